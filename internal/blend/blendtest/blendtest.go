// Package blendtest is the conformance suite for blend.Blender
// implementations (CPU reference and CUDA): Run(t, impl) checks mosaics
// against answers known without running any blender, and Bench times the
// production workload (63 tiles of 1440x1920, 9 rows x 7 columns).
//
// Tiles are float32 (y, x), row-major; positions are px (Y, X) of each
// tile's pixel (0, 0); expected values are computed here in float64 from
// the formula in package blend's documentation.
package blendtest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/blend"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// Tolerances, each with its reason.
const (
	// RelTol: the mosaic is a float32 plane, and a weighted mean of equal
	// values, or of tile values with float32 weights, is within a few
	// float32 ulps (6e-8 each) of the exact value.
	RelTol = 1e-6
	// WeightTol is the absolute tolerance of weighted means of different
	// values in [0, 1] against a float64 evaluation of the formula: float32
	// weights and sums are good to about 1e-7 relative.
	WeightTol = 1e-5
)

// Run runs the conformance suite against b.
func Run(t *testing.T, b blend.Blender) {
	t.Run("Reconstruct", func(t *testing.T) { testReconstruct(t, b) })
	t.Run("Constant", func(t *testing.T) { testConstant(t, b) })
	t.Run("Weights", func(t *testing.T) { testWeights(t, b, 15) })
	// sigma 1: single-tile weights near the mosaic corners fall to ~1e-12,
	// where dividing by sum(w) + 1e-10 (the original) visibly darkens them
	t.Run("WeightsSigma1", func(t *testing.T) { testWeights(t, b, 1) })
	// sigma 0.3: the tapers underflow and TaperFloor takes over
	t.Run("WeightsTaperFloor", func(t *testing.T) { testWeights(t, b, 0.3) })
	t.Run("SingleTile", func(t *testing.T) { testSingle(t, b) })
	t.Run("GapAndRounding", func(t *testing.T) { testGap(t, b) })
	t.Run("Errors", func(t *testing.T) { testErrors(t, b) })
}

// grid places rows x cols tiles of h x w at nominal steps h(1-ov), w(1-ov)
// plus U(-jit, jit) per axis, shifted so the minimum is 0 (then each
// position is given a fractional part in [-0.4, 0.4] that rounding
// removes). It returns the fractional positions and their rounded values.
func grid(rng *rand.Rand, rows, cols, h, w int, ov, jit float64) ([]raster.Point, []int, []int) {
	n := rows * cols
	ys, xs := make([]int, n), make([]int, n)
	minY, minX := math.MaxInt, math.MaxInt
	for i := range n {
		r, c := i/cols, i%cols
		ys[i] = int(math.Round(float64(r)*float64(h)*(1-ov) + jit*(2*rng.Float64()-1)))
		xs[i] = int(math.Round(float64(c)*float64(w)*(1-ov) + jit*(2*rng.Float64()-1)))
		minY, minX = min(minY, ys[i]), min(minX, xs[i])
	}
	pos := make([]raster.Point, n)
	for i := range n {
		ys[i] -= minY
		xs[i] -= minX
		fy, fx := 0.8*rng.Float64()-0.4, 0.8*rng.Float64()-0.4
		if ys[i] == 0 {
			fy = math.Abs(fy) // keep the contract: positions >= 0
		}
		if xs[i] == 0 {
			fx = math.Abs(fx)
		}
		pos[i] = raster.Point{Y: float64(ys[i]) + fy, X: float64(xs[i]) + fx}
	}
	return pos, ys, xs
}

// coverage returns, per mosaic pixel, how many tiles cover it.
func coverage(oh, ow, h, w int, ys, xs []int) []int {
	c := make([]int, oh*ow)
	for i := range ys {
		for y := ys[i]; y < ys[i]+h; y++ {
			for x := xs[i]; x < xs[i]+w; x++ {
				c[y*ow+x]++
			}
		}
	}
	return c
}

func checkSize(t *testing.T, out *raster.Float32, h, w int, ys, xs []int) {
	t.Helper()
	wantH, wantW := 0, 0
	for i := range ys {
		wantH, wantW = max(wantH, ys[i]+h), max(wantW, xs[i]+w)
	}
	if out == nil || out.H != wantH || out.W != wantW || len(out.Pix) != wantH*wantW {
		t.Fatalf("mosaic size: got %v, want %dx%d (W x H)", sizeOf(out), wantW, wantH)
	}
}

