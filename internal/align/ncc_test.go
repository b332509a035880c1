package align

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// scoreTol is the largest difference accepted between NCC, TextureNCC or
// a scorer's score and the two-pass references below: both sum in
// float64, in different orders, over at most a few thousand float32 pixels
// (rounding near 1e-15 of scores in [-1, 1]).
const scoreTol = 1e-12

// refNCC is NCC written out plainly: the overlap's pixel pairs, their
// means, then the Pearson correlation of the mean-subtracted values.
func refNCC(a, b *raster.Float32, dy, dx int) float64 {
	var va, vb []float64
	for y := range a.H {
		for x := range a.W {
			if by, bx := y-dy, x-dx; by >= 0 && by < b.H && bx >= 0 && bx < b.W {
				va = append(va, float64(a.At(y, x)))
				vb = append(vb, float64(b.At(by, bx)))
			}
		}
	}
	return refPearson(va, vb)
}

// refTextureNCC is TextureNCC written out plainly: each side of the
// overlap high-passed by a direct sum over the box around each interior
// pixel, then the Pearson correlation.
func refTextureNCC(a, b *raster.Float32, dy, dx int) float64 {
	const k = TextureRadius
	y0, y1 := max(0, dy), min(a.H, a.H+dy)
	x0, x1 := max(0, dx), min(a.W, a.W+dx)
	if y1-y0 <= 2*k || x1-x0 <= 2*k {
		return 0
	}
	hp := func(t *raster.Float32, ty, tx int) float64 { // ty, tx: the pixel on t
		var s float64
		for u := ty - k; u <= ty+k; u++ {
			for v := tx - k; v <= tx+k; v++ {
				s += float64(t.At(u, v))
			}
		}
		return float64(t.At(ty, tx)) - s/((2*k+1)*(2*k+1))
	}
	var va, vb []float64
	for y := y0 + k; y < y1-k; y++ {
		for x := x0 + k; x < x1-k; x++ {
			va = append(va, hp(a, y, x))
			vb = append(vb, hp(b, y-dy, x-dx))
		}
	}
	return refPearson(va, vb)
}

func refPearson(va, vb []float64) float64 {
	if len(va) == 0 {
		return 0
	}
	var ma, mb float64
	for i := range va {
		ma += va[i]
		mb += vb[i]
	}
	ma /= float64(len(va))
	mb /= float64(len(vb))
	var sab, saa, sbb float64
	for i := range va {
		sab += (va[i] - ma) * (vb[i] - mb)
		saa += (va[i] - ma) * (va[i] - ma)
		sbb += (vb[i] - mb) * (vb[i] - mb)
	}
	if !(saa > 0) || !(sbb > 0) {
		return 0
	}
	return max(-1, min(1, sab/math.Sqrt(saa*sbb)))
}

// scoreTiles returns two h x w tiles that share a textured scene at
// translation (ty, tx), B(y, x) = scene(y+ty, x+tx), on top of offset
// (counts-like, to exercise the cancellation in the variances), with
// independent noise.
func scoreTiles(rng *rand.Rand, h, w, ty, tx int, offset float64) (*raster.Float32, *raster.Float32) {
	blobs := blobField(rng, h*w/40, float64(max(h, w)+max(abs(ty), abs(tx))+20))
	f := func(y, x float64) float64 { return offset + 100*blobs(y+20, x+20) + 0.3*y - 0.2*x }
	return sceneTile(f, 0, 0, h, w, 5, rng), sceneTile(f, float64(ty), float64(tx), h, w, 5, rng)
}

// testTranslations returns translations of h x w tiles covering the cases
// of the overlap: empty (|dy| = h or |dx| = w), one row or column, just
// narrower than, as wide as and just wider than 2·TextureRadius+1, negative
// and positive offsets, and the tiles' own offset (ty, tx).
func testTranslations(h, w, ty, tx int) [][2]int {
	axis := func(n, t int) []int {
		const k = TextureRadius
		var out []int
		for _, d := range []int{n, n - 1, n - 2*k, n - 2*k - 1, n - 2*k - 2, n / 2, 3, 1, 0} {
			out = append(out, d, -d)
		}
		return append(out, t-1, t, t+1)
	}
	var out [][2]int
	for _, dy := range axis(h, ty) {
		for _, dx := range axis(w, tx) {
			out = append(out, [2]int{dy, dx})
		}
	}
	return out
}

