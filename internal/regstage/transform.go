package regstage

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/register"
	"github.com/kintsugi-hpc/kintsugi-go/internal/safefile"
	"github.com/kintsugi-hpc/kintsugi-go/internal/staging"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// Transform is the JSON form of a registration (<name>_transform.json),
// enough to re-apply it (kintsugi-register apply). Coordinates are
// full-resolution px (y, x) of the padded reference frame.
type Transform struct {
	Version   int    `json:"version"`
	Direction string `json:"direction"`
	Height    int    `json:"image_height"`
	Width     int    `json:"image_width"`
	Rigid     struct {
		ThetaDeg float64       `json:"theta_deg"`
		ThetaRad float64       `json:"theta_rad"`
		Scale    float64       `json:"scale"`
		TY       float64       `json:"ty_px"`
		TX       float64       `json:"tx_px"`
		CY       float64       `json:"cy_px"`
		CX       float64       `json:"cx_px"`
		Matrix   [2][3]float64 `json:"matrix_yx"` // q = M · (y, x, 1)
	} `json:"rigid"`
	Field *TransformField `json:"field"`
}

// TransformField is the non-rigid field of a Transform: ny x nx nodes at
// (y0 + i*step, x0 + j*step) px, the displacements in two float32 TIFFs
// (px) named relative to the JSON file.
type TransformField struct {
	NY     int     `json:"ny"`
	NX     int     `json:"nx"`
	Y0     float64 `json:"y0_px"`
	X0     float64 `json:"x0_px"`
	Step   float64 `json:"step_px"`
	DYFile string  `json:"dy_file"`
	DXFile string  `json:"dx_file"`
}

const direction = "reference pixel p -> moving pixel q = rigid(p + field(p)), rigid(p) = c + scale*R(theta)*(p - c) + t with R(theta)(y, x) = (cos*y + sin*x, -sin*y + cos*x); the field is bilinear between nodes (y0 + i*step, x0 + j*step) and constant beyond; registered(p) = moving(q), bilinear, 0 outside"

// WriteTransform writes dir/<name>_transform.json and, with a field,
// dir/<name>_field_dy.tif and _field_dx.tif (float32, ny x nx, px); an
// empty name writes transform.json, field_dy.tif and field_dx.tif.
func WriteTransform(dir, name string, r *register.Result, h, w int) error {
	pre := name + "_"
	if name == "" {
		pre = ""
	}
	var t Transform
	t.Version, t.Direction, t.Height, t.Width = 1, direction, h, w
	rg := r.Mapping.Rigid
	t.Rigid.ThetaRad, t.Rigid.ThetaDeg = rg.Theta, rg.Theta*180/math.Pi
	t.Rigid.Scale, t.Rigid.TY, t.Rigid.TX, t.Rigid.CY, t.Rigid.CX = rg.Scale, rg.TY, rg.TX, rg.CY, rg.CX
	a, b := rg.Matrix()
	t.Rigid.Matrix = [2][3]float64{{a[0], a[1], b[0]}, {a[2], a[3], b[1]}}
	if f := r.Mapping.Field; f != nil {
		t.Field = &TransformField{f.NY, f.NX, f.Y0, f.X0, f.Step, pre + "field_dy.tif", pre + "field_dx.tif"}
		if err := os.MkdirAll(dir, 0o777); err != nil {
			return err
		}
		for _, c := range []struct {
			file string
			v    []float32
		}{{t.Field.DYFile, f.DY}, {t.Field.DXFile, f.DX}} {
			if err := tiffio.WriteFloat32(filepath.Join(dir, c.file), &raster.Float32{W: f.NX, H: f.NY, Pix: c.v}); err != nil {
				return err
			}
		}
	}
	return writeJSON(filepath.Join(dir, pre+"transform.json"), t)
}

// ReadTransform reads a transform written by WriteTransform (field files
// relative to the JSON's directory) and returns its mapping and the
// reference frame's size.
func ReadTransform(path string) (*register.Mapping, int, int, error) {
	b, err := safefile.ReadFile(path, maxTransformJSON)
	if err != nil {
		return nil, 0, 0, staging.Inputf("transform %s: %w", path, err)
	}
	var t Transform
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, 0, 0, staging.Inputf("transform %s: %w", path, err)
	}
	if err := t.check(); err != nil {
		return nil, 0, 0, staging.Inputf("transform %s: %w", path, err)
	}
	m := &register.Mapping{Rigid: register.Rigid{Theta: t.Rigid.ThetaRad, Scale: t.Rigid.Scale, TY: t.Rigid.TY, TX: t.Rigid.TX, CY: t.Rigid.CY, CX: t.Rigid.CX}}
	if t.Field != nil {
		f := t.Field
		if f.NY < 1 || f.NX < 1 || !(f.Step > 0) {
			return nil, 0, 0, staging.Inputf("transform %s: field %dx%d step %g", path, f.NX, f.NY, f.Step)
		}
		fl := register.NewField(f.NY, f.NX, f.Y0, f.X0, f.Step)
		for _, c := range []struct {
			file string
			dst  []float32
		}{{f.DYFile, fl.DY}, {f.DXFile, fl.DX}} {
			p := filepath.Join(filepath.Dir(path), c.file)
			img, err := tiffio.ReadFloat32(p)
			if err != nil {
				return nil, 0, 0, staging.Inputf("transform %s: %w", path, err)
			}
			if img.W != f.NX || img.H != f.NY {
				return nil, 0, 0, staging.Inputf("transform %s: %s is %dx%d, want %dx%d", path, p, img.W, img.H, f.NX, f.NY)
			}
			if err := checkFieldValues(p, img.Pix, f.NX, float64(max(t.Height, t.Width))); err != nil {
				return nil, 0, 0, staging.Inputf("transform %s: %w", path, err)
			}
			copy(c.dst, img.Pix)
		}
		m.Field = fl
	}
	return m, t.Height, t.Width, nil
}

// Describe formats a mapping for logs.
func Describe(m *register.Mapping) string {
	s := fmt.Sprintf("rotation %.4f°, scale %.5f, translation (%.2f, %.2f) px", m.Rigid.Theta*180/math.Pi, m.Rigid.Scale, m.Rigid.TY, m.Rigid.TX)
	if m.Field != nil {
		s += fmt.Sprintf(", field %dx%d nodes every %.0f px", m.Field.NX, m.Field.NY, m.Field.Step)
	}
	return s
}