func sizeOf(f *raster.Float32) string {
	if f == nil {
		return "nil"
	}
	return fmt.Sprintf("%dx%d (W x H), %d px", f.W, f.H, len(f.Pix))
}

func testReconstruct(t *testing.T, b blend.Blender) {
	rng := rand.New(rand.NewPCG(1, 1))
	const rows, cols, h, w, ov = 3, 4, 60, 80, 0.3
	pos, ys, xs := grid(rng, rows, cols, h, w, ov, 5)
	oh, ow := 0, 0
	for i := range ys {
		oh, ow = max(oh, ys[i]+h), max(ow, xs[i]+w)
	}
	img := make([]float32, oh*ow)
	for i := range img {
		img[i] = float32(0.05 + 0.9*rng.Float64())
	}
	tiles := make([]*raster.Float32, len(pos))
	for i := range tiles {
		tiles[i] = raster.NewFloat32(w, h)
		for y := range h {
			copy(tiles[i].Pix[y*w:(y+1)*w], img[(ys[i]+y)*ow+xs[i]:])
		}
	}
	out, err := b.Blend(context.Background(), tiles, pos, blend.Params{Sigma: 15, OverlapY: ov, OverlapX: ov})
	if err != nil {
		t.Fatal(err)
	}
	checkSize(t, out, h, w, ys, xs)
	cov := coverage(oh, ow, h, w, ys, xs)
	worst, at, nCov, nUn := 0.0, -1, 0, 0
	for i, c := range cov {
		if c == 0 {
			nUn++
			if out.Pix[i] != 0 {
				t.Fatalf("uncovered pixel (%d, %d) = %g, want 0", i/ow, i%ow, out.Pix[i])
			}
			continue
		}
		nCov++
		if e := math.Abs(float64(out.Pix[i])-float64(img[i])) / float64(img[i]); e > worst || math.IsNaN(e) {
			worst, at = e, i
			if math.IsNaN(e) {
				break
			}
		}
	}
	t.Logf("reconstruction: %d covered px, %d uncovered; max relative error %.2g", nCov, nUn, worst)
	if nUn == 0 {
		t.Error("test layout has no uncovered pixel; the jitter should leave some")
	}
	if worst > RelTol || math.IsNaN(worst) {
		t.Errorf("pixel (%d, %d) = %g, image %g: relative error %.2g > %.0g", at/ow, at%ow, out.Pix[at], img[at], worst, RelTol)
	}
}

func testConstant(t *testing.T, b blend.Blender) {
	rng := rand.New(rand.NewPCG(2, 1))
	const rows, cols, h, w, ov, v = 2, 3, 50, 70, 0.25, 0.37
	pos, ys, xs := grid(rng, rows, cols, h, w, ov, 3)
	tiles := make([]*raster.Float32, len(pos))
	for i := range tiles {
		tiles[i] = raster.NewFloat32(w, h)
		for j := range tiles[i].Pix {
			tiles[i].Pix[j] = v
		}
	}
	out, err := b.Blend(context.Background(), tiles, pos, blend.Params{Sigma: 10, OverlapY: ov, OverlapX: ov})
	if err != nil {
		t.Fatal(err)
	}
	checkSize(t, out, h, w, ys, xs)
	cov := coverage(out.H, out.W, h, w, ys, xs)
	for i, c := range cov {
		want := float32(0)
		if c > 0 {
			want = v
		}
		if math.Abs(float64(out.Pix[i]-want)) > RelTol*v || math.IsNaN(float64(out.Pix[i])) {
			t.Fatalf("pixel (%d, %d) covered by %d tiles = %.9g, want %g", i/out.W, i%out.W, c, out.Pix[i], want)
		}
	}
}

// taper64 is the documented taper, evaluated independently of blend.Taper
// (which the implementation may or may not use), floored like it.
func taper64(i, n int, sigma, ov float64) float64 {
	d := math.Abs(float64(i) - float64(n-1)/2)
	return max(blend.TaperFloor, 1/(1+math.Exp((d-float64(n)*(1-ov)/2)/sigma)))
}

