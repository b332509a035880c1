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
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth"
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
	cfgPath := filepath.Join(o.OutDir, "config.yaml")
	os.MkdirAll(o.OutDir, 0o755)
	if err := synth.WriteConfig(cfgPath, o, nil); err != nil {
		t.Fatal(err)
	}
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
		name  string
		env   []string
		args  []string
		code  int
		want  string
		check func(t *testing.T)
	}{
		{"no stitch sentinel", nil, []string{"run", "-c", cfgPath, "--cycle", "1", "--device", "cpu"}, 2, ".snakemake_complete", nil},
		{"missing config", nil, []string{"run", "-c", dir + "/nope.yaml", "--cycle", "1", "--device", "cpu"}, 2, "nope.yaml", nil},
		{"bad device", nil, []string{"run", "-c", cfgPath, "--cycle", "1", "--device", "tpu"}, 2, "--device", nil},
		{"gpu without cuda", nil, []string{"run", "-c", cfgPath, "--cycle", "1"}, 2, "built without CUDA support", nil},
		{"bad cycle", nil, []string{"run", "-c", cfgPath, "--cycle", "7", "--device", "cpu"}, 2, "--cycle 7", nil},
		{"bad workers env", []string{"SLURM_CPUS_PER_TASK=many"}, []string{"run", "-c", cfgPath, "--cycle", "1", "--device", "cpu"}, 2, "SLURM_CPUS_PER_TASK", nil},
		{"impossible memory budget", []string{"cpus_per_task=2"}, []string{"run", "-c", cfgPath, "--cycle", "1", "--device", "cpu", "--mem-budget", "1"}, 2, "resources.mem_decon", func(t *testing.T) {
			// refused before any output: no output directory, no staging
			if ents, err := os.ReadDir(filepath.Dir(out)); err == nil && len(ents) > 0 {
				t.Errorf("output left behind under %s: %v", filepath.Dir(out), ents)
			}
		}},
		{"cpu run", []string{"cpus_per_task=2"}, []string{"run", "-c", cfgPath, "--cycle", "1", "--device", "cpu", "--log-format", "text"}, 0, "channel deconvolved", func(t *testing.T) {
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
		{"tile", nil, []string{"tile", "-c", cfgPath, "--in", stack, "--out", tileOut, "--channel", "1", "--device", "cpu"}, 0, "tile deconvolved", func(t *testing.T) {
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
		{"tile directory", nil, []string{"tile", "-c", cfgPath, "--in", filepath.Join(in, "CH1"), "--out", tileOut, "--channel", "1", "--device", "cpu"}, 0, "tile deconvolved", nil},
		{"gpu mem cap with cpu", nil, []string{"tile", "-c", cfgPath, "--in", stack, "--out", tileOut, "--channel", "1", "--device", "cpu", "--gpu-mem-cap", "512"}, 2, "--gpu-mem-cap", nil},
		{"negative gpu mem cap", nil, []string{"tile", "-c", cfgPath, "--in", stack, "--out", tileOut, "--channel", "1", "--gpu-mem-cap", "-1"}, 2, "--gpu-mem-cap -1", nil},
		{"tile bad channel", nil, []string{"tile", "-c", cfgPath, "--in", stack, "--out", tileOut, "--channel", "9", "--device", "cpu"}, 2, "--channel 9", nil},
		{"tile missing input", nil, []string{"tile", "-c", cfgPath, "--in", dir + "/none.tif", "--out", tileOut, "--channel", "1", "--device", "cpu"}, 2, "none.tif", nil},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if i == 1 { // after the first case, the stitch sentinel exists
				os.WriteFile(sentinel, []byte("stage=stitch\n"), 0o644)
			}
			msg, code := exectest.Run(t, bin, tc.env, tc.args...)
			if err := exectest.Check(msg, code, tc.code, tc.want); err != nil {
				t.Fatal(err)
			}
			_, statErr := os.Stat(layout.Sentinel(out))
			if tc.args[0] == "run" && (tc.code == 0) != (statErr == nil) {
				t.Errorf("decon sentinel present = %v after exit %d", statErr == nil, code)
			}
			if tc.check != nil {
				tc.check(t)
			}
		})
	}
}
