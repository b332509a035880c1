package align

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// sceneTile samples f at (y0+i, x0+j) into an h x w tile and adds Gaussian
// noise of sigma noise.
func sceneTile(f func(y, x float64) float64, y0, x0 float64, h, w int, noise float64, rng *rand.Rand) *raster.Float32 {
	t := raster.NewFloat32(w, h)
	for i := range h {
		for j := range w {
			t.Pix[i*w+j] = float32(f(y0+float64(i), x0+float64(j)) + noise*rng.NormFloat64())
		}
	}
	return t
}

// blobField returns a scene of n Gaussian "nuclei" (sigma 3-5 px) over
// [0, size)².
func blobField(rng *rand.Rand, n int, size float64) func(y, x float64) float64 {
	type b struct{ y, x, k, a float64 }
	bs := make([]b, n)
	for i := range bs {
		s := 3 + 2*rng.Float64()
		bs[i] = b{rng.Float64() * size, rng.Float64() * size, 1 / (2 * s * s), 0.5 + rng.Float64()}
	}
	return func(y, x float64) float64 {
		var v float64
		for _, q := range bs {
			d2 := (y-q.y)*(y-q.y) + (x-q.x)*(x-q.x)
			if d2 < 100 {
				v += q.a * math.Exp(-q.k*d2)
			}
		}
		return v
	}
}

// TestTextureNCC checks what Align relies on: a smooth gradient alone (a
// soft tissue edge plus a flatfield-like ramp) correlates in NCC at many
// translations but stays below TextureMin in TextureNCC at every one, while
// the same gradient with nuclei on it scores near 1 at the true translation.
func TestTextureNCC(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	const h, w = 80, 100
	edge := func(y, x float64) float64 {
		return 0.2 + 0.8/(1+math.Exp(-(x+0.3*y-120)/12)) + 0.002*y
	}
	blobs := blobField(rng, 120, 260)
	textured := func(y, x float64) float64 { return edge(y, x) + 2*blobs(y, x) }
	// B lies at (3, 70) from A: B(y, x) = scene(y+3, x+70), A(y, x) = scene(y, x)
	const ty, tx = 3, 70
	const noise = 0.01
	for _, c := range []struct {
		name     string
		f        func(y, x float64) float64
		textured bool
	}{{"gradient only", edge, false}, {"nuclei on the gradient", textured, true}} {
		a := sceneTile(c.f, 0, 0, h, w, noise, rng)
		b := sceneTile(c.f, ty, tx, h, w, noise, rng)
		if c.textured {
			if v := TextureNCC(a, b, ty, tx); v < 0.9 {
				t.Errorf("%s: TextureNCC at the true translation %.3f, want >= 0.9", c.name, v)
			}
			continue
		}
		highNCC, worst := 0, math.Inf(-1)
		for dy := ty - 10; dy <= ty+10; dy++ {
			for dx := tx - 10; dx <= tx+10; dx++ {
				if NCC(a, b, dy, dx) > 0.5 {
					highNCC++
				}
				worst = max(worst, TextureNCC(a, b, dy, dx))
			}
		}
		if highNCC < 100 {
			t.Errorf("%s: NCC > 0.5 at only %d of 441 translations; the case should fool NCC", c.name, highNCC)
		}
		t.Logf("%s: NCC > 0.5 at %d of 441 translations, TextureNCC at most %.3f", c.name, highNCC, worst)
		if worst >= TextureMin {
			t.Errorf("%s: TextureNCC reaches %.3f >= TextureMin %.2f", c.name, worst, TextureMin)
		}
	}
	// identical tiles correlate perfectly; an empty overlap or a constant
	// side gives 0
	a := sceneTile(textured, 0, 0, h, w, noise, rng)
	if v := TextureNCC(a, a, 0, 0); math.Abs(v-1) > 1e-12 {
		t.Errorf("TextureNCC of a tile with itself = %.15f", v)
	}
	if v := TextureNCC(a, a, h, 0); v != 0 {
		t.Errorf("TextureNCC of an empty overlap = %g", v)
	}
	if v := TextureNCC(a, raster.NewFloat32(w, h), 5, 5); v != 0 {
		t.Errorf("TextureNCC against a constant tile = %g", v)
	}
}

