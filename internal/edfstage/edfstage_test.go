package edfstage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/edf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth/synthtest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// project writes a config and a deconvolved cycle 1 of two channels (each a
// synthetic z-stack with a known depth map) and returns the config and the
// stacks.
func project(t *testing.T, extra map[string]any) (*config.Config, [][]*raster.Gray16) {
	t.Helper()
	dir := t.TempDir()
	o := synthtest.Tiny(t)
	o.OutDir, o.NCycles, o.NChannels = dir, 1, 2
	path := synth.ConfigPath(dir)
	if err := synth.WriteConfig(path, o, extra); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	var stacks [][]*raster.Gray16
	for ch := 1; ch <= 2; ch++ {
		so := synth.DefaultEDFStack()
		so.W, so.H, so.NZ, so.Seed = 96, 80, 7, uint64(ch)
		st, err := synth.MakeEDFStack(so)
		if err != nil {
			t.Fatal(err)
		}
		d := filepath.Join(InputDir(dir, 1), fmt.Sprintf("CH%d", ch))
		os.MkdirAll(d, 0o755)
		for z, p := range st.Planes {
			if err := tiffio.WriteGray16(filepath.Join(d, fmt.Sprintf("deconv_%03d.tif", z+1)), p); err != nil {
				t.Fatal(err)
			}
		}
		stacks = append(stacks, st.Planes)
	}
	os.WriteFile(layout.Sentinel(InputDir(dir, 1)), []byte("stage=decon\n"), 0o644)
	return cfg, stacks
}

func run(cfg *config.Config) (*Result, error) {
	return Run(context.Background(), Options{Config: cfg, Cycle: 1, Engine: edf.CPU{Workers: 2}, Workers: 2})
}

// Issue 16: a cycle whose channels share a name (the original's blank
// channels) runs, each channel to its own file named by the original's rule.
func TestRunDuplicateNames(t *testing.T) {
	cfg, _ := project(t, map[string]any{"channel_names": map[string][]string{"1": {"Blank", "Blank"}}})
	if _, err := run(cfg); err != nil {
		t.Fatal(err)
	}
	for ch, want := range map[int]string{1: "Blank_1.tif", 2: "Blank_1a.tif"} {
		if got := cfg.EDFFileName(1, ch); got != want {
			t.Errorf("channel %d output name %s, want %s", ch, got, want)
		}
		if _, err := os.Stat(filepath.Join(OutDir(cfg.ProjectDir, 1), want)); err != nil {
			t.Error(err)
		}
	}
}

func TestRun(t *testing.T) {
	cfg, stacks := project(t, nil)
	res, err := run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	out := OutDir(cfg.ProjectDir, 1)
	g := Gate(cfg.QualityGate)
	for i, ch := range []int{1, 2} {
		name := cfg.EDFFileName(1, ch)
		if want := []string{"DAPI-01.tif", "Blank.tif"}[i]; name != want {
			t.Fatalf("channel %d output name %s, want %s", ch, name, want)
		}
		got, err := tiffio.ReadGray16(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		want, err := edf.CPU{Workers: 1}.EDF(context.Background(), stacks[i], g, Params(cfg.EDF))
		if err != nil {
			t.Fatal(err)
		}
		for j := range want.Out.Pix {
			if got.Pix[j] != want.Out.Pix[j] {
				t.Fatalf("%s pixel %d: %d, want %d", name, j, got.Pix[j], want.Out.Pix[j])
			}
		}
		if !slices.Equal(res.Channels[i].Used, []int{1, 2, 3, 4, 5}) {
			t.Errorf("channel %d used %v, want slices 2-6", ch, res.Channels[i].Used)
		}
	}
	s, err := os.ReadFile(layout.Sentinel(out))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"stage=edf\n", "cycle=1\n", "successful=1,2\n", "skipped=\n", "method=variance\n", "slices_used=CH1:2-6;CH2:2-6\n", "engine=cpu"} {
		if !strings.Contains(string(s), want) {
			t.Errorf("sentinel lacks %q:\n%s", want, s)
		}
	}
	ents, _ := os.ReadDir(filepath.Dir(out))
	if len(ents) != 1 {
		t.Errorf("edf/ holds %d entries, want only cyc01 (no staging leftovers)", len(ents))
	}
	// A second run replaces the output.
	if _, err := run(cfg); err != nil {
		t.Fatal(err)
	}
}

