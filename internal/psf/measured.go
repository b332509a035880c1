package psf

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// Bounds of a measured PSF: each side of the stack read from the file and
// of the kernel made from it at most MaxMeasuredSide voxels, the whole at
// most MaxMeasuredVoxels (64 MiB of float32); a lateral side of at least
// MinMeasuredSide voxels (the background is read from the lateral border).
const (
	MaxMeasuredSide   = 512
	MaxMeasuredVoxels = 1 << 24
	MinMeasuredSide   = 3
)

// Centre rules of a measured PSF (config decon.psf_center).
const (
	CenterMaximum  = "maximum"  // the brightest voxel (the first in z, y, x order when tied)
	CenterCentroid = "centroid" // the intensity-weighted centroid after the background (sub-voxel)
)

// Measured describes a measured PSF stack (a bead image) and the grid it is
// to be used on.
type Measured struct {
	NZ, NY, NX int       // the stack's size
	Data       []float32 // (z, y, x), x fastest, any scale (counts)
	VoxelXY    float64   // the stack's lateral voxel size, nm
	VoxelZ     float64   // the stack's z step, nm
	DXY, DZ    float64   // the data's pixel size and z step, nm: the kernel's grid
	Center     string    // CenterMaximum ("" too) or CenterCentroid
}

// ErrMeasured wraps every error of a measured PSF that lies in its data or
// its settings (errors.Is).
var ErrMeasured = errors.New("psf: unusable measured PSF")

func measuredErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMeasured, fmt.Sprintf(format, args...))
}

