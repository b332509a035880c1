package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/decon"
	"github.com/kintsugi-hpc/kintsugi-go/internal/deconstage"
	"github.com/kintsugi-hpc/kintsugi-go/internal/exectest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth/synthtest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// TestExecutable builds kintsugi-decon and runs it as the Snakefile and
// users do: exit codes, messages, outputs, and that a refused run writes
// nothing.
func TestExecutable(t *testing.T) {
	dir := t.TempDir()
	bin := exectest.Build(t, "kintsugi-decon", ".")
	o := synthtest.Tiny(t)
	o.OutDir, o.NCycles, o.NZ = filepath.Join(dir, "p"), 1, 2
	cfgPath := synthtest.WriteConfig(t, o)
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	in := deconstage.InputDir(o.OutDir, 1)
	var pages []*raster.Gray16
	for _, ch := range cfg.Channels {
		k, _, err := deconstage.Kernel(cfg, ch)
		if err != nil {
			t.Fatal(err)
		}
		sc := decon.NewScene(uint64(ch), 2, 30, 36, k, 3)
		os.MkdirAll(filepath.Join(in, fmt.Sprintf("CH%d", ch)), 0o755)
		for z := 0; z < 2; z++ {
			pg := &raster.Gray16{W: 36, H: 30, Pix: decon.Quantize(nil, sc.Noisy.Plane(z))}
			if err := tiffio.WriteGray16(filepath.Join(in, fmt.Sprintf("CH%d", ch), fmt.Sprintf("%02d.tif", z+1)), pg); err != nil {
				t.Fatal(err)
			}
			if ch == 1 {
				pages = append(pages, pg)
			}
		}
	}
	stack := filepath.Join(dir, "stack.tif")
	if err := tiffio.WriteGray16Pages(stack, pages); err != nil {
		t.Fatal(err)
	}
	sentinel := layout.Sentinel(in)
	out := deconstage.OutDir(o.OutDir, 1)
	tileOut := filepath.Join(dir, "tile.tif")
	cases := []struct {
		exectest.Case
		check func(t *testing.T) // after the run: its outputs
	}{
		{exectest.Case{Name: "no stitch sentinel", Args: []string{"run", "-c", cfgPath, "--cycle", "1", "--device", "cpu"}, Code: 2, Want: ".snakemake_complete"}, nil},
		{exectest.Case{Name: "missing config", Args: []string{"run", "-c", dir + "/nope.yaml", "--cycle", "1", "--device", "cpu"}, Code: 2, Want: "nope.yaml"}, nil},
		{exectest.Case{Name: "bad device", Args: []string{"run", "-c", cfgPath, "--cycle", "1", "--device", "tpu"}, Code: 2, Want: "--device"}, nil},
		{exectest.Case{Name: "gpu without cuda", Args: []string{"run", "-c", cfgPath, "--cycle", "1"}, Code: 2, Want: "built without CUDA support"}, nil},
		{exectest.Case{Name: "bad cycle", Args: []string{"run", "-c", cfgPath, "--cycle", "7", "--device", "cpu"}, Code: 2, Want: "--cycle 7"}, nil},
		{exectest.Case{Name: "bad workers env", Env: []string{"SLURM_CPUS_PER_TASK=many"}, Args: []string{"run", "-c", cfgPath, "--cycle", "1", "--device", "cpu"}, Code: 2, Want: "SLURM_CPUS_PER_TASK"}, nil},
		{exectest.Case{Name: "impossible memory budget", Env: []string{"cpus_per_task=2"}, Args: []string{"run", "-c", cfgPath, "--cycle", "1", "--device", "cpu", "--mem-budget", "1"}, Code: 2, Want: "resources.mem_decon"}, func(t *testing.T) {
			// refused before any output: no output directory, no staging
			if ents, err := os.ReadDir(filepath.Dir(out)); err == nil && len(ents) > 0 {
				t.Errorf("output left behind under %s: %v", filepath.Dir(out), ents)
			}
		}},
		{exectest.Case{Name: "cpu run", Env: []string{"cpus_per_task=2"}, Args: []string{"run", "-c", cfgPath, "--cycle", "1", "--device", "cpu", "--log-format", "text"}, Code: 0, Want: "channel deconvolved"}, func(t *testing.T) {
			for _, ch := range cfg.Channels {
				for k := 1; k <= 2; k++ {
					img, err := tiffio.ReadGray16(filepath.Join(out, fmt.Sprintf("CH%d", ch), fmt.Sprintf("deconv_%03d.tif", k)))
					if err != nil || img.W != 36 || img.H != 30 {
						t.Errorf("channel %d plane %d: %v", ch, k, err)
					}
				}
			}
			if _, err := os.Stat(filepath.Join(out, "DECONV_parameters.txt")); err != nil {
				t.Error(err)
			}
		}},
		{exectest.Case{Name: "tile", Args: []string{"tile", "-c", cfgPath, "--in", stack, "--out", tileOut, "--channel", "1", "--device", "cpu"}, Code: 0, Want: "tile deconvolved"}, func(t *testing.T) {
			pg, err := tiffio.ReadGray16Pages(tileOut)
			if err != nil || len(pg) != 2 {
				t.Fatalf("tile output: %v, %d pages", err, len(pg))
			}
			// the same as the stage's channel 1 (same PSF, settings, data)
			for k := 0; k < 2; k++ {
				st, _ := tiffio.ReadGray16(filepath.Join(out, "CH1", fmt.Sprintf("deconv_%03d.tif", k+1)))
				for i := range st.Pix {
					if st.Pix[i] != pg[k].Pix[i] {
						t.Fatalf("tile plane %d differs from the stage's output at %d", k+1, i)
					}
				}
			}
		}},
		{exectest.Case{Name: "tile directory", Args: []string{"tile", "-c", cfgPath, "--in", filepath.Join(in, "CH1"), "--out", tileOut, "--channel", "1", "--device", "cpu"}, Code: 0, Want: "tile deconvolved"}, nil},
		{exectest.Case{Name: "gpu mem cap with cpu", Args: []string{"tile", "-c", cfgPath, "--in", stack, "--out", tileOut, "--channel", "1", "--device", "cpu", "--gpu-mem-cap", "512"}, Code: 2, Want: "--gpu-mem-cap"}, nil},
		{exectest.Case{Name: "negative gpu mem cap", Args: []string{"tile", "-c", cfgPath, "--in", stack, "--out", tileOut, "--channel", "1", "--gpu-mem-cap", "-1"}, Code: 2, Want: "--gpu-mem-cap -1"}, nil},
		{exectest.Case{Name: "tile bad channel", Args: []string{"tile", "-c", cfgPath, "--in", stack, "--out", tileOut, "--channel", "9", "--device", "cpu"}, Code: 2, Want: "--channel 9"}, nil},
		{exectest.Case{Name: "tile missing input", Args: []string{"tile", "-c", cfgPath, "--in", dir + "/none.tif", "--out", tileOut, "--channel", "1", "--device", "cpu"}, Code: 2, Want: "none.tif"}, nil},
	}
	for i, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			if i == 1 { // after the first case, the stitch sentinel exists
				os.WriteFile(sentinel, []byte("stage=stitch\n"), 0o644)
			}
			_, code, err := tc.Run(t, bin)
			if err != nil {
				t.Fatal(err)
			}
			_, statErr := os.Stat(layout.Sentinel(out))
			if tc.Args[0] == "run" && (tc.Code == 0) != (statErr == nil) {
				t.Errorf("decon sentinel present = %v after exit %d", statErr == nil, code)
			}
			if tc.check != nil {
				tc.check(t)
			}
		})
	}
}
