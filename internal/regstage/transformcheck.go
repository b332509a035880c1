package regstage

import (
	"fmt"
	"math"
	"path/filepath"

	"github.com/kintsugi-hpc/kintsugi-go/internal/register"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// Physical bounds on a transform read from a file (kintsugi-register apply),
// so that a hand-edited or hostile JSON cannot allocate without bound, panic
// or give a garbage image with exit 0. Registration between cycles of one
// microscope finds rotations of a few degrees, scales within a few percent
// of 1 and shifts of a fraction of the frame; the bounds are far wider.
const (
	maxFrameSide     = 1 << 20 // px, each side of the frame
	maxTransformJSON = 1 << 20 // bytes of the JSON file
	minScale         = 0.25    // rigid.scale, dimensionless (0 is read as 1)
	maxScale         = 4.0
)

// check validates every number of t against the physical bounds, naming
// the JSON key of the first that fails. It runs before anything is
// allocated from the header.
func (t *Transform) check() error {
	bad := func(key string, v any, why string) error {
		return fmt.Errorf("key %s = %v: %s", key, v, why)
	}
	if t.Version != 1 {
		return bad("version", t.Version, "want 1: not a registration transform of this version")
	}
	if t.Height < 1 || t.Height > maxFrameSide {
		return bad("image_height", t.Height, fmt.Sprintf("want 1..%d px", maxFrameSide))
	}
	if t.Width < 1 || t.Width > maxFrameSide {
		return bad("image_width", t.Width, fmt.Sprintf("want 1..%d px", maxFrameSide))
	}
	h, w := float64(t.Height), float64(t.Width)
	if lim := tiffio.DecodeLimit(); int64(t.Height)*int64(t.Width)*2 > lim {
		return bad("image_height x image_width", fmt.Sprintf("%dx%d", t.Height, t.Width), fmt.Sprintf("a 16-bit frame of that size exceeds this process's memory limit of %d bytes", lim))
	}
	side := max(h, w)
	r := &t.Rigid
	finite := func(key string, v, lo, hi float64, unit string) error {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < lo || v > hi {
			return bad(key, v, fmt.Sprintf("want a finite value in [%g, %g] %s", lo, hi, unit))
		}
		return nil
	}
	checks := []error{
		finite("rigid.theta_rad", r.ThetaRad, -2*math.Pi, 2*math.Pi, "rad"),
		finite("rigid.theta_deg", r.ThetaDeg, -360, 360, "degrees"),
		finite("rigid.ty_px", r.TY, -side, side, "px (at most the frame's longer side)"),
		finite("rigid.tx_px", r.TX, -side, side, "px (at most the frame's longer side)"),
		finite("rigid.cy_px", r.CY, -h, 2*h, "px (about the frame)"),
		finite("rigid.cx_px", r.CX, -w, 2*w, "px (about the frame)"),
	}
	for _, err := range checks {
		if err != nil {
			return err
		}
	}
	if d := r.ThetaRad * 180 / math.Pi; math.Abs(d-r.ThetaDeg) > 1e-6*(1+math.Abs(d)) {
		return bad("rigid.theta_deg", r.ThetaDeg, fmt.Sprintf("disagrees with rigid.theta_rad %v (%v degrees)", r.ThetaRad, d))
	}
	if r.Scale != 0 { // 0 is read as 1 (register.Rigid)
		if err := finite("rigid.scale", r.Scale, minScale, maxScale, "(dimensionless; > 0)"); err != nil {
			return err
		}
	}
	rg := register.Rigid{Theta: r.ThetaRad, Scale: r.Scale, TY: r.TY, TX: r.TX, CY: r.CY, CX: r.CX}
	a, b := rg.Matrix()
	want := [2][3]float64{{a[0], a[1], b[0]}, {a[2], a[3], b[1]}}
	for i := range 2 {
		for j := range 3 {
			v, u := r.Matrix[i][j], want[i][j]
			if math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v-u) > 1e-6*(1+math.Abs(u)) {
				return bad(fmt.Sprintf("rigid.matrix_yx[%d][%d]", i, j), v, fmt.Sprintf("disagrees with the rigid parameters (%v)", u))
			}
		}
	}
	if f := t.Field; f != nil {
		if err := finite("field.step_px", f.Step, 1, 2*side, "px"); err != nil {
			return err
		}
		if err := finite("field.y0_px", f.Y0, -h, h, "px"); err != nil {
			return err
		}
		if err := finite("field.x0_px", f.X0, -w, w, "px"); err != nil {
			return err
		}
		// Nodes every step px need not extend past the frame by more than a node.
		if maxN := int(math.Ceil(h/f.Step)) + 2; f.NY < 1 || f.NY > maxN {
			return bad("field.ny", f.NY, fmt.Sprintf("want 1..%d nodes (image_height / step_px + 2)", maxN))
		}
		if maxN := int(math.Ceil(w/f.Step)) + 2; f.NX < 1 || f.NX > maxN {
			return bad("field.nx", f.NX, fmt.Sprintf("want 1..%d nodes (image_width / step_px + 2)", maxN))
		}
		for key, name := range map[string]string{"field.dy_file": f.DYFile, "field.dx_file": f.DXFile} {
			if name == "" || filepath.Base(name) != name || name == "." || name == ".." {
				return bad(key, fmt.Sprintf("%q", name), "want a file name beside the JSON (no directory part)")
			}
		}
	}
	return nil
}

// checkFieldValues refuses displacements that are not finite or exceed the
// frame's longer side (px), naming the file and the node.
func checkFieldValues(file string, v []float32, nx int, side float64) error {
	for k, d := range v {
		if x := float64(d); math.IsNaN(x) || math.IsInf(x, 0) || math.Abs(x) > side {
			return fmt.Errorf("%s: node (%d, %d) holds %v px: want a finite displacement within the frame (|d| <= %g px)", file, k/nx, k%nx, d, side)
		}
	}
	return nil
}
