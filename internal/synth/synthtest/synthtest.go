// Package synthtest holds the test helpers shared by the tests that
// generate a synthetic project (internal/synth) to run a stage or an
// executable on.
package synthtest

import (
	"context"
	"os"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth"
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
