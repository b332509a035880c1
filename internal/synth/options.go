package synth

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"sort"
	"strconv"
	"strings"
)

// ErrInvalidOptions is wrapped by every error that comes from bad options
// (a usage error, as opposed to an I/O failure).
var ErrInvalidOptions = errors.New("invalid options")

// Options describe the synthetic experiment and what to write. Zero values are
// not defaults: start from a Preset and change fields.
type Options struct {
	OutDir string // project directory to write into
	Seed   uint64 // seed of every random stream

	// Acquisition geometry.
	Rows, Cols   int     // tile grid (tile_rows, tile_cols)
	TileH, TileW int     // tile size, px
	Overlap      float64 // fraction of a tile shared with a grid neighbour, in (0, 0.5) [tile_overlap]
	NZ           int     // z-planes per tile [n_zplanes]
	NChannels    int     // channels per cycle in the experiment
	NCycles      int     // cycles in the experiment
	Channels     []int   // channels to write (1-based, subset of 1..NChannels); nil: all
	Cycles       []int   // cycles to write (1-based, subset of 1..NCycles); nil: all

	// Optics (written to truth.json and config.yaml; they also set the blur).
	PixelSizeNM       float64 // xy pixel size, nm [xy_pixel_size]
	ZStepNM           float64 // z step, nm [z_step_size]
	NA                float64 // numerical aperture [numerical_aperture]
	RefractiveIndex   float64 // tissue refractive index [tissue_refractive_index]
	BlurPerPlane      float64 // defocus blur sigma per plane of |z - zf|, px; 0: derived from optics (see DefocusSigmaPerPlane)
	FocusRange        float64 // the focal plane varies by about ± this many planes across the mosaic
	StageJitterPx     float64 // standard deviation of the per-tile stage jitter, px (clipped at 3 sigma)
	CycleShiftPx      float64 // maximum |dy|, |dx| of the per-cycle global shift, px (cycle 1: 0)
	CellSpacingPx     float64 // spacing of the jittered grid that places cells, px
	NucleusSigmaPx    float64 // mean nucleus Gaussian sigma, px
	EmptyTiles        int     // tiles (on the grid border) whose centre is off tissue
	BlankFirstCycle   bool    // channels 2.. of cycle 1 are blanks (autofluorescence only), as in CODEX
	Gain              float64 // shot noise: counts per photoelectron (variance gain·signal); 0: no shot noise
	ReadNoise         float64 // read noise, counts rms
	WriteTruthScene   bool    // write the true scene of the reference z at mosaic size per (cycle, channel)
	WriteFocusScene   bool    // also write the all-in-focus scene at mosaic size
	DarkfieldBase     float64 // darkfield mean of channel 1, counts (others add 4 counts per channel)
	DarkfieldGradient float64 // peak-to-peak darkfield gradient across a tile, counts
	// Variety (variety.go; zero: off, the presets' output is unchanged).
	DarkfieldVary  float64 // peak-to-peak smooth spatial darkfield pattern across a tile, counts
	MarkerFraction float64 // fraction of cells each marker channel labels, (0, 1]; 0: drawn per channel (0.08-0.33)
	TissueCover    float64 // fraction of the mosaic on the tissue side of a straight tissue edge, (0, 1]; 0: no edge

	Workers int          // parallel workers; 0: runtime.NumCPU()
	Logger  *slog.Logger // nil: slog.Default()
}

// PresetNames lists the presets Preset accepts.
var PresetNames = []string{"tiny", "example", "small", "production"}

