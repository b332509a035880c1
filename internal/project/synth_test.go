package project

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth"
)

// The metadata kintsugi-synth writes (--meta) gives the same experiment as
// the config it writes itself: Infer on it agrees with synth.WriteConfig,
// with the channel names made unique by the original's rule.
func TestSynthMeta(t *testing.T) {
	o, err := synth.Preset("example")
	if err != nil {
		t.Fatal(err)
	}
	o.OutDir, o.NChannels, o.NCycles = t.TempDir(), 4, 3
	if err := synth.WriteMeta(o); err != nil {
		t.Fatal(err)
	}
	for cy := 1; cy <= o.NCycles; cy++ { // the raw tile names (empty files: Infer reads names only)
		os.MkdirAll(synth.RawDir(o.OutDir, cy), 0o755)
		for tile := 1; tile <= o.Rows*o.Cols; tile++ {
			for z := 1; z <= o.NZ; z++ {
				for ch := 1; ch <= o.NChannels; ch++ {
					os.WriteFile(filepath.Join(synth.RawDir(o.OutDir, cy), synth.RawName(tile, z, ch)), nil, 0o644)
				}
			}
		}
	}
	ref := filepath.Join(t.TempDir(), "synth.yaml")
	if err := synth.WriteConfig(ref, o, nil); err != nil {
		t.Fatal(err)
	}
	want, err := config.Load(ref)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Infer(o.OutDir)
	if err != nil {
		t.Fatal(err)
	}
	if p.Experiment.Form != "CODEX" || len(p.Notes) != 0 {
		t.Errorf("form %s, notes %q", p.Experiment.Form, p.Notes)
	}
	_, got, err := p.Config("c.yaml", Options{KintsugiDir: "/k"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Cycles, want.Cycles) || !slices.Equal(got.Channels, want.Channels) || got.NZPlanes != want.NZPlanes ||
		got.TileRows != want.TileRows || got.TileCols != want.TileCols || got.TileOverlap != want.TileOverlap ||
		got.XYPixelSize != want.XYPixelSize || got.ZStepSize != want.ZStepSize || got.NumericalAperture != want.NumericalAperture ||
		got.TissueRefractiveIndex != want.TissueRefractiveIndex || !reflect.DeepEqual(got.Wavelengths, want.Wavelengths) {
		t.Errorf("inferred config differs from kintsugi-synth's:\n got %+v\nwant %+v", got, want)
	}
	raw := map[int][]string{}
	for cy := 1; cy <= o.NCycles; cy++ {
		for ch := 1; ch <= o.NChannels; ch++ {
			raw[cy] = append(raw[cy], o.ChannelName(cy, ch))
		}
	}
	unique, _ := config.UniqueNames(raw, true)
	for cy, names := range unique {
		if g := got.ChannelNames[strconv.Itoa(cy)]; !slices.Equal(g, names) {
			t.Errorf("channel_names.%d = %v, want %v", cy, g, names)
		}
	}
	if g := got.ChannelNames["1"]; !slices.Equal(g, []string{"DAPI-01", "Blank_1a", "Blank_1b", "Blank_1c"}) {
		t.Errorf("cycle 1 names %v: want the blank channels renamed", g)
	}
}
