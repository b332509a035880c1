package tiffio

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// lzwInputs are byte strings that exercise literals, long runs (strings
// longer than the 12-bit table can hold), table resets and every code width.
func lzwInputs() map[string][]byte {
	rng := rand.New(rand.NewPCG(2, 1))
	random := make([]byte, 300000)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	skewed := make([]byte, 200000) // few symbols: long matches, many resets
	for i := range skewed {
		skewed[i] = byte(rng.IntN(3))
	}
	ramp := make([]byte, 100000)
	for i := range ramp {
		ramp[i] = byte(i / 300)
	}
	return map[string][]byte{
		"empty": {}, "one": {7}, "two": {7, 7}, "abab": []byte("ABABABABABAB"),
		"random": random, "skewed": skewed, "ramp": ramp, "zeros": make([]byte, 1<<20),
	}
}

func TestLZWRoundTrip(t *testing.T) {
	var d lzwDecoder
	for name, in := range lzwInputs() {
		enc := lzwEncode(in)
		out := make([]byte, len(in))
		n, err := d.decode(out, enc)
		if err != nil || n != len(in) || !bytes.Equal(out, in) {
			t.Errorf("%s: decoded %d of %d bytes, err %v, equal %v", name, n, len(in), err, bytes.Equal(out[:n], in[:n]))
		}
		// A short destination takes a prefix, as for the padding rows of a
		// last strip.
		if len(in) > 10 {
			short := make([]byte, len(in)/2+1)
			n, err := d.decode(short, enc)
			if err != nil || n != len(short) || !bytes.Equal(short, in[:len(short)]) {
				t.Errorf("%s: short destination: %d bytes, err %v", name, n, err)
			}
		}
	}
}

func TestLZWCorrupt(t *testing.T) {
	var d lzwDecoder
	out := make([]byte, 100)
	// 9-bit codes MSB first: clear (256), then code 300 (beyond the table).
	bad := []byte{0x80, 0x4B, 0x00}
	if _, err := d.decode(out, bad); err == nil {
		t.Error("code beyond the table: no error")
	}
	if _, err := d.decode(out, []byte{0x00, 0x01, 0x02}); err != errLZWOld {
		t.Errorf("old-style lzw: err %v, want %v", err, errLZWOld)
	}
}

func TestPackBits(t *testing.T) {
	// The worked example in the TIFF 6.0 specification, section 9.
	packed := []byte{0xFE, 0xAA, 0x02, 0x80, 0x00, 0x2A, 0xFD, 0xAA, 0x03, 0x80, 0x00, 0x2A, 0x22, 0xF7, 0xAA}
	want := []byte{0xAA, 0xAA, 0xAA, 0x80, 0x00, 0x2A, 0xAA, 0xAA, 0xAA, 0xAA, 0x80, 0x00, 0x2A, 0x22,
		0xAA, 0xAA, 0xAA, 0xAA, 0xAA, 0xAA, 0xAA, 0xAA, 0xAA, 0xAA}
	out := make([]byte, len(want))
	if n, err := unpackBits(out, packed); err != nil || n != len(want) || !bytes.Equal(out, want) {
		t.Fatalf("spec example: got % X (%d, %v), want % X", out[:n], n, err, want)
	}
	for name, in := range lzwInputs() {
		out := make([]byte, len(in))
		if n, err := unpackBits(out, packBits(in)); err != nil || n != len(in) || !bytes.Equal(out, in) {
			t.Errorf("%s: round trip gave %d of %d bytes, err %v", name, n, len(in), err)
		}
	}
	if _, err := unpackBits(make([]byte, 10), []byte{0x05, 1, 2}); err == nil {
		t.Error("literal run past the end: no error")
	}
}

// sampleType is one pixel type of the builder matrix, with how to make a
// sample and what ReadFloat32 must return for it.
type sampleType struct {
	name    string
	bps, sf int
	preds   []int
	gen     func(rng *rand.Rand, i int) uint64
	float   func(v uint64) float32
}

var sampleTypes = []sampleType{
	{"u16", 16, sampleUint, []int{1, 2},
		func(rng *rand.Rand, i int) uint64 { return uint64(rng.Uint32() >> 16) },
		func(v uint64) float32 { return float32(uint16(v)) }},
	{"u16smooth", 16, sampleUint, []int{2},
		func(rng *rand.Rand, i int) uint64 { return uint64(1000 + i%37*3 + rng.IntN(4)) },
		func(v uint64) float32 { return float32(uint16(v)) }},
	{"f32", 32, sampleFloat, []int{1, 2, 3},
		func(rng *rand.Rand, i int) uint64 { return uint64(math.Float32bits(float32(rng.NormFloat64() * 100))) },
		func(v uint64) float32 { return math.Float32frombits(uint32(v)) }},
	{"u8", 8, sampleUint, []int{1, 2},
		func(rng *rand.Rand, i int) uint64 { return uint64(rng.IntN(256)) },
		func(v uint64) float32 { return float32(v) }},
	{"i16", 16, sampleInt, []int{2},
		func(rng *rand.Rand, i int) uint64 { return uint64(uint16(int16(rng.IntN(65536) - 32768))) },
		func(v uint64) float32 { return float32(int16(v)) }},
	{"f64", 64, sampleFloat, []int{1, 3},
		func(rng *rand.Rand, i int) uint64 { return math.Float64bits(float64(float32(rng.NormFloat64()))) },
		func(v uint64) float32 { return float32(math.Float64frombits(v)) }},
}

