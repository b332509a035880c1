package synth

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/kintsugi-hpc/kintsugi-go/internal/atomicfile"
)

// MetaDir is <project>/meta, where a KINTSUGI project keeps its experiment
// metadata.
func MetaDir(projectDir string) string { return filepath.Join(projectDir, "meta") }

// WriteMeta writes the experiment's metadata as a CODEX instrument leaves
// it, for `kintsugi-config init` to generate the config from:
//
//	meta/experiment.json   the instrument's keys (numCycles, numZPlanes, numChannels,
//	                       regionHeight = Rows, regionWidth = Cols, tileOverlapX/Y,
//	                       xyResolution, zPitch, aperture, and wavelengths as the flat
//	                       list of excitations, in nm); tissue_refractive_index (the
//	                       original's key) only when it is not the original's default 1.44
//	meta/CHANNELNAMES.txt  one marker per line, every channel of every cycle of the
//	                       experiment (ChannelName: DAPI-NN, Blank in cycle 1 with
//	                       BlankFirstCycle, then the markers)
//
// Both writes are atomic.
func WriteMeta(o Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	ex := make([]float64, o.NChannels)
	for c := 1; c <= o.NChannels; c++ {
		ex[c-1] = math.Round(look(c).exNM)
	}
	exp := map[string]any{
		"name":         "synthetic CODEX project (kintsugi-synth)",
		"numCycles":    o.NCycles,
		"numZPlanes":   o.NZ,
		"numChannels":  o.NChannels,
		"regionHeight": o.Rows,
		"regionWidth":  o.Cols,
		"tileWidth":    o.TileW,
		"tileHeight":   o.TileH,
		"tileOverlapX": o.Overlap,
		"tileOverlapY": o.Overlap,
		"tilingMode":   "snake",
		"xyResolution": o.PixelSizeNM,
		"zPitch":       o.ZStepNM,
		"aperture":     o.NA,
		"wavelengths":  ex,
		"bitDepth":     16,
		"numRegions":   1,
	}
	if o.RefractiveIndex != 1.44 {
		exp["tissue_refractive_index"] = o.RefractiveIndex
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(exp); err != nil {
		return fmt.Errorf("experiment.json: %w", err)
	}
	dir := MetaDir(o.OutDir)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return fmt.Errorf("meta: %w", err)
	}
	if err := atomicfile.WriteBytes(filepath.Join(dir, "experiment.json"), buf.Bytes(), 0o666); err != nil {
		return err
	}
	var names strings.Builder
	for cy := 1; cy <= o.NCycles; cy++ {
		for ch := 1; ch <= o.NChannels; ch++ {
			names.WriteString(o.ChannelName(cy, ch) + "\n")
		}
	}
	return atomicfile.WriteBytes(filepath.Join(dir, "CHANNELNAMES.txt"), []byte(names.String()), 0o666)
}
