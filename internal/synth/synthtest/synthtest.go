// Package synthtest holds the test helpers shared by the tests that
// generate a synthetic project (internal/synth) to run a stage or an
// executable on.
package synthtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// Tiny returns the "tiny" preset, synth.Preset("tiny"), for the test to
// adjust (output directory, cycles, z-planes, channels); a preset error is
// fatal.
func Tiny(t testing.TB) synth.Options {
	t.Helper()
	o, err := synth.Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// WriteConfig writes the config of the synthetic project o
// (synth.WriteConfig, no extra keys) to its default place,
// synth.ConfigPath(o.OutDir), creating o.OutDir, and returns that path. It
// writes no image: the test writes the stage's input itself. An error is
// fatal.
func WriteConfig(t testing.TB, o synth.Options) string {
	t.Helper()
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := synth.ConfigPath(o.OutDir)
	if err := synth.WriteConfig(path, o, nil); err != nil {
		t.Fatal(err)
	}
	return path
}

// Generate generates the synthetic project o (synth.Generate: the raw tiles
// and the truth under o.OutDir), writes its config (WriteConfig) and
// returns the config's path. An error is fatal.
func Generate(t testing.TB, o synth.Options) string {
	t.Helper()
	if err := synth.Generate(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	return WriteConfig(t, o)
}

// Project generates the synthetic project o (its raw tiles into o.OutDir),
// writes its config.yaml (Generate) and returns the loaded config; any
// error is fatal.
func Project(t testing.TB, o synth.Options) *config.Config {
	t.Helper()
	cfg, err := config.Load(Generate(t, o))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// BlankPlane makes every raw tile of z-plane z of channel ch of cycle 1 of
// cfg's project zero (as a shutter that stayed closed would leave it).
func BlankPlane(t testing.TB, cfg *config.Config, ch, z int) {
	t.Helper()
	tiles, _ := filepath.Glob(filepath.Join(layout.RawCycleDir(cfg.ProjectDir, 1), fmt.Sprintf("*_Z%03d_CH%d.tif", z, ch)))
	if len(tiles) == 0 {
		t.Fatalf("no CH%d Z%d tiles", ch, z)
	}
	for _, f := range tiles {
		g, err := tiffio.ReadGray16(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := tiffio.WriteGray16(f, raster.NewGray16(g.W, g.H)); err != nil {
			t.Fatal(err)
		}
	}
}
