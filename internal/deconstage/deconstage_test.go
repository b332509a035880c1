package deconstage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/decon"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth/synthtest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

const (
	nz, ph, pw = 3, 40, 52
)

// project writes a config (tiny preset: 2 channels, n_zplanes 3, the
// default optics and wavelengths of the synthetic generator) and a
// stitched cycle 1 of nz planes per channel built from decon.NewScene
// (seeded), with the stitch sentinel. extra overrides config keys.
func project(t *testing.T, extra map[string]any) (*config.Config, string) {
	t.Helper()
	dir := t.TempDir()
	o := synthtest.Tiny(t)
	o.OutDir, o.NCycles, o.NZ = dir, 1, nz
	path := filepath.Join(dir, "config.yaml")
	if err := synth.WriteConfig(path, o, extra); err != nil {
		t.Fatal(err)
	}
	in := InputDir(dir, 1)
	for ch := 1; ch <= o.NChannels; ch++ {
		kern, _, err := Kernel(mustLoad(t, path), ch)
		if err != nil {
			t.Fatal(err)
		}
		sc := decon.NewScene(uint64(ch), nz, ph, pw, kern, 3)
		chDir := filepath.Join(in, fmt.Sprintf("CH%d", ch))
		os.MkdirAll(chDir, 0o755)
		for z := 0; z < nz; z++ {
			writePlane(t, filepath.Join(chDir, fmt.Sprintf("%02d.tif", z+1)), sc.Noisy.Plane(z), pw, ph)
		}
	}
	os.WriteFile(layout.Sentinel(in), []byte("stage=stitch\n"), 0o644)
	return mustLoad(t, path), dir
}

func mustLoad(t *testing.T, path string) *config.Config {
	t.Helper()
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func writePlane(t *testing.T, path string, v []float32, w, h int) {
	t.Helper()
	img := &raster.Gray16{W: w, H: h, Pix: decon.Quantize(nil, v)}
	if err := tiffio.WriteGray16(path, img); err != nil {
		t.Fatal(err)
	}
}

func TestRunCPU(t *testing.T) {
	cfg, dir := project(t, nil)
	res, err := Run(context.Background(), Options{Config: cfg, Cycle: 1, Engine: CPUEngine{Workers: 2}, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	out := OutDir(dir, 1)
	if res.Dir != out || len(res.Channels) != len(cfg.Channels) {
		t.Fatalf("result %+v", res)
	}
	for _, ch := range cfg.Channels {
		// The stage's output must equal decon.CPU on the stitched planes, rounded.
		paths, w, h, err := Planes(filepath.Join(InputDir(dir, 1), fmt.Sprintf("CH%d", ch)), nz)
		if err != nil {
			t.Fatal(err)
		}
		st, err := ReadStack(context.Background(), paths, w, h, 2)
		if err != nil {
			t.Fatal(err)
		}
		k, _, err := Kernel(cfg, ch)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := Params(cfg)
		want, s, err := decon.CPU{}.Deconvolve(context.Background(), st, k, p)
		if err != nil {
			t.Fatal(err)
		}
		if s.Iterations < 2 || s.Iterations > 25 {
			t.Errorf("channel %d: %d iterations", ch, s.Iterations)
		}
		for z := 0; z < nz; z++ {
			img, err := tiffio.ReadGray16(filepath.Join(out, fmt.Sprintf("CH%d", ch), fmt.Sprintf("deconv_%03d.tif", z+1)))
			if err != nil {
				t.Fatal(err)
			}
			q := decon.Quantize(nil, want.Plane(z))
			for i, v := range img.Pix {
				if v != q[i] {
					t.Fatalf("channel %d plane %d pixel %d: %d, decon.CPU %d", ch, z+1, i, v, q[i])
				}
			}
		}
		if _, err := os.Stat(filepath.Join(out, fmt.Sprintf("CH%d", ch), fmt.Sprintf("deconv_%03d.tif", nz+1))); err == nil {
			t.Errorf("channel %d: extra output plane", ch)
		}
	}
	sent, err := os.ReadFile(layout.Sentinel(out))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"stage=decon\n", "cycle=1\n", "channels=1,2\n", "successful=1,2\n", "engine=cpu"} {
		if !strings.Contains(string(sent), want) {
			t.Errorf("sentinel lacks %q:\n%s", want, sent)
		}
	}
	par, err := os.ReadFile(filepath.Join(out, "DECONV_parameters.txt"))
	if err != nil || !strings.Contains(string(par), "size of PSF (pixel): 9 x 9 x 1") && !strings.Contains(string(par), "size of PSF (pixel): 7 x 7 x 1") {
		t.Errorf("parameters file: %v\n%s", err, par)
	}
	if !strings.Contains(string(par), "boundary: free\n") { // the default (config.DefaultDecon)
		t.Errorf("parameters file does not name the boundary:\n%s", par)
	}
	ents, _ := os.ReadDir(filepath.Dir(out))
	if len(ents) != 1 {
		t.Errorf("deconvolved/ holds %d entries, want only cyc01 (no staging leftovers)", len(ents))
	}
}

// TestBadInput: each bad input is an ErrInput naming the file or key, and
// nothing is written.
func TestBadInput(t *testing.T) {
	cases := []struct {
		name  string
		extra map[string]any
		mut   func(t *testing.T, in string)
		want  string
	}{
		{"no sentinel", nil, func(t *testing.T, in string) { os.Remove(layout.Sentinel(in)) }, ".snakemake_complete"},
		{"missing plane", nil, func(t *testing.T, in string) { os.Remove(filepath.Join(in, "CH2", "02.tif")) }, "missing plane 02.tif"},
		{"missing last plane", nil, func(t *testing.T, in string) { os.Remove(filepath.Join(in, "CH1", "03.tif")) }, "n_zplanes is 3: missing"},
		{"extra plane", nil, func(t *testing.T, in string) {
			data, _ := os.ReadFile(filepath.Join(in, "CH1", "03.tif"))
			os.WriteFile(filepath.Join(in, "CH1", "04.tif"), data, 0o644)
		}, "extra"},
		{"plane size", nil, func(t *testing.T, in string) {
			writePlane(t, filepath.Join(in, "CH2", "03.tif"), make([]float32, 10*12), 12, 10)
		}, "CH2/03.tif is 12x10"},
		{"all zero", nil, func(t *testing.T, in string) {
			for z := 1; z <= nz; z++ {
				writePlane(t, filepath.Join(in, "CH2", fmt.Sprintf("%02d.tif", z)), make([]float32, ph*pw), pw, ph)
			}
		}, "all zero"},
		{"no wavelengths", map[string]any{"wavelengths": map[string][]float64{"1": {358, 461}}}, nil, "wavelengths.2"},
		{"NA above RI", map[string]any{"numerical_aperture": 1.5, "tissue_refractive_index": 1.33}, nil, "numerical_aperture"},
		{"bad iterations", map[string]any{"decon": map[string]any{"iterations": 0}}, nil, "decon"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := loadProject(t, c.extra)
			if err != nil {
				// the schema may refuse the value first: it must still name the key
				if !strings.Contains(err.Error(), strings.Split(c.want, ".")[0]) {
					t.Fatalf("config error %v does not name %s", err, c.want)
				}
				return
			}
			in := InputDir(cfg.ProjectDir, 1)
			if c.mut != nil {
				c.mut(t, in)
			}
			_, err = Run(context.Background(), Options{Config: cfg, Cycle: 1, Engine: CPUEngine{Workers: 2}, Workers: 2})
			if !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v: want ErrInput naming %q", err, c.want)
			}
			if _, err := os.Stat(filepath.Dir(OutDir(cfg.ProjectDir, 1))); err == nil {
				ents, _ := os.ReadDir(filepath.Dir(OutDir(cfg.ProjectDir, 1)))
				if len(ents) != 0 {
					t.Errorf("output left behind: %v", ents)
				}
			}
		})
	}
}

