package project

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
)

// Project is what Infer found in a project directory.
type Project struct {
	Dir        string // absolute
	Experiment *Experiment
	Names      *ChannelNames // nil: no channel-names file
	Raw        []RawCycle
	Cycles     []int
	Channels   []int
	NZPlanes   int
	TissueType string
	// From says where each config value came from, by config key.
	From map[string]string
	// Notes are disagreements between the sources and what was ignored; the
	// config is written anyway, as the original does, and the stage that
	// would fail says so again.
	Notes []string
}

// ExperimentFile is where a project's experiment metadata lives.
func ExperimentFile(dir string) string { return filepath.Join(dir, "meta", "experiment.json") }

// Infer reads dir/meta/experiment.json (required, as in the original),
// dir/meta/CHANNELNAMES.txt (or one of ChannelNameFiles; optional) and the
// raw cycle directories under dir/data/raw (optional), and decides the
// cycles, channels and z-planes:
//   - cycles: 1..n_cycles of experiment.json; without n_cycles, the raw cycle
//     directories found;
//   - channels: 1..channels_per_cycle of experiment.json; when it does not
//     give them, the channels of the raw tile names (1..k), else the
//     original's default 4;
//   - n_zplanes: experiment.json; without it, the z-planes of the raw tiles.
//
// Errors name the file and key.
func Infer(dir string) (*Project, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("project %s: %w", dir, err)
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("project %s: not a directory", dir)
	}
	p := &Project{Dir: abs, From: map[string]string{}}
	exp, err := ReadExperiment(ExperimentFile(abs))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: missing: the config is generated from the experiment's metadata (n_cycles/numCycles, n_zplanes/numZPlanes, tile grid, optics), as by the original's `kintsugi workflow config`", ExperimentFile(abs))
	}
	if err != nil {
		return nil, err
	}
	p.Experiment = exp
	for k, v := range exp.From {
		p.From[k] = v
	}
	p.Notes = append(p.Notes, exp.Notes...)
	raw, ignored, err := ScanRaw(abs)
	if err != nil {
		return nil, err
	}
	p.Raw = raw
	for _, s := range ignored {
		p.note("data/raw/%s: not used", s)
	}
	if err := p.inferCycles(); err != nil {
		return nil, err
	}
	n := p.inferChannels()
	if err := p.inferZPlanes(); err != nil {
		return nil, err
	}
	p.checkTileGrid()
	if err := p.readNames(n); err != nil {
		return nil, err
	}
	p.TissueType, p.From["signal_isolation.tissue_type"] = TissueType(filepath.Base(abs), exp.Name)
	return p, nil
}

// note records a disagreement or something ignored (Project.Notes).
func (p *Project) note(format string, args ...any) {
	p.Notes = append(p.Notes, fmt.Sprintf(format, args...))
}

// rawFrom is a From value for something read from the raw cycle directories.
func (p *Project) rawFrom(what string) string {
	return fmt.Sprintf("data/raw (%s of %d cycle director%s)", what, len(p.Raw), map[bool]string{true: "y", false: "ies"}[len(p.Raw) == 1])
}

// inferCycles sets Cycles from n_cycles, else from the raw cycle
// directories, and notes the cycles that have no raw directory or are
// beyond n_cycles.
func (p *Project) inferCycles() error {
	exp, raw, note, rawFrom, abs := p.Experiment, p.Raw, p.note, p.rawFrom, p.Dir
	switch {
	case exp.NCycles > 0:
		for c := 1; c <= exp.NCycles; c++ {
			p.Cycles = append(p.Cycles, c)
		}
		p.From["cycles"] = p.From["n_cycles"]
	case len(raw) > 0:
		for _, r := range raw {
			p.Cycles = append(p.Cycles, r.Number)
		}
		p.From["cycles"] = rawFrom("the names")
	default:
		return fmt.Errorf("%s: no n_cycles (the original's key) or numCycles (CODEX) and no raw cycle directories under %s",
			exp.Path, layout.RawDir(abs))
	}
	if len(raw) > 0 {
		var missing, extra []int
		have := map[int]bool{}
		for _, r := range raw {
			have[r.Number] = true
			if !slices.Contains(p.Cycles, r.Number) {
				extra = append(extra, r.Number)
			}
		}
		for _, c := range p.Cycles {
			if !have[c] {
				missing = append(missing, c)
			}
		}
		if len(missing) > 0 {
			note("cycles %v have no raw directory under data/raw: their stitch jobs will fail until the data is there", missing)
		}
		if len(extra) > 0 {
			note("raw cycle directories %v are beyond n_cycles %d: not in cycles", extra, exp.NCycles)
		}
	} else {
		note("no raw cycle directories under data/raw (%s): nothing checked against the tiles", strings.Join(append(layout.RawCycleGlobs(1), layout.RawCycleNames(1)...), ", "))
	}
	return nil
}

// inferChannels sets Channels (1..n) from channels_per_cycle, else from the
// raw tile names, and returns n.
func (p *Project) inferChannels() int {
	exp, raw, note, rawFrom := p.Experiment, p.Raw, p.note, p.rawFrom
	rawChannels := commonChannels(raw)
	n := exp.ChannelsPerCycle
	p.From["channels"] = p.From["channels_per_cycle"]
	if exp.From["channels_per_cycle"] == defaultFrom && len(rawChannels) > 0 && isOneToK(rawChannels) {
		n = len(rawChannels)
		p.From["channels"] = rawFrom("the tile names")
	} else if len(rawChannels) > 0 && !slices.Equal(rawChannels, oneTo(n)) {
		note("channels 1-%d (%s), the raw tiles have channels %v", n, p.From["channels"], rawChannels)
	}
	p.Channels = oneTo(n)
	for _, ch := range p.Channels {
		if _, ok := exp.Wavelengths[ch]; !ok {
			note("channel %d has no wavelengths (%s): deconvolution needs wavelengths.%d", ch, p.From["wavelengths"], ch)
		}
	}
	return n
}

