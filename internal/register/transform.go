package register

import (
	"fmt"
	"math"
)

// Rigid is q = c + s·R(θ)·(p − c) + t, points (y, x) in full-resolution
// px. R(θ) rotates the image content counter-clockwise on screen for θ > 0
// in (x right, y down) coordinates: y' = cos θ·y + sin θ·x,
// x' = −sin θ·y + cos θ·x.
type Rigid struct {
	Theta  float64 // radians
	Scale  float64 // 1 = no scale; 0 is read as 1
	TY, TX float64 // translation, px
	CY, CX float64 // centre of rotation, px
}

// Identity returns the identity about the centre of an h x w image.
func Identity(h, w int) Rigid {
	return Rigid{Scale: 1, CY: float64(h-1) / 2, CX: float64(w-1) / 2}
}

// Matrix returns A and b with q = A·p + b, A row-major [ayy ayx; axy axx]
// acting on (y, x).
func (r Rigid) Matrix() (a [4]float64, b [2]float64) {
	s := r.Scale
	if s == 0 {
		s = 1
	}
	c, sn := math.Cos(r.Theta), math.Sin(r.Theta)
	a = [4]float64{s * c, s * sn, -s * sn, s * c}
	b[0] = r.CY + r.TY - a[0]*r.CY - a[1]*r.CX
	b[1] = r.CX + r.TX - a[2]*r.CY - a[3]*r.CX
	return a, b
}

// Apply maps (y, x).
func (r Rigid) Apply(y, x float64) (float64, float64) {
	a, b := r.Matrix()
	return a[0]*y + a[1]*x + b[0], a[2]*y + a[3]*x + b[1]
}

// Compose returns r ∘ d (first d, then r) for a d with the same centre.
func (r Rigid) Compose(d Rigid) Rigid {
	if r.CY != d.CY || r.CX != d.CX {
		panic("register: compose rigid transforms of different centres")
	}
	rs, ds := r.Scale, d.Scale
	if rs == 0 {
		rs = 1
	}
	if ds == 0 {
		ds = 1
	}
	c, sn := math.Cos(r.Theta), math.Sin(r.Theta)
	// r(d(p)) = c + rs R(r.θ) (ds R(d.θ)(p−c) + d.t) + r.t
	ty := rs * (c*d.TY + sn*d.TX)
	tx := rs * (-sn*d.TY + c*d.TX)
	return Rigid{Theta: r.Theta + d.Theta, Scale: rs * ds, TY: r.TY + ty, TX: r.TX + tx, CY: r.CY, CX: r.CX}
}

// Field is a displacement field on a regular grid: node (i, j) lies at
// full-resolution (Y0 + i·Step, X0 + j·Step) and holds the displacement
// (DY, DX) in full-resolution px. Between nodes it is interpolated
// bilinearly; beyond the outer nodes it is constant (clamped).
type Field struct {
	NY, NX int
	Y0, X0 float64
	Step   float64
	DY, DX []float32 // NY x NX, row-major
}

// NewField returns a zero field.
func NewField(ny, nx int, y0, x0, step float64) *Field {
	if ny < 1 || nx < 1 || !(step > 0) {
		panic(fmt.Sprintf("register: invalid field %dx%d step %g", ny, nx, step))
	}
	return &Field{NY: ny, NX: nx, Y0: y0, X0: x0, Step: step, DY: make([]float32, ny*nx), DX: make([]float32, ny*nx)}
}

// Clone returns a deep copy.
func (f *Field) Clone() *Field {
	if f == nil {
		return nil
	}
	g := *f
	g.DY = append([]float32(nil), f.DY...)
	g.DX = append([]float32(nil), f.DX...)
	return &g
}

// At returns the displacement at full-resolution (y, x). The arithmetic is
// the one the CUDA warp kernel does (float64 coordinates and weights).
func (f *Field) At(y, x float64) (float64, float64) {
	gy := (y - f.Y0) / f.Step
	gx := (x - f.X0) / f.Step
	gy = math.Max(0, math.Min(float64(f.NY-1), gy))
	gx = math.Max(0, math.Min(float64(f.NX-1), gx))
	i0 := int(gy)
	j0 := int(gx)
	i0 = min(i0, f.NY-2)
	j0 = min(j0, f.NX-2)
	if f.NY == 1 {
		i0 = 0
	}
	if f.NX == 1 {
		j0 = 0
	}
	fy := gy - float64(i0)
	fx := gx - float64(j0)
	i1, j1 := min(i0+1, f.NY-1), min(j0+1, f.NX-1)
	w00 := (1 - fy) * (1 - fx)
	w01 := (1 - fy) * fx
	w10 := fy * (1 - fx)
	w11 := fy * fx
	k00, k01, k10, k11 := i0*f.NX+j0, i0*f.NX+j1, i1*f.NX+j0, i1*f.NX+j1
	dy := w00*float64(f.DY[k00]) + w01*float64(f.DY[k01]) + w10*float64(f.DY[k10]) + w11*float64(f.DY[k11])
	dx := w00*float64(f.DX[k00]) + w01*float64(f.DX[k01]) + w10*float64(f.DX[k10]) + w11*float64(f.DX[k11])
	return dy, dx
}

// rowAt returns the field interpolated along y at y (full-resolution px,
// clamped to the grid as At does): one dy and one dx per grid column, for
// colAt. At(y, x) equals colAt(rowAt(y), x) to rounding.
func (f *Field) rowAt(y float64) (dy, dx []float64) {
	gy := math.Max(0, math.Min(float64(f.NY-1), (y-f.Y0)/f.Step))
	i0 := min(int(gy), f.NY-2)
	if f.NY == 1 {
		i0 = 0
	}
	fy := gy - float64(i0)
	i1 := min(i0+1, f.NY-1)
	dy, dx = make([]float64, f.NX), make([]float64, f.NX)
	for c := range f.NX {
		dy[c] = (1-fy)*float64(f.DY[i0*f.NX+c]) + fy*float64(f.DY[i1*f.NX+c])
		dx[c] = (1-fy)*float64(f.DX[i0*f.NX+c]) + fy*float64(f.DX[i1*f.NX+c])
	}
	return dy, dx
}

// colAt interpolates a row of rowAt along x at x (full-resolution px).
func (f *Field) colAt(dy, dx []float64, x float64) (float64, float64) {
	gx := min(max((x-f.X0)/f.Step, 0), float64(f.NX-1)) // x is never NaN
	j0 := min(int(gx), f.NX-2)
	if f.NX == 1 {
		j0 = 0
	}
	fx := gx - float64(j0)
	j1 := min(j0+1, f.NX-1)
	return dy[j0] + fx*(dy[j1]-dy[j0]), dx[j0] + fx*(dx[j1]-dx[j0])
}

// Mapping is the transform from fixed to moving coordinates:
// q = Rigid(p + Field(p)) (Field nil: rigid only).
type Mapping struct {
	Rigid Rigid
	Field *Field
}

// Apply maps the fixed point (y, x) to the moving image.
func (m *Mapping) Apply(y, x float64) (float64, float64) {
	a, b := m.Rigid.Matrix()
	return applyAB(a, b, m.Field, y, x)
}

func applyAB(a [4]float64, b [2]float64, f *Field, y, x float64) (float64, float64) {
	if f != nil {
		dy, dx := f.At(y, x)
		y += dy
		x += dx
	}
	return a[0]*y + a[1]*x + b[0], a[2]*y + a[3]*x + b[1]
}