func makePages(rng *rand.Rand, st sampleType, n, w, h int) []buildPage {
	pages := make([]buildPage, n)
	for p := range pages {
		pages[p] = buildPage{w: w, h: h, samples: make([]uint64, w*h)}
		for i := range pages[p].samples {
			pages[p].samples[i] = st.gen(rng, i)
		}
	}
	return pages
}

// TestBuilderMatrix reads every combination of byte order, flavour, layout,
// compression, predictor and sample type from the independent builder.
func TestBuilderMatrix(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	dir := t.TempDir()
	const w, h = 37, 23
	layouts := []struct {
		name              string
		rps, tileW, tileH int
	}{{"whole", 0, 0, 0}, {"rps1", 1, 0, 0}, {"rps7", 7, 0, 0}, {"tile16", 0, 16, 16}, {"tile32x48", 0, 32, 48}}
	orders := map[string]byteOrder{"II": binary.LittleEndian, "MM": binary.BigEndian}
	cases := 0
	for oname, order := range orders {
		for _, big := range []bool{false, true} {
			for _, lay := range layouts {
				for _, comp := range []int{compNone, compLZW, compDeflate, compDeflateOld, compPackBits} {
					for _, st := range sampleTypes {
						for _, pred := range st.preds {
							if pred > 1 && (comp == compNone || comp == compPackBits) {
								continue // predictors go with LZW and Deflate
							}
							name := fmt.Sprintf("%s-big%v-%s-c%d-%s-p%d", oname, big, lay.name, comp, st.name, pred)
							pages := makePages(rng, st, 2, w, h)
							data := buildTIFF(pages, buildOpts{order: order, big: big, bps: st.bps, sf: st.sf,
								comp: comp, pred: pred, rps: lay.rps, tileW: lay.tileW, tileH: lay.tileH})
							path := filepath.Join(dir, name+".tif")
							if err := os.WriteFile(path, data, 0o644); err != nil {
								t.Fatal(err)
							}
							checkBuilt(t, path, st, pages, big)
							cases++
						}
					}
				}
			}
		}
	}
	t.Logf("%d combinations", cases)
}

func checkBuilt(t *testing.T, path string, st sampleType, pages []buildPage, big bool) {
	t.Helper()
	got, err := ReadFloat32Pages(path)
	if err != nil {
		t.Fatalf("%v", err)
	}
	if len(got) != len(pages) {
		t.Fatalf("%s: %d pages, want %d", path, len(got), len(pages))
	}
	for p, pg := range pages {
		for i, v := range pg.samples {
			want := st.float(v)
			if g := got[p].Pix[i]; math.Float32bits(g) != math.Float32bits(want) {
				t.Fatalf("%s: page %d pixel (y=%d, x=%d) = %g, want %g", path, p, i/pg.w, i%pg.w, g, want)
			}
		}
	}
	if st.bps == 16 && st.sf == sampleUint {
		g, err := ReadGray16Pages(path)
		if err != nil {
			t.Fatal(err)
		}
		for p, pg := range pages {
			for i, v := range pg.samples {
				if g[p].Pix[i] != uint16(v) {
					t.Fatalf("%s: ReadGray16Pages page %d pixel %d = %d, want %d", path, p, i, g[p].Pix[i], v)
				}
			}
		}
	}
	info, err := ReadInfo(path)
	if err != nil {
		t.Fatal(err)
	}
	want := Info{Width: pages[0].w, Height: pages[0].h, BitsPerSample: st.bps, SampleFormat: st.sf,
		SamplesPerPixel: 1, Pages: len(pages), BigTIFF: big}
	if info != want {
		t.Fatalf("%s: info %+v, want %+v", path, info, want)
	}
}

// TestReadGray16Into: every layout and compression decodes into a plane
// whose memory was dirty (every pixel overwritten), which it returns; a
// plane of another size is left alone for a new one.
func TestReadGray16Into(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	dir := t.TempDir()
	const w, h = 37, 23
	var u16 sampleType
	for _, st := range sampleTypes {
		if st.bps == 16 && st.sf == sampleUint {
			u16 = st
		}
	}
	n := 0
	for _, order := range []byteOrder{binary.LittleEndian, binary.BigEndian} {
		for _, lay := range [][3]int{{0, 0, 0}, {7, 0, 0}, {0, 16, 16}} {
			for _, comp := range []int{compNone, compLZW, compDeflate, compPackBits} {
				pages := makePages(rng, u16, 1, w, h)
				path := filepath.Join(dir, fmt.Sprintf("%d.tif", n))
				n++
				data := buildTIFF(pages, buildOpts{order: order, bps: 16, sf: sampleUint, comp: comp, pred: 1, rps: lay[0], tileW: lay[1], tileH: lay[2]})
				if err := os.WriteFile(path, data, 0o644); err != nil {
					t.Fatal(err)
				}
				dst := raster.NewGray16(w, h)
				for i := range dst.Pix {
					dst.Pix[i] = 0xdead
				}
				g, err := ReadGray16Into(path, dst)
				if err != nil {
					t.Fatal(err)
				}
				if g != dst {
					t.Fatalf("%s: a plane of the page's size was not used", path)
				}
				for i, v := range pages[0].samples {
					if g.Pix[i] != uint16(v) {
						t.Fatalf("%s (comp %d, layout %v): pixel %d = %#x, want %#x", path, comp, lay, i, g.Pix[i], v)
					}
				}
				other := raster.NewGray16(w+1, h)
				if g, err := ReadGray16Into(path, other); err != nil || g == other || g.W != w || g.Pix[w+3] != uint16(pages[0].samples[w+3]) {
					t.Fatalf("%s: into a plane of another size: %v", path, err)
				}
			}
		}
	}
}
