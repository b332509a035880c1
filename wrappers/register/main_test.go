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

	cases := []struct {
		name string
		env  []string
		args []string
		code int
		want string
	}{
		{"missing config", nil, []string{"run", "--config", dir + "/nope.yaml", "--device", "cpu"}, 2, "nope.yaml"},
		{"bad device", nil, []string{"run", "--config", good, "--device", "tpu"}, 2, "--device"},
		{"gpu without cuda", nil, []string{"run", "--config", good, "--log-format", "text"}, 2, "built without CUDA support"},
		{"missing sentinel", nil, []string{"run", "--config", noSent, "--device", "cpu"}, 2, sent},
		{"reference not a cycle", nil, []string{"run", "--config", badRef, "--device", "cpu"}, 2, "registration.reference_cycle"},
		{"impossible budget", nil, []string{"run", "--config", tight, "--device", "cpu", "--mem-budget", "8"}, 2, "resources.mem_registration"},
		{"impossible budget from SLURM", []string{"SLURM_MEM_PER_NODE=9"}, []string{"run", "--config", tight, "--device", "cpu"}, 2, "memory budget 9 MiB (SLURM_MEM_PER_NODE) is too small"},
		{"unknown flag", nil, []string{"run", "--frobnicate"}, 2, "frobnicate"},
		{"cpu run", []string{"cpus_per_task=2"}, []string{"run", "--config", good, "--device", "cpu", "--log-format", "text"}, 0, "registration done"},
		{"pair", nil, []string{"pair", "--fixed", fixed, "--moving", moving, "--out", pairOut, "--device", "cpu", "--workers", "2"}, 0, "pair registered"},
		{"apply", nil, []string{"apply", "--transform", filepath.Join(reg, "registration_data", "cyc02_transform.json"),
			"--in", filepath.Join(edf2, cfg.EDFFileName(2, 2)), "--out", filepath.Join(dir, "applied.tif"), "--device", "cpu"}, 0, "transform applied"},
		{"apply missing transform", nil, []string{"apply", "--transform", dir + "/none.json", "--in", fixed, "--out", dir + "/x.tif", "--device", "cpu"}, 2, "none.json"},
	}
	for _, c := range cases {
		out, code := exectest.Run(t, bin, c.env, c.args...)
		if err := exectest.Check(out, code, c.code, c.want); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		if c.code == 2 && strings.Contains(c.name, "sentinel") {
			if _, err := os.Stat(filepath.Join(dir, "nosent", "data", "processed", "registered")); err == nil {
				t.Errorf("%s: registered/ written", c.name)
			}
		}
		if strings.Contains(c.name, "budget") {
			// Refused before any output: nothing under processed/ but the
			// EDF input, no staging directory.
			ents, err := os.ReadDir(filepath.Join(dir, "tight", "data", "processed"))
			if err != nil || len(ents) != 1 || ents[0].Name() != "edf" {
				t.Errorf("%s: processed/ holds %v (%v), want only edf/", c.name, ents, err)
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