// Preset returns the options of a named preset, or an error wrapping
// ErrInvalidOptions for an unknown name.
//
//	tiny:       2 x 3 tiles of 160 x 200 px, 5 z, 2 channels, 3 cycles (CI; well under 2 s)
//	example:    5 x 6 tiles of 360 x 480 px at 1508 nm, 3 z, 2 channels, 2 cycles: the
//	            production sample and optics seen through 4 x 4 camera binning (same field
//	            of view and cells per tile, pixels 4x larger), on which BaSiC identifies the
//	            profiles (`make example`, the end-to-end test)
//	small:      3 x 3 tiles of 360 x 480 px, 7 z, 4 channels, 2 cycles
//	production: 7 x 9 tiles of 1440 x 1920 px, 20 z, 4 channels, 1 cycle (≈ 28 GB);
//	            7 rows x 9 columns matches the original's stitched size of about 7475 x 12660 px.
func Preset(name string) (Options, error) {
	o := Options{
		OutDir:          "synth_project",
		Seed:            1,
		Overlap:         0.3,
		PixelSizeNM:     377,
		ZStepNM:         1500,
		NA:              0.75,
		RefractiveIndex: 1.44,
		StageJitterPx:   1.5,
		CycleShiftPx:    20,
		CellSpacingPx:   18,
		NucleusSigmaPx:  4.5,
		BlankFirstCycle: true,
		Gain:            1,
		ReadNoise:       4,
		WriteTruthScene: true,
		DarkfieldBase:   460,
		// A gentle gradient: 12 counts across the tile.
		DarkfieldGradient: 12,
	}
	switch name {
	case "tiny":
		o.Rows, o.Cols, o.TileH, o.TileW = 2, 3, 160, 200
		o.NZ, o.NChannels, o.NCycles = 5, 2, 3
		o.FocusRange = 1
		o.CycleShiftPx = 8
		// Every tile shows tissue: with 6 tiles, an empty one has no
		// textured overlap and only the stage model could place it.
		o.EmptyTiles = 0
	case "example":
		// The production acquisition (NA 0.75, 377 nm pixels, 1440 x 1920 px
		// tiles) with 4 x 4 camera binning that averages each block: 1508 nm
		// pixels, the same field of view per tile and the same tissue, so
		// cell spacing and nucleus size shrink 4x in px (4.5 and 1.125 px, i.e.
		// 6.8 µm and 1.7 µm as in production); the blur follows from the
		// optics (0.3 px of defocus per 1.5 µm plane). Each tile holds as many
		// cells as a production tile, so the content averages out in BaSiC's
		// 128 x 128 working grid; of the grids measured, 5 x 6 is the smallest
		// on which every channel's flatfield comes out better than no
		// correction (4 x 5: CH2 worse). Stage jitter (1.5 px,
		// 2.3 µm) and the cycle shift (12 µm) are in the range of a motorised
		// stage and a remounted slide.
		o.Rows, o.Cols, o.TileH, o.TileW = 5, 6, 360, 480
		o.NZ, o.NChannels, o.NCycles = 3, 2, 2
		o.PixelSizeNM = 4 * 377
		o.CellSpacingPx, o.NucleusSigmaPx = 18.0/4, 4.5/4
		o.FocusRange = 1
		o.CycleShiftPx = 8
		o.EmptyTiles = 0
	case "small":
		o.Rows, o.Cols, o.TileH, o.TileW = 3, 3, 360, 480
		o.NZ, o.NChannels, o.NCycles = 7, 4, 2
		o.FocusRange = 1.5
		o.EmptyTiles = 1
	case "production":
		o.Rows, o.Cols, o.TileH, o.TileW = 7, 9, 1440, 1920
		o.NZ, o.NChannels, o.NCycles = 20, 4, 1
		o.FocusRange = 2.5
		o.EmptyTiles = 4
	default:
		return Options{}, fmt.Errorf("%w: unknown preset %q (want one of %s)", ErrInvalidOptions, name, strings.Join(PresetNames, ", "))
	}
	return o, nil
}

// DefocusSigmaPerPlane is the blur used when BlurPerPlane is 0: half the
// geometric blur radius of one z step, z_step·tan(asin(NA/n))/2, in px
// (1.21 px for 1500 nm, NA 0.75, n 1.44, 377 nm pixels).
func (o Options) DefocusSigmaPerPlane() float64 {
	if o.BlurPerPlane > 0 {
		return o.BlurPerPlane
	}
	s := o.NA / o.RefractiveIndex
	return 0.5 * o.ZStepNM * s / math.Sqrt(1-s*s) / o.PixelSizeNM
}

// RefZ is the stitch stage's reference plane, n_zplanes // 2, 1-based (as the
// original: 20 -> 10, 5 -> 2), at least 1.
func (o Options) RefZ() int { return max(1, o.NZ/2) }

