package psf

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// gaussVol is a (z, y, x) volume of a*exp(-d²/2σ²) + bg around (cz, cy, cx)
// (voxel units), 0 above background beyond cut (voxels per axis; 0: no cut).
func gaussVol(nz, ny, nx int, cz, cy, cx, sz, sy, sx, a, bg float64, cut [3]int) []float32 {
	v := make([]float32, nz*ny*nx)
	for z := 0; z < nz; z++ {
		for y := 0; y < ny; y++ {
			for x := 0; x < nx; x++ {
				dz, dy, dx := float64(z)-cz, float64(y)-cy, float64(x)-cx
				g := a * math.Exp(-dz*dz/(2*sz*sz)-dy*dy/(2*sy*sy)-dx*dx/(2*sx*sx))
				if cut[0] > 0 && (math.Abs(dz) > float64(cut[0]) || math.Abs(dy) > float64(cut[1]) || math.Abs(dx) > float64(cut[2])) {
					g = 0
				}
				v[(z*ny+y)*nx+x] = float32(g + bg)
			}
		}
	}
	return v
}

func centroid(k *Kernel) (z, y, x float64) {
	var s float64
	for i, v := range k.Data {
		w := float64(v)
		x += w * float64(i%k.NX)
		y += w * float64(i/k.NX%k.NY)
		z += w * float64(i/(k.NX*k.NY))
		s += w
	}
	return z/s - float64(k.NZ/2), y/s - float64(k.NY/2), x/s - float64(k.NX/2)
}

