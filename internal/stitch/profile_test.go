package stitch

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// TestLoadProfileRefusesBadNumbers: a profile with a value BaSiC cannot
// produce, or of another size than the tiles, is an error naming the file.
func TestLoadProfileRefusesBadNumbers(t *testing.T) {
	dir := t.TempDir()
	const w, h = 8, 6
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	cases := []struct {
		name       string
		flat, dark float32 // value of pixel (2, 3); 1 and 100 otherwise
		pw, ph     int
		file       string
	}{
		{"good", 1, 100, w, h, ""},
		{"flatfield NaN", nan, 100, w, h, "_flatfield.tif"},
		{"flatfield +Inf", inf, 100, w, h, "_flatfield.tif"},
		{"flatfield 0", 0, 100, w, h, "_flatfield.tif"},
		{"flatfield negative", -1, 100, w, h, "_flatfield.tif"},
		{"flatfield 1e30", 1e30, 100, w, h, "_flatfield.tif"},
		{"darkfield NaN", 1, nan, w, h, "_darkfield.tif"},
		{"darkfield 1e30", 1, 1e30, w, h, "_darkfield.tif"},
		{"darkfield -Inf", 1, float32(math.Inf(-1)), w, h, "_darkfield.tif"},
		{"another size", 1, 100, w + 1, h, "_flatfield.tif"},
	}
	for i, tc := range cases {
		pfx := filepath.Join(dir, strings.Repeat("p", i+1))
		flat, dark := raster.NewFloat32(tc.pw, tc.ph), raster.NewFloat32(tc.pw, tc.ph)
		for k := range flat.Pix {
			flat.Pix[k], dark.Pix[k] = 1, 100
		}
		flat.Pix[2*tc.pw+3], dark.Pix[2*tc.pw+3] = tc.flat, tc.dark
		if err := tiffio.WriteFloat32(pfx+"_flatfield.tif", flat); err != nil {
			t.Fatal(err)
		}
		if err := tiffio.WriteFloat32(pfx+"_darkfield.tif", dark); err != nil {
			t.Fatal(err)
		}
		prof, err := LoadProfile(pfx, w, h)
		if tc.file == "" {
			if err != nil || prof.W != w || math.Abs(float64(prof.Darkfield[0])-100.0/65535) > 1e-9 {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), pfx+tc.file) {
			t.Errorf("%s: %v, want an error naming %s", tc.name, err, pfx+tc.file)
		}
	}
}
