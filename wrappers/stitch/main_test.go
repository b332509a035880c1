package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/exectest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
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
	cfg := synthtest.Generate(t, o)
	badKey := filepath.Join(dir, "bad.yaml")
	data, _ := os.ReadFile(cfg)
	os.WriteFile(badKey, []byte(strings.Replace(string(data), "tile_overlap: 0.3", "tile_overlap: 1.3", 1)), 0o644)
	noCycle := filepath.Join(dir, "nocycle.yaml")
	os.WriteFile(noCycle, []byte(strings.Replace(string(data), "project_dir: "+o.OutDir, "project_dir: "+dir+"/empty", 1)), 0o644)

	cases := []exectest.Case{
		{Name: "missing config", Args: []string{"run", "-c", dir + "/nope.yaml", "--cycle", "1", "--device", "cpu"}, Code: 2, Want: "nope.yaml"},
		{Name: "bad key", Args: []string{"run", "-c", badKey, "--cycle", "1", "--device", "cpu"}, Code: 2, Want: "key tile_overlap"},
		{Name: "bad device", Args: []string{"run", "-c", cfg, "--cycle", "1", "--device", "tpu"}, Code: 2, Want: "--device"},
		{Name: "gpu without cuda", Args: []string{"run", "-c", cfg, "--cycle", "1"}, Code: 2, Want: "built without CUDA support"},
		{Name: "gpu from env", Env: []string{"KINTSUGI_DEVICE_MODE=gpu"}, Args: []string{"run", "-c", cfg, "--cycle", "1"}, Code: 2, Want: "built without CUDA support"},
		{Name: "bad workers env", Env: []string{"SLURM_CPUS_PER_TASK=many"}, Args: []string{"run", "-c", cfg, "--cycle", "1", "--device", "cpu"}, Code: 2, Want: "SLURM_CPUS_PER_TASK"},
		{Name: "missing cycle dir", Args: []string{"run", "-c", noCycle, "--cycle", "1", "--device", "cpu"}, Code: 2, Want: "no raw directory"},
		{Name: "unknown flag", Args: []string{"run", "--frobnicate"}, Code: 2, Want: "frobnicate"},
		{Name: "cpu run", Env: []string{"cpus_per_task=2"}, Args: []string{"run", "-c", cfg, "--cycle", "1", "--device", "cpu", "--log-format", "json"}, Code: 0, Want: `"source":"cpus_per_task"`},
	}
	out := layout.Stitched(o.OutDir, 1)
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			_, code, err := tc.Run(t, bin)
			if err != nil {
				t.Error(err)
			}
			_, statErr := os.Stat(layout.Sentinel(out))
			if (tc.Code == 0) != (statErr == nil) {
				t.Errorf("sentinel present = %v after exit %d", statErr == nil, code)
			}
		})
	}
}