// loadProject is project, returning a config error instead of failing.
func loadProject(t *testing.T, extra map[string]any) (cfg *config.Config, err error) {
	t.Helper()
	dir := t.TempDir()
	o, _ := synth.Preset("tiny")
	o.OutDir, o.NCycles, o.NZ = dir, 1, nz
	path := filepath.Join(dir, "config.yaml")
	if err := synth.WriteConfig(path, o, extra); err != nil {
		return nil, err
	}
	if cfg, err = config.Load(path); err != nil {
		return nil, err
	}
	good, _ := project(t, nil)
	// copy the good project's stitched data into this one
	src := InputDir(good.ProjectDir, 1)
	dst := InputDir(dir, 1)
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	return cfg, nil
}

// The elapsed time of DECONV_parameters.txt is written as the original's
// str(timedelta(seconds=int(s))) (values confirmed with Python 3:
// str(datetime.timedelta(seconds=45)) == '0:00:45', 90061 s == '1 day, 1:01:01').
func TestElapsedText(t *testing.T) {
	for _, c := range []struct {
		sec  float64
		want string
	}{{0, "0:00:00"}, {45.9, "0:00:45"}, {59, "0:00:59"}, {61, "0:01:01"}, {3600, "1:00:00"}, {36000 + 61, "10:01:01"},
		{86399, "23:59:59"}, {90061, "1 day, 1:01:01"}, {2*86400 + 5, "2 days, 0:00:05"}} {
		if got := ElapsedText(c.sec); got != c.want {
			t.Errorf("ElapsedText(%g) = %q, want %q", c.sec, got, c.want)
		}
	}
	// The file itself: a 45 s run.
	cfg, _ := project(t, nil)
	txt := ParametersText(cfg, Options{Config: cfg, Cycle: 1, Engine: CPUEngine{Workers: 1}}, &Result{Seconds: 45.2})
	if !strings.Contains(txt, "\nelapsed time: 0:00:45\n") {
		t.Errorf("DECONV_parameters.txt of a 45 s run:\n%s", txt)
	}
}
