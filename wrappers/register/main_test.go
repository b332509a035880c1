package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/exectest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/gpu"
	"github.com/kintsugi-hpc/kintsugi-go/internal/membudget"
	"github.com/kintsugi-hpc/kintsugi-go/internal/register"
	"github.com/kintsugi-hpc/kintsugi-go/internal/regstage/regtest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// project writes a 2-cycle project with EDF outputs (synthetic cycles with
// known warps), registration.reference_cycle = ref, and returns its config
// path.
func project(t *testing.T, dir string, ref int) string {
	t.Helper()
	reg := map[string]any{"reference_cycle": ref, "max_image_dim": 256, "non_rigid": map[string]any{"max_dim": 256}}
	cfg, _ := regtest.WriteProject(t, dir, 2, reg, synth.RegOptions{H: 320, W: 400, Seed: 3, MaxShift: 25, MaxRotDeg: 1, WarpPx: 3, Workers: 2})
	return cfg.Path
}

// TestExecutable builds kintsugi-register and runs it as the Snakefile and
// users do, checking exit codes, messages and outputs.
func TestExecutable(t *testing.T) {
	dir := t.TempDir()
	bin := exectest.Build(t, "kintsugi-register", ".")
	good := project(t, filepath.Join(dir, "good"), 1)
	badRef := project(t, filepath.Join(dir, "badref"), 9)
	noSent := project(t, filepath.Join(dir, "nosent"), 1)
	tight := project(t, filepath.Join(dir, "tight"), 1)
	sent := filepath.Join(dir, "nosent", "data", "processed", "edf", "cyc02", ".snakemake_complete")
	os.Remove(sent)
	edf1 := filepath.Join(dir, "good", "data", "processed", "edf", "cyc01")
	edf2 := filepath.Join(dir, "good", "data", "processed", "edf", "cyc02")
	cfg, _ := config.Load(good)
	fixed, moving := filepath.Join(edf1, cfg.EDFFileName(1, 1)), filepath.Join(edf2, cfg.EDFFileName(2, 1))
	pairOut := filepath.Join(dir, "pair")
	reg := filepath.Join(dir, "good", "data", "processed", "registered")

	cases := []exectest.Case{
		{Name: "missing config", Args: []string{"run", "--config", dir + "/nope.yaml", "--device", "cpu"}, Code: 2, Want: "nope.yaml"},
		{Name: "bad device", Args: []string{"run", "--config", good, "--device", "tpu"}, Code: 2, Want: "--device"},
		{Name: "gpu without cuda", Args: []string{"run", "--config", good, "--log-format", "text"}, Code: 2, Want: "built without CUDA support"},
		{Name: "missing sentinel", Args: []string{"run", "--config", noSent, "--device", "cpu"}, Code: 2, Want: sent},
		{Name: "reference not a cycle", Args: []string{"run", "--config", badRef, "--device", "cpu"}, Code: 2, Want: "registration.reference_cycle"},
		{Name: "impossible budget", Args: []string{"run", "--config", tight, "--device", "cpu", "--mem-budget", "8"}, Code: 2, Want: "resources.mem_registration"},
		{Name: "impossible budget from SLURM", Env: []string{"SLURM_MEM_PER_NODE=9"}, Args: []string{"run", "--config", tight, "--device", "cpu"}, Code: 2, Want: "memory budget 9 MiB (SLURM_MEM_PER_NODE) is too small"},
		{Name: "unknown flag", Args: []string{"run", "--frobnicate"}, Code: 2, Want: "frobnicate"},
		{Name: "cpu run", Env: []string{"cpus_per_task=2"}, Args: []string{"run", "--config", good, "--device", "cpu", "--log-format", "text"}, Code: 0, Want: "registration done"},
		{Name: "pair", Args: []string{"pair", "--fixed", fixed, "--moving", moving, "--out", pairOut, "--device", "cpu", "--workers", "2"}, Code: 0, Want: "pair registered"},
		{Name: "apply", Args: []string{"apply", "--transform", filepath.Join(reg, "registration_data", "cyc02_transform.json"),
			"--in", filepath.Join(edf2, cfg.EDFFileName(2, 2)), "--out", filepath.Join(dir, "applied.tif"), "--device", "cpu"}, Code: 0, Want: "transform applied"},
		{Name: "apply missing transform", Args: []string{"apply", "--transform", dir + "/none.json", "--in", fixed, "--out", dir + "/x.tif", "--device", "cpu"}, Code: 2, Want: "none.json"},
	}
	for _, c := range cases {
		if _, _, err := c.Run(t, bin); err != nil {
			t.Errorf("%s: %v", c.Name, err)
		}
		if c.Code == 2 && strings.Contains(c.Name, "sentinel") {
			if _, err := os.Stat(filepath.Join(dir, "nosent", "data", "processed", "registered")); err == nil {
				t.Errorf("%s: registered/ written", c.Name)
			}
		}
		if strings.Contains(c.Name, "budget") {
			// Refused before any output: nothing under processed/ but the
			// EDF input, no staging directory.
			ents, err := os.ReadDir(filepath.Join(dir, "tight", "data", "processed"))
			if err != nil || len(ents) != 1 || ents[0].Name() != "edf" {
				t.Errorf("%s: processed/ holds %v (%v), want only edf/", c.Name, ents, err)
			}
		}
	}
	for _, f := range []string{"cyc01/" + cfg.EDFFileName(1, 2), "cyc02/" + cfg.EDFFileName(2, 2), "qc/cyc02_metrics.json", "qc/cyc02_overlay.png", "registered.ome.tif", ".snakemake_complete"} {
		if _, err := os.Stat(filepath.Join(reg, f)); err != nil {
			t.Errorf("run output: %v", err)
		}
	}
	a, err1 := tiffio.ReadGray16(filepath.Join(dir, "applied.tif"))
	b, err2 := tiffio.ReadGray16(filepath.Join(reg, "cyc02", cfg.EDFFileName(2, 2)))
	if err1 != nil || err2 != nil || len(a.Pix) != len(b.Pix) {
		t.Fatalf("apply output: %v %v", err1, err2)
	}
	for i := range a.Pix {
		if a.Pix[i] != b.Pix[i] {
			t.Fatalf("apply differs from the run's output at pixel %d", i)
		}
	}
	if _, err := os.Stat(filepath.Join(pairOut, filepath.Base(moving))); err != nil {
		t.Errorf("pair output: %v", err)
	}
}

// TestGPUBackendReportsMemory: the CUDA engine's registration backend (the
// one backend() hands the stage on the GPU) reports its data on the
// device, which picks regstage's GPU memory model and device=gpu in the
// sentinel; the CPU reference reports nothing and gets the CPU's.
func TestGPUBackendReportsMemory(t *testing.T) {
	r, ok := (&gpu.Engine{}).Registrar().(membudget.MemoryReporter)
	if !ok || r.EngineMemory() != membudget.CUDAEngine {
		t.Fatalf("the GPU registrar %T does not report membudget.CUDAEngine", (&gpu.Engine{}).Registrar())
	}
	if _, ok := any(register.CPU{}).(membudget.MemoryReporter); ok {
		t.Error("register.CPU reports a memory model: regstage would not plan it with its CPU figures")
	}
}
