package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/edfstage"
	"github.com/kintsugi-hpc/kintsugi-go/internal/exectest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth/synthtest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// TestExecutable builds kintsugi-edf and runs it as the Snakefile and users
// do: exit codes, messages, outputs, and nothing written on refusal.
func TestExecutable(t *testing.T) {
	dir := t.TempDir()
	bin := exectest.Build(t, "kintsugi-edf", ".")
	o := synthtest.Tiny(t)
	o.OutDir, o.NCycles, o.NChannels = filepath.Join(dir, "p"), 2, 2
	cfg := synthtest.WriteConfig(t, o)
	wav := filepath.Join(dir, "wavelet.yaml")
	data, _ := os.ReadFile(cfg)
	os.WriteFile(wav, append(data, []byte("edf: {method: wavelet}\n")...), 0o644)
	// Cycle 1 deconvolved and complete; cycle 2 without its sentinel.
	so := synth.DefaultEDFStack()
	so.W, so.H, so.NZ = 64, 48, 6
	st, err := synth.MakeEDFStack(so)
	if err != nil {
		t.Fatal(err)
	}
	for cyc := 1; cyc <= 2; cyc++ {
		for ch := 1; ch <= 2; ch++ {
			d := filepath.Join(edfstage.InputDir(o.OutDir, cyc), fmt.Sprintf("CH%d", ch))
			os.MkdirAll(d, 0o755)
			for z, p := range st.Planes {
				tiffio.WriteGray16(filepath.Join(d, fmt.Sprintf("deconv_%03d.tif", z+1)), p)
			}
		}
	}
	os.WriteFile(layout.Sentinel(edfstage.InputDir(o.OutDir, 1)), []byte("stage=decon\n"), 0o644)
	stackDir := filepath.Join(edfstage.InputDir(o.OutDir, 1), "CH1")
	multi := filepath.Join(dir, "stack.tif")
	tiffio.WriteGray16Pages(multi, st.Planes)
	empty := filepath.Join(dir, "empty.tif")
	tiffio.WriteGray16Pages(empty, []*raster.Gray16{raster.NewGray16(8, 8), raster.NewGray16(8, 8), raster.NewGray16(8, 8)})

	cases := []exectest.Case{
		{Name: "gpu without cuda", Args: []string{"run", "--config", cfg, "--cycle", "1"}, Code: 2, Want: "built without CUDA support"},
		{Name: "wavelet on the gpu without cuda", Args: []string{"run", "--config", wav, "--cycle", "1", "--device", "gpu"}, Code: 2, Want: "built without CUDA support"},
		{Name: "cycle not in config", Args: []string{"run", "--config", cfg, "--cycle", "7", "--device", "cpu"}, Code: 2, Want: "--cycle 7"},
		{Name: "missing decon sentinel", Args: []string{"run", "--config", cfg, "--cycle", "2", "--device", "cpu"}, Code: 2, Want: "deconvolved/cyc02/.snakemake_complete"},
		{Name: "empty stack", Args: []string{"tile", "--in", empty, "--out", filepath.Join(dir, "e.tif"), "--device", "cpu"}, Code: 2, Want: "too few valid slices"},
		{Name: "bad workers env", Env: []string{"SLURM_CPUS_PER_TASK=x"}, Args: []string{"run", "--config", cfg, "--cycle", "1", "--device", "cpu"}, Code: 2, Want: "SLURM_CPUS_PER_TASK"},
		{Name: "cpu run", Env: []string{"cpus_per_task=2"}, Args: []string{"run", "--config", cfg, "--cycle", "1", "--device", "cpu", "--log-format", "text"}, Code: 0, Want: "cycle done"},
		{Name: "cpu run wavelet", Args: []string{"run", "--config", wav, "--cycle", "1", "--device", "cpu", "--log-format", "json"}, Code: 0, Want: `"method":"wavelet"`},
		{Name: "tile directory", Args: []string{"tile", "--in", stackDir, "--out", filepath.Join(dir, "a.tif"), "--device", "cpu"}, Code: 0, Want: "stack fused"},
		{Name: "tile multi-page", Args: []string{"tile", "--in", multi, "--out", filepath.Join(dir, "b.tif"), "--device", "cpu", "--config", cfg}, Code: 0, Want: "stack fused"},
	}
	// A budget below the smallest working set: refused before any output
	// (no cycle directory, no staging directory left), exit 2, naming the
	// config key.
	t.Run("impossible budget", func(t *testing.T) {
		out, code := exectest.Run(t, bin, nil, "run", "--config", cfg, "--cycle", "1", "--device", "cpu", "--mem-budget", "16")
		if err := exectest.Check(out, code, 2, edfstage.ConfigKeyMem); err != nil {
			t.Fatal(err)
		}
		if err := exectest.Check(out, code, 2, "memory budget 16 MiB"); err != nil {
			t.Fatal(err)
		}
		if ents, err := os.ReadDir(filepath.Dir(edfstage.OutDir(o.OutDir, 1))); err == nil && len(ents) > 0 {
			t.Errorf("refused run left %v under the edf directory", ents)
		}
	})
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			if _, _, err := c.Run(t, bin); err != nil {
				t.Fatal(err)
			}
		})
	}
	for _, f := range []string{"DAPI-01.tif", "Blank.tif", ".snakemake_complete"} {
		if _, err := os.Stat(filepath.Join(edfstage.OutDir(o.OutDir, 1), f)); err != nil {
			t.Errorf("cycle 1 output: %v", err)
		}
	}
	if _, err := os.Stat(edfstage.OutDir(o.OutDir, 2)); err == nil {
		t.Error("cycle 2 (no decon sentinel) has an output directory")
	}
	a, errA := tiffio.ReadGray16(filepath.Join(dir, "a.tif"))
	b, errB := tiffio.ReadGray16(filepath.Join(dir, "b.tif"))
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	for i := range a.Pix {
		if a.Pix[i] != b.Pix[i] {
			t.Fatalf("tile from a directory and from a multi-page TIFF differ at %d", i)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "e.tif")); err == nil {
		t.Error("refused tile wrote its output")
	}
}
