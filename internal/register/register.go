package register

import (
	"context"
	"fmt"
	"math"
	"sort"

	"github.com/kintsugi-hpc/kintsugi-go/internal/align"
	"github.com/kintsugi-hpc/kintsugi-go/internal/par"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// Params are the registration settings (config keys in brackets).
type Params struct {
	MaxImageDim    int     // rigid working level: long side at most this, px [registration.max_image_dim]
	RigidOnly      bool    // skip the non-rigid step [registration.rigid_only]
	NonRigidMaxDim int     // non-rigid working level long side, px [registration.non_rigid.max_dim]
	SigmaRatio     float64 // field smoothing sigma / working long side [registration.non_rigid.sigma_ratio]
	Scale          bool    // also estimate a uniform scale (off: rotation + translation)

	CoarseDim     int     // long side of the coarse level of the rotation search, px
	MaxAngleDeg   float64 // rotation search range, ± degrees
	AngleStepDeg  float64 // rotation search step, degrees
	RigidBlock    int     // rigid refinement block side, level px (halved on small levels)
	RigidIters    int     // most rigid refinement rounds
	NonRigidBlock int     // non-rigid block side, level px; blocks overlap by half
	NonRigidIters int     // non-rigid rounds
	PeakMin       float64 // least Shift.Peak of a block that is used
	TextureFrac   float64 // least fixed-block standard deviation, fraction of the 90th percentile over blocks
	MedianTol     float64 // vector-median outlier threshold, level px
	MinJacobian   float64 // least det(I + ∇D) allowed
	Workers       int     // host goroutines for the metrics (<= 0: 1)
}

// DefaultParams returns the defaults: the original's working sizes and
// smoothing (4096 px rigid and non-rigid, sigma ratio 0.01, non-rigid on: what
// config.DefaultRegistration holds; regstage's TestParamsDefaults holds them
// together) and this package's search settings. regstage.Params sets the
// config's keys on them.
func DefaultParams() Params {
	return Params{
		MaxImageDim: 4096, NonRigidMaxDim: 4096, SigmaRatio: 0.01,
		CoarseDim: 1024, MaxAngleDeg: 3, AngleStepDeg: 0.5, RigidBlock: 128, RigidIters: 8,
		NonRigidBlock: 64, NonRigidIters: 3, PeakMin: 0.03, TextureFrac: 0.15, MedianTol: 1.0, MinJacobian: 0.5,
	}
}

// Check validates the parameters.
func (p Params) Check() error {
	switch {
	case p.MaxImageDim < 64:
		return fmt.Errorf("register: max_image_dim %d < 64", p.MaxImageDim)
	case !p.RigidOnly && p.NonRigidMaxDim < 64:
		return fmt.Errorf("register: non_rigid.max_dim %d < 64", p.NonRigidMaxDim)
	case !p.RigidOnly && !(p.SigmaRatio > 0 && p.SigmaRatio < 1):
		return fmt.Errorf("register: non_rigid.sigma_ratio %g not in (0, 1)", p.SigmaRatio)
	case p.CoarseDim < 64:
		return fmt.Errorf("register: coarse dim %d < 64", p.CoarseDim)
	case !(p.MaxAngleDeg >= 0 && p.MaxAngleDeg <= 45) || !(p.AngleStepDeg > 0):
		return fmt.Errorf("register: angle search ±%g step %g", p.MaxAngleDeg, p.AngleStepDeg)
	case p.RigidBlock < 16 || p.NonRigidBlock < 16 || p.RigidIters < 1 || p.NonRigidIters < 1:
		return fmt.Errorf("register: block sizes %d, %d or rounds %d, %d too small", p.RigidBlock, p.NonRigidBlock, p.RigidIters, p.NonRigidIters)
	}
	return nil
}

// factor returns the level factor that brings max(h, w) to at most dim.
func factor(h, w, dim int) int { return max(1, (max(h, w)+dim-1)/dim) }

// Reference is the fixed (reference) DAPI image's levels, computed once
// and shared by every cycle.
type Reference struct {
	H, W   int
	levels map[int]*raster.Float32
}

// Levels returns the level factors Register needs for an h x w image.
func (p Params) Levels(h, w int) (coarse, rigid, nonRigid int) {
	coarse = factor(h, w, p.CoarseDim)
	rigid = factor(h, w, p.MaxImageDim)
	nonRigid = rigid
	if !p.RigidOnly {
		nonRigid = factor(h, w, p.NonRigidMaxDim)
	}
	return
}

func (p Params) levelList(h, w int) []int {
	c, r, n := p.Levels(h, w)
	ks := []int{c}
	for _, k := range []int{r, n} {
		if k != ks[0] && (len(ks) < 2 || k != ks[1]) {
			ks = append(ks, k)
		}
	}
	return ks
}

// NewReference downsamples the reference DAPI image.
func NewReference(ctx context.Context, be Backend, img *raster.Gray16, p Params) (*Reference, error) {
	if err := p.Check(); err != nil {
		return nil, err
	}
	ks := p.levelList(img.H, img.W)
	lv, err := be.Downsample(ctx, img, ks)
	if err != nil {
		return nil, err
	}
	r := &Reference{H: img.H, W: img.W, levels: map[int]*raster.Float32{}}
	for i, k := range ks {
		r.levels[k] = lv[i]
	}
	return r, nil
}

// Metrics describe one registration (NCC at the non-rigid working level).
type Metrics struct {
	NCCBefore       float64 `json:"ncc_before"`
	NCCRigid        float64 `json:"ncc_after_rigid"`
	NCCNonRigid     float64 `json:"ncc_after_non_rigid"` // = NCCRigid when rigid only or the field was dropped
	NCCFinal        float64 `json:"ncc_final"`
	NonRigidDropped bool    `json:"non_rigid_dropped"` // the field lowered the NCC and was not used
	RotationDeg     float64 `json:"rotation_deg"`
	Scale           float64 `json:"scale"`
	TranslationY    float64 `json:"translation_y_px"`
	TranslationX    float64 `json:"translation_x_px"`
	CoarsePeak      float64 `json:"coarse_peak"`
	RigidRounds     int     `json:"rigid_rounds"`
	RigidBlocks     int     `json:"rigid_blocks"`
	RigidBlocksUsed int     `json:"rigid_blocks_used"`
	RigidResidualPx float64 `json:"rigid_residual_rms_px"` // RMS of the last round's inlier block residuals, full px
	NRBlocks        int     `json:"non_rigid_blocks"`
	NRBlocksUsed    int     `json:"non_rigid_blocks_used"` // in the last round
	DispMeanPx      float64 `json:"displacement_mean_px"`  // |D| over the field's nodes, full px
	DispP95Px       float64 `json:"displacement_p95_px"`
	DispMaxPx       float64 `json:"displacement_max_px"`
	JacobianMin     float64 `json:"jacobian_min"` // min det(I + ∇D); 1 without a field
	JacobianSmooths int     `json:"jacobian_extra_smoothing"`
	JacobianHalving int     `json:"jacobian_halvings"`
	LevelCoarse     int     `json:"level_coarse"`
	LevelRigid      int     `json:"level_rigid"`
	LevelNonRigid   int     `json:"level_non_rigid"`
	SigmaPx         float64 `json:"sigma_level_px"`
}

// Result is a registration: the final mapping, the rigid part alone and
// the metrics.
type Result struct {
	Mapping Mapping
	Rigid   Rigid
	Metrics Metrics
}

// Register registers the moving DAPI image to the reference (same size as
// the reference; pad first). See the package comment for the steps.
func Register(ctx context.Context, be Backend, ref *Reference, moving *raster.Gray16, p Params) (*Result, error) {
	if err := p.Check(); err != nil {
		return nil, err
	}
	if moving.H != ref.H || moving.W != ref.W {
		return nil, fmt.Errorf("register: moving image %dx%d, reference %dx%d (pad to one size first)", moving.W, moving.H, ref.W, ref.H)
	}
	ks := p.levelList(ref.H, ref.W)
	lv, err := be.Downsample(ctx, moving, ks)
	if err != nil {
		return nil, err
	}
	mov := map[int]*raster.Float32{}
	for i, k := range ks {
		mov[k] = lv[i]
	}
	kc, kr, kn := p.Levels(ref.H, ref.W)
	res := &Result{}
	met := &res.Metrics
	met.LevelCoarse, met.LevelRigid, met.LevelNonRigid = kc, kr, kn

	rig, err := coarseSearch(ctx, be, ref.levels[kc], mov[kc], kc, ref.H, ref.W, p, met)
	if err != nil {
		return nil, err
	}
	rig, err = refineRigid(ctx, be, ref.levels[kr], mov[kr], kr, rig, p, met)
	if err != nil {
		return nil, err
	}
	res.Rigid = rig
	res.Mapping = Mapping{Rigid: rig}
	fixN, movN := ref.levels[kn], mov[kn]
	id := Mapping{Rigid: Identity(ref.H, ref.W)}
	met.NCCBefore = LevelNCC(fixN, movN, kn, &id, p.Workers)
	met.NCCRigid = LevelNCC(fixN, movN, kn, &res.Mapping, p.Workers)
	met.NCCNonRigid = met.NCCRigid
	met.JacobianMin = 1
	if !p.RigidOnly {
		f, err := nonRigid(ctx, be, fixN, movN, kn, rig, p, met)
		if err != nil {
			return nil, err
		}
		m := Mapping{Rigid: rig, Field: f}
		met.NCCNonRigid = LevelNCC(fixN, movN, kn, &m, p.Workers)
		if met.NCCNonRigid < met.NCCRigid {
			met.NonRigidDropped = true
		} else {
			res.Mapping = m
		}
	}
	// The final mapping is the rigid one or the rigid with the field, both
	// measured above (LevelNCC is deterministic: the same bits).
	met.NCCFinal = met.NCCRigid
	if res.Mapping.Field != nil {
		met.NCCFinal = met.NCCNonRigid
	}
	met.RotationDeg = rig.Theta * 180 / math.Pi
	met.Scale = rig.Scale
	met.TranslationY, met.TranslationX = rig.TY, rig.TX
	return res, nil
}

// smoothDown returns the largest n' <= n with no prime factor above 5.
func smoothDown(n int) int {
	for n > 1 {
		m := n
		for _, q := range []int{2, 3, 5} {
			for m%q == 0 {
				m /= q
			}
		}
		if m == 1 {
			return n
		}
		n--
	}
	return 1
}

// coarseSearch tries every angle of the grid on the coarse level with one
// whole-image block each and returns the best rotation with its
// translation.
func coarseSearch(ctx context.Context, be Backend, fix, mov *raster.Float32, k, h, w int, p Params, met *Metrics) (Rigid, error) {
	bh, bw := smoothDown(fix.H), smoothDown(fix.W)
	y0, x0 := (fix.H-bh)/2, (fix.W-bw)/2
	n := int(math.Floor(p.MaxAngleDeg/p.AngleStepDeg + 1e-9))
	var maps []*Mapping
	var blocks []Block
	var angles []float64
	for i := -n; i <= n; i++ {
		r := Identity(h, w)
		r.Theta = float64(i) * p.AngleStepDeg * math.Pi / 180
		angles = append(angles, r.Theta)
		maps = append(maps, &Mapping{Rigid: r})
		blocks = append(blocks, Block{Y0: y0, X0: x0, Map: len(maps) - 1})
	}
	sh, err := be.BlockShifts(ctx, fix, mov, k, maps, blocks, bh, bw)
	if err != nil {
		return Rigid{}, err
	}
	best := 0
	for i := range sh {
		if sh[i].Peak > sh[best].Peak {
			best = i
		}
	}
	met.CoarsePeak = sh[best].Peak
	r := maps[best].Rigid
	d := Identity(h, w)
	d.TY, d.TX = float64(k)*sh[best].DY, float64(k)*sh[best].DX
	r = r.Compose(d)
	// Parabola through the neighbouring peaks refines the angle.
	if best > 0 && best < len(sh)-1 {
		a, b, c := sh[best-1].Peak, sh[best].Peak, sh[best+1].Peak
		if den := a - 2*b + c; den < 0 {
			off := 0.5 * (a - c) / den
			r.Theta = angles[best] + math.Max(-0.5, math.Min(0.5, off))*p.AngleStepDeg*math.Pi/180
		}
	}
	return r, nil
}

// blockGrid returns blocks of side b at the given step covering an h x w
// level, centred (the margin split evenly).
func blockGrid(h, w, b, step int) (blocks []Block, ny, nx int) {
	ny = (h-b)/step + 1
	nx = (w-b)/step + 1
	oy := (h - (b + (ny-1)*step)) / 2
	ox := (w - (b + (nx-1)*step)) / 2
	for i := 0; i < ny; i++ {
		for j := 0; j < nx; j++ {
			blocks = append(blocks, Block{Y0: oy + i*step, X0: ox + j*step})
		}
	}
	return blocks, ny, nx
}

// textured reports, per block, whether the fixed patch's standard deviation
// reaches TextureFrac of the 90th percentile over blocks.
func textured(fix *raster.Float32, blocks []Block, b int, frac float64) []bool {
	sd := make([]float64, len(blocks))
	for i, bl := range blocks {
		var s, ss float64
		for y := bl.Y0; y < bl.Y0+b; y++ {
			for _, v := range fix.Pix[y*fix.W+bl.X0 : y*fix.W+bl.X0+b] {
				s += float64(v)
				ss += float64(v) * float64(v)
			}
		}
		n := float64(b * b)
		sd[i] = math.Sqrt(math.Max(0, ss/n-(s/n)*(s/n)))
	}
	thr := frac * percentile(sd, 0.9)
	ok := make([]bool, len(blocks))
	for i := range ok {
		ok[i] = sd[i] > 0 && sd[i] >= thr
	}
	return ok
}

// refineRigid iterates block phase correlation and a robust rigid fit.
func refineRigid(ctx context.Context, be Backend, fix, mov *raster.Float32, k int, rig Rigid, p Params, met *Metrics) (Rigid, error) {
	b := min(p.RigidBlock, smoothDown(min(fix.H, fix.W)))
	for b > 32 && (fix.H/b)*(fix.W/b) < 16 {
		b /= 2
	}
	blocks, _, _ := blockGrid(fix.H, fix.W, b, b)
	tex := textured(fix, blocks, b, p.TextureFrac)
	var use []Block
	for i, bl := range blocks {
		if tex[i] {
			use = append(use, bl)
		}
	}
	met.RigidBlocks = len(use)
	if len(use) < 3 {
		return rig, nil
	}
	for round := 0; round < p.RigidIters; round++ {
		m := &Mapping{Rigid: rig}
		sh, err := be.BlockShifts(ctx, fix, mov, k, []*Mapping{m}, use, b, b)
		if err != nil {
			return rig, err
		}
		var pts []fitPoint
		for i, s := range sh {
			if s.Peak < p.PeakMin || math.Abs(s.DY) > float64(b)/4 || math.Abs(s.DX) > float64(b)/4 {
				continue
			}
			cy := LevelCoord(float64(use[i].Y0)+float64(b-1)/2, k)
			cx := LevelCoord(float64(use[i].X0)+float64(b-1)/2, k)
			pts = append(pts, fitPoint{y: cy - rig.CY, x: cx - rig.CX, sy: float64(k) * s.DY, sx: float64(k) * s.DX, w: s.Peak})
		}
		d, used, rms, ok := fitSmallRigid(pts, p.Scale, 0.5*float64(k))
		met.RigidRounds = round + 1
		met.RigidBlocksUsed = used
		met.RigidResidualPx = rms
		if !ok {
			break
		}
		dr := Identity(1, 1)
		dr.CY, dr.CX = rig.CY, rig.CX
		dr.Theta, dr.Scale, dr.TY, dr.TX = d[2], 1+d[3], d[0], d[1]
		rig = rig.Compose(dr)
		// Largest displacement of the update at the image corners, level px.
		ext := math.Hypot(rig.CY, rig.CX)
		move := (math.Hypot(d[0], d[1]) + ext*(math.Abs(d[2])+math.Abs(d[3]))) / float64(k)
		if move < 0.005 {
			break
		}
	}
	return rig, nil
}

type fitPoint struct{ y, x, sy, sx, w float64 }

// fitSmallRigid fits s ≈ (ty, tx) + θ·(x, −y) + σ·(y, x) (σ only with
// scale) by weighted least squares, dropping points whose residual exceeds
// max(3·1.4826·MAD, floor) for three rounds. It returns [ty, tx, θ, σ],
// the inliers, their weighted RMS residual and whether a fit exists.
func fitSmallRigid(pts []fitPoint, scale bool, floor float64) ([4]float64, int, float64, bool) {
	np := 3
	if scale {
		np = 4
	}
	in := make([]bool, len(pts))
	for i := range in {
		in[i] = true
	}
	var sol [4]float64
	ok := false
	used, rms := 0, 0.0
	for round := 0; round < 4; round++ {
		var ata [4][4]float64
		var atb [4]float64
		used = 0
		for i, q := range pts {
			if !in[i] {
				continue
			}
			used++
			rows := [2][4]float64{{1, 0, q.x, q.y}, {0, 1, -q.y, q.x}}
			obs := [2]float64{q.sy, q.sx}
			for r := 0; r < 2; r++ {
				for a := 0; a < np; a++ {
					atb[a] += q.w * rows[r][a] * obs[r]
					for c := 0; c < np; c++ {
						ata[a][c] += q.w * rows[r][a] * rows[r][c]
					}
				}
			}
		}
		if used < 3 {
			return sol, used, rms, false
		}
		x, good := solve(ata, atb, np)
		if !good {
			return sol, used, rms, false
		}
		sol, ok = x, true
		res := make([]float64, len(pts))
		var rr []float64
		var sw, swr float64
		for i, q := range pts {
			ry := q.sy - (x[0] + x[2]*q.x + x[3]*q.y)
			rx := q.sx - (x[1] - x[2]*q.y + x[3]*q.x)
			res[i] = math.Hypot(ry, rx)
			if in[i] {
				rr = append(rr, res[i])
				sw += q.w
				swr += q.w * res[i] * res[i]
			}
		}
		rms = math.Sqrt(swr / sw)
		if round == 3 {
			break
		}
		mad := median(rr)
		thr := math.Max(3*1.4826*mad, floor)
		changed := false
		for i := range pts {
			keep := res[i] <= thr
			if keep != in[i] {
				changed = true
			}
			in[i] = keep
		}
		if !changed {
			break
		}
	}
	return sol, used, rms, ok
}

// solve solves the n x n system by Gaussian elimination with partial pivoting.
func solve(a [4][4]float64, b [4]float64, n int) ([4]float64, bool) {
	var x [4]float64
	for c := 0; c < n; c++ {
		p := c
		for r := c + 1; r < n; r++ {
			if math.Abs(a[r][c]) > math.Abs(a[p][c]) {
				p = r
			}
		}
		if !(math.Abs(a[p][c]) > 1e-12) {
			return x, false
		}
		a[c], a[p] = a[p], a[c]
		b[c], b[p] = b[p], b[c]
		for r := c + 1; r < n; r++ {
			f := a[r][c] / a[c][c]
			for q := c; q < n; q++ {
				a[r][q] -= f * a[c][q]
			}
			b[r] -= f * b[c]
		}
	}
	for r := n - 1; r >= 0; r-- {
		s := b[r]
		for q := r + 1; q < n; q++ {
			s -= a[r][q] * x[q]
		}
		x[r] = s / a[r][r]
	}
	return x, true
}

// nonRigid measures the displacement field at level k on overlapping
// blocks, NonRigidIters rounds.
func nonRigid(ctx context.Context, be Backend, fix, mov *raster.Float32, k int, rig Rigid, p Params, met *Metrics) (*Field, error) {
	b := min(p.NonRigidBlock, smoothDown(min(fix.H, fix.W)/2))
	if b < 8 {
		return nil, nil
	}
	step := b / 2
	blocks, ny, nx := blockGrid(fix.H, fix.W, b, step)
	half := float64(b-1) / 2
	f := NewField(ny, nx, LevelCoord(float64(blocks[0].Y0)+half, k), LevelCoord(float64(blocks[0].X0)+half, k), float64(k*step))
	tex := textured(fix, blocks, b, p.TextureFrac)
	met.NRBlocks = len(blocks)
	sigmaLevel := p.SigmaRatio * float64(max(fix.H, fix.W))
	met.SigmaPx = sigmaLevel
	sigma := math.Max(1, sigmaLevel/float64(step))
	m := &Mapping{Rigid: rig, Field: f}
	dy := make([]float64, len(blocks))
	dx := make([]float64, len(blocks))
	for round := 0; round < p.NonRigidIters; round++ {
		sh, err := be.BlockShifts(ctx, fix, mov, k, []*Mapping{m}, blocks, b, b)
		if err != nil {
			return nil, err
		}
		valid := make([]bool, len(blocks))
		used := 0
		for i, s := range sh {
			dy[i], dx[i] = s.DY, s.DX
			valid[i] = tex[i] && s.Peak >= p.PeakMin && math.Abs(s.DY) <= float64(b)/4 && math.Abs(s.DX) <= float64(b)/4
		}
		vectorMedianReject(dy, dx, valid, ny, nx, p.MedianTol)
		for _, v := range valid {
			if v {
				used++
			}
		}
		met.NRBlocksUsed = used
		if used == 0 {
			break
		}
		iy := smoothFill(dy, valid, ny, nx, sigma)
		ix := smoothFill(dx, valid, ny, nx, sigma)
		for i := range f.DY {
			f.DY[i] += float32(float64(k) * iy[i])
			f.DX[i] += float32(float64(k) * ix[i])
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	met.JacobianSmooths, met.JacobianHalving = enforceJacobian(f, p.MinJacobian)
	met.JacobianMin = JacobianMin(f)
	mags := make([]float64, len(f.DY))
	var sum float64
	for i := range f.DY {
		mags[i] = math.Hypot(float64(f.DY[i]), float64(f.DX[i]))
		sum += mags[i]
	}
	sort.Float64s(mags)
	met.DispMeanPx = sum / float64(len(mags))
	met.DispP95Px = percentile(mags, 0.95)
	met.DispMaxPx = mags[len(mags)-1]
	return f, nil
}

// LevelNCC is the normalised cross-correlation of the fixed level and the
// moving level sampled through m (bilinear, as SampleLevel, at the
// coordinate MovingLevelCoord gives), over the level pixels whose moving
// coordinate lies inside the moving level. It is a measure, not part of
// the warp: each row's coordinates are computed in closed form (the field
// interpolated along y once per row, the rigid part linear in x), which
// equals MovingLevelCoord to rounding (TestLevelNCCMatchesPerPixel) at a
// fraction of its cost. Deterministic: the same inputs give the same bits
// for any worker count.
func LevelNCC(fix, mov *raster.Float32, k int, m *Mapping, workers int) float64 {
	a, b := m.Rigid.Matrix()
	type sums struct{ sa, sb, saa, sbb, sab, n float64 }
	rows := make([]sums, fix.H)
	f := m.Field
	h := float64(k-1) / 2
	kf := float64(k)
	inv := 1 / kf
	ymax, xmax := float64(mov.H-1), float64(mov.W-1)
	_ = par.ForEach(context.Background(), fix.H, max(1, workers), func(i int) error {
		var s sums
		y := kf*float64(i) + h
		var fdy, fdx []float64 // the field at this row's y, per grid column
		if f != nil {
			fdy, fdx = f.rowAt(y)
		}
		for j := 0; j < fix.W; j++ {
			x := kf*float64(j) + h
			py, px := y, x
			if f != nil {
				dy, dx := f.colAt(fdy, fdx, x)
				py += dy
				px += dx
			}
			qy := (a[0]*py + a[1]*px + b[0] - h) * inv
			qx := (a[2]*py + a[3]*px + b[1] - h) * inv
			if !(qy >= 0 && qx >= 0 && qy <= ymax && qx <= xmax) {
				continue
			}
			va := float64(fix.Pix[i*fix.W+j])
			// bilinear(mov.Pix, ...) written out: the generic call is not inlined
			y0, x0 := min(int(qy), mov.H-2), min(int(qx), mov.W-2)
			fy, fx := qy-float64(y0), qx-float64(x0)
			r0 := mov.Pix[y0*mov.W+x0:]
			r1 := mov.Pix[(y0+1)*mov.W+x0:]
			r0, r1 = r0[:2], r1[:2]
			top := float64(r0[0]) + fx*(float64(r0[1])-float64(r0[0]))
			bot := float64(r1[0]) + fx*(float64(r1[1])-float64(r1[0]))
			vb := top + fy*(bot-top)
			s.sa += va
			s.sb += vb
			s.saa += va * va
			s.sbb += vb * vb
			s.sab += va * vb
			s.n++
		}
		rows[i] = s
		return nil
	})
	var t sums
	for _, s := range rows {
		t.sa += s.sa
		t.sb += s.sb
		t.saa += s.saa
		t.sbb += s.sbb
		t.sab += s.sab
		t.n += s.n
	}
	return align.NCCFromSums(t.sa, t.sb, t.saa, t.sbb, t.sab, t.n)
}
