package register

import (
	"math"
	"sort"
)

// gaussKernel returns a normalised 1-D Gaussian of sigma (grid units),
// truncated at 3 sigma (at least radius 1).
func gaussKernel(sigma float64) []float64 {
	r := max(1, int(math.Ceil(3*sigma)))
	k := make([]float64, 2*r+1)
	var s float64
	for i := range k {
		d := float64(i - r)
		k[i] = math.Exp(-d * d / (2 * sigma * sigma))
		s += k[i]
	}
	for i := range k {
		k[i] /= s
	}
	return k
}

// convSep convolves an ny x nx grid with kernel k along y and x, treating
// nodes beyond the grid as absent (zero contribution).
func convSep(src []float64, ny, nx int, k []float64) []float64 {
	return conv1(conv1(src, ny, nx, k, false), ny, nx, k, true)
}

// conv1 is one pass of convSep: the convolution of the ny x nx grid src
// (row-major) with k along x (alongY false) or along y.
func conv1(src []float64, ny, nx int, k []float64, alongY bool) []float64 {
	r := len(k) / 2
	out := make([]float64, ny*nx)
	for i := 0; i < ny; i++ {
		for j := 0; j < nx; j++ {
			c, n, step := j, nx, 1 // the node's index along the axis, its length, the neighbours' distance in src
			if alongY {
				c, n, step = i, ny, nx
			}
			var s float64
			for t := -r; t <= r; t++ {
				if cc := c + t; cc >= 0 && cc < n {
					s += k[t+r] * src[i*nx+j+t*step]
				}
			}
			out[i*nx+j] = s
		}
	}
	return out
}

// MinSupport is the least Gaussian-weighted fraction of valid neighbours
// (relative to a fully valid neighbourhood) at which a smoothed increment
// is taken at full strength; with less support it shrinks towards 0
// (regions without measurable texture keep the current mapping).
const MinSupport = 0.25

// smoothFill returns the normalised Gaussian convolution of the values v
// at the nodes where valid is true: sum(G·w·v) / max(sum(G·w), MinSupport·sum(G)).
func smoothFill(v []float64, valid []bool, ny, nx int, sigma float64) []float64 {
	k := gaussKernel(sigma)
	wv := make([]float64, ny*nx)
	w := make([]float64, ny*nx)
	one := make([]float64, ny*nx)
	for i := range v {
		one[i] = 1
		if valid[i] {
			w[i] = 1
			wv[i] = v[i]
		}
	}
	num := convSep(wv, ny, nx, k)
	den := convSep(w, ny, nx, k)
	full := convSep(one, ny, nx, k)
	out := make([]float64, ny*nx)
	for i := range out {
		out[i] = num[i] / math.Max(den[i], MinSupport*full[i])
	}
	return out
}

// smoothField smooths both components of f in place with a Gaussian of
// sigma grid units, renormalised at the grid's edges.
func smoothField(f *Field, sigma float64) {
	valid := make([]bool, len(f.DY))
	for i := range valid {
		valid[i] = true
	}
	for _, c := range [][]float32{f.DY, f.DX} {
		v := make([]float64, len(c))
		for i, x := range c {
			v[i] = float64(x)
		}
		s := smoothFill(v, valid, f.NY, f.NX, sigma)
		for i := range c {
			c[i] = float32(s[i])
		}
	}
}

// JacobianMin returns the smallest determinant of I + ∇D of the bilinear
// field f, evaluated at the four corners of every grid cell from the
// cell's edge differences (for a bilinear field the extremes lie there). A
// field of one row or column has no cells in that direction; its
// derivative there is 0. A nil field gives 1.
func JacobianMin(f *Field) float64 {
	if f == nil {
		return 1
	}
	ny, nx, s := f.NY, f.NX, f.Step
	at := func(c []float32, i, j int) float64 { return float64(c[i*nx+j]) }
	jmin := math.Inf(1)
	for i := 0; i < max(1, ny-1); i++ {
		for j := 0; j < max(1, nx-1); j++ {
			for _, ci := range [2]int{0, 1} {
				for _, cj := range [2]int{0, 1} {
					y, x := min(i+ci, ny-1), min(j+cj, nx-1)
					var dyy, dxy, dyx, dxx float64 // d(Dy)/dy, d(Dx)/dy, d(Dy)/dx, d(Dx)/dx
					if ny > 1 {
						dyy = (at(f.DY, i+1, x) - at(f.DY, i, x)) / s
						dxy = (at(f.DX, i+1, x) - at(f.DX, i, x)) / s
					}
					if nx > 1 {
						dyx = (at(f.DY, y, j+1) - at(f.DY, y, j)) / s
						dxx = (at(f.DX, y, j+1) - at(f.DX, y, j)) / s
					}
					d := (1+dyy)*(1+dxx) - dyx*dxy
					jmin = math.Min(jmin, d)
				}
			}
		}
	}
	return jmin
}

// enforceJacobian makes JacobianMin(f) >= minJ: up to 10 extra smoothing
// passes (sigma 1 node), then halving the field. It returns the number of
// passes of each kind.
func enforceJacobian(f *Field, minJ float64) (smooths, halvings int) {
	for JacobianMin(f) < minJ && smooths < 10 {
		smoothField(f, 1)
		smooths++
	}
	for JacobianMin(f) < minJ && halvings < 30 {
		for i := range f.DY {
			f.DY[i] *= 0.5
			f.DX[i] *= 0.5
		}
		halvings++
	}
	return smooths, halvings
}

// vectorMedianReject clears valid[i] for nodes whose shift differs by more
// than tol from the component-wise median of the valid nodes in their 3x3
// neighbourhood (itself included), when at least 3 are valid there.
func vectorMedianReject(dy, dx []float64, valid []bool, ny, nx int, tol float64) {
	bad := make([]bool, len(valid))
	var ay, ax []float64
	for i := 0; i < ny; i++ {
		for j := 0; j < nx; j++ {
			k := i*nx + j
			if !valid[k] {
				continue
			}
			ay, ax = ay[:0], ax[:0]
			for a := max(0, i-1); a <= min(ny-1, i+1); a++ {
				for b := max(0, j-1); b <= min(nx-1, j+1); b++ {
					if valid[a*nx+b] {
						ay = append(ay, dy[a*nx+b])
						ax = append(ax, dx[a*nx+b])
					}
				}
			}
			if len(ay) < 3 {
				continue
			}
			my, mx := median(ay), median(ax)
			if math.Hypot(dy[k]-my, dx[k]-mx) > tol {
				bad[k] = true
			}
		}
	}
	for k, b := range bad {
		if b {
			valid[k] = false
		}
	}
}

// median returns the median of v (reordering v).
func median(v []float64) float64 {
	sort.Float64s(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// percentile returns the q-quantile (0..1) of v by nearest rank, on a copy.
func percentile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	c := append([]float64(nil), v...)
	sort.Float64s(c)
	i := int(math.Round(q * float64(len(c)-1)))
	return c[max(0, min(len(c)-1, i))]
}
