package project

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
)

// maxMetaBytes bounds every metadata file read (experiment.json, CHANNELNAMES.txt).
const maxMetaBytes = 4 << 20

// Experiment is meta/experiment.json in either form. Zero NCycles or
// NZPlanes means the file does not give them.
type Experiment struct {
	Path             string
	Form             string // "KINTSUGI", "CODEX", or "KINTSUGI and CODEX" (the original's keys win)
	NCycles          int
	NZPlanes         int
	ChannelsPerCycle int
	TileRows         int
	TileCols         int
	TileOverlap      float64 // fraction
	XYPixelSize      float64 // nm
	ZStepSize        float64 // nm
	NA               float64
	RefractiveIndex  float64
	Wavelengths      map[int][2]float64 // channel -> [excitation, emission], nm
	Name             string             // the "name" field, if any
	// From says where each value came from, by config key, e.g.
	// "experiment.json numCycles" or "default (the original's ExperimentConfig)".
	From  map[string]string
	Notes []string // disagreements and conversions worth telling the user
}

// The original's ExperimentConfig defaults (KINTSUGI src/kintsugi/project.py).
const defaultFrom = "the original's default (ExperimentConfig)"

// field is one experiment value: its config key, the original's key, the
// CODEX key (ExperimentConfig._CODEX_FIELD_MAP) and its default (NaN: none).
type field struct {
	key, kintsugi, codex string
	integer              bool
	def                  float64
}

var fields = []field{
	{"n_cycles", "n_cycles", "numCycles", true, math.NaN()},
	{"n_zplanes", "n_zplanes", "numZPlanes", true, math.NaN()},
	{"channels_per_cycle", "channels_per_cycle", "numChannels", true, 4},
	{"tile_rows", "tile_rows", "regionHeight", true, 5},
	{"tile_cols", "tile_cols", "regionWidth", true, 5},
	{"tile_overlap", "tile_overlap", "tileOverlapX", false, 0.3},
	{"xy_pixel_size", "xy_pixel_size", "xyResolution", false, 377},
	{"z_step_size", "z_step_size", "zPitch", false, 1500},
	{"numerical_aperture", "numerical_aperture", "aperture", false, 0.75},
	{"tissue_refractive_index", "tissue_refractive_index", "", false, 1.44},
}

// DefaultWavelengths are the original's ExperimentConfig wavelengths:
// DAPI, Cy7, Cy3 (TRITC), Cy5.
var DefaultWavelengths = map[int][2]float64{1: {358, 461}, 2: {753, 775}, 3: {560, 575}, 4: {648, 668}}

// filterSets maps a CODEX excitation to the filter set's [excitation,
// emission] (ExperimentConfig._CODEX_FILTER_SETS), matched within
// FilterSetTolerance nm.
var filterSets = []struct {
	ex   int
	pair [2]float64
}{
	{358, [2]float64{358, 461}}, // DAPI
	{488, [2]float64{488, 525}}, // FITC / Alexa 488
	{550, [2]float64{560, 575}}, // TRITC / Cy3
	{650, [2]float64{648, 668}}, // Cy5
	{750, [2]float64{753, 775}}, // Cy7
}

// FilterSetTolerance is how far (nm, after rounding) a CODEX excitation may
// be from a filter set's.
const FilterSetTolerance = 10