// TestScoresMatchReference checks NCC, TextureNCC and a scorer's scores,
// alone and in batches, against the plain references on random textured
// tiles, at translations covering the edge cases of the overlap.
//
// NCC's one-pass variance, Σa² − (Σa)²/n, loses about eps·(mean/std)² to
// cancellation: on these tiles with an offset of 1000 it is 6e-12 from
// the two-pass reference (NCC as it was before the scorer was added, too).
// There the scorer's scores are held to NCC instead (the same formula,
// another order of additions); TextureNCC removes the offset and is held
// to its reference at every offset.
func TestScoresMatchReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 1))
	const h, w, ty, tx = 37, 53, 3, 36
	for _, offset := range []float64{0, 100, 1000} {
		a, b := scoreTiles(rng, h, w, ty, tx, offset)
		want := func(dy, dx int) float64 { return refNCC(a, b, dy, dx) }
		if offset > 100 {
			want = func(dy, dx int) float64 { return NCC(a, b, dy, dx) }
		}
		s := newScorer(a, b, NewPairGeometry(h, w, Left, 0.3))
		worst := map[string]float64{}
		check := func(what string, dy, dx int, got, want float64) {
			t.Helper()
			e := math.Abs(got - want)
			worst[what] = max(worst[what], e)
			if !(e <= scoreTol) {
				t.Errorf("offset %g: %s at (%d, %d) = %.16f, reference %.16f", offset, what, dy, dx, got, want)
			}
		}
		trs := testTranslations(h, w, ty, tx)
		for _, d := range trs {
			if offset <= 100 {
				check("NCC", d[0], d[1], NCC(a, b, d[0], d[1]), want(d[0], d[1]))
			}
			check("scorer", d[0], d[1], s.ncc(d[0], d[1]), want(d[0], d[1]))
			check("TextureNCC", d[0], d[1], TextureNCC(a, b, d[0], d[1]), refTextureNCC(a, b, d[0], d[1]))
		}
		// every batch of up to maxBatch consecutive translations, and the
		// 3x3 neighbourhoods a climb scores, from a fresh scorer
		sb := newScorer(a, b, NewPairGeometry(h, w, Left, 0.3))
		var batches [][][2]int
		for n := 2; n <= maxBatch; n++ {
			for i := 0; i+n <= len(trs); i += n {
				batches = append(batches, trs[i:i+n])
			}
		}
		for _, c := range trs {
			var nb [][2]int
			for dy := c[0] - 1; dy <= c[0]+1; dy++ {
				for dx := c[1] - 1; dx <= c[1]+1; dx++ {
					nb = append(nb, [2]int{dy, dx})
				}
			}
			batches = append(batches, nb[:4], nb[4:8], nb[5:8], nb[7:9])
		}
		for _, bt := range batches {
			got := sb.nccBatch(bt)
			for i, d := range bt {
				check("scorer batch", d[0], d[1], got[i], want(d[0], d[1]))
			}
		}
		t.Logf("offset %g: %d translations, %d batches; worst differences from the references %v", offset, len(trs), len(batches), worst)
	}
}

// TestScoresIndependentOfBatching checks that a scorer's score at a
// translation is the same to the bit whether it is computed alone, in any
// batch, or by a scorer that has scored other translations before
// (nccsums.go): memoised scores may then be shared and reused freely.
func TestScoresIndependentOfBatching(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 1))
	const h, w, ty, tx = 41, 60, -2, 40
	a, b := scoreTiles(rng, h, w, ty, tx, 500)
	g := NewPairGeometry(h, w, Left, 0.3)
	alone := func(dy, dx int) float64 { return newScorer(a, b, g).ncc(dy, dx) }
	trs := testTranslations(h, w, ty, tx)
	s := newScorer(a, b, g)
	for _, c := range trs {
		// a climb's neighbourhood, in the order prefetch batches it, and
		// some translations far from it in the same batch
		var todo [][2]int
		for dy := c[0] - 1; dy <= c[0]+1; dy++ {
			for dx := c[1] - 1; dx <= c[1]+1; dx++ {
				todo = append(todo, [2]int{dy, dx})
			}
		}
		todo = append(todo, [2]int{c[0] + 9, c[1] - 11}, [2]int{-c[0], -c[1]}, [2]int{c[0], c[1] + 2})
		for len(todo) > 0 {
			n := min(len(todo), maxBatch)
			got := s.nccBatch(todo[:n])
			for i, d := range todo[:n] {
				if want := alone(d[0], d[1]); got[i] != want {
					t.Fatalf("around (%d, %d): batch %v gives %.17g at %v, alone %.17g", c[0], c[1], todo[:n], got[i], d, want)
				}
			}
			todo = todo[n:]
		}
	}
}

// TestCrossSumsBatched checks crossSums's bit-for-bit claim directly:
// shared passes (overlaps with most rows and columns in common, some
// empty) give each translation the sum of crossSum alone, and the sums
// over the overlap that overlapSums gives.
func TestCrossSumsBatched(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 1))
	a, b := scoreTiles(rng, 30, 45, 2, 30, 0)
	for _, bt := range [][][2]int{
		{{2, 30}, {2, 31}, {3, 29}, {1, 32}},
		{{-2, 30}, {-3, 31}},
		{{0, -20}, {1, -21}, {-1, -19}},
		{{5, 44}, {5, 45}, {6, 43}, {30, 0}},
		{{2, 30}, {20, -30}},
	} {
		got := crossSums(a, b, bt)
		for i, d := range bt {
			r := overlapRect(a.H, a.W, d[0], d[1])
			want := crossSum(a, b, r, d)
			_, _, _, _, fused := overlapSums(a, b, r, d[0], d[1])
			if got[i] != want || fused != want {
				t.Errorf("%s: Σab at %v: batched %.17g, alone %.17g, overlapSums %.17g", fmt.Sprint(bt), d, got[i], want, fused)
			}
		}
	}
}