// An even-sized stack whose bead is off-centre (peak at z 7, y 5, x 9 of
// 16 x 12 x 20) with a background of 10 gives an odd kernel centred on the
// peak whose values are the bead's, normalised: the truth is the Gaussian
// itself, cut at 5, 3 and 4 voxels (z, y, x), so 11 x 7 x 9 (z, y, x) after
// the zero shells are trimmed.
func TestMeasuredCentresEvenStack(t *testing.T) {
	const cz, cy, cx = 7, 5, 9
	m := Measured{NZ: 16, NY: 12, NX: 20, Data: gaussVol(16, 12, 20, cz, cy, cx, 2, 1.2, 1.5, 1000, 10, [3]int{5, 3, 4}),
		VoxelXY: 100, VoxelZ: 300, DXY: 100, DZ: 300}
	k, info, err := FromMeasured(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Check(); err != nil {
		t.Fatal(err)
	}
	if k.NZ != 11 || k.NY != 7 || k.NX != 9 {
		t.Fatalf("kernel %dx%dx%d (z,y,x), want 11x7x9", k.NZ, k.NY, k.NX)
	}
	truth := gaussVol(11, 7, 9, 5, 3, 4, 2, 1.2, 1.5, 1, 0, [3]int{5, 3, 4})
	var s float64
	for _, v := range truth {
		s += float64(v)
	}
	worst := 0.0
	for i, v := range truth {
		worst = math.Max(worst, math.Abs(float64(k.Data[i])-float64(v)/s))
	}
	if worst > 1e-6 {
		t.Errorf("kernel differs from the normalised bead by %.2g", worst)
	}
	if info.Model != "measured" || info.SampleXY != 100 || info.SampleZ != 300 {
		t.Errorf("info %+v", info)
	}
	// FWHM of a Gaussian: 2 sqrt(2 ln 2) σ (x: σ 1.5 voxels of 100 nm;
	// z: σ 2 voxels of 300 nm), within the linear interpolation's error.
	if fx := 2 * math.Sqrt(2*math.Ln2) * 150; math.Abs(info.FWHMxy-fx) > 0.05*fx {
		t.Errorf("FWHM xy %.1f nm, want %.1f", info.FWHMxy, fx)
	}
	if fz := 2 * math.Sqrt(2*math.Ln2) * 600; math.Abs(info.FWHMz-fz) > 0.05*fz {
		t.Errorf("FWHM z %.1f nm, want %.1f", info.FWHMz, fz)
	}
}

// Centred on the centroid, a bead between voxels (z 6.3, y 5.6, x 8.4)
// ends up centred to a few hundredths of a voxel; on the maximum it stays
// off by the fraction.
func TestMeasuredCentroid(t *testing.T) {
	data := gaussVol(14, 12, 18, 6.3, 5.6, 8.4, 1.6, 1.2, 1.4, 5000, 20, [3]int{})
	m := Measured{NZ: 14, NY: 12, NX: 18, Data: data, VoxelXY: 100, VoxelZ: 250, DXY: 100, DZ: 250, Center: CenterCentroid}
	k, _, err := FromMeasured(m)
	if err != nil {
		t.Fatal(err)
	}
	z, y, x := centroid(k)
	t.Logf("centroid mode: kernel centroid off by (%.3f, %.3f, %.3f) voxels (z, y, x)", z, y, x)
	if math.Abs(z) > 0.03 || math.Abs(y) > 0.03 || math.Abs(x) > 0.03 {
		t.Errorf("centroid mode: kernel centroid off by (%.3f, %.3f, %.3f) voxels", z, y, x)
	}
	m.Center = CenterMaximum
	k, _, err = FromMeasured(m)
	if err != nil {
		t.Fatal(err)
	}
	z, y, x = centroid(k)
	t.Logf("maximum mode: kernel centroid off by (%.3f, %.3f, %.3f) voxels (z, y, x)", z, y, x)
	if math.Abs(z-0.3) > 0.05 || math.Abs(y+0.4) > 0.05 || math.Abs(x-0.4) > 0.05 {
		t.Errorf("maximum mode: kernel centroid off by (%.3f, %.3f, %.3f), want about (0.3, -0.4, 0.4)", z, y, x)
	}
}

// boxGauss is the integral of a unit Gaussian of σ over [a, b].
func boxGauss(a, b, s float64) float64 {
	return 0.5 * (math.Erf(b/(s*math.Sqrt2)) - math.Erf(a/(s*math.Sqrt2)))
}

// boxVol is a (z, y, x) volume of a centred unit Gaussian (σ in nm)
// integrated over each voxel (vz, vxy nm), as a camera pixel integrates.
func boxVol(nz, ny, nx int, vz, vxy, sz, sy, sx float64) []float32 {
	v := make([]float32, nz*ny*nx)
	for z := 0; z < nz; z++ {
		for y := 0; y < ny; y++ {
			for x := 0; x < nx; x++ {
				dz, dy, dx := float64(z-nz/2)*vz, float64(y-ny/2)*vxy, float64(x-nx/2)*vxy
				v[(z*ny+y)*nx+x] = float32(1e6 * boxGauss(dz-vz/2, dz+vz/2, sz) * boxGauss(dy-vxy/2, dy+vxy/2, sy) * boxGauss(dx-vxy/2, dx+vxy/2, sx))
			}
		}
	}
	return v
}

// Resampled onto a coarser and onto a finer grid, the kernel matches the
// continuous Gaussian integrated over each data voxel (erf: independent
// of the code's interpolation) within tol of the kernel's peak. The stack
// holds the Gaussian integrated over its own voxels (a camera's pixels);
// going 3x coarser is then exact (sums of whole voxels); going finer
// cannot restore what the coarser stack averaged away: each axis loses
// about 2.5 % of the peak here (the stack's own 80 nm averaging plus the
// linear interpolant's h²/8 of the curvature, h = 0.5 σ), 7.5 % over three
// axes, hence 8 %.
func TestMeasuredResamples(t *testing.T) {
	for _, c := range []struct {
		name             string
		sxy, sy, sz      float64 // σ along x, y, z, nm
		vxy, vz, dxy, dz float64
		tol              float64
	}{
		{"coarser (50, 100 nm -> 150, 300 nm)", 120, 160, 400, 50, 100, 150, 300, 1e-5},
		{"finer (80, 200 nm -> 50, 120 nm)", 160, 200, 400, 80, 200, 50, 120, 0.08},
	} {
		t.Run(c.name, func(t *testing.T) {
			nx, ny, nz := 2*int(math.Ceil(6*c.sxy/c.vxy))+2, 2*int(math.Ceil(6*c.sy/c.vxy))+1, 2*int(math.Ceil(6*c.sz/c.vz))+2
			m := Measured{NZ: nz, NY: ny, NX: nx, VoxelXY: c.vxy, VoxelZ: c.vz, DXY: c.dxy, DZ: c.dz,
				Data: boxVol(nz, ny, nx, c.vz, c.vxy, c.sz, c.sy, c.sxy)}
			k, _, err := FromMeasured(m)
			if err != nil {
				t.Fatal(err)
			}
			if err := k.Check(); err != nil {
				t.Fatal(err)
			}
			truth := make([]float64, len(k.Data))
			var s, peak float64
			for z := 0; z < k.NZ; z++ {
				for y := 0; y < k.NY; y++ {
					for x := 0; x < k.NX; x++ {
						dz, dy, dx := float64(z-k.NZ/2)*c.dz, float64(y-k.NY/2)*c.dxy, float64(x-k.NX/2)*c.dxy
						v := boxGauss(dz-c.dz/2, dz+c.dz/2, c.sz) * boxGauss(dy-c.dxy/2, dy+c.dxy/2, c.sy) * boxGauss(dx-c.dxy/2, dx+c.dxy/2, c.sxy)
						truth[(z*k.NY+y)*k.NX+x] = v
						s += v
					}
				}
			}
			worst := 0.0
			for i := range truth {
				truth[i] /= s
				peak = math.Max(peak, truth[i])
				worst = math.Max(worst, math.Abs(float64(k.Data[i])-truth[i]))
			}
			t.Logf("kernel %dx%dx%d (z,y,x); worst error %.2g of the peak", k.NZ, k.NY, k.NX, worst/peak)
			if worst > c.tol*peak {
				t.Errorf("worst error %.4f of the peak, want <= %g", worst/peak, c.tol)
			}
			// x and y keep their own widths (no axis swap): σy > σx.
			if vx, vy := k.At(k.NZ/2, k.NY/2, k.NX/2+1), k.At(k.NZ/2, k.NY/2+1, k.NX/2); !(vy > vx) {
				t.Errorf("neighbour along y %g <= along x %g: axes swapped", vy, vx)
			}
		})
	}
}

func TestMeasuredRefused(t *testing.T) {
	good := func() Measured {
		return Measured{NZ: 5, NY: 9, NX: 9, Data: gaussVol(5, 9, 9, 2, 4, 4, 1, 1, 1, 100, 5, [3]int{}), VoxelXY: 100, VoxelZ: 200, DXY: 100, DZ: 200}
	}
	for _, c := range []struct {
		name string
		mod  func(*Measured)
		want string
	}{
		{"NaN", func(m *Measured) { m.Data[7] = float32(math.NaN()) }, "finite"},
		{"Inf", func(m *Measured) { m.Data[0] = float32(math.Inf(1)) }, "finite"},
		{"flat", func(m *Measured) {
			for i := range m.Data {
				m.Data[i] = 3
			}
		}, "no signal above the background"},
		{"too narrow", func(m *Measured) { m.NX, m.NY, m.NZ, m.Data = 2, 9, 5, make([]float32, 90) }, "per lateral side"},
		{"too large", func(m *Measured) { m.NX, m.NY, m.NZ, m.Data = 600, 9, 5, make([]float32, 600*9*5) }, "per lateral side"},
		{"voxel size", func(m *Measured) { m.VoxelZ = -1 }, "voxel size z"},
		{"kernel too large", func(m *Measured) { m.DXY = 0.1 }, "on the data's grid"},
		{"centre", func(m *Measured) { m.Center = "middle" }, "centre"},
	} {
		m := good()
		c.mod(&m)
		_, _, err := FromMeasured(m)
		if !errors.Is(err, ErrMeasured) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want ErrMeasured naming %q", c.name, err, c.want)
		}
	}
	if _, _, err := FromMeasured(good()); err != nil {
		t.Errorf("good stack: %v", err)
	}
}
