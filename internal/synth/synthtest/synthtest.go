// Package synthtest holds the test helpers shared by the tests that
// generate a synthetic project (internal/synth) to run a stage or an
// executable on.
package synthtest

import (
	"context"
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

// Project generates the synthetic project o (its raw tiles into o.OutDir),
// writes its config.yaml and returns the loaded config; any error is
// fatal.
func Project(t testing.TB, o synth.Options) *config.Config {
	t.Helper()
	if err := synth.Generate(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	path := synth.ConfigPath(o.OutDir)
	if err := synth.WriteConfig(path, o, nil); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
