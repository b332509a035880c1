package stitch

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
	"github.com/kintsugi-hpc/kintsugi-go/internal/dataset"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth/synthtest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// project writes a small synthetic project (one cycle, two channels, three
// z-planes) and returns its loaded config.
func project(t *testing.T) *config.Config {
	t.Helper()
	o := synthtest.Tiny(t)
	o.OutDir = t.TempDir()
	o.NCycles, o.NZ = 1, 3
	return synthProject(t, o)
}

// synthProject generates the synthetic project o and loads its config.
func synthProject(t *testing.T, o synth.Options) *config.Config {
	t.Helper()
	return synthtest.Project(t, o)
}

func run(cfg *config.Config) (*Result, error) {
	return Run(context.Background(), Options{Config: cfg, Cycle: 1, Engine: NewCPUEngine(2), Workers: 2})
}

// TestRunWritesLayout checks the output layout the later stages and the
// original's tools expect, read back through the TIFF reader.
func TestRunWritesLayout(t *testing.T) {
	cfg := project(t)
	res, err := run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	out := OutDir(cfg.ProjectDir, 1)
	if res.OutDir != out || res.Planes != 6 {
		t.Errorf("result %+v", res)
	}
	for _, ch := range cfg.Channels {
		for z := 1; z <= 3; z++ {
			img, err := tiffio.ReadGray16(filepath.Join(out, fmt.Sprintf("CH%d", ch), fmt.Sprintf("%02d.tif", z)))
			if err != nil {
				t.Fatal(err)
			}
			// The mosaic spans the positions plus one tile.
			var maxY, maxX float64
			for _, p := range res.Positions {
				maxY, maxX = max(maxY, p.Y), max(maxX, p.X)
			}
			info, _ := tiffio.ReadInfo(filepath.Join(layout.RawCycleDir(cfg.ProjectDir, 1), "1_00001_Z001_CH1.tif"))
			if d := img.H - (int(maxY+0.5) + info.Height); d != 0 || img.W-(int(maxX+0.5)+info.Width) != 0 {
				t.Errorf("CH%d Z%d mosaic %dx%d for positions up to (%.1f, %.1f)", ch, z, img.W, img.H, maxY, maxX)
			}
			prof, err := LoadProfile(filepath.Join(out, fmt.Sprintf("CH%d", ch), "basic", fmt.Sprintf("%02d", z)), info.Width, info.Height)
			if err != nil {
				t.Fatal(err)
			}
			var mean float64
			for _, v := range prof.Flatfield {
				mean += float64(v)
			}
			if mean /= float64(len(prof.Flatfield)); mean < 0.999 || mean > 1.001 {
				t.Errorf("CH%d Z%d flatfield mean %.4f, want 1", ch, z, mean)
			}
		}
	}
	for _, f := range []string{"tile_positions.csv", ".snakemake_complete"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	sent, _ := os.ReadFile(layout.Sentinel(out))
	if !strings.Contains(string(sent), "stage=stitch\ncycle=1\n") || !strings.Contains(string(sent), "zplanes=3") {
		t.Errorf("sentinel:\n%s", sent)
	}
	leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(out), ".cyc01.partial-*"))
	if len(leftovers) > 0 {
		t.Errorf("staging left behind: %v", leftovers)
	}
	// A second run replaces the first atomically.
	if _, err := run(cfg); err != nil {
		t.Fatalf("rerun: %v", err)
	}
}

// TestFailureLeavesNoOutput: a tile whose pixel data is truncated fails the
// run with an error naming it, after some planes were already processed, and
// nothing of the cycle is left behind.
func TestFailureLeavesNoOutput(t *testing.T) {
	cfg := project(t)
	bad := filepath.Join(layout.RawCycleDir(cfg.ProjectDir, 1), "1_00004_Z003_CH2.tif")
	data, err := os.ReadFile(bad)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, data[:len(data)-1000], 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = run(cfg)
	if err == nil || !errors.Is(err, dataset.ErrInput) || !strings.Contains(err.Error(), bad) {
		t.Fatalf("err = %v, want an input error naming %s", err, bad)
	}
	parent := filepath.Dir(OutDir(cfg.ProjectDir, 1))
	ents, _ := os.ReadDir(parent)
	if len(ents) != 0 {
		t.Errorf("partial output left in %s: %v", parent, ents)
	}
}

// TestUnwritableOutput: the output directory cannot be created.
func TestUnwritableOutput(t *testing.T) {
	cfg := project(t)
	blocker := layout.ProcessedDir(cfg.ProjectDir)
	if err := os.WriteFile(blocker, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := run(cfg)
	if err == nil || !strings.Contains(err.Error(), "output directory") || !strings.Contains(err.Error(), blocker) {
		t.Fatalf("err = %v, want an error naming the output directory under %s", err, blocker)
	}
}

// With a sink the batches end at each channel's end, as few as the batch
// size allows, of sizes that differ by at most one.
func TestChannelBatch(t *testing.T) {
	if got := fmt.Sprint(batchesOf(2, 20, 8)); got != "[7 7 6 7 7 6]" {
		t.Errorf("2 channels of 20 planes in batches of at most 8: %s, want [7 7 6 7 7 6]", got)
	}
	for nz := 1; nz <= 25; nz++ {
		for batch := 1; batch <= 10; batch++ {
			b := batchesOf(3, nz, batch)
			if want := 3 * ((nz + batch - 1) / batch); len(b) != want {
				t.Fatalf("nz %d batch %d: %d batches %v, want %d", nz, batch, len(b), b, want)
			}
			lo, hi := slices.Min(b), slices.Max(b)
			if hi > batch || lo < 1 || hi-lo > 1 {
				t.Fatalf("nz %d batch %d: batches %v", nz, batch, b)
			}
		}
	}
}

// batchesOf is the sizes of the batches of channels x nz planes, each
// checked to end within its channel.
func batchesOf(channels, nz, batch int) []int {
	var b []int
	for lo, n := 0, 0; lo < channels*nz; lo += n {
		n = channelBatch(lo, nz, batch)
		if lo/nz != (lo+n-1)/nz {
			panic(fmt.Sprintf("batch %d+%d crosses a channel of %d planes", lo, n, nz))
		}
		b = append(b, n)
	}
	return b
}
