package register

import (
	"math"
	"math/rand/v2"
	"testing"
)

// A folded field is unfolded by enforceJacobian: det(I + ∇D) >= the bound
// afterwards, and a field that already satisfies it is left alone.
func TestEnforceJacobian(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	f := NewField(12, 15, 0, 0, 8)
	for i := range f.DY {
		f.DY[i] = float32(r.NormFloat64() * 6) // neighbours 8 px apart moved ±6 px: folds
		f.DX[i] = float32(r.NormFloat64() * 6)
	}
	if j := JacobianMin(f); !(j < 0) {
		t.Fatalf("test field not folded: Jacobian min %g", j)
	}
	s, h := enforceJacobian(f, 0.5)
	if j := JacobianMin(f); !(j >= 0.5) {
		t.Errorf("after %d smoothings and %d halvings: Jacobian min %g < 0.5", s, h, j)
	}
	g := NewField(3, 3, 0, 0, 10)
	g.DY[4] = 1
	before := g.Clone()
	if s, h := enforceJacobian(g, 0.5); s != 0 || h != 0 || g.DY[4] != before.DY[4] {
		t.Errorf("a fold-free field was changed (%d smoothings, %d halvings)", s, h)
	}
}

// The vector median test drops an outlier among consistent neighbours, and
// the normalised convolution fills it from them.
func TestMedianAndFill(t *testing.T) {
	ny, nx := 5, 5
	dy := make([]float64, ny*nx)
	dx := make([]float64, ny*nx)
	valid := make([]bool, ny*nx)
	for i := range dy {
		dy[i], dx[i], valid[i] = 1.5, -0.5, true
	}
	dy[12] = 9 // centre outlier
	vectorMedianReject(dy, dx, valid, ny, nx, 1)
	for i, v := range valid {
		if v != (i != 12) {
			t.Fatalf("node %d valid %v", i, v)
		}
	}
	fy := smoothFill(dy, valid, ny, nx, 1)
	if math.Abs(fy[12]-1.5) > 1e-12 {
		t.Errorf("filled centre %g, want 1.5", fy[12])
	}
	none := make([]bool, ny*nx)
	if z := smoothFill(dy, none, ny, nx, 1); z[12] != 0 {
		t.Errorf("no support: %g, want 0", z[12])
	}
}

// convSep is the 2-D convolution with the outer product of k, nodes beyond
// the grid contributing nothing: on a grid little larger than the kernel
// (radius 4 on 7 x 11 nodes, so both passes clip at both ends) and not
// square (so the axes cannot be swapped unseen), it equals the direct
// double sum to rounding.
func TestConvSep(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 1))
	ny, nx := 7, 11
	src := make([]float64, ny*nx)
	for i := range src {
		src[i] = r.NormFloat64()
	}
	k := gaussKernel(1.3) // radius 4
	kr := len(k) / 2
	got := convSep(src, ny, nx, k)
	for i := range ny {
		for j := range nx {
			var want float64
			for a := -kr; a <= kr; a++ {
				for b := -kr; b <= kr; b++ {
					if ii, jj := i+a, j+b; ii >= 0 && ii < ny && jj >= 0 && jj < nx {
						want += k[a+kr] * k[b+kr] * src[ii*nx+jj]
					}
				}
			}
			if d := math.Abs(got[i*nx+j] - want); !(d <= 1e-12) {
				t.Fatalf("node (%d, %d): %.15g, want %.15g", i, j, got[i*nx+j], want)
			}
		}
	}
}