// FromMeasured makes a kernel from a measured PSF stack:
//
//  1. checks its size (MinMeasuredSide..MaxMeasuredSide per lateral side,
//     1..MaxMeasuredSide planes, at most MaxMeasuredVoxels) and that every
//     value is finite;
//  2. subtracts the background, the median of the voxels on the lateral
//     border of every plane, and sets what falls below it to 0; nothing left
//     above the background is an error;
//  3. finds the centre (Center: the brightest voxel, or the centroid);
//  4. resamples onto the data's grid (DXY, DZ) around that centre, one axis
//     at a time: each kernel voxel is the mean of the linear interpolant of
//     the stack over the voxel's extent (ceil(out/in) points per axis; the
//     stack is 0 outside itself). With equal voxel sizes and an integer
//     centre this copies the stack. The kernel extends as far from the
//     centre as the stack's farthest face, so any size, odd or even, gives
//     an odd kernel centred on (NZ/2, NY/2, NX/2);
//  5. trims outer shells that are 0 on both sides of an axis;
//  6. normalises to sum 1.
//
// Info reports the model "measured", the kernel's sampling (DXY, DZ) and
// the FWHMs measured on it through the centre along x and z.
func FromMeasured(m Measured) (*Kernel, Info, error) {
	if m.NZ < 1 || m.NY < MinMeasuredSide || m.NX < MinMeasuredSide || m.NZ > MaxMeasuredSide || m.NY > MaxMeasuredSide || m.NX > MaxMeasuredSide ||
		m.NZ*m.NY*m.NX > MaxMeasuredVoxels {
		return nil, Info{}, measuredErr("stack %dx%dx%d (x,y,z): want %d..%d px per lateral side, 1..%d planes, at most %d voxels",
			m.NX, m.NY, m.NZ, MinMeasuredSide, MaxMeasuredSide, MaxMeasuredSide, MaxMeasuredVoxels)
	}
	if len(m.Data) != m.NZ*m.NY*m.NX {
		return nil, Info{}, fmt.Errorf("psf: measured stack %dx%dx%d has %d values", m.NX, m.NY, m.NZ, len(m.Data))
	}
	for _, v := range []struct {
		name string
		v    float64
	}{{"voxel size xy", m.VoxelXY}, {"voxel size z", m.VoxelZ}, {"data pixel size", m.DXY}, {"data z step", m.DZ}} {
		if !(v.v > 0) || math.IsInf(v.v, 0) {
			return nil, Info{}, measuredErr("%s %g nm: want a positive finite value", v.name, v.v)
		}
	}
	for i, v := range m.Data {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			x, y, z := i%m.NX, i/m.NX%m.NY, i/(m.NX*m.NY)
			return nil, Info{}, measuredErr("value %g at (x %d, y %d, z %d): want finite values", v, x, y, z)
		}
	}
	// 2. Background.
	var border []float64
	plane := m.NY * m.NX
	for z := 0; z < m.NZ; z++ {
		for y := 0; y < m.NY; y++ {
			for x := 0; x < m.NX; x++ {
				if y == 0 || y == m.NY-1 || x == 0 || x == m.NX-1 {
					border = append(border, float64(m.Data[z*plane+y*m.NX+x]))
				}
			}
		}
	}
	slices.Sort(border)
	bg := border[len(border)/2]
	if len(border)%2 == 0 {
		bg = 0.5 * (border[len(border)/2-1] + bg)
	}
	vol := make([]float64, len(m.Data))
	var sum float64
	for i, v := range m.Data {
		vol[i] = max(0, float64(v)-bg)
		sum += vol[i]
	}
	if !(sum > 0) {
		return nil, Info{}, measuredErr("no signal above the background (%g, the median of the lateral border)", bg)
	}
	// 3. Centre.
	var cz, cy, cx float64
	switch m.Center {
	case CenterMaximum, "":
		best := 0
		for i, v := range vol {
			if v > vol[best] {
				best = i
			}
		}
		cx, cy, cz = float64(best%m.NX), float64(best/m.NX%m.NY), float64(best/plane)
	case CenterCentroid:
		for i, v := range vol {
			cx += v * float64(i%m.NX)
			cy += v * float64(i/m.NX%m.NY)
			cz += v * float64(i/plane)
		}
		cx, cy, cz = cx/sum, cy/sum, cz/sum
	default:
		return nil, Info{}, measuredErr("centre %q: want %s or %s", m.Center, CenterMaximum, CenterCentroid)
	}
	// 4. Resample, x then y then z.
	hx := halfExtent(m.NX, cx, m.VoxelXY, m.DXY)
	hy := halfExtent(m.NY, cy, m.VoxelXY, m.DXY)
	hz := halfExtent(m.NZ, cz, m.VoxelZ, m.DZ)
	ox, oy, oz := 2*hx+1, 2*hy+1, 2*hz+1
	if ox > MaxMeasuredSide || oy > MaxMeasuredSide || oz > MaxMeasuredSide || ox*oy*oz > MaxMeasuredVoxels {
		return nil, Info{}, measuredErr("on the data's grid (%g nm, %g nm) the kernel is %dx%dx%d (x,y,z): more than %d per side or %d voxels",
			m.DXY, m.DZ, ox, oy, oz, MaxMeasuredSide, MaxMeasuredVoxels)
	}
	// v1: (z, y, ox)
	v1 := make([]float64, m.NZ*m.NY*ox)
	for l := 0; l < m.NZ*m.NY; l++ {
		resample1(v1[l*ox:], 1, vol[l*m.NX:], 1, m.NX, cx, m.VoxelXY, m.DXY, hx)
	}
	// v2: (z, oy, ox)
	v2 := make([]float64, m.NZ*oy*ox)
	for z := 0; z < m.NZ; z++ {
		for x := 0; x < ox; x++ {
			resample1(v2[z*oy*ox+x:], ox, v1[z*m.NY*ox+x:], ox, m.NY, cy, m.VoxelXY, m.DXY, hy)
		}
	}
	// v3: (oz, oy, ox)
	v3 := make([]float64, oz*oy*ox)
	for i := 0; i < oy*ox; i++ {
		resample1(v3[i:], oy*ox, v2[i:], oy*ox, m.NZ, cz, m.VoxelZ, m.DZ, hz)
	}
	// 5. Trim zero shells symmetrically.
	k := trimShells(v3, oz, oy, ox)
	// 6. Normalise (step 4 kept the signal: the kernel's support covers the stack's).
	var s float64
	for _, v := range k.Data {
		s += float64(v)
	}
	if !(s > 0) {
		return nil, Info{}, measuredErr("nothing left after resampling onto the data's grid")
	}
	for i, v := range k.Data {
		k.Data[i] = float32(float64(v) / s)
	}
	info := Info{Model: "measured", SampleXY: m.DXY, SampleZ: m.DZ}
	info.FWHMxy = profileFWHM(k, 0) * m.DXY
	info.FWHMz = profileFWHM(k, 2) * m.DZ
	return k, info, nil
}

