package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/exectest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth/synthtest"
)

// TestExecutable builds kintsugi-stitch and runs it the way users and the
// Snakefile do, checking exit codes, messages and that a refused run writes
// nothing.
func TestExecutable(t *testing.T) {
	dir := t.TempDir()
	bin := exectest.Build(t, "kintsugi-stitch", ".")
	o := synthtest.Tiny(t)
	o.OutDir, o.NCycles, o.NZ = filepath.Join(dir, "p"), 1, 2
	if err := synth.Generate(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(o.OutDir, "config.yaml")
	if err := synth.WriteConfig(cfg, o, nil); err != nil {
		t.Fatal(err)
	}
	badKey := filepath.Join(dir, "bad.yaml")
	data, _ := os.ReadFile(cfg)
	os.WriteFile(badKey, []byte(strings.Replace(string(data), "tile_overlap: 0.3", "tile_overlap: 1.3", 1)), 0o644)
	noCycle := filepath.Join(dir, "nocycle.yaml")
	os.WriteFile(noCycle, []byte(strings.Replace(string(data), "project_dir: "+o.OutDir, "project_dir: "+dir+"/empty", 1)), 0o644)

	cases := []struct {
		name string
		env  []string
		args []string
		code int
		want string
	}{
		{"missing config", nil, []string{"run", "-c", dir + "/nope.yaml", "--cycle", "1", "--device", "cpu"}, 2, "nope.yaml"},
		{"bad key", nil, []string{"run", "-c", badKey, "--cycle", "1", "--device", "cpu"}, 2, "key tile_overlap"},
		{"bad device", nil, []string{"run", "-c", cfg, "--cycle", "1", "--device", "tpu"}, 2, "--device"},
		{"gpu without cuda", nil, []string{"run", "-c", cfg, "--cycle", "1"}, 2, "built without CUDA support"},
		{"gpu from env", []string{"KINTSUGI_DEVICE_MODE=gpu"}, []string{"run", "-c", cfg, "--cycle", "1"}, 2, "built without CUDA support"},
		{"bad workers env", []string{"SLURM_CPUS_PER_TASK=many"}, []string{"run", "-c", cfg, "--cycle", "1", "--device", "cpu"}, 2, "SLURM_CPUS_PER_TASK"},
		{"missing cycle dir", nil, []string{"run", "-c", noCycle, "--cycle", "1", "--device", "cpu"}, 2, "no raw directory"},
		{"unknown flag", nil, []string{"run", "--frobnicate"}, 2, "frobnicate"},
		{"cpu run", []string{"cpus_per_task=2"}, []string{"run", "-c", cfg, "--cycle", "1", "--device", "cpu", "--log-format", "json"}, 0, `"source":"cpus_per_task"`},
	}
	out := layout.Stitched(o.OutDir, 1)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			msg, code := exectest.Run(t, bin, tc.env, tc.args...)
			if err := exectest.Check(msg, code, tc.code, tc.want); err != nil {
				t.Error(err)
			}
			_, statErr := os.Stat(layout.Sentinel(out))
			if (tc.code == 0) != (statErr == nil) {
				t.Errorf("sentinel present = %v after exit %d", statErr == nil, code)
			}
		})
	}
}
