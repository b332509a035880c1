package register_test

import (
	"context"
	"math"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/register"
	"github.com/kintsugi-hpc/kintsugi-go/internal/register/registertest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth"
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

// With Params.Scale, a uniform scale is recovered: the moving image is the
// reference resampled through a known rigid transform S with scale 1.012,
// so the registration is S⁻¹.
func TestScale(t *testing.T) {
	ctx := context.Background()
	_, ref := registertest.Scene(t, synth.RegOptions{H: 384, W: 512, Channels: 1, Seed: 8, Workers: 2})
	s := register.Identity(384, 512)
	s.Scale, s.Theta, s.TY, s.TX = 1.012, 0.004, 6.3, -9.1
	be := register.CPU{Workers: 2}
	mov, err := be.Warp(ctx, ref, &register.Mapping{Rigid: s}, 384, 512)
	if err != nil {
		t.Fatal(err)
	}
	p := register.DefaultParams()
	p.RigidOnly, p.Scale, p.MaxImageDim, p.CoarseDim, p.Workers = true, true, 512, 256, 2
	res := registertest.Register(t, be, ref[0], mov[0], p)
	worst := 0.0
	for y := 60.0; y < 324; y += 16 {
		for x := 60.0; x < 452; x += 16 {
			// T = S⁻¹: S(T(p)) = p
			qy, qx := res.Mapping.Apply(y, x)
			py, px := s.Apply(qy, qx)
			worst = math.Max(worst, math.Hypot(py-y, px-x))
		}
	}
	t.Logf("scale %.5f (want %.5f), rotation %.4f° (want %.4f°), worst error %.3f px", res.Rigid.Scale, 1/s.Scale, res.Metrics.RotationDeg, -s.Theta*180/math.Pi, worst)
	if !(math.Abs(res.Rigid.Scale*s.Scale-1) < 1e-3) || !(worst < 0.3) {
		t.Errorf("scale %.5f, want %.5f; worst error %.3f px", res.Rigid.Scale, 1/s.Scale, worst)
	}
}
