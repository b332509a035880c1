package cliutil

import (
	"bytes"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/membudget"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

func TestMemBudget(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	var logs bytes.Buffer
	lg := slog.New(slog.NewTextHandler(&logs, nil))
	env := map[string]string{"SLURM_MEM_PER_NODE": "4000"}
	b, src, err := MemBudget(0, func(k string) string { return env[k] }, lg)
	if err != nil || b != 4000<<20 || src != membudget.SourceMemNode {
		t.Fatalf("SLURM_MEM_PER_NODE=4000: %d %v", b, err)
	}
	if !strings.Contains(logs.String(), "source=SLURM_MEM_PER_NODE") || !strings.Contains(logs.String(), "mb=4000") {
		t.Errorf("log lacks the budget and its source: %s", logs.String())
	}
	if lim := tiffio.DecodeLimit(); lim != 4000<<20 {
		t.Errorf("TIFF decode limit %d, want the budget", lim)
	}
	if lim := debug.SetMemoryLimit(-1); lim != 4000<<20/10*9 {
		t.Errorf("Go soft limit %d, want 90%% of the budget", lim)
	}
	if b, _, err := MemBudget(1500, func(string) string { return "junk" }, lg); err != nil || b != 1500<<20 {
		t.Errorf("--mem-budget 1500 over a malformed environment: %d %v", b, err)
	}
	env["SLURM_MEM_PER_NODE"] = "4G"
	if _, _, err := MemBudget(0, func(k string) string { return env[k] }, lg); err == nil || ExitCode(err) != ExitUsage || !strings.Contains(err.Error(), "SLURM_MEM_PER_NODE") {
		t.Errorf("malformed SLURM_MEM_PER_NODE: %v (exit %d), want exit %d naming the variable", err, ExitCode(err), ExitUsage)
	}
}

func TestMemBudgetExitCodes(t *testing.T) {
	need := fmt.Errorf("cycle 1: %w", &membudget.NeedError{Stage: "stitch", Budget: 1 << 20, Need: 1 << 30, ConfigKey: "resources.mem_stitch"})
	if c := ExitCode(need); c != ExitUsage {
		t.Errorf("budget below the need: exit %d, want %d", c, ExitUsage)
	}
	if c := ExitCode(&membudget.UsageError{Msg: "x"}); c != ExitUsage {
		t.Errorf("malformed budget: exit %d, want %d", c, ExitUsage)
	}
}