// testWeights gives every tile its own constant value, so each mosaic pixel
// is the taper-weighted mean of the values of the tiles covering it; all
// pixels are compared with that mean computed here in float64. Pixels
// covered by one tile must equal its value, including the mosaic's corners
// where the weights are ~1e-12 (sigma 1) or floored (sigma 0.3).
func testWeights(t *testing.T, b blend.Blender, sigma float64) {
	rng := rand.New(rand.NewPCG(3, 1))
	const rows, cols, h, w, ovY, ovX = 3, 3, 90, 120, 0.2, 0.3
	// nominal steps from the two overlaps, jitter 4 px
	n := rows * cols
	ys, xs := make([]int, n), make([]int, n)
	pos := make([]raster.Point, n)
	vals := make([]float32, n)
	tiles := make([]*raster.Float32, n)
	for i := range n {
		r, c := i/cols, i%cols
		ys[i] = int(math.Round(float64(r)*h*(1-ovY))) + rng.IntN(9)
		xs[i] = int(math.Round(float64(c)*w*(1-ovX))) + rng.IntN(9)
	}
	ys[0], xs[0] = 0, 0
	for i := range n {
		pos[i] = raster.Point{Y: float64(ys[i]), X: float64(xs[i])}
		vals[i] = float32(0.1 + 0.8*rng.Float64())
		tiles[i] = raster.NewFloat32(w, h)
		for j := range tiles[i].Pix {
			tiles[i].Pix[j] = vals[i]
		}
	}
	out, err := b.Blend(context.Background(), tiles, pos, blend.Params{Sigma: sigma, OverlapY: ovY, OverlapX: ovX})
	if err != nil {
		t.Fatal(err)
	}
	checkSize(t, out, h, w, ys, xs)
	worst, at, single := 0.0, -1, 0
	for y := range out.H {
		for x := range out.W {
			var num, den float64
			k, last := 0, -1
			for i := range n {
				ly, lx := y-ys[i], x-xs[i]
				if ly < 0 || ly >= h || lx < 0 || lx >= w {
					continue
				}
				wt := taper64(ly, h, sigma, ovY) * taper64(lx, w, sigma, ovX)
				num += wt * float64(vals[i])
				den += wt
				k, last = k+1, i
			}
			got := float64(out.Pix[y*out.W+x])
			want := 0.0
			if k > 0 {
				want = num / den
			}
			if k == 1 {
				single++
				if math.Abs(got-float64(vals[last])) > RelTol*float64(vals[last]) {
					t.Fatalf("sigma %g: pixel (%d, %d) covered only by tile %d = %.9g, want its value %.9g", sigma, y, x, last, got, vals[last])
				}
			}
			if e := math.Abs(got - want); e > worst || math.IsNaN(e) {
				worst, at = e, y*out.W+x
			}
		}
	}
	t.Logf("sigma %g: max |mosaic - formula| %.2g over %d px (%d covered by one tile)", sigma, worst, len(out.Pix), single)
	if worst > WeightTol || math.IsNaN(worst) {
		t.Errorf("sigma %g: pixel (%d, %d) = %.7g, formula differs by %.2g > %.0g", sigma, at/out.W, at%out.W, out.Pix[at], worst, WeightTol)
	}
}

func testSingle(t *testing.T, b blend.Blender) {
	rng := rand.New(rand.NewPCG(4, 1))
	tile := raster.NewFloat32(37, 23)
	for i := range tile.Pix {
		tile.Pix[i] = float32(rng.Float64())
	}
	out, err := b.Blend(context.Background(), []*raster.Float32{tile}, []raster.Point{{Y: 0.3, X: 0.2}}, blend.Params{Sigma: 15, OverlapY: 0.3, OverlapX: 0.3})
	if err != nil {
		t.Fatal(err)
	}
	if out.W != 37 || out.H != 23 {
		t.Fatalf("size %s, want 37x23", sizeOf(out))
	}
	for i, v := range tile.Pix {
		if math.Abs(float64(out.Pix[i]-v)) > RelTol*float64(v) {
			t.Fatalf("pixel (%d, %d) = %.9g, tile %.9g", i/37, i%37, out.Pix[i], v)
		}
	}
}

