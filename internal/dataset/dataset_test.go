package dataset

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// makeCycle writes a rows x cols grid of w x h uint16 tiles, nz planes,
// channels 1..nch, into project/data/raw/<dirName>. Pixel values encode
// (tile, z, ch) so reads can be checked.
func makeCycle(t *testing.T, project, dirName string, rows, cols, nz, nch, w, h int) string {
	t.Helper()
	dir := filepath.Join(project, "data", "raw", dirName)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for tile := 1; tile <= rows*cols; tile++ {
		for z := 1; z <= nz; z++ {
			for ch := 1; ch <= nch; ch++ {
				img := raster.NewGray16(w, h)
				for i := range img.Pix {
					img.Pix[i] = uint16(tile*100 + z*10 + ch)
				}
				if err := tiffio.WriteGray16(filepath.Join(dir, fmt.Sprintf("1_%05d_Z%03d_CH%d.tif", tile, z, ch)), img); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return dir
}

var opts = Options{Rows: 2, Cols: 3, Channels: []int{1, 2}, Workers: 2}

func TestDiscoverAndRead(t *testing.T) {
	p := t.TempDir()
	makeCycle(t, p, "cyc002_reg001_20250101", 2, 3, 3, 2, 8, 6)
	c, err := Discover(context.Background(), p, 2, opts)
	if err != nil {
		t.Fatal(err)
	}
	if c.W != 8 || c.H != 6 || len(c.Z) != 3 || c.Tiles() != 6 || c.Region != 1 {
		t.Fatalf("cycle %+v", c)
	}
	tiles, err := c.ReadPlane(context.Background(), 2, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	for i, tl := range tiles {
		if want := uint16((i+1)*100 + 2*10 + 2); tl.Pix[0] != want {
			t.Errorf("tile %d value %d want %d", i+1, tl.Pix[0], want)
		}
	}
}

func TestResolveCycleDirVariants(t *testing.T) {
	for _, name := range []string{"cyc003_x", "cyc03_x", "Cyc03_x", "cyc003", "cyc03", "Cyc03"} {
		p := t.TempDir()
		os.MkdirAll(filepath.Join(p, "data", "raw", name), 0o755)
		d, err := ResolveCycleDir(p, 3)
		if err != nil || filepath.Base(d) != name {
			t.Errorf("%s: got %q %v", name, d, err)
		}
	}
	// Globbed names win over exact ones, as in the original.
	p := t.TempDir()
	os.MkdirAll(filepath.Join(p, "data", "raw", "cyc03"), 0o755)
	os.MkdirAll(filepath.Join(p, "data", "raw", "cyc003_reg1"), 0o755)
	if d, _ := ResolveCycleDir(p, 3); filepath.Base(d) != "cyc003_reg1" {
		t.Errorf("precedence: %s", d)
	}
}

func TestSnakeOrder(t *testing.T) {
	// 3 x 3 grid: 0 1 2 / 5 4 3 / 6 7 8
	want := [][2]int{{0, 0}, {0, 1}, {0, 2}, {1, 2}, {1, 1}, {1, 0}, {2, 0}, {2, 1}, {2, 2}}
	for k, w := range want {
		if r, c := Grid(k, 3); r != w[0] || c != w[1] {
			t.Errorf("tile %d: (%d,%d) want %v", k, r, c, w)
		}
	}
}

// TestBadInput: every broken dataset is refused with ErrInput and a message
// naming the file or directory.
// renameZ renames every file of z-plane from to z-plane to.
func renameZ(t *testing.T, dir string, from, to int) {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, fmt.Sprintf("*_Z%03d_*.tif", from)))
	for _, f := range m {
		if err := os.Rename(f, strings.Replace(f, fmt.Sprintf("_Z%03d_", from), fmt.Sprintf("_Z%03d_", to), 1)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestBadInput(t *testing.T) {
	cases := []struct {
		name   string
		break_ func(dir string)
		want   string
	}{
		{"missing cycle dir", func(dir string) { os.RemoveAll(dir) }, "no raw directory"},
		{"missing tile", func(dir string) { os.Remove(filepath.Join(dir, "1_00004_Z002_CH2.tif")) }, "1_00004_Z002_CH2.tif"},
		{"extra tile", func(dir string) {
			copyFile(t, filepath.Join(dir, "1_00001_Z001_CH1.tif"), filepath.Join(dir, "1_00007_Z001_CH1.tif"))
		}, "1_00007_Z001_CH1.tif"},
		{"duplicated tile", func(dir string) {
			copyFile(t, filepath.Join(dir, "1_00002_Z001_CH1.tif"), filepath.Join(dir, "1_00002_Z01_CH1.tif"))
		}, "duplicated tile 2"},
		{"different size", func(dir string) {
			tiffio.WriteGray16(filepath.Join(dir, "1_00005_Z003_CH1.tif"), raster.NewGray16(9, 6))
		}, "1_00005_Z003_CH1.tif: 9x6"},
		{"not 16-bit", func(dir string) {
			tiffio.WriteFloat32(filepath.Join(dir, "1_00003_Z001_CH2.tif"), raster.NewFloat32(8, 6))
		}, "1_00003_Z001_CH2.tif: 32-bit"},
		{"not a tiff", func(dir string) {
			os.WriteFile(filepath.Join(dir, "1_00006_Z002_CH1.tif"), []byte("hello, not a tiff at all"), 0o644)
		}, "1_00006_Z002_CH1.tif"},
		{"empty z set", func(dir string) {
			m, _ := filepath.Glob(filepath.Join(dir, "*.tif"))
			for _, f := range m {
				os.Remove(f)
			}
		}, "no z-planes"},
		{"z-plane gap (Z001, Z003, Z004 for 3 planes)", func(dir string) {
			renameZ(t, dir, 2, 4)
		}, "1_00001_Z004_CH1.tif"},
		{"z-plane 0", func(dir string) {
			renameZ(t, dir, 3, 0)
		}, "Z001..Z003"},
		{"extra z-plane for one tile", func(dir string) {
			copyFile(t, filepath.Join(dir, "1_00003_Z001_CH2.tif"), filepath.Join(dir, "1_00003_Z004_CH2.tif"))
		}, "11 missing tile file(s)"}, // without n_zplanes the other tiles lack Z004
		{"multi-page raw tile", func(dir string) {
			tiffio.WriteGray16Pages(filepath.Join(dir, "1_00004_Z002_CH1.tif"), []*raster.Gray16{raster.NewGray16(8, 6), raster.NewGray16(8, 6)})
		}, "1_00004_Z002_CH1.tif: 2 pages"},
		{"several regions", func(dir string) {
			copyFile(t, filepath.Join(dir, "1_00001_Z001_CH1.tif"), filepath.Join(dir, "2_00001_Z001_CH1.tif"))
		}, "duplicated tile 1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := t.TempDir()
			dir := makeCycle(t, p, "cyc01", 2, 3, 3, 2, 8, 6)
			tc.break_(dir)
			_, err := Discover(context.Background(), p, 1, opts)
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q: want ErrInput mentioning %q", err, tc.want)
			}
		})
	}
	t.Run("z-planes with gaps matching n_zplanes in number", func(t *testing.T) {
		p := t.TempDir()
		dir := makeCycle(t, p, "cyc01", 2, 3, 3, 2, 8, 6)
		renameZ(t, dir, 3, 5)
		renameZ(t, dir, 2, 3)
		o := opts
		o.NZPlanes = 3 // Z001, Z003, Z005
		if _, err := Discover(context.Background(), p, 1, o); err == nil || !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), "1_00001_Z005_CH1.tif") || !strings.Contains(err.Error(), "n_zplanes is 3") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("z count differs from config", func(t *testing.T) {
		p := t.TempDir()
		makeCycle(t, p, "cyc01", 2, 3, 3, 2, 8, 6)
		o := opts
		o.NZPlanes = 5
		if _, err := Discover(context.Background(), p, 1, o); err == nil || !strings.Contains(err.Error(), "n_zplanes is 5") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("truncated pixel data", func(t *testing.T) {
		p := t.TempDir()
		dir := makeCycle(t, p, "cyc01", 2, 3, 3, 2, 64, 48)
		f := filepath.Join(dir, "1_00002_Z003_CH1.tif")
		data, _ := os.ReadFile(f)
		os.WriteFile(f, data[:len(data)/2], 0o644)
		c, err := Discover(context.Background(), p, 1, opts)
		if err == nil {
			_, err = c.ReadPlane(context.Background(), 3, 1, 2)
		}
		if err == nil || !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), "1_00002_Z003_CH1.tif") {
			t.Errorf("err = %v", err)
		}
	})
}

func copyFile(t *testing.T, from, to string) {
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
