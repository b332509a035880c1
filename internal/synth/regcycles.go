package synth

import (
	"context"
	"fmt"
	"math"
	"sort"

	"github.com/kintsugi-hpc/kintsugi-go/internal/par"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// Synthetic cycles for registration: EDF-like images (y, x) of one tissue
// section imaged in several cycles, each cycle moved by a known rigid
// transform and a smooth non-rigid warp, with its own intensities.
//
// Model. The tissue is fixed in the reference frame (cycle 1): a wavy
// elliptical region holding nuclei (Gaussian blobs, sigma 1.6-3 px, with
// 1-3 chromocentres of sigma 0.9 px) on a smooth autofluorescence
// background. Channel 1 is DAPI (every regNucleus); channels 2.. are markers
// (a random 35 % of the cells, as broader blobs). Per cycle, every
// regNucleus's DAPI brightness varies by ±10 %, the autofluorescence by a
// cycle-specific smooth field, gain and offset change, and shot plus read
// noise is added, so cycles differ as real cycles do.
//
// Geometry. Pixel q of cycle c's image shows the reference frame at
// G_c(q) = R_c(q) + W_c(q), with R_c a rotation by −θ about the image
// centre followed by a translation (its inverse is the rigid part of the
// truth) and W_c a sum of three long-wavelength sinusoidal displacements of
// total amplitude at most WarpPx. The truth mapping T_c = G_c⁻¹ takes a
// reference point p to the cycle's point q showing the same tissue; it is
// what registration recovers (register.Mapping has the same direction).
// Cycle 1 has G = identity.
//
// Rendering: the reference frame is rendered on a grid with a margin, then
// sampled bilinearly at G_c(q); blobs are at least 0.9 px wide, so the
// interpolation changes intensities slightly but moves nothing.

// RegOptions configure the synthetic registration cycles.
type RegOptions struct {
	H, W      int     // image size, px
	Channels  int     // channels per cycle; channel 1 is DAPI
	Seed      uint64  // every random quantity derives from it
	MaxShift  float64 // largest translation per axis, px
	MaxRotDeg float64 // largest rotation, degrees
	WarpPx    float64 // largest non-rigid displacement, px
	Density   float64 // nuclei per px² of tissue (0: 1/110)
	Workers   int
}

// RegCycleTruth is the known geometry of one cycle.
type RegCycleTruth struct {
	Cycle    int
	ThetaDeg float64 // rotation of the truth mapping T (fixed -> moving), degrees
	TY, TX   float64 // translation of T at the image centre, px
	warp     [3]regWarpWave
	cy, cx   float64
}

type regWarpWave struct{ ay, ax, ky, kx, phase float64 }

// RegScene is the tissue shared by all cycles.
type RegScene struct {
	o      RegOptions
	nuclei []regNucleus // sorted by y
	margin int
}

type regNucleus struct {
	y, x, sigma, bright float64
	spots               [3][3]float64 // y, x offsets and brightness of chromocentres (brightness 0: none)
	marker              uint8         // bit c-2 set: positive in channel c
}

// NewRegScene builds the tissue for o.
func NewRegScene(o RegOptions) (*RegScene, error) {
	if o.H < 64 || o.W < 64 || o.Channels < 1 {
		return nil, fmt.Errorf("synth: registration scene %dx%d with %d channels", o.W, o.H, o.Channels)
	}
	if o.Density <= 0 {
		o.Density = 1.0 / 110
	}
	if o.Workers < 1 {
		o.Workers = 1
	}
	s := &RegScene{o: o}
	// Margin: translation, rotation about the centre and warp stay inside.
	r := math.Hypot(float64(o.H), float64(o.W)) / 2
	s.margin = int(math.Ceil(o.MaxShift+r*math.Sin(o.MaxRotDeg*math.Pi/180)+o.WarpPx)) + 16
	area := float64(o.H * o.W)
	n := int(area * o.Density)
	for i := 0; i < n*2 && len(s.nuclei) < n; i++ {
		k := uint64(i)
		y := regUnit(o.Seed, 1, k) * float64(o.H)
		x := regUnit(o.Seed, 2, k) * float64(o.W)
		if s.TissueAt(y, x) < 0.5 {
			continue
		}
		nu := regNucleus{y: y, x: x, sigma: 1.6 + 1.4*regUnit(o.Seed, 3, k), bright: 0.5 + 0.5*regUnit(o.Seed, 4, k)}
		ns := 1 + int(3*regUnit(o.Seed, 5, k))
		for j := 0; j < min(ns, 3); j++ {
			kk := k*4 + uint64(j)
			nu.spots[j] = [3]float64{(regUnit(o.Seed, 6, kk) - 0.5) * 1.6 * nu.sigma, (regUnit(o.Seed, 7, kk) - 0.5) * 1.6 * nu.sigma, 0.3 + 0.4*regUnit(o.Seed, 8, kk)}
		}
		for c := 2; c <= min(o.Channels, 9); c++ {
			if regUnit(o.Seed, 9+uint64(c), k) < 0.35 {
				nu.marker |= 1 << (c - 2)
			}
		}
		s.nuclei = append(s.nuclei, nu)
	}
	sort.Slice(s.nuclei, func(a, b int) bool { return s.nuclei[a].y < s.nuclei[b].y })
	return s, nil
}

// Options returns the scene's options (defaults filled in).
func (s *RegScene) Options() RegOptions { return s.o }

// TissueAt returns the tissue indicator (0..1) of the reference frame at
// (y, x): a wavy ellipse covering about 60 % of the image.
func (s *RegScene) TissueAt(y, x float64) float64 {
	o := s.o
	cy, cx := float64(o.H)/2, float64(o.W)/2
	dy, dx := (y-cy)/(0.42*float64(o.H)), (x-cx)/(0.42*float64(o.W))
	a := math.Atan2(dy, dx)
	r := math.Hypot(dy, dx) * (1 + 0.08*math.Sin(3*a+regUnit(o.Seed, 100, 0)*6) + 0.05*math.Sin(5*a+regUnit(o.Seed, 101, 0)*6))
	return smoothstep((1.05 - r) / 0.1)
}

// Truth returns the geometry of cycle (1-based; cycle 1 is the identity).
func (s *RegScene) Truth(cycle int) *RegCycleTruth {
	o := s.o
	t := &RegCycleTruth{Cycle: cycle, cy: float64(o.H-1) / 2, cx: float64(o.W-1) / 2}
	if cycle <= 1 {
		return t
	}
	c := uint64(cycle)
	t.ThetaDeg = (2*regUnit(o.Seed, 200, c) - 1) * o.MaxRotDeg
	t.TY = (2*regUnit(o.Seed, 201, c) - 1) * o.MaxShift
	t.TX = (2*regUnit(o.Seed, 202, c) - 1) * o.MaxShift
	L := float64(max(o.H, o.W))
	var amp float64
	for i := range t.warp {
		k := c*8 + uint64(i)
		w := regWarpWave{
			ay: 2*regUnit(o.Seed, 210, k) - 1, ax: 2*regUnit(o.Seed, 211, k) - 1,
			ky:    (2*regUnit(o.Seed, 212, k) - 1) * 2 * math.Pi / (0.6 * L),
			kx:    (2*regUnit(o.Seed, 213, k) - 1) * 2 * math.Pi / (0.6 * L),
			phase: regUnit(o.Seed, 214, k) * 2 * math.Pi,
		}
		t.warp[i] = w
		amp += math.Hypot(w.ay, w.ax)
	}
	for i := range t.warp {
		t.warp[i].ay *= o.WarpPx / amp
		t.warp[i].ax *= o.WarpPx / amp
	}
	return t
}

// g is G_c: the reference-frame point shown at cycle pixel (y, x).
func (t *RegCycleTruth) g(y, x float64) (float64, float64) {
	th := -t.ThetaDeg * math.Pi / 180
	c, sn := math.Cos(th), math.Sin(th)
	// inverse rigid of T: p = c + R(−θ)(q − c − t)
	vy, vx := y-t.cy-t.TY, x-t.cx-t.TX
	py := t.cy + c*vy + sn*vx
	px := t.cx - sn*vy + c*vx
	for _, w := range t.warp {
		s := math.Sin(w.ky*y + w.kx*x + w.phase)
		py += w.ay * s
		px += w.ax * s
	}
	return py, px
}

// Map returns T(p) = G⁻¹(p): the cycle's point showing reference point
// (y, x) (fixed-point iteration; the warp's gradient is far below 1).
func (t *RegCycleTruth) Map(y, x float64) (float64, float64) {
	th := t.ThetaDeg * math.Pi / 180
	c, sn := math.Cos(th), math.Sin(th)
	qy, qx := y, x
	for it := 0; it < 30; it++ {
		gy, gx := t.g(qy, qx)
		ey, ex := y-gy, x-gx // residual in reference coordinates
		// dG/dq ≈ R(−θ): correct by R(θ)·e
		qy += c*ey + sn*ex
		qx += -sn*ey + c*ex
		if math.Hypot(ey, ex) < 1e-6 {
			break
		}
	}
	return qy, qx
}

// RenderCycle renders every channel of cycle (uint16 counts, H x W).
func (s *RegScene) RenderCycle(ctx context.Context, cycle int) ([]*raster.Gray16, *RegCycleTruth, error) {
	t := s.Truth(cycle)
	out := make([]*raster.Gray16, s.o.Channels)
	for ch := 1; ch <= s.o.Channels; ch++ {
		base, err := s.renderBase(ctx, cycle, ch)
		if err != nil {
			return nil, nil, err
		}
		img, err := s.sample(ctx, base, t, cycle, ch)
		if err != nil {
			return nil, nil, err
		}
		out[ch-1] = img
	}
	return out, t, nil
}

// renderBase renders the reference frame of (cycle, channel) with the
// margin, in counts before noise.
func (s *RegScene) renderBase(ctx context.Context, cycle, ch int) (*raster.Float32, error) {
	o, m := s.o, s.margin
	bh, bw := o.H+2*m, o.W+2*m
	b := raster.NewFloat32(bw, bh)
	cyc := uint64(cycle)
	gain := 9000 * (0.8 + 0.4*regUnit(o.Seed, 300, cyc*16+uint64(ch)))
	if ch > 1 {
		gain *= 0.6
	}
	offset := 300 + 200*regUnit(o.Seed, 301, cyc*16+uint64(ch))
	af := 600 + 900*regUnit(o.Seed, 302, cyc*16+uint64(ch))
	// Cycle-specific smooth autofluorescence modulation.
	fy := 2 * math.Pi * (0.5 + regUnit(o.Seed, 303, cyc)) / float64(o.H)
	fx := 2 * math.Pi * (0.5 + regUnit(o.Seed, 304, cyc)) / float64(o.W)
	ph := 2 * math.Pi * regUnit(o.Seed, 305, cyc)
	// Tissue on a coarse grid (step 8), bilinear.
	const st = 8
	th, tw := bh/st+2, bw/st+2
	tis := make([]float64, th*tw)
	for i := 0; i < th; i++ {
		for j := 0; j < tw; j++ {
			tis[i*tw+j] = s.TissueAt(float64(i*st-m), float64(j*st-m))
		}
	}
	colMod := make([]float64, bw)
	for x := range colMod {
		colMod[x] = math.Cos(fx*float64(x-m) + ph)
	}
	const band = 64
	nb := (bh + band - 1) / band
	err := par.ForEach(ctx, nb, o.Workers, func(bi int) error {
		y0, y1 := bi*band, min(bh, (bi+1)*band)
		for y := y0; y < y1; y++ {
			gy := float64(y) / st
			i0 := int(gy)
			fyy := gy - float64(i0)
			rowMod := 0.3 * math.Sin(fy*float64(y-m)+ph)
			row := b.Pix[y*bw : (y+1)*bw]
			for x := range row {
				gx := float64(x) / st
				j0 := int(gx)
				fxx := gx - float64(j0)
				tv := (1-fyy)*((1-fxx)*tis[i0*tw+j0]+fxx*tis[i0*tw+j0+1]) + fyy*((1-fxx)*tis[(i0+1)*tw+j0]+fxx*tis[(i0+1)*tw+j0+1])
				mod := 1 + rowMod*colMod[x]
				row[x] = float32(offset + af*tv*mod)
			}
		}
		// Nuclei overlapping the band (reference coordinates + margin).
		lo := sort.Search(len(s.nuclei), func(i int) bool { return s.nuclei[i].y+float64(m)+12 >= float64(y0) })
		for ni := lo; ni < len(s.nuclei); ni++ {
			nu := &s.nuclei[ni]
			if nu.y+float64(m)-12 >= float64(y1) {
				break
			}
			if ch == 1 {
				br := nu.bright * (0.9 + 0.2*regUnit(o.Seed, 400+cyc, uint64(ni)))
				regSplat(b, y0, y1, nu.y+float64(m), nu.x+float64(m), nu.sigma, gain*br)
				for _, sp := range nu.spots {
					if sp[2] > 0 {
						regSplat(b, y0, y1, nu.y+sp[0]+float64(m), nu.x+sp[1]+float64(m), 0.9, gain*br*sp[2])
					}
				}
			} else if ch <= 9 && nu.marker&(1<<(ch-2)) != 0 {
				regSplat(b, y0, y1, nu.y+float64(m), nu.x+float64(m), nu.sigma*1.8, gain*nu.bright)
			}
		}
		return nil
	})
	return b, err
}

// splat adds amp·exp(−r²/2σ²) around (cy, cx) to the rows [y0, y1) of b.
func regSplat(b *raster.Float32, y0, y1 int, cy, cx, sigma, amp float64) {
	r := int(math.Ceil(3 * sigma))
	iy, ix := int(math.Round(cy)), int(math.Round(cx))
	inv := 1 / (2 * sigma * sigma)
	var gx [32]float64
	n := 2*r + 1
	if n > len(gx) {
		return
	}
	for j := 0; j < n; j++ {
		d := float64(ix-r+j) - cx
		gx[j] = math.Exp(-d * d * inv)
	}
	for y := max(y0, iy-r); y <= min(y1-1, iy+r); y++ {
		d := float64(y) - cy
		gy := amp * math.Exp(-d*d*inv)
		row := b.Pix[y*b.W:]
		for j := 0; j < n; j++ {
			x := ix - r + j
			if x >= 0 && x < b.W {
				row[x] += float32(gy * gx[j])
			}
		}
	}
}

// gridStep is the spacing, px, of the grid on which G is evaluated
// exactly for rendering (bilinear in between: the warp's wavelengths are
// thousands of px, so the interpolation error is below 1e-3 px).
const gridStep = 16

// sample resamples the base frame at G(q) for every cycle pixel q and adds
// noise.
func (s *RegScene) sample(ctx context.Context, base *raster.Float32, t *RegCycleTruth, cycle, ch int) (*raster.Gray16, error) {
	o, m := s.o, float64(s.margin)
	gh, gw := (o.H-1)/gridStep+2, (o.W-1)/gridStep+2
	gyv, gxv := make([]float64, gh*gw), make([]float64, gh*gw)
	for i := 0; i < gh; i++ {
		for j := 0; j < gw; j++ {
			gyv[i*gw+j], gxv[i*gw+j] = t.g(float64(i*gridStep), float64(j*gridStep))
		}
	}
	img := raster.NewGray16(o.W, o.H)
	key := uint64(cycle)<<8 | uint64(ch)
	err := par.ForEach(ctx, o.H, o.Workers, func(y int) error {
		row := img.Pix[y*o.W : (y+1)*o.W]
		i0 := y / gridStep
		fy := float64(y-i0*gridStep) / gridStep
		for x := range row {
			j0 := x / gridStep
			fx := float64(x-j0*gridStep) / gridStep
			k := i0*gw + j0
			py := (1-fy)*((1-fx)*gyv[k]+fx*gyv[k+1]) + fy*((1-fx)*gyv[k+gw]+fx*gyv[k+gw+1])
			px := (1-fy)*((1-fx)*gxv[k]+fx*gxv[k+1]) + fy*((1-fx)*gxv[k+gw]+fx*gxv[k+gw+1])
			v := regBilinear(base, py+m, px+m)
			// shot (gain 1 count per photo-electron) plus read noise 8 counts
			sd := math.Sqrt(math.Max(v, 0) + 64)
			v += sd * regFastNormal(o.Seed^key<<40, uint64(y*o.W+x))
			row[x] = regClampCount(v)
		}
		return nil
	})
	return img, err
}

// regFastNormal is an approximately standard normal number keyed by
// (seed, k): the sum of four 16-bit uniforms of one hash (Irwin-Hall),
// scaled to unit variance.
func regFastNormal(seed, k uint64) float64 {
	h := regHash(seed ^ regHash(k))
	s := float64(h&0xffff) + float64(h>>16&0xffff) + float64(h>>32&0xffff) + float64(h>>48)
	return (s/65536 - 2) * math.Sqrt(3)
}

func regBilinear(b *raster.Float32, y, x float64) float64 {
	y = math.Max(0, math.Min(float64(b.H-1), y))
	x = math.Max(0, math.Min(float64(b.W-1), x))
	i0, j0 := min(int(y), b.H-2), min(int(x), b.W-2)
	fy, fx := y-float64(i0), x-float64(j0)
	p := b.Pix[i0*b.W+j0:]
	q := b.Pix[(i0+1)*b.W+j0:]
	return (1-fy)*((1-fx)*float64(p[0])+fx*float64(p[1])) + fy*((1-fx)*float64(q[0])+fx*float64(q[1]))
}

func regClampCount(v float64) uint16 {
	v = math.Round(v)
	if !(v > 0) {
		return 0
	}
	if v > 65535 {
		return 65535
	}
	return uint16(v)
}

// regHash is splitmix64.
func regHash(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// regUnit is a uniform [0, 1) number keyed by (seed, purpose, k).
func regUnit(seed, purpose, k uint64) float64 {
	return float64(regHash(regHash(seed^purpose*0x632be59bd9b4e019)^k)>>11) / (1 << 53)
}