// FilterSet maps a CODEX excitation wavelength (nm) to its filter set's
// [excitation, emission]: the exact set first, then the first within
// FilterSetTolerance nm. ok is false for an unknown excitation (the original
// then used the excitation as the emission too, with a warning; here it is
// an error, because the emission sets the PSF).
func FilterSet(ex float64) (pair [2]float64, ok bool) {
	r := int(math.Round(ex))
	for _, f := range filterSets {
		if r == f.ex {
			return f.pair, true
		}
	}
	for _, f := range filterSets {
		if abs(r-f.ex) <= FilterSetTolerance {
			return f.pair, true
		}
	}
	return [2]float64{}, false
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// ReadExperiment reads and checks meta/experiment.json. The original's key
// wins where both forms give a value (as in ExperimentConfig.from_dict);
// absent values take the original's defaults, except n_cycles and
// n_zplanes (0: not given). Errors name the file and key.
func ReadExperiment(path string) (*Experiment, error) {
	data, err := readBounded(path)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var raw map[string]any
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%s: invalid JSON: %w (want one JSON object)", path, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%s: text after the JSON object", path)
	}
	e := &Experiment{Path: path, From: map[string]string{}}
	var kin, codex bool
	vals := map[string]float64{}
	for _, f := range fields {
		src, v, ok := "", any(nil), false
		if v, ok = raw[f.kintsugi]; ok {
			src, kin = f.kintsugi, true
		} else if f.codex != "" {
			if v, ok = raw[f.codex]; ok {
				src, codex = f.codex, true
			}
		}
		if !ok {
			if !math.IsNaN(f.def) {
				vals[f.key] = f.def
				e.From[f.key] = defaultFrom
			}
			continue
		}
		x, err := number(v, f.integer)
		if err != nil {
			return nil, fmt.Errorf("%s: key %s: %w", path, src, err)
		}
		if x <= 0 {
			return nil, fmt.Errorf("%s: key %s: %v: want a positive number", path, src, v)
		}
		vals[f.key] = x
		e.From[f.key] = "experiment.json " + src
	}
	e.NCycles, e.NZPlanes = int(vals["n_cycles"]), int(vals["n_zplanes"])
	e.ChannelsPerCycle, e.TileRows, e.TileCols = int(vals["channels_per_cycle"]), int(vals["tile_rows"]), int(vals["tile_cols"])
	e.TileOverlap, e.XYPixelSize, e.ZStepSize = vals["tile_overlap"], vals["xy_pixel_size"], vals["z_step_size"]
	e.NA, e.RefractiveIndex = vals["numerical_aperture"], vals["tissue_refractive_index"]

	if e.From["tile_overlap"] == "experiment.json tileOverlapX" {
		if oy, ok := raw["tileOverlapY"]; ok {
			if y, err := number(oy, false); err == nil && y != e.TileOverlap {
				e.Notes = append(e.Notes, fmt.Sprintf("experiment.json: tileOverlapX %v differs from tileOverlapY %v: tile_overlap is tileOverlapX (as the original)", e.TileOverlap, y))
			}
		}
	}
	if e.TileOverlap >= 1 && e.TileOverlap < 100 {
		e.Notes = append(e.Notes, fmt.Sprintf("experiment.json: tile overlap %v read as percent: tile_overlap %v", e.TileOverlap, e.TileOverlap/100))
		e.TileOverlap /= 100
	}
	if e.TileOverlap <= 0 || e.TileOverlap >= 1 {
		return nil, fmt.Errorf("%s: key %s: %v: want a fraction in (0, 1) (or a percent in [1, 100))", path, srcKey(e.From["tile_overlap"]), e.TileOverlap)
	}
	if wl, ok := raw["wavelengths"]; ok {
		kin = kin || !isFlatList(wl)
		codex = codex || isFlatList(wl)
		if e.Wavelengths, err = parseWavelengths(wl); err != nil {
			return nil, fmt.Errorf("%s: key wavelengths%w", path, err)
		}
		e.From["wavelengths"] = "experiment.json wavelengths"
		if isFlatList(wl) {
			e.From["wavelengths"] += " (CODEX excitations mapped by filter set)"
		}
	} else {
		e.Wavelengths = DefaultWavelengths
		e.From["wavelengths"] = defaultFrom
	}
	if n, ok := raw["name"].(string); ok {
		e.Name = n
	}
	switch {
	case kin && codex:
		e.Form = "KINTSUGI and CODEX"
	case codex:
		e.Form = "CODEX"
	default:
		e.Form = "KINTSUGI"
	}
	return e, nil
}