// halfExtent is how many output voxels (of size out) the kernel reaches on
// each side of a centre c of an n-voxel axis of voxel size in: as far as
// the farthest face's voxel centre.
func halfExtent(n int, c, in, out float64) int {
	far := math.Max(c, float64(n-1)-c) * in / out
	return max(0, int(math.Ceil(far-1e-9)))
}

// resample1 fills the 2h+1 values dst[i*ds] with the mean of the
// linear interpolant of src (n values at src[j*ss], voxel size in, 0
// outside) over output voxel i - h's extent around c (voxel size out),
// sampled at ceil(out/in) evenly spaced points.
func resample1(dst []float64, ds int, src []float64, ss, n int, c, in, out float64, h int) {
	sub := max(1, int(math.Ceil(out/in-1e-9)))
	at := func(j int) float64 {
		if j < 0 || j >= n {
			return 0
		}
		return src[j*ss]
	}
	for i := 0; i <= 2*h; i++ {
		var acc float64
		for q := 0; q < sub; q++ {
			p := c + (float64(i-h)+(float64(q)+0.5)/float64(sub)-0.5)*out/in
			j := math.Floor(p)
			f := p - j
			acc += (1-f)*at(int(j)) + f*at(int(j)+1)
		}
		dst[i*ds] = acc / float64(sub)
	}
}

// trimShells drops, axis by axis, outer slabs that are 0 on both sides
// (keeping the centre) and returns the float32 kernel.
func trimShells(v []float64, nz, ny, nx int) *Kernel {
	zero := func(z0, z1, y0, y1, x0, x1 int) bool {
		for z := z0; z < z1; z++ {
			for y := y0; y < y1; y++ {
				for x := x0; x < x1; x++ {
					if v[(z*ny+y)*nx+x] > 0 {
						return false
					}
				}
			}
		}
		return true
	}
	tz, ty, tx := 0, 0, 0 // slabs dropped on each side
	for 2*(tz+1) < nz && zero(tz, tz+1, 0, ny, 0, nx) && zero(nz-1-tz, nz-tz, 0, ny, 0, nx) {
		tz++
	}
	for 2*(ty+1) < ny && zero(0, nz, ty, ty+1, 0, nx) && zero(0, nz, ny-1-ty, ny-ty, 0, nx) {
		ty++
	}
	for 2*(tx+1) < nx && zero(0, nz, 0, ny, tx, tx+1) && zero(0, nz, 0, ny, nx-1-tx, nx-tx) {
		tx++
	}
	k := &Kernel{NZ: nz - 2*tz, NY: ny - 2*ty, NX: nx - 2*tx}
	k.Data = make([]float32, k.NZ*k.NY*k.NX)
	for z := 0; z < k.NZ; z++ {
		for y := 0; y < k.NY; y++ {
			for x := 0; x < k.NX; x++ {
				k.Data[(z*k.NY+y)*k.NX+x] = float32(v[((z+tz)*ny+y+ty)*nx+x+tx])
			}
		}
	}
	return k
}

// profileFWHM is the full width at half the centre value of the kernel's
// profile through its centre along x (axis 0) or z (axis 2), in voxels,
// by linear interpolation; the whole extent when it stays above half.
func profileFWHM(k *Kernel, axis int) float64 {
	cz, cy, cx := k.NZ/2, k.NY/2, k.NX/2
	n, at := k.NX, func(i int) float64 { return float64(k.At(cz, cy, i)) }
	if axis == 2 {
		n, at = k.NZ, func(i int) float64 { return float64(k.At(i, cy, cx)) }
	}
	c := n / 2
	half := at(c) / 2
	side := func(step int) float64 {
		for i := c; i+step >= 0 && i+step < n; i += step {
			a, b := at(i), at(i+step)
			if b <= half {
				return float64(i-c)*float64(step) + (a-half)/(a-b)
			}
		}
		return float64(n-1-c) + 0.5
	}
	return side(1) + side(-1)
}