// Bad input: an error wrapping ErrInput that names the file or key, and no
// output directory.
func TestBadInput(t *testing.T) {
	cases := []struct {
		name   string
		extra  map[string]any
		break_ func(cfg *config.Config)
		want   string
	}{
		{"missing decon sentinel", nil, func(cfg *config.Config) {
			os.Remove(layout.Sentinel(InputDir(cfg.ProjectDir, 1)))
		}, ".snakemake_complete"},
		{"plane of another size", nil, func(cfg *config.Config) {
			tiffio.WriteGray16(filepath.Join(InputDir(cfg.ProjectDir, 1), "CH2", "deconv_004.tif"), raster.NewGray16(95, 80))
		}, "CH2/deconv_004.tif is 95 x 80"},
		{"missing channel", nil, func(cfg *config.Config) {
			os.RemoveAll(filepath.Join(InputDir(cfg.ProjectDir, 1), "CH2"))
		}, "CH2"},
		{"empty channel", nil, func(cfg *config.Config) {
			for z := 1; z <= 7; z++ {
				tiffio.WriteGray16(filepath.Join(InputDir(cfg.ProjectDir, 1), "CH1", fmt.Sprintf("deconv_%03d.tif", z)), raster.NewGray16(96, 80))
			}
		}, "too few valid slices"},
		{"corrupt tiff", nil, func(cfg *config.Config) {
			os.WriteFile(filepath.Join(InputDir(cfg.ProjectDir, 1), "CH1", "deconv_002.tif"), []byte("II*\x00junk"), 0o644)
		}, "deconv_002.tif"},
		// The loader makes duplicate names unique (config.UniqueNames); a Config
		// built in code past it still cannot give two channels one file.
		{"duplicate marker names past the loader", nil, func(cfg *config.Config) {
			cfg.ChannelNames["1"] = []string{"CD3 x", "CD3/x"}
		}, "channel_names.1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, _ := project(t, c.extra)
			if c.break_ != nil {
				c.break_(cfg)
			}
			_, err := run(cfg)
			if !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want ErrInput naming %q", err, c.want)
			}
			if _, serr := os.Stat(filepath.Dir(OutDir(cfg.ProjectDir, 1))); serr == nil {
				ents, _ := os.ReadDir(filepath.Dir(OutDir(cfg.ProjectDir, 1)))
				if len(ents) != 0 {
					t.Errorf("output left behind: %v", ents)
				}
			}
		})
	}
}

// A stack given as a directory and as a multi-page TIFF reads the same.
func TestReadStackPath(t *testing.T) {
	cfg, stacks := project(t, nil)
	dir := filepath.Join(InputDir(cfg.ProjectDir, 1), "CH1")
	a, err := ReadStackPath(context.Background(), dir, 2)
	if err != nil {
		t.Fatal(err)
	}
	mp := filepath.Join(t.TempDir(), "stack.tif")
	if err := tiffio.WriteGray16Pages(mp, stacks[0]); err != nil {
		t.Fatal(err)
	}
	b, err := ReadStackPath(context.Background(), mp, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != 7 || len(b) != 7 {
		t.Fatalf("%d and %d planes, want 7", len(a), len(b))
	}
	for z := range a {
		for i := range a[z].Pix {
			if a[z].Pix[i] != b[z].Pix[i] || a[z].Pix[i] != stacks[0][z].Pix[i] {
				t.Fatalf("plane %d differs", z)
			}
		}
	}
}