// srcKey strips "experiment.json " from a From value.
func srcKey(from string) string {
	k, _ := strings.CutPrefix(from, "experiment.json ")
	return k
}

// number reads a JSON number (integral when integer).
func number(v any, integer bool) (float64, error) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, fmt.Errorf("%v (%T): want a number", v, v)
	}
	x, err := n.Float64()
	if err != nil || math.IsInf(x, 0) {
		return 0, fmt.Errorf("%s: want a finite number", n)
	}
	if integer && (x != math.Trunc(x) || x > 1e6) {
		return 0, fmt.Errorf("%s: want a whole number up to 1000000", n)
	}
	return x, nil
}

func isFlatList(v any) bool {
	l, ok := v.([]any)
	if !ok || len(l) == 0 {
		return false
	}
	_, num := l[0].(json.Number)
	return num
}

// parseWavelengths reads the three forms of ExperimentConfig.from_dict:
// {"<ch>": [ex, em]}, [[ch, [ex, em]], ...], or the CODEX flat list of
// excitations [358, 750, 550, 650] (channel i+1 = item i, by filter set).
// Errors start with the key suffix (".2", "[1]").
func parseWavelengths(v any) (map[int][2]float64, error) {
	out := map[int][2]float64{}
	pair := func(at string, p any) ([2]float64, error) {
		l, ok := p.([]any)
		if !ok || len(l) != 2 {
			return [2]float64{}, fmt.Errorf("%s: %v: want [excitation, emission] in nm", at, p)
		}
		var r [2]float64
		for i := range l {
			x, err := number(l[i], false)
			if err != nil || x <= 0 {
				return r, fmt.Errorf("%s: %v: want [excitation, emission], positive nm", at, p)
			}
			r[i] = x
		}
		return r, nil
	}
	switch t := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			ch, err := strconv.Atoi(k)
			if err != nil || ch < 1 || strconv.Itoa(ch) != k {
				return nil, fmt.Errorf(".%s: want a channel number as key", k)
			}
			if out[ch], err = pair("."+k, t[k]); err != nil {
				return nil, err
			}
		}
	case []any:
		if len(t) == 0 {
			return nil, errors.New(": empty list")
		}
		for i, item := range t {
			at := fmt.Sprintf("[%d]", i)
			if isFlatList(t) {
				ex, err := number(item, false)
				if err != nil {
					return nil, fmt.Errorf("%s: %w (the CODEX form is a list of excitations)", at, err)
				}
				p, ok := FilterSet(ex)
				if !ok {
					return nil, fmt.Errorf("%s: excitation %v nm matches no CODEX filter set (358, 488, 550, 650, 750 nm, within %d nm); give [excitation, emission] per channel instead: {\"%d\": [ex, em], ...}",
						at, ex, FilterSetTolerance, i+1)
				}
				out[i+1] = p
				continue
			}
			l, ok := item.([]any)
			if !ok || len(l) != 2 {
				return nil, fmt.Errorf("%s: %v: want [channel, [excitation, emission]]", at, item)
			}
			ch, err := number(l[0], true)
			if err != nil || ch < 1 {
				return nil, fmt.Errorf("%s: channel %v: want a channel number", at, l[0])
			}
			if _, dup := out[int(ch)]; dup {
				return nil, fmt.Errorf("%s: channel %v listed twice", at, ch)
			}
			if out[int(ch)], err = pair(at, l[1]); err != nil {
				return nil, err
			}
		}
	default:
		return nil, fmt.Errorf(": %v: want {\"<channel>\": [ex, em]}, [[channel, [ex, em]], ...] or a CODEX list of excitations", v)
	}
	return out, nil
}

// readBounded reads a metadata file of at most maxMetaBytes.
func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxMetaBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > maxMetaBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes: not a metadata file", path, maxMetaBytes)
	}
	return data, nil
}
