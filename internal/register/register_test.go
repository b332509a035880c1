package register_test

import (
	"math"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/register"
	"github.com/kintsugi-hpc/kintsugi-go/internal/register/registertest"
)

func TestCPUConformance(t *testing.T) {
	registertest.Run(t, register.CPU{Workers: 2})
}

// Compose is function composition: (r ∘ d)(p) = r(d(p)).
func TestCompose(t *testing.T) {
	r := register.Rigid{Theta: 0.3, Scale: 1.1, TY: 5, TX: -7, CY: 20, CX: 30}
	d := register.Rigid{Theta: -0.05, Scale: 0.97, TY: -1.5, TX: 2.25, CY: 20, CX: 30}
	c := r.Compose(d)
	for _, p := range [][2]float64{{0, 0}, {13, -4}, {100, 250}} {
		y1, x1 := d.Apply(p[0], p[1])
		y1, x1 = r.Apply(y1, x1)
		y2, x2 := c.Apply(p[0], p[1])
		if math.Hypot(y1-y2, x1-x2) > 1e-9 {
			t.Errorf("compose at %v: %v, %v vs %v, %v", p, y1, x1, y2, x2)
		}
	}
}

// A field interpolates bilinearly between nodes and is constant beyond.
func TestFieldAt(t *testing.T) {
	f := register.NewField(2, 3, 10, 20, 5)
	copy(f.DY, []float32{0, 1, 2, 3, 4, 5})
	copy(f.DX, []float32{1, 1, 1, 1, 1, 1})
	for _, c := range []struct{ y, x, want float64 }{
		{10, 20, 0}, {15, 30, 5}, {12.5, 22.5, 0.5*0.5 + 0.5*3.5}, {-100, -100, 0}, {100, 100, 5}, {10, 27.5, 1.5},
	} {
		dy, dx := f.At(c.y, c.x)
		if math.Abs(dy-c.want) > 1e-12 || dx != 1 {
			t.Errorf("At(%g, %g) = %g, %g; want %g, 1", c.y, c.x, dy, dx, c.want)
		}
	}
}

// JacobianMin: 1 for a constant field, det of the gradient for a linear
// one, negative for a fold.
func TestJacobianMin(t *testing.T) {
	f := register.NewField(3, 3, 0, 0, 10)
	for i := range f.DY {
		f.DY[i] = 4
	}
	if j := register.JacobianMin(f); math.Abs(j-1) > 1e-12 {
		t.Errorf("constant field: %g", j)
	}
	for i := 0; i < 3; i++ {
		for k := 0; k < 3; k++ {
			f.DY[i*3+k] = float32(0.5 * 10 * float64(i)) // dDy/dy = 0.5
			f.DX[i*3+k] = float32(-0.2 * 10 * float64(k))
		}
	}
	if j := register.JacobianMin(f); math.Abs(j-1.5*0.8) > 1e-6 {
		t.Errorf("linear field: %g, want 1.2", j)
	}
	f.DY[4] = 30 // node (1,1) pushed past (2,1): a fold
	if j := register.JacobianMin(f); !(j < 0) {
		t.Errorf("folded field: %g, want < 0", j)
	}
}