// testGap places two tiles side by side with a 5 px gap and checks the
// size, the zero gap, rounding of .5 away from zero and that each side
// equals its tile.
func testGap(t *testing.T, b blend.Blender) {
	const h, w = 10, 12
	a, c := raster.NewFloat32(w, h), raster.NewFloat32(w, h)
	for i := range a.Pix {
		a.Pix[i], c.Pix[i] = 0.25, 0.75
	}
	// X 16.5 rounds to 17: gap columns 12..16; Y 2.5 rounds to 3.
	pos := []raster.Point{{Y: 0, X: 0}, {Y: 2.5, X: 16.5}}
	out, err := b.Blend(context.Background(), []*raster.Float32{a, c}, pos, blend.Params{Sigma: 15, OverlapY: 0.3, OverlapX: 0.3})
	if err != nil {
		t.Fatal(err)
	}
	if out.H != 13 || out.W != 29 {
		t.Fatalf("size %s, want 29x13 (positions rounded half away from zero)", sizeOf(out))
	}
	for y := range out.H {
		for x := range out.W {
			want := float32(0)
			switch {
			case x < w && y < h:
				want = 0.25
			case x >= 17 && y >= 3:
				want = 0.75
			}
			if got := out.Pix[y*out.W+x]; math.Abs(float64(got-want)) > RelTol {
				t.Fatalf("pixel (%d, %d) = %g, want %g", y, x, got, want)
			}
		}
	}
}

func testErrors(t *testing.T, b blend.Blender) {
	p := blend.Params{Sigma: 15, OverlapY: 0.3, OverlapX: 0.3}
	a, c := raster.NewFloat32(8, 6), raster.NewFloat32(8, 6)
	two := []*raster.Float32{a, c}
	ok := []raster.Point{{Y: 0, X: 0}, {Y: 0, X: 5}}
	cases := []struct {
		name  string
		tiles []*raster.Float32
		pos   []raster.Point
		p     blend.Params
	}{
		{"no tiles", nil, nil, p},
		{"count mismatch", two, ok[:1], p},
		{"size mismatch", []*raster.Float32{a, raster.NewFloat32(8, 7)}, ok, p},
		{"negative position", two, []raster.Point{{Y: 0, X: 0}, {Y: -1, X: 5}}, p},
		{"NaN position", two, []raster.Point{{Y: 0, X: 0}, {Y: math.NaN(), X: 5}}, p},
		{"zero sigma", two, ok, blend.Params{Sigma: 0, OverlapY: 0.3, OverlapX: 0.3}},
		{"overlap 1", two, ok, blend.Params{Sigma: 15, OverlapY: 1, OverlapX: 0.3}},
	}
	for _, tc := range cases {
		if _, err := b.Blend(context.Background(), tc.tiles, tc.pos, tc.p); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.Blend(ctx, two, ok, p); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: err = %v, want context.Canceled", err)
	}
}

var (
	benchTiles []*raster.Float32
	benchPos   []raster.Point
)

// Bench times b blending 63 tiles of 1440x1920 (9 rows x 7 columns, 30 %
// overlap, jitter 5 px) into one plane of about 9.5k x 10k px (the
// production layout, 7 rows x 9 columns giving 7.5k x 12.7k, has the same
// pixel count). Tiles and positions are built once per process. Reported:
// s/plane and Mpx/s of input.
func Bench(bm *testing.B, b blend.Blender) {
	const rows, cols, h, w, ov = 9, 7, 1440, 1920, 0.3
	if benchTiles == nil {
		rng := rand.New(rand.NewPCG(5, 1))
		benchPos, _, _ = grid(rng, rows, cols, h, w, ov, 5)
		benchTiles = make([]*raster.Float32, len(benchPos))
		for i := range benchTiles {
			benchTiles[i] = raster.NewFloat32(w, h)
			v := float32(0.2 + 0.6*rng.Float64())
			for j := range benchTiles[i].Pix {
				benchTiles[i].Pix[j] = v + float32(j%97)*1e-3
			}
		}
	}
	tiles, pos := benchTiles, benchPos
	p := blend.Params{Sigma: 15, OverlapY: ov, OverlapX: ov}
	var out *raster.Float32
	bm.ResetTimer()
	for bm.Loop() {
		var err error
		out, err = b.Blend(context.Background(), tiles, pos, p)
		if err != nil {
			bm.Fatal(err)
		}
	}
	sec := bm.Elapsed().Seconds() / float64(bm.N)
	bm.ReportMetric(sec, "s/plane")
	bm.ReportMetric(float64(len(tiles)*h*w)/sec/1e6, "Mpx/s")
	fmt.Printf("blend bench: 63 tiles of 1440x1920 -> %dx%d in %.3f s\n", out.W, out.H, sec)
}
