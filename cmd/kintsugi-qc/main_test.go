package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/cliutil"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
)

func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	text := "project_dir: " + dir + "\ncycles: [1]\nchannels: [1]\ntile_rows: 1\ntile_cols: 2\ntile_overlap: 0.3\nncc_threshold: 0.078\npou: 0.5\nresources: {accounts: [{name: a, gpu_slots: 1}]}\n"
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{"no command", nil, 2},
		{"unknown command", []string{"plot"}, 2},
		{"missing --config", []string{"run", "--stage", "edf"}, 2},
		{"missing --stage", []string{"run", "--config", cfg}, 2},
		{"unknown stage", []string{"run", "--config", cfg, "--stage", "bogus"}, 2},
		{"unknown flag", []string{"run", "--config", cfg, "--stage", "edf", "--colour"}, 2},
		{"extra argument", []string{"run", "--config", cfg, "--stage", "edf", "now"}, 2},
		{"stage not run yet", []string{"run", "--config", cfg, "--stage", "edf"}, 2},
		{"bad config", []string{"run", "--config", cfg + ".missing", "--stage", "edf"}, 2},
		{"bad workers", []string{"run", "--config", cfg, "--stage", "edf", "--workers", "-1"}, 2},
		{"report: missing --config", []string{"report"}, 2},
		{"report: bad config", []string{"report", "--config", cfg + ".missing"}, 2},
		{"report: extra argument", []string{"report", "--config", cfg, "now"}, 2},
		{"report: bad crop", []string{"report", "--config", cfg, "--crop-px", "4"}, 2},
		{"report: nothing run yet (notes, not an error)", []string{"report", "--config", cfg}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app := newApp()
			var out bytes.Buffer
			app.Writer = &out
			err := app.RunContext(context.Background(), append([]string{"kintsugi-qc", "--log-level", "error"}, tc.args...))
			if got := cliutil.ExitCode(err); got != tc.want {
				t.Errorf("exit %d (%v), want %d", got, err, tc.want)
			}
			if tc.want == 0 && tc.args[0] == "report" {
				// The report's path on stdout, the page there.
				p := layout.QCReport(dir)
				if strings.TrimSpace(out.String()) != p {
					t.Errorf("printed %q, want %s", out.String(), p)
				}
				if b, err := os.ReadFile(p); err != nil || !bytes.Contains(b, []byte("no QC metrics for cycle(s) 1")) {
					t.Errorf("%s: %v", p, err)
				}
			}
		})
	}
}
