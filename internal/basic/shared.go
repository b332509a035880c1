package basic

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"gonum.org/v1/gonum/stat"
)

// ProfileMode selects how the stitch stage estimates the illumination
// profiles of a cycle.
type ProfileMode int

const (
	// ModeCompatible is the original's BaSiC, fitted on every plane's own
	// tiles with the darkfield estimated inside the fit (the default).
	ModeCompatible ProfileMode = iota
	// ModeEnvelopeDarkfield measures the darkfield from the dark end of the
	// raw data instead of inside BaSiC's model, then fits each plane's own
	// flatfield with that darkfield known (DarkEnvelope or
	// ChannelDarkfield, then FitWithDarkfield; FitPlanes does both). The
	// darkfield is a camera offset: it is the same for every z-plane of a
	// channel (one exposure), so it is measured from all of them together;
	// each plane keeps its own flatfield (mean 1). Darkfields are in
	// counts/65535 in memory, as every Profile's (counts on disk).
	ModeEnvelopeDarkfield
)

// ProfileModeNames are the config spellings of the modes, in order.
var ProfileModeNames = []string{"compatible", "envelope_darkfield"}

func (m ProfileMode) String() string {
	if m >= 0 && int(m) < len(ProfileModeNames) {
		return ProfileModeNames[m]
	}
	return fmt.Sprintf("ProfileMode(%d)", int(m))
}

// ParseProfileMode parses a config spelling (ProfileModeNames).
func ParseProfileMode(s string) (ProfileMode, error) {
	if i := slices.Index(ProfileModeNames, s); i >= 0 {
		return ProfileMode(i), nil
	}
	return 0, fmt.Errorf("basic: profile mode %q unknown (want one of %v)", s, ProfileModeNames)
}

// PlaneFitter fits one BaSiC profile per plane of raw tiles (uint16
// counts); planes[i] holds plane i's tiles. stitch.Engine satisfies it, so
// the CPU and GPU engines run FitWithDarkfield unchanged.
type PlaneFitter interface {
	Fit(ctx context.Context, planes [][]*raster.Gray16, p Params) ([]Profile, error)
}

// Envelope settings. The darkfield is BaSiC's offset D(x) of I = S·B + D;
// at every pixel the dimmest tiles (glass, or the darkest tissue) are
// closest to it.
const (
	// envelopeFraction is the fraction of a plane's tiles averaged at each
	// working pixel for its dark envelope (at least one tile): the darkest
	// 5 %, so that noise averages while the envelope stays on the dimmest
	// content (measured: 3-10 % alike, 20 % reaches into tissue).
	envelopeFraction = 0.05
	// envelopeOrder is the highest DCT order per axis kept in the smooth
	// darkfield: camera darkfields (offset gradients, amplifier glow, fixed
	// pattern of a few periods per tile) are smooth; cell texture is not
	// (measured on 300-count patterns of up to 1.5 periods: residual 6
	// counts RMS at order 6, 2-3 at order 9).
	envelopeOrder = 10
	// envelopeClip bounds the residual above the smooth fit, in robust
	// standard deviations, in the reweighted rounds: pixels whose darkest
	// tiles were all tissue lie above the camera offset and are pulled down
	// to the fit instead of lifting it.
	envelopeClip   = 2.5
	envelopeRounds = 30
)

// DarkEnvelope accumulates the dark envelope of the planes that share one
// darkfield (the z-planes of one channel in a cycle: one camera, one
// exposure): per plane, at every pixel of the working grid, the mean of its
// darkest envelopeFraction of tiles. Add planes one at a time (the tiles
// can be dropped after Add); Darkfield combines them.
type DarkEnvelope struct {
	size, h, w int
	planes     [][]float64 // per plane: size x size, counts/65535, (y, x)
	workers    int
}

// NewDarkEnvelope returns an empty envelope for tiles of h x w px at
// working size size (Params.WorkingSize); workers bounds the goroutines of
// the resize (0: runtime.NumCPU()).
func NewDarkEnvelope(h, w, size, workers int) *DarkEnvelope {
	return &DarkEnvelope{size: size, h: h, w: w, workers: workers}
}

// Add adds one plane's raw tiles (counts, at least 2, each h x w). It
// holds the plane only at the working size (n x size² float64), never a
// full-size float copy.
func (e *DarkEnvelope) Add(tiles []*raster.Gray16) error {
	if len(tiles) < 2 {
		return fmt.Errorf("basic: dark envelope: need at least 2 tiles, got %d", len(tiles))
	}
	for i, t := range tiles {
		if t == nil || t.W != e.w || t.H != e.h || len(t.Pix) != e.w*e.h {
			return fmt.Errorf("basic: dark envelope: tile %d is not %dx%d", i+1, e.w, e.h)
		}
	}
	d := resizeImages(nil, len(tiles), e.h, e.w, e.size, e.workers, func(j int, buf []float32) []float32 {
		return raster.Normalize16(buf, tiles[j].Pix)
	})
	e.addWorking(d, len(tiles))
	return nil
}

