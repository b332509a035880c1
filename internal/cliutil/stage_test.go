package cliutil

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
)

func TestLoadConfigAndCheckCycle(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.yaml")
	_, err := LoadConfig(missing)
	if ExitCode(err) != ExitUsage || !strings.Contains(err.Error(), "nope.yaml") {
		t.Errorf("missing config: exit %d, %v; want %d naming the file", ExitCode(err), err, ExitUsage)
	}
	cfg := &config.Config{Cycles: []int{1, 3}}
	if err := CheckCycle(cfg, 3); err != nil {
		t.Errorf("cycle 3: %v", err)
	}
	err = CheckCycle(cfg, 2)
	if ExitCode(err) != ExitUsage || !strings.Contains(err.Error(), "--cycle 2") {
		t.Errorf("cycle 2: exit %d, %v; want %d naming --cycle 2", ExitCode(err), err, ExitUsage)
	}
}