// inferZPlanes sets NZPlanes from n_zplanes, else from the raw tiles'
// z-planes, and notes raw cycles that disagree.
func (p *Project) inferZPlanes() error {
	exp, raw, note, rawFrom := p.Experiment, p.Raw, p.note, p.rawFrom
	rawZ := 0
	for _, r := range raw {
		if len(r.Z) != len(raw[0].Z) {
			note("%s has %d z-planes, %s has %d", r.Dir, len(r.Z), raw[0].Dir, len(raw[0].Z))
		}
	}
	if len(raw) > 0 {
		rawZ = len(raw[0].Z)
	}
	switch {
	case exp.NZPlanes > 0:
		p.NZPlanes = exp.NZPlanes
		if rawZ > 0 && rawZ != p.NZPlanes {
			note("n_zplanes %d (%s), but %s has %d z-planes: the stitch stage will refuse the cycle", p.NZPlanes, p.From["n_zplanes"], raw[0].Dir, rawZ)
		}
	case rawZ > 0:
		p.NZPlanes = rawZ
		p.From["n_zplanes"] = rawFrom("the z-planes in the tile names")
	default:
		return fmt.Errorf("%s: no n_zplanes (the original's key) or numZPlanes (CODEX) and no raw tiles to count them from", exp.Path)
	}
	return nil
}

// checkTileGrid notes raw cycles whose tile count is not tile_rows x
// tile_cols or that hold several regions.
func (p *Project) checkTileGrid() {
	exp, note := p.Experiment, p.note
	for _, r := range p.Raw {
		if r.Tiles != exp.TileRows*exp.TileCols {
			note("%s has %d tiles, tile_rows x tile_cols is %d x %d = %d (%s, %s)", r.Dir, r.Tiles, exp.TileRows, exp.TileCols,
				exp.TileRows*exp.TileCols, p.From["tile_rows"], p.From["tile_cols"])
		}
		if len(r.Regions) > 1 {
			note("%s holds tiles of regions %v: the stitch stage reads one region per cycle directory", r.Dir, r.Regions)
		}
	}
}

// readNames reads the channel-names file of meta/ (n channels per cycle)
// into Names, noting the cycles it does not name or names beyond cycles.
func (p *Project) readNames(n int) error {
	abs, note := p.Dir, p.note
	if path := FindChannelNames(filepath.Join(abs, "meta")); path != "" {
		cn, err := ReadChannelNames(path, n)
		if err != nil {
			return err
		}
		p.Names = cn
		rel, _ := filepath.Rel(abs, path)
		p.From["channel_names"] = fmt.Sprintf("%s (%s; the original's duplicate rule)", rel, cn.Form)
		var missing, extra []int
		for _, c := range p.Cycles {
			if _, ok := cn.Names[c]; !ok {
				missing = append(missing, c)
			}
		}
		for c := range cn.Names {
			if !slices.Contains(p.Cycles, c) {
				extra = append(extra, c)
			}
		}
		slices.Sort(extra)
		if len(missing) > 0 {
			note("%s has no names for cycles %v: their files are named CH{c}_edf.tif", rel, missing)
		}
		if len(extra) > 0 {
			note("%s names cycles %v beyond the cycles %v: kept in channel_names, not processed", rel, extra, p.Cycles)
		}
	} else {
		p.From["channel_names"] = "none (no meta/" + strings.Join(ChannelNameFiles, ", meta/") + ")"
		note("no channel-names file in meta/: EDF files are named CH{c}_edf.tif")
	}
	return nil
}

// tissuePatterns are the original's (KINTSUGI signal/batch_multi.py
// _TISSUE_PATTERNS), most specific first, matched ignoring case.
var tissuePatterns = []struct {
	re     *regexp.Regexp
	tissue string
}{
	{regexp.MustCompile(`(?i)(?:_SP_|spleen|splenic)`), "spleen"},
	{regexp.MustCompile(`(?i)(?:_LN_|lymph.?node|lymph)`), "lymph_node"},
	{regexp.MustCompile(`(?i)(?:_TH_|thymus|thymic)`), "thymus"},
	{regexp.MustCompile(`(?i)(?:pancrea)`), "pancreas"},
}

// TissueType parses the tissue from the project directory's name, then from
// experiment.json's name, as the original's parse_tissue_type; "unknown"
// when neither says.
func TissueType(projectName, experimentName string) (tissue, from string) {
	for _, s := range []struct{ text, from string }{{projectName, "the project directory's name"}, {experimentName, "experiment.json name"}} {
		for _, tp := range tissuePatterns {
			if s.text != "" && tp.re.MatchString(s.text) {
				return tp.tissue, s.from
			}
		}
	}
	return "unknown", "neither the project directory's name nor experiment.json name names a tissue"
}

// commonChannels is the union of the raw cycles' channels.
func commonChannels(raw []RawCycle) []int {
	set := map[int]bool{}
	for _, r := range raw {
		for _, c := range r.Channels {
			set[c] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

func isOneToK(s []int) bool { return slices.Equal(s, oneTo(len(s))) }

func oneTo(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i + 1
	}
	return out
}
