package tiffio

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

func randGray16(rng *rand.Rand, w, h int) *raster.Gray16 {
	g := raster.NewGray16(w, h)
	for i := range g.Pix {
		g.Pix[i] = uint16(rng.Uint32())
	}
	return g
}

// randFloat32 fills a plane with values spanning the float32 range,
// including NaN, infinities, -0 and subnormals, so bit patterns matter.
func randFloat32(rng *rand.Rand, w, h int) *raster.Float32 {
	f := raster.NewFloat32(w, h)
	special := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)),
		float32(math.Copysign(0, -1)), math.SmallestNonzeroFloat32, math.MaxFloat32}
	for i := range f.Pix {
		switch rng.IntN(8) {
		case 0:
			f.Pix[i] = special[rng.IntN(len(special))]
		case 1:
			f.Pix[i] = math.Float32frombits(rng.Uint32())
		default:
			f.Pix[i] = rng.Float32()*2 - 0.5
		}
	}
	return f
}

// sameGray16 reports the first differing pixel.
func sameGray16(t *testing.T, what string, got, want *raster.Gray16) {
	t.Helper()
	samePixels(t, what, [2]int{got.W, got.H}, [2]int{want.W, want.H}, got.Pix, want.Pix, func(a, b uint16) bool { return a == b })
}

// sameFloat32 compares bit patterns (exact round trip, NaN payloads included).
func sameFloat32(t *testing.T, what string, got, want *raster.Float32) {
	t.Helper()
	samePixels(t, what, [2]int{got.W, got.H}, [2]int{want.W, want.H}, got.Pix, want.Pix, func(a, b float32) bool {
		return math.Float32bits(a) == math.Float32bits(b)
	})
}

// samePixels fails t unless got and want, planes of the sizes gotWH and
// wantWH (width, height; row-major pixels), have the same size and equal
// pixels by eq; the message gives the count and the first difference.
func samePixels[T any](t *testing.T, what string, gotWH, wantWH [2]int, got, want []T, eq func(a, b T) bool) {
	t.Helper()
	if gotWH != wantWH {
		t.Fatalf("%s: size %dx%d, want %dx%d", what, gotWH[0], gotWH[1], wantWH[0], wantWH[1])
	}
	bad := 0
	first := -1
	for i := range want {
		if !eq(got[i], want[i]) {
			if first < 0 {
				first = i
			}
			bad++
		}
	}
	if bad > 0 {
		w := wantWH[0]
		t.Fatalf("%s: %d of %d pixels differ; first at (y=%d, x=%d): got %v want %v",
			what, bad, len(want), first/w, first%w, got[first], want[first])
	}
}

// roundTrip writes want to path with write and returns what read reads
// back; an error of either is fatal.
func roundTrip[P any](t *testing.T, path string, want P, write func(string, P) error, read func(string) (P, error)) P {
	t.Helper()
	if err := write(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := read(path)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

var testSizes = [][2]int{{1, 1}, {1, 7}, {7, 1}, {3, 5}, {17, 13}, {255, 3}, {1001, 67}, {300, 900}, {4099, 129}}

func TestRoundTripGray16(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	dir := t.TempDir()
	for _, sz := range testSizes {
		want := randGray16(rng, sz[0], sz[1])
		path := filepath.Join(dir, "g.tif")
		sameGray16(t, path, roundTrip(t, path, want, WriteGray16, ReadGray16), want)
		gotF, err := ReadFloat32(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range want.Pix {
			if gotF.Pix[i] != float32(v) {
				t.Fatalf("%dx%d: ReadFloat32 of uint16 pixel %d = %g, want %d", sz[0], sz[1], i, gotF.Pix[i], v)
			}
		}
		info, err := ReadInfo(path)
		if err != nil {
			t.Fatal(err)
		}
		wantInfo := Info{Width: sz[0], Height: sz[1], BitsPerSample: 16, SampleFormat: 1, SamplesPerPixel: 1, Pages: 1}
		if info != wantInfo {
			t.Fatalf("info %+v, want %+v", info, wantInfo)
		}
	}
}

func TestRoundTripFloat32(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	dir := t.TempDir()
	for _, sz := range testSizes {
		want := randFloat32(rng, sz[0], sz[1])
		path := filepath.Join(dir, "f.tif")
		sameFloat32(t, path, roundTrip(t, path, want, WriteFloat32, ReadFloat32), want)
		info, err := ReadInfo(path)
		if err != nil {
			t.Fatal(err)
		}
		if info.BitsPerSample != 32 || info.SampleFormat != 3 {
			t.Fatalf("info %+v, want 32-bit float", info)
		}
		_, err = ReadGray16(path)
		if !errors.Is(err, ErrUnsupported) {
			t.Fatalf("ReadGray16 of a float file: err %v, want ErrUnsupported", err)
		}
	}
}

func TestRoundTripPages(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 3))
	dir := t.TempDir()
	for _, big := range []bool{false, true} {
		o := writeOptions{bigTIFF: big}
		var g []*raster.Gray16
		var f []*raster.Float32
		for _, sz := range testSizes[:6] {
			g = append(g, randGray16(rng, sz[0], sz[1]))
			f = append(f, randFloat32(rng, sz[0], sz[1]))
		}
		gp, fp := filepath.Join(dir, "g.tif"), filepath.Join(dir, "f.tif")
		if err := writeGray16Pages(gp, g, o); err != nil {
			t.Fatal(err)
		}
		if err := writeFloat32Pages(fp, f, o); err != nil {
			t.Fatal(err)
		}
		gg, err := ReadGray16Pages(gp)
		if err != nil {
			t.Fatal(err)
		}
		ff, err := ReadFloat32Pages(fp)
		if err != nil {
			t.Fatal(err)
		}
		if len(gg) != len(g) || len(ff) != len(f) {
			t.Fatalf("read %d and %d pages, want %d", len(gg), len(ff), len(g))
		}
		for i := range g {
			sameGray16(t, gp, gg[i], g[i])
			sameFloat32(t, fp, ff[i], f[i])
		}
		if _, err := ReadGray16(gp); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%d pages, one plane expected", len(g))) {
			t.Fatalf("ReadGray16 of a %d-page file: %v, want an error naming the page count", len(g), err)
		}
		info, err := ReadInfo(fp)
		if err != nil {
			t.Fatal(err)
		}
		if info.Pages != len(f) || info.BigTIFF != big || info.Width != f[0].W {
			t.Fatalf("info %+v: want %d pages, BigTIFF %v", info, len(f), big)
		}
	}
}

func TestWriteErrors(t *testing.T) {
	dir := t.TempDir()
	for name, err := range map[string]error{
		"nil":     WriteGray16(filepath.Join(dir, "a.tif"), nil),
		"short":   WriteFloat32(filepath.Join(dir, "b.tif"), &raster.Float32{W: 3, H: 3, Pix: make([]float32, 8)}),
		"empty":   WriteGray16Pages(filepath.Join(dir, "c.tif"), nil),
		"zero":    WriteGray16(filepath.Join(dir, "d.tif"), &raster.Gray16{}),
		"missing": WriteGray16(filepath.Join(dir, "no", "such", "e.tif"), raster.NewGray16(2, 2)),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 0 {
		t.Errorf("failed writes left %d entries in the directory", len(ents))
	}
}