// AddStack adds one plane given as a (n, y, x) stack in counts/65535.
func (e *DarkEnvelope) AddStack(st *raster.Stack) {
	if st.H != e.h || st.W != e.w {
		panic(fmt.Sprintf("basic: DarkEnvelope.AddStack: stack %dx%d, envelope %dx%d", st.H, st.W, e.h, e.w))
	}
	e.addWorking(ResizeToWorking(nil, st, e.size, e.workers), st.N)
}

// addWorking adds a plane of n images at the working size (image-major).
func (e *DarkEnvelope) addWorking(d []float64, n int) {
	m := e.size * e.size
	k := max(1, int(math.Round(envelopeFraction*float64(n))))
	env := make([]float64, m)
	col := make([]float64, n)
	for i := range m {
		for j := range n {
			col[j] = d[j*m+i]
		}
		slices.Sort(col)
		var s float64
		for _, v := range col[:k] {
			s += v
		}
		env[i] = s / float64(k)
	}
	e.planes = append(e.planes, env)
}

// Planes is the number of planes added.
func (e *DarkEnvelope) Planes() int { return len(e.planes) }

// Darkfield is a darkfield measured outside BaSiC's fit, for
// FitWithDarkfield: Full at tile size (H x W, (y, x), x fastest) and Work
// at the working size (Size x Size), both in counts/65535.
type Darkfield struct {
	W, H, Size int
	Full, Work []float32
}

// Darkfield returns the darkfield of the planes added: the per-pixel
// median of the planes' envelopes, fitted by a smooth surface (2-D DCT
// orders 0..envelopeOrder per axis) that follows the envelope's lower side
// (points more than envelopeClip robust deviations above the fit are
// clipped to it, then refitted). Its level includes the dimmest content's
// own light times the flatfield (glass background: measured +20 to +40
// counts on the generator's data), which does not bias the flatfield fit
// (I - D - b·S = S·(B - b)).
func (e *DarkEnvelope) Darkfield() (Darkfield, error) {
	if len(e.planes) == 0 {
		return Darkfield{}, errors.New("basic: dark envelope: no planes added")
	}
	m := e.size * e.size
	med := make([]float64, m)
	col := make([]float64, len(e.planes))
	for i := range m {
		for j, p := range e.planes {
			col[j] = p[i]
		}
		med[i] = median(col)
	}
	work := smoothLowerEnvelope(med, e.size)
	df := Darkfield{W: e.w, H: e.h, Size: e.size, Full: ResizeProfile(nil, work, e.size, e.h, e.w), Work: make([]float32, m)}
	for i, v := range work {
		df.Work[i] = float32(v)
	}
	return df, nil
}

// smoothLowerEnvelope fits env (size x size) with its DCT orders
// 0..envelopeOrder per axis, then repeatedly clips env at the fit plus
// envelopeClip robust deviations of the residual and refits.
func smoothLowerEnvelope(env []float64, size int) []float64 {
	m := size * size
	d := newDCT2(size)
	cur := slices.Clone(env)
	fit := make([]float64, m)
	res := make([]float64, m)
	lowpass := func() {
		d.forward(fit, cur)
		for u := range size {
			for v := range size {
				if u > envelopeOrder || v > envelopeOrder {
					fit[u*size+v] = 0
				}
			}
		}
		d.inverse(fit, fit)
	}
	lowpass()
	for range envelopeRounds {
		for i := range m {
			res[i] = env[i] - fit[i]
		}
		sig := 1.4826 * mad(res)
		for i := range m {
			cur[i] = min(env[i], fit[i]+envelopeClip*sig)
		}
		lowpass()
	}
	return fit
}

// median returns the median of v (reordering v): the empirical
// 0.5-quantile, the lower middle value for even len(v).
func median(v []float64) float64 {
	slices.Sort(v)
	return stat.Quantile(0.5, stat.Empirical, v, nil)
}

// mad returns the median absolute deviation of v from its median.
func mad(v []float64) float64 {
	w := slices.Clone(v)
	c := median(w)
	for i, x := range v {
		w[i] = math.Abs(x - c)
	}
	return median(w)
}

