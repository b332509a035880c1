// Package regtest writes the input of the registration stage for tests: a
// project whose cycles' EDF outputs are synthetic images with known warps
// (synth.RegScene), with the EDF stage's sentinels.
package regtest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/edfstage"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// WriteProject writes under dir a config (the tiny preset with cycles
// 1..cycles, 2 channels and the registration: keys reg) and, for every
// cycle, the EDF images of both channels rendered by a scene of so (so.Channels
// is set to 2) and the EDF sentinel. It returns the loaded config and the
// scene (its truth). Failures are fatal.
func WriteProject(t testing.TB, dir string, cycles int, reg map[string]any, so synth.RegOptions) (*config.Config, *synth.RegScene) {
	t.Helper()
	return WriteProjectChannels(t, dir, cycles, 2, reg, so)
}

// WriteProjectChannels is WriteProject with channels (>= 2) channels per
// cycle (cycle 1: DAPI and blanks, the synthetic generator's
// BlankFirstCycle): DAPI and one marker rendered by the scene, further channels cheap
// copies of the marker with their bits permuted per channel (x XOR a
// per-channel key: other content for the same cost of warping and
// writing).
func WriteProjectChannels(t testing.TB, dir string, cycles, channels int, reg map[string]any, so synth.RegOptions) (*config.Config, *synth.RegScene) {
	t.Helper()
	o, err := synth.Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	o.OutDir, o.NCycles, o.NChannels, o.Cycles = dir, cycles, channels, nil
	// Cycle 1's channels 2.. stay Blank, as in CODEX: with several, the
	// config's duplicate rule names them Blank_1a, Blank_1b, ...
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := synth.ConfigPath(dir)
	if err := synth.WriteConfig(path, o, map[string]any{"registration": reg}); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	so.Channels = 2
	sc, err := synth.NewRegScene(so)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Cycles {
		imgs, _, err := sc.RenderCycle(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		d := edfstage.OutDir(dir, c)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for len(imgs) < channels {
			src := imgs[1]
			g := raster.NewGray16(src.W, src.H)
			key := uint16(0x5a5a + 0x1111*len(imgs))
			for i, v := range src.Pix {
				g.Pix[i] = v ^ key
			}
			imgs = append(imgs, g)
		}
		for ch := 1; ch <= channels; ch++ {
			if err := tiffio.WriteGray16(filepath.Join(d, cfg.EDFFileName(c, ch)), imgs[ch-1]); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(layout.Sentinel(d), []byte("stage=edf\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return cfg, sc
}
