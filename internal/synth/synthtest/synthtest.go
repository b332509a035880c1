// Package synthtest holds the test helpers shared by the tests that
// generate a synthetic project (internal/synth) to run a stage or an
// executable on.
package synthtest

import (
	"testing"

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