// TestHighPass compares the sliding box filter of TextureNCC with a direct
// sum, on a region inside a larger tile (odd sizes, box radius 4). The
// filter returns (2k+1)² times pixel minus box mean.
func TestHighPass(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 1))
	tl := raster.NewFloat32(31, 23)
	for i := range tl.Pix {
		tl.Pix[i] = float32(rng.Float64())
	}
	const y0, x0, h, w, k = 3, 5, 15, 20, 4
	var f boxFilter
	f.init(tl, y0, x0, h, w, k)
	iw := w - 2*k
	for i := range h - 2*k {
		got := f.next()
		if len(got) != iw {
			t.Fatalf("row %d: %d values, want %d", i, len(got), iw)
		}
		for j := range iw {
			var s float64
			for u := i; u <= i+2*k; u++ {
				for v := j; v <= j+2*k; v++ {
					s += float64(tl.At(y0+u, x0+v))
				}
			}
			want := float64(tl.At(y0+k+i, x0+k+j)) - s/((2*k+1)*(2*k+1))
			if got := got[j] / ((2*k + 1) * (2*k + 1)); math.Abs(got-want) > 1e-12 {
				t.Fatalf("high pass at (%d, %d) = %.15f, want %.15f", i, j, got, want)
			}
		}
	}
}

// TestLoops drives the loop check with hand-made translations of a 3x3
// grid whose stage moves (up to 6 px) are far beyond pou (0.5 % of 100 px):
// the MIST filters reject most pairs, the loop check keeps every pair of a
// block that closes, and a blunder breaks the blocks it is in.
func TestLoops(t *testing.T) {
	rows, cols := 3, 3
	grid := fullGrid(rows, cols)
	pairs := Pairs(rows, cols, grid)
	rng := rand.New(rand.NewPCG(4, 1))
	pos := make([]raster.Point, len(grid))
	for i, g := range grid {
		pos[i] = raster.Point{Y: 80*float64(g.Row) + 6*(2*rng.Float64()-1), X: 80*float64(g.Col) + 6*(2*rng.Float64()-1)}
	}
	idx := func(a, b int) int {
		for i, pr := range pairs {
			if pr.A == a && pr.B == b {
				return i
			}
		}
		panic("no pair")
	}
	mk := func(scale float64) []Translation {
		out := make([]Translation, len(pairs))
		for i, pr := range pairs {
			// measurement error scale px (alternating signs)
			e := scale * float64(1-2*(i%2))
			out[i] = Translation{DY: pos[pr.B].Y - pos[pr.A].Y + e, DX: pos[pr.B].X - pos[pr.A].X - e, NCC: 0.9}
		}
		return out
	}
	p := Params{Overlap: 0.2, NCCThreshold: 0.078, POU: 0.5}
	run := func(first []Translation, texture func(i int) float64) *mist {
		m := &mist{pairs: pairs, grid: grid, first: first, h: 100, w: 100, p: p}
		m.filter()
		m.texture = make([]float64, len(pairs))
		for i := range m.texture {
			m.texture[i] = texture(i)
		}
		m.consistent = m.loops()
		return m
	}
	all := func(int) float64 { return 0.9 }

	m := run(mk(0.2), all)
	nValid := 0
	for i := range pairs {
		if m.valid3[i] {
			nValid++
		}
		if !m.consistent[i] {
			t.Errorf("clean pair %d %+v not consistent", i, pairs[i])
		}
	}
	if nValid > len(pairs)/2 {
		t.Errorf("%d of %d pairs pass the MIST filters; the case should defeat them", nValid, len(pairs))
	}

	// a blunder on Left (1,0)->(1,1) (tiles 3-4) breaks blocks (0,0) and
	// (1,0); pairs only in those blocks lose consistency, the others keep it
	first := mk(0.2)
	bad := idx(3, 4)
	first[bad].DY += 20
	first[bad].DX += 25
	m = run(first, all)
	lost := map[int]bool{bad: true, idx(0, 1): true, idx(0, 3): true, idx(3, 6): true, idx(6, 7): true}
	for i := range pairs {
		if m.consistent[i] == lost[i] {
			t.Errorf("blunder: pair %d %+v consistent %v, want %v", i, pairs[i], m.consistent[i], !lost[i])
		}
	}

	// closure just within and just beyond LoopTol: Left 4-5 is in blocks
	// (0,1) and (1,1), both of which it alone makes fail to close
	for _, c := range []struct {
		err  float64
		want bool
	}{{0.9 * LoopTol, true}, {1.1 * LoopTol, false}} {
		first := mk(0)
		first[idx(4, 5)].DX += c.err
		m := run(first, all)
		if got := m.consistent[idx(4, 5)]; got != c.want {
			t.Errorf("closure error %.2f px: pair 4-5 consistent %v, want %v", c.err, got, c.want)
		}
	}

	// a textureless pair cannot vouch for a block, even when it closes:
	// block (1,1) does not count, so 7-8 and 5-8 (in no other block) are
	// not consistent; 4-5 and 4-7 are, through blocks (0,1) and (1,0)
	tl := idx(7, 8)
	m = run(mk(0.2), func(i int) float64 {
		if i == tl {
			return 0.05
		}
		return 0.9
	})
	for i := range pairs {
		want := i != tl && i != idx(5, 8)
		if m.consistent[i] != want {
			t.Errorf("textureless 7-8: pair %d %+v consistent %v, want %v", i, pairs[i], m.consistent[i], want)
		}
	}
}

