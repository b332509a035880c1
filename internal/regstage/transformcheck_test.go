package regstage

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/register"
	"github.com/kintsugi-hpc/kintsugi-go/internal/staging"
)

// TestHostileTransforms: every number of a transform JSON is checked
// against physical bounds before anything is allocated; the error wraps
// ErrInput (exit 2) and names the key. No case may panic.
func TestHostileTransforms(t *testing.T) {
	dir := t.TempDir()
	rg := register.Identity(100, 120)
	rg.Theta, rg.TY, rg.TX = 0.01, 3, -2
	fl := register.NewField(5, 6, 0, 0, 25)
	if err := WriteTransform(dir, "c", &register.Result{Mapping: register.Mapping{Rigid: rg, Field: fl}}, 100, 120); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "c_transform.json")
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := ReadTransform(path); err != nil {
		t.Fatalf("the written transform: %v", err)
	}
	edit := func(fn func(m map[string]any)) []byte {
		var m map[string]any
		json.Unmarshal(good, &m)
		fn(m)
		b, _ := json.Marshal(m)
		return b
	}
	rigid := func(key string, v any) func(map[string]any) {
		return func(m map[string]any) { m["rigid"].(map[string]any)[key] = v }
	}
	field := func(key string, v any) func(map[string]any) {
		return func(m map[string]any) { m["field"].(map[string]any)[key] = v }
	}
	cases := []struct {
		name string
		fn   func(map[string]any)
		key  string
	}{
		{"field of 1e8 x 1e8 nodes", func(m map[string]any) { field("ny", 1e8)(m); field("nx", 1e8)(m) }, "field.ny"},
		{"frame of 1e8 x 1e8", func(m map[string]any) { m["image_height"], m["image_width"] = 1e8, 1e8 }, "image_height"},
		{"frame beyond the memory limit", func(m map[string]any) { m["image_height"], m["image_width"] = 1e6, 1e6 }, "image_height x image_width"},
		{"theta_deg 1e308", rigid("theta_deg", 1e308), "rigid.theta_deg"},
		{"theta_rad 1e308", rigid("theta_rad", 1e308), "rigid.theta_rad"},
		{"theta_deg disagreeing", rigid("theta_deg", 45.0), "rigid.theta_deg"},
		{"ty_px 1e300", rigid("ty_px", 1e300), "rigid.ty_px"},
		{"tx_px beyond the frame", rigid("tx_px", 500.0), "rigid.tx_px"},
		{"scale -1", rigid("scale", -1.0), "rigid.scale"},
		{"scale 1e-9", rigid("scale", 1e-9), "rigid.scale"},
		{"centre far outside", rigid("cy_px", 1e9), "rigid.cy_px"},
		{"matrix disagreeing", rigid("matrix_yx", [][]float64{{1, 0, 0}, {0, 1, 0}}), "rigid.matrix_yx"},
		{"step_px 1e-300", field("step_px", 1e-300), "field.step_px"},
		{"step_px 0", field("step_px", 0.0), "field.step_px"},
		{"y0 1e300", field("y0_px", 1e300), "field.y0_px"},
		{"field file outside the directory", field("dy_file", "../../etc/passwd"), "field.dy_file"},
		{"version 2", func(m map[string]any) { m["version"] = 2 }, "version"},
	}
	for _, tc := range cases {
		p := filepath.Join(dir, "bad_transform.json")
		if err := os.WriteFile(p, edit(tc.fn), 0o644); err != nil {
			t.Fatal(err)
		}
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s: panic %v", tc.name, r)
				}
			}()
			_, _, _, err := ReadTransform(p)
			if err == nil || !errors.Is(err, staging.ErrInput) || !strings.Contains(err.Error(), "key "+tc.key) || !strings.Contains(err.Error(), p) {
				t.Errorf("%s: %v, want an input error naming %s and key %s", tc.name, err, p, tc.key)
			}
		}()
	}
	// Displacements that are not finite or exceed the frame.
	for _, v := range []float32{float32(math.NaN()), float32(math.Inf(1)), 1e6} {
		bad := fl.Clone()
		bad.DX[7] = v
		if err := WriteTransform(dir, "d", &register.Result{Mapping: register.Mapping{Rigid: rg, Field: bad}}, 100, 120); err != nil {
			t.Fatal(err)
		}
		_, _, _, err := ReadTransform(filepath.Join(dir, "d_transform.json"))
		if err == nil || !errors.Is(err, staging.ErrInput) || !strings.Contains(err.Error(), "d_field_dx.tif") || !strings.Contains(err.Error(), "node (1, 1)") {
			t.Errorf("displacement %v: %v, want an input error naming the file and node", v, err)
		}
	}
	// A JSON that is not a regular file, or too large.
	if _, _, _, err := ReadTransform("/dev/zero"); err == nil || !errors.Is(err, staging.ErrInput) {
		t.Errorf("/dev/zero: %v", err)
	}
}
