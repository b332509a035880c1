package tiffio

import (
	"bufio"
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

// The fast paths (fastpath.go) must give exactly what the portable
// per-sample loops give: the same file bytes when writing, the same pixels
// when reading, on every size (odd widths, one row, partial last strips),
// byte order, TIFF flavour and strip layout.

func needLittleEndianHost(t *testing.T) {
	t.Helper()
	if !hostLittleEndian {
		t.Fatal("the fast paths are for little-endian hosts; this one is big-endian, so they cannot be compared here")
	}
}

var fastSizes = [][2]int{{1, 1}, {3, 5}, {1001, 700}, {257, 33}, {7479, 3}}

// extremeFloat32 is a plane of random floats with NaN (two payloads),
// infinities, -0 and subnormals mixed in.
func extremeFloat32(rng *rand.Rand, w, h int) *raster.Float32 {
	g := raster.NewFloat32(w, h)
	special := []float32{float32(math.NaN()), math.Float32frombits(0x7fc00001), float32(math.Inf(1)), float32(math.Inf(-1)),
		math.Float32frombits(0x80000000), math.Float32frombits(1), 65535}
	for i := range g.Pix {
		g.Pix[i] = rng.Float32()*1e5 - 5e4
		if i%11 == 0 {
			g.Pix[i] = special[i%len(special)]
		}
	}
	return g
}

// TestFastWriteSameBytes: the one-write path gives the bytes of the
// strip-by-strip encoder, for one-page and multi-page files of uint16 and
// float32 pages, classic and BigTIFF, and through WriteGray16Pages and
// WriteFloat32Pages (the public path, with its buffered writer).
func TestFastWriteSameBytes(t *testing.T) {
	needLittleEndianHost(t)
	rng := rand.New(rand.NewPCG(21, 1))
	var pages []outPage
	var grays []*raster.Gray16
	var floats []*raster.Float32
	for _, sz := range fastSizes {
		g := randGray16(rng, sz[0], sz[1])
		f := extremeFloat32(rng, sz[0], sz[1])
		grays, floats = append(grays, g), append(floats, f)
		pages = append(pages, gray16Page(g.W, g.H, g.Pix), float32Page(f.W, f.H, f.Pix))
	}
	portable := func(ps []outPage) []outPage {
		out := make([]outPage, len(ps))
		for i, p := range ps {
			if p.raw == nil {
				t.Fatalf("page %d (%dx%d, %d-bit) has no raw bytes on a little-endian host", i, p.w, p.h, p.bps)
			}
			p.raw = nil
			out[i] = p
		}
		return out
	}
	encode := func(ps []outPage, big bool) []byte {
		var buf bytes.Buffer
		bw := bufio.NewWriterSize(&buf, writeBufferBytes)
		lay, _ := layout(ps, big)
		if err := encodeFile(bw, ps, lay, big); err != nil {
			t.Fatal(err)
		}
		if err := bw.Flush(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	for _, big := range []bool{false, true} {
		for i := range pages {
			one := pages[i : i+1]
			if got, want := encode(one, big), encode(portable(one), big); !bytes.Equal(got, want) {
				t.Errorf("page %d (%dx%d, %d-bit), bigtiff %v: fast path wrote other bytes", i, one[0].w, one[0].h, one[0].bps, big)
			}
		}
		if got, want := encode(pages, big), encode(portable(pages), big); !bytes.Equal(got, want) {
			t.Errorf("%d mixed pages, bigtiff %v: fast path wrote other bytes", len(pages), big)
		}
	}
	dir := t.TempDir()
	gp, fp := filepath.Join(dir, "g.tif"), filepath.Join(dir, "f.tif")
	if err := WriteGray16Pages(gp, grays); err != nil {
		t.Fatal(err)
	}
	if err := WriteFloat32Pages(fp, floats); err != nil {
		t.Fatal(err)
	}
	var gpages, fpages []outPage
	for i := range grays {
		gpages = append(gpages, pages[2*i])
		fpages = append(fpages, pages[2*i+1])
	}
	for path, ps := range map[string][]outPage{gp: gpages, fp: fpages} {
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, encode(portable(ps), false)) {
			t.Errorf("%s differs from the portable encoder's bytes", path)
		}
	}
}

// fastCase is one file for the read comparison.
type fastCase struct {
	name  string
	order byteOrder
	big   bool
	w, h  int
	rps   int
	swap  bool // strips 0 and 1 exchange offsets (not adjacent in the file)
	pages int
}

func fastCases() []fastCase {
	var cs []fastCase
	for _, order := range []byteOrder{binary.LittleEndian, binary.BigEndian} {
		for _, big := range []bool{false, true} {
			for _, sz := range fastSizes {
				for _, rps := range []int{0, 1, 7} {
					cs = append(cs, fastCase{order: order, big: big, w: sz[0], h: sz[1], rps: rps, pages: 1})
				}
			}
			cs = append(cs,
				fastCase{order: order, big: big, w: 1001, h: 700, rps: 7, swap: true, pages: 1},
				fastCase{order: order, big: big, w: 257, h: 33, rps: 4, pages: 3})
		}
	}
	for i := range cs {
		c := &cs[i]
		c.name = fmt.Sprintf("%s bigtiff=%v %dx%d rps %d, %d pages", c.order, c.big, c.w, c.h, c.rps, c.pages)
		if c.swap {
			c.name += " swapped strips"
		}
	}
	return cs
}

// buildCase builds c's file with samples of bps bits and sample format sf,
// and returns it with the pages' expected samples (rows of strips 0 and 1
// exchanged when c.swap).
func buildCase(t *testing.T, rng *rand.Rand, c fastCase, bps, sf int) ([]byte, []buildPage) {
	t.Helper()
	var pages []buildPage
	for range c.pages {
		p := buildPage{w: c.w, h: c.h, samples: make([]uint64, c.w*c.h)}
		for i := range p.samples {
			if bps == 16 {
				p.samples[i] = uint64(uint16(rng.Uint32()))
			} else {
				p.samples[i] = uint64(math.Float32bits(rng.Float32()*1e4 - 5e3))
			}
		}
		pages = append(pages, p)
	}
	o := buildOpts{order: c.order, big: c.big, bps: bps, sf: sf, comp: compNone, rps: c.rps}
	if c.swap {
		o.mutate = func(page int, tags map[uint16]tagVal) {
			offs := tags[tagStripOffsets]
			offs.vals[0], offs.vals[1] = offs.vals[1], offs.vals[0]
		}
	}
	data := buildTIFF(pages, o)
	if c.swap { // strip 0 of the file now holds rows rps..2rps-1
		for _, p := range pages {
			s := p.samples
			a := append([]uint64(nil), s[:c.rps*c.w]...)
			copy(s, s[c.rps*c.w:2*c.rps*c.w])
			copy(s[c.rps*c.w:], a)
		}
	}
	return data, pages
}

// TestFastReadSamePixels: the direct read gives the pixels of decodePage,
// and the samples the file holds, for uint16 pages (as uint16) and float32
// pages (as float32), either byte order, classic and BigTIFF, one strip,
// one row per strip, partial last strips, strips out of file order, and
// stacks.
func TestFastReadSamePixels(t *testing.T) {
	needLittleEndianHost(t)
	rng := rand.New(rand.NewPCG(21, 2))
	for _, c := range fastCases() {
		for _, kind := range []int{kU16, kF32} {
			bps, sf := 16, sampleUint
			if kind == kF32 {
				bps, sf = 32, sampleFloat
			}
			data, want := buildCase(t, rng, c, bps, sf)
			f, err := openTIFF(bytes.NewReader(data), int64(len(data)))
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			n := 0
			err = f.eachPage(true, func(p *page) error {
				if !p.direct(int64(bps / 8)) {
					t.Fatalf("%s, %d-bit: page %d does not take the direct path", c.name, bps, p.index)
				}
				w := want[p.index]
				if kind == kU16 {
					fast, slow := make([]uint16, c.w*c.h), make([]uint16, c.w*c.h)
					if err := f.decodeGray16(p, fast); err != nil {
						return err
					}
					if err := f.decodeGray16Rows(p, slow); err != nil {
						return err
					}
					for i := range fast {
						if fast[i] != slow[i] || uint64(fast[i]) != w.samples[i] {
							t.Fatalf("%s uint16 page %d pixel %d: direct %d, decodePage %d, file %d", c.name, p.index, i, fast[i], slow[i], w.samples[i])
						}
					}
				} else {
					fast, slow := make([]float32, c.w*c.h), make([]float32, c.w*c.h)
					if err := f.decodeFloat32(p, kind, fast); err != nil {
						return err
					}
					if err := f.decodeFloat32Rows(p, kind, slow); err != nil {
						return err
					}
					for i := range fast {
						a, b := math.Float32bits(fast[i]), math.Float32bits(slow[i])
						if a != b || uint64(a) != w.samples[i] {
							t.Fatalf("%s float32 page %d pixel %d: direct %#x, decodePage %#x, file %#x", c.name, p.index, i, a, b, w.samples[i])
						}
					}
				}
				n++
				return nil
			})
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if n != c.pages {
				t.Fatalf("%s: %d pages decoded, want %d", c.name, n, c.pages)
			}
		}
	}
}

// TestFastReadNotForOthers: compressed, predicted and tiled pages, and
// samples whose size differs from the destination's, keep the portable
// path (and still decode right: TestBuilderMatrix covers their pixels).
func TestFastReadNotForOthers(t *testing.T) {
	for _, c := range []struct {
		p    page
		size int64
	}{
		{page{compression: compDeflate, predictor: predNone, bytesPerSample: 2}, 2},
		{page{compression: compNone, predictor: predHorizontal, bytesPerSample: 2}, 2},
		{page{compression: compNone, predictor: predNone, tiled: true, bytesPerSample: 2}, 2},
		{page{compression: compNone, predictor: predNone, bytesPerSample: 2}, 4},
		{page{compression: compLZW, predictor: predNone, bytesPerSample: 4}, 4},
	} {
		if c.p.direct(c.size) {
			t.Errorf("%+v read directly as %d-byte samples", c.p, c.size)
		}
	}
	if p := (page{compression: compNone, predictor: predNone, bytesPerSample: 2}); !p.direct(2) {
		t.Error("an uncompressed, unpredicted strip page of uint16 is not read directly")
	}
}

// callCounter counts the ReadAt calls of more than 4 KiB (pixel reads; the
// header and IFDs are smaller) and their bytes.
type callCounter struct {
	r            *bytes.Reader
	calls, bytes int
}

func (c *callCounter) ReadAt(p []byte, off int64) (int, error) {
	if len(p) > 4096 {
		c.calls++
		c.bytes += len(p)
	}
	return c.r.ReadAt(p, off)
}

// TestFastReadOneCall: a plane of many strips as this package writes them
// is read with one call for all its pixels.
func TestFastReadOneCall(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 3))
	g := randGray16(rng, 1001, 700) // 3 strips of 261 rows
	path := filepath.Join(t.TempDir(), "p.tif")
	if err := WriteGray16(path, g); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c := &callCounter{r: bytes.NewReader(data)}
	f, err := openTIFF(c, int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	got, err := readGray16(f, false)
	if err != nil {
		t.Fatal(err)
	}
	sameGray16(t, "1001x700", got[0], g)
	if c.calls != 1 || c.bytes != 2*len(g.Pix) {
		t.Errorf("pixels read in %d calls of %d bytes in all, want 1 call of %d", c.calls, c.bytes, 2*len(g.Pix))
	}
}