// TestAlignJitterBeyondPOU runs the whole of Align on a textured mosaic
// whose stage moves exceed pou and checks every tile (no stage model left
// in place of a measurement), with the smooth gradient of an uncorrected
// flatfield on every tile.
func TestAlignJitterBeyondPOU(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 1))
	const rows, cols, h, w = 3, 3, 120, 150
	const ov = 0.3
	blobs := blobField(rng, 700, 420)
	var grid []GridPos
	var tiles []*raster.Float32
	var truth []raster.Point
	for r := range rows {
		for c := range cols {
			y := 10 + float64(r)*h*(1-ov) + 4*(2*rng.Float64()-1)
			x := 10 + float64(c)*w*(1-ov) + 4*(2*rng.Float64()-1)
			tl := sceneTile(blobs, y, x, h, w, 0.01, rng)
			for i := range h {
				for j := range w {
					u, v := float64(i)/h-0.5, float64(j)/w-0.5
					tl.Pix[i*w+j] *= float32(1 - 0.3*(u*u+v*v)) // flatfield residual, 15 % at the corners
				}
			}
			grid = append(grid, GridPos{r, c})
			tiles = append(tiles, tl)
			truth = append(truth, raster.Point{Y: y, X: x})
		}
	}
	res, err := Align(context.Background(), CPU{Workers: 2}, tiles, rows, cols, grid, Params{Overlap: ov, NCCThreshold: 0.078, POU: 0.5, Subpixel: true})
	if err != nil {
		t.Fatal(err)
	}
	// 0.3 px: sub-pixel translations within 0.2 px (aligntest) plus the
	// bias of the vignetting, summed along at most 4 tree edges
	const tol = 0.3
	var oy, ox float64
	for i, q := range res.Positions {
		oy += (q.Y - truth[i].Y) / float64(len(truth))
		ox += (q.X - truth[i].X) / float64(len(truth))
	}
	worst, at := 0.0, 0
	for i, q := range res.Positions {
		if e := math.Hypot(q.Y-truth[i].Y-oy, q.X-truth[i].X-ox); e > worst {
			worst, at = e, i
		}
	}
	nValid := 0
	for i := range res.Pairs {
		if res.Valid[i] {
			nValid++
		}
		if !res.Trusted[i] && !res.Refined[i] {
			t.Errorf("pair %d %+v left at the stage model", i, res.Pairs[i])
		}
	}
	t.Logf("%d of %d pairs valid (MIST); position error max %.3f px (tile %d)", nValid, len(res.Pairs), worst, at)
	if worst > tol {
		t.Errorf("position error %.3f px at tile %d > %.2f", worst, at, tol)
	}
}