// FitWithDarkfield fits every plane's own flatfield with its darkfield
// known: plane i's raw tiles minus dark[i].Full (in counts, rounded,
// clipped at 0) are fitted by f with p, BaSiC's settings unchanged, except
// that the darkfield is not estimated a second time (the residual is S·B
// alone); profile i carries dark[i] as its darkfield. Planes of one channel
// share one Darkfield (ChannelDarkfield); a batch may mix channels.
// Flatfields have mean 1, (y, x). It holds one subtracted copy of the
// planes' tiles (uint16) while f fits them.
func FitWithDarkfield(ctx context.Context, f PlaneFitter, planes [][]*raster.Gray16, dark []Darkfield, p Params) ([]Profile, error) {
	if len(dark) != len(planes) {
		return nil, fmt.Errorf("basic: %d darkfields for %d planes", len(dark), len(planes))
	}
	sub := make([][]*raster.Gray16, len(planes))
	for i, tiles := range planes {
		d := dark[i]
		if d.Size != p.WorkingSize || len(d.Work) != d.Size*d.Size || len(d.Full) != d.W*d.H {
			return nil, fmt.Errorf("basic: plane %d: darkfield of %dx%d px at working size %d, params want working size %d",
				i, d.W, d.H, d.Size, p.WorkingSize)
		}
		sub[i] = make([]*raster.Gray16, len(tiles))
		for j, t := range tiles {
			if t == nil || t.W != d.W || t.H != d.H || len(t.Pix) != len(d.Full) {
				return nil, fmt.Errorf("basic: plane %d tile %d is not %dx%d (the darkfield's size)", i, j+1, d.W, d.H)
			}
			g := raster.NewGray16(t.W, t.H)
			for k, v := range t.Pix {
				g.Pix[k] = uint16(min(max(math.Round(float64(v)-float64(d.Full[k])*65535), 0), 65535))
			}
			sub[i][j] = g
		}
	}
	q := p
	q.Darkfield = false
	profs, err := f.Fit(ctx, sub, q)
	if err != nil {
		return nil, err
	}
	for i := range profs {
		profs[i].Darkfield = slices.Clone(dark[i].Full)
		profs[i].WorkDark = slices.Clone(dark[i].Work)
	}
	return profs, nil
}

// FitPlanes fits the profiles of planes that share one darkfield (the
// z-planes of one channel of a cycle; planes[i] holds plane i's raw tiles,
// counts) under mode: ModeCompatible is f.Fit(planes, p) as before;
// ModeEnvelopeDarkfield measures the darkfield from all the planes
// (DarkEnvelope) and fits each plane's own flatfield with it
// (FitWithDarkfield). A stage that cannot hold all planes at once uses
// DarkEnvelope.Add plane by plane, then FitWithDarkfield per batch.
// workers bounds the envelope's goroutines (0: runtime.NumCPU()).
func FitPlanes(ctx context.Context, f PlaneFitter, planes [][]*raster.Gray16, p Params, mode ProfileMode, workers int) ([]Profile, error) {
	switch mode {
	case ModeCompatible:
		return f.Fit(ctx, planes, p)
	case ModeEnvelopeDarkfield:
	default:
		return nil, fmt.Errorf("basic: profile mode %v unknown", mode)
	}
	if len(planes) == 0 {
		return nil, nil
	}
	if len(planes[0]) == 0 || planes[0][0] == nil {
		return nil, errors.New("basic: plane 0 has no tiles")
	}
	dark, err := ChannelDarkfield(ctx, len(planes), planes[0][0].H, planes[0][0].W, p, workers,
		func(_ context.Context, i int) ([]*raster.Gray16, error) { return planes[i], nil })
	if err != nil {
		return nil, err
	}
	darks := make([]Darkfield, len(planes))
	for i := range darks {
		darks[i] = dark
	}
	return FitWithDarkfield(ctx, f, planes, darks, p)
}

// CPUPlanes is the CPU reference as a PlaneFitter: it normalises each
// plane's tiles to counts/65535 and runs CPU.Fit (what stitch.CPUEngine
// does).
type CPUPlanes struct{ CPU CPU }

// Fit fits one profile per plane of raw tiles.
func (c CPUPlanes) Fit(ctx context.Context, planes [][]*raster.Gray16, p Params) ([]Profile, error) {
	stacks := make([]*raster.Stack, len(planes))
	for i, tiles := range planes {
		if len(tiles) == 0 || tiles[0] == nil {
			return nil, fmt.Errorf("basic: plane %d has no tiles", i)
		}
		st := raster.NewStack(len(tiles), tiles[0].H, tiles[0].W)
		for j, t := range tiles {
			if t == nil || t.W != st.W || t.H != st.H {
				return nil, fmt.Errorf("basic: plane %d tile %d is not %dx%d", i, j+1, st.W, st.H)
			}
			raster.Normalize16(st.Plane(j), t.Pix)
		}
		stacks[i] = st
	}
	return c.CPU.Fit(ctx, stacks, p)
}

// ChannelDarkfield is the first pass of ModeEnvelopeDarkfield for a stage
// that streams planes: it reads the n planes sharing one darkfield (the
// z-planes of one channel of a cycle) one at a time with read(ctx, i),
// which returns plane i's raw tiles (counts, h x w), adds each to a
// DarkEnvelope at p.WorkingSize and drops it, and returns their darkfield
// for FitWithDarkfield. Peak memory beyond one plane's tiles: n tiles at
// the working size (float64) per plane read, 8 MB for 63 tiles.
func ChannelDarkfield(ctx context.Context, n, h, w int, p Params, workers int, read func(ctx context.Context, i int) ([]*raster.Gray16, error)) (Darkfield, error) {
	if err := p.Validate(); err != nil {
		return Darkfield{}, err
	}
	env := NewDarkEnvelope(h, w, p.WorkingSize, workers)
	for i := range n {
		tiles, err := read(ctx, i)
		if err != nil {
			return Darkfield{}, err
		}
		if err := ctx.Err(); err != nil {
			return Darkfield{}, err
		}
		if err := env.Add(tiles); err != nil {
			return Darkfield{}, fmt.Errorf("plane %d: %w", i, err)
		}
	}
	return env.Darkfield()
}