// Validate checks the options; errors wrap ErrInvalidOptions.
func (o Options) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidOptions}, a...)...)
	}
	switch {
	case o.OutDir == "":
		return bad("output directory is empty")
	case o.Rows < 1 || o.Cols < 1 || o.Rows*o.Cols < 2:
		return bad("grid %dx%d: need at least 2 tiles", o.Rows, o.Cols)
	case o.Rows*o.Cols > 99999:
		return bad("grid %dx%d: more than 99999 tiles", o.Rows, o.Cols)
	case o.TileH < 16 || o.TileW < 16:
		return bad("tile size %dx%d: below 16 px", o.TileH, o.TileW)
	case !(o.Overlap > 0 && o.Overlap < 0.5):
		return bad("overlap %g: want a fraction in (0, 0.5)", o.Overlap)
	case o.NZ < 1 || o.NZ > 999:
		return bad("z-planes %d: want 1..999", o.NZ)
	case o.NChannels < 1 || o.NChannels > 99:
		return bad("channels %d: want 1..99", o.NChannels)
	case o.NCycles < 1 || o.NCycles > 99:
		return bad("cycles %d: want 1..99", o.NCycles)
	case !(o.PixelSizeNM > 0) || !(o.ZStepNM > 0):
		return bad("pixel size %g nm, z step %g nm: must be positive", o.PixelSizeNM, o.ZStepNM)
	case !(o.NA > 0) || !(o.RefractiveIndex > o.NA):
		return bad("NA %g, refractive index %g: need 0 < NA < n", o.NA, o.RefractiveIndex)
	case o.BlurPerPlane < 0 || o.FocusRange < 0 || o.StageJitterPx < 0 || o.CycleShiftPx < 0:
		return bad("blur, focus range, jitter and cycle shift must not be negative")
	case o.StageJitterPx*3 > 0.25*o.Overlap*float64(min(o.TileH, o.TileW)):
		return bad("stage jitter %g px is too large for the overlap", o.StageJitterPx)
	case !(o.CellSpacingPx >= 4) || !(o.NucleusSigmaPx >= 0.5):
		return bad("cell spacing %g px (>= 4), nucleus sigma %g px (>= 0.5)", o.CellSpacingPx, o.NucleusSigmaPx)
	case o.EmptyTiles < 0 || o.EmptyTiles > o.Rows*o.Cols/2:
		return bad("empty tiles %d: want 0..%d", o.EmptyTiles, o.Rows*o.Cols/2)
	case o.Gain < 0 || o.ReadNoise < 0:
		return bad("gain and read noise must not be negative")
	case o.DarkfieldBase < 0 || o.DarkfieldBase > 20000 || o.DarkfieldGradient < 0:
		return bad("darkfield base %g counts (0..20000), gradient %g", o.DarkfieldBase, o.DarkfieldGradient)
	case !(o.DarkfieldVary >= 0 && o.DarkfieldVary <= 20000):
		return bad("darkfield variation %g counts: want 0..20000", o.DarkfieldVary)
	case !(o.MarkerFraction >= 0 && o.MarkerFraction <= 1):
		return bad("marker fraction %g: want 0..1 (0: drawn per channel)", o.MarkerFraction)
	case !(o.TissueCover >= 0 && o.TissueCover <= 1):
		return bad("tissue cover %g: want 0..1 (0: no tissue edge)", o.TissueCover)
	case o.Workers < 0:
		return bad("workers %d: must not be negative", o.Workers)
	}
	for _, c := range o.Channels {
		if c < 1 || c > o.NChannels {
			return bad("channel %d: want 1..%d", c, o.NChannels)
		}
	}
	for _, c := range o.Cycles {
		if c < 1 || c > o.NCycles {
			return bad("cycle %d: want 1..%d", c, o.NCycles)
		}
	}
	return nil
}

// channelList returns the channels to write, sorted and deduplicated.
func (o Options) channelList() []int { return listOrAll(o.Channels, o.NChannels) }

// cycleList returns the cycles to write, sorted and deduplicated.
func (o Options) cycleList() []int { return listOrAll(o.Cycles, o.NCycles) }

func listOrAll(sel []int, n int) []int {
	if len(sel) == 0 {
		all := make([]int, n)
		for i := range all {
			all[i] = i + 1
		}
		return all
	}
	out := append([]int(nil), sel...)
	sort.Ints(out)
	k := 0
	for i, v := range out {
		if i == 0 || v != out[k-1] {
			out[k] = v
			k++
		}
	}
	return out[:k]
}

func (o Options) workers() int {
	if o.Workers > 0 {
		return o.Workers
	}
	return runtime.NumCPU()
}

func (o Options) logger() *slog.Logger {
	if o.Logger != nil {
		return o.Logger
	}
	return slog.Default()
}

// ParseIntList parses a list such as "1,2,5" or "1-3,7" into sorted,
// deduplicated integers. The empty string gives nil (meaning "all").
// Errors wrap ErrInvalidOptions.
func ParseIntList(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var out []int
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(strings.TrimSpace(lo))
		if err != nil {
			return nil, fmt.Errorf("%w: list %q: bad item %q", ErrInvalidOptions, s, part)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(strings.TrimSpace(hi)); err != nil || b < a {
				return nil, fmt.Errorf("%w: list %q: bad range %q", ErrInvalidOptions, s, part)
			}
		}
		if b-a > 10000 {
			return nil, fmt.Errorf("%w: list %q: range %q too long", ErrInvalidOptions, s, part)
		}
		for v := a; v <= b; v++ {
			out = append(out, v)
		}
	}
	return listOrAll(out, 0), nil
}
