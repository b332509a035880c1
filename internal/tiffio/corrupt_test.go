package tiffio

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// readAll runs every reader on path and returns the first error.
func readAll(path string) error {
	if _, err := ReadInfo(path); err != nil {
		return err
	}
	if _, err := ReadFloat32Pages(path); err != nil {
		return err
	}
	if _, err := ReadFloat32(path); err != nil {
		return err
	}
	_, err := ReadGray16Pages(path)
	return err
}

func u16Pages(rng *rand.Rand, n, w, h int) []buildPage {
	return makePages(rng, sampleTypes[0], n, w, h)
}

func TestCorruptFiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 1))
	dir := t.TempDir()
	pages := u16Pages(rng, 2, 20, 10)
	base := buildOpts{bps: 16, sf: 1, rps: 4}
	set := func(tag uint16, typ uint16, vals ...uint64) func(int, map[uint16]tagVal) {
		return func(_ int, m map[uint16]tagVal) { m[tag] = tagVal{typ, vals} }
	}
	del := func(tag uint16) func(int, map[uint16]tagVal) {
		return func(_ int, m map[uint16]tagVal) { delete(m, tag) }
	}
	withMut := func(f func(int, map[uint16]tagVal)) []byte {
		o := base
		o.mutate = f
		return buildTIFF(pages, o)
	}
	good := buildTIFF(pages, base)
	loop := bytes.Clone(good) // the second IFD's next pointer back to the first
	{
		f, _ := openTIFF(bytes.NewReader(loop), int64(len(loop)))
		d0, _ := f.readIFD(f.first, 0)
		d1, _ := f.readIFD(d0.next, 1)
		ptr := d1.off + 2 + int64(len(d1.entries))*12
		binary.LittleEndian.PutUint32(loop[ptr:], uint32(f.first))
	}
	// strip offsets stored out of line at an offset past the end
	arrayPastEnd := bytes.Clone(good)
	{
		f, _ := openTIFF(bytes.NewReader(arrayPastEnd), int64(len(arrayPastEnd)))
		d0, _ := f.readIFD(f.first, 0)
		for i, e := range d0.entries {
			if e.tag == tagStripOffsets {
				binary.LittleEndian.PutUint32(arrayPastEnd[d0.off+2+int64(i)*12+8:], 1<<31-1)
			}
		}
	}
	cases := []struct {
		name string
		data []byte
		kind error
		msg  string
	}{
		{"empty", nil, ErrTruncated, "header needs 8"},
		{"text", []byte("hello, world, not a tiff"), ErrFormat, "not a tiff file"},
		{"version", append([]byte("II\x2b\x01"), good[4:]...), ErrFormat, "version 299"},
		{"bigtiff-offset-size", []byte("II\x2b\x00\x04\x00\x00\x00\x10\x00\x00\x00\x00\x00\x00\x00"), ErrFormat, "offset size 4"},
		{"no-ifd", []byte("II\x2a\x00\x00\x00\x00\x00"), ErrFormat, "no image"},
		{"ifd-past-end", []byte("II\x2a\x00\xff\xff\x00\x00"), ErrTruncated, "ifd 0"},
		{"loop", loop, ErrFormat, "loops back"},
		{"width-0", withMut(set(tagImageWidth, typeShort, 0)), ErrFormat, "image width is 0"},
		{"no-length", withMut(del(tagImageLength)), ErrFormat, "missing image width or length"},
		{"jpeg", withMut(set(tagCompression, typeShort, 7)), ErrUnsupported, "compression 7"},
		{"rgb", withMut(set(tagSamplesPerPixel, typeShort, 3)), ErrUnsupported, "3 samples per pixel"},
		{"12-bit", withMut(set(tagBitsPerSample, typeShort, 12)), ErrUnsupported, "12-bit unsigned"},
		{"predictor-9", withMut(set(tagPredictor, typeShort, 9)), ErrUnsupported, "predictor 9"},
		{"fp-predictor-on-ints", withMut(set(tagPredictor, typeShort, 3)), ErrFormat, "floating-point predictor"},
		{"rps-0", withMut(set(tagRowsPerStrip, typeLong, 0)), ErrFormat, "rows per strip is 0"},
		{"few-offsets", withMut(set(tagStripOffsets, typeLong, 8, 8)), ErrFormat, "2 strip offsets, image needs 3"},
		{"few-counts", withMut(set(tagStripByteCounts, typeLong, 80)), ErrFormat, "1 strip byte counts"},
		{"short-count", withMut(set(tagStripByteCounts, typeLong, 160, 10, 80)), ErrFormat, "strip 1 of page 0 has 10 bytes, 160 needed"},
		{"zero-count", func() []byte {
			o := base
			o.comp = compLZW
			o.mutate = set(tagStripByteCounts, typeLong, 0, 0, 0)
			return buildTIFF(pages, o)
		}(), ErrFormat, "strip 0 of page 0: 0 compressed bytes cannot decode to 160"},
		{"offset-past-end", withMut(set(tagStripOffsets, typeLong, 8, 1<<30, 8)), ErrTruncated, "strip 1 of page 0 starts at offset 1073741824"},
		{"strip-cut", withMut(set(tagStripOffsets, typeLong, 8, 8, uint64(len(good)-40))), ErrTruncated, "strip 2 of page 0 needs 80 bytes at offset"},
		{"array-past-end", arrayPastEnd, ErrTruncated, "page 0: tag 273 values at offset 2147483647 are past the end"},
		{"huge", withMut(set(tagImageWidth, typeLong, 1<<31-1)), ErrUnsupported, "exceeds"},
		{"wide", withMut(func(p int, m map[uint16]tagVal) {
			m[tagImageWidth] = tagVal{typeLong, []uint64{1 << 26}}
			delete(m, tagStripByteCounts) // allowed when uncompressed
		}), ErrTruncated, "strip 0 of page 0 needs 536870912 bytes at offset 8"},
		{"bomb", func() []byte {
			o := base
			o.comp = compDeflate
			o.mutate = set(tagImageWidth, typeLong, 1<<26)
			return buildTIFF(pages, o)
		}(), ErrFormat, "compressed bytes cannot decode to 536870912"},
		{"width-rational", withMut(set(tagImageWidth, typeRational, 3)), ErrFormat, "tag 256 has type 5"},
		{"per-sample-differ", withMut(set(tagBitsPerSample, typeShort, 16, 8)), ErrUnsupported, "differing"},
	}
	for _, c := range cases {
		path := filepath.Join(dir, c.name+".tif")
		if err := os.WriteFile(path, c.data, 0o644); err != nil {
			t.Fatal(err)
		}
		err := readAll(path)
		switch {
		case err == nil:
			t.Errorf("%s: no error", c.name)
		case !errors.Is(err, c.kind):
			t.Errorf("%s: %v: not %v", c.name, err, c.kind)
		case !strings.HasPrefix(err.Error(), "tiff "+path+": "):
			t.Errorf("%s: %q does not start with the path", c.name, err)
		case !strings.Contains(err.Error(), c.msg):
			t.Errorf("%s: %q does not say %q", c.name, err, c.msg)
		default:
			t.Logf("%s: %v", c.name, err)
		}
	}
	// ReadInfo needs only the first IFD's structure tags.
	info, err := ReadInfo(filepath.Join(dir, "rgb.tif"))
	if err != nil || info.SamplesPerPixel != 3 {
		t.Errorf("ReadInfo of an RGB file: %+v, %v", info, err)
	}
	if _, err := ReadInfo(filepath.Join(dir, "no-such-file.tif")); !errors.Is(err, os.ErrNotExist) ||
		strings.Count(err.Error(), "no-such-file.tif") != 1 {
		t.Errorf("missing file: %v", err)
	}
}

// TestTruncated cuts valid files at every length: cuts that remove needed
// bytes must give a format error naming the file, never a panic; others may
// still decode, and then to the right values.
func TestTruncated(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 2))
	dir := t.TempDir()
	g := randGray16(rng, 13, 9)
	ours := filepath.Join(dir, "ours.tif")
	if err := WriteGray16Pages(ours, []*raster.Gray16{g, g}); err != nil {
		t.Fatal(err)
	}
	oursData, _ := os.ReadFile(ours)
	files := map[string][]byte{"ours": oursData}
	for _, comp := range []int{compNone, compLZW, compDeflate, compPackBits} {
		for _, big := range []bool{false, true} {
			files["built-c"+string(rune('0'+comp%10))+map[bool]string{false: "", true: "-big"}[big]] = buildTIFF(
				u16Pages(rng, 2, 13, 9), buildOpts{bps: 16, sf: 1, comp: comp, rps: 4, tileW: 16 * (comp % 2), tileH: 16 * (comp % 2), big: big})
		}
	}
	for name, data := range files {
		full := filepath.Join(dir, name+".tif")
		os.WriteFile(full, data, 0o644)
		want, err := ReadGray16Pages(full)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		path := filepath.Join(dir, "cut.tif")
		errs := 0
		for n := range len(data) {
			var got []*raster.Gray16
			var err error
			if n%50 == 0 { // through a file, to see the error name it
				os.WriteFile(path, data[:n], 0o644)
				got, err = ReadGray16Pages(path)
				if err != nil && !strings.HasPrefix(err.Error(), "tiff "+path+": ") {
					t.Fatalf("%s cut to %d bytes: %v does not name the file", name, n, err)
				}
			} else {
				var f *file
				if f, err = openTIFF(bytes.NewReader(data[:n]), int64(n)); err == nil {
					got, err = readGray16(f, true)
				}
			}
			if err != nil {
				errs++
				if !errors.Is(err, ErrFormat) {
					t.Fatalf("%s cut to %d bytes: %v is not ErrFormat", name, n, err)
				}
				continue
			}
			for i := range want {
				sameGray16(t, name+" cut", got[i], want[i])
			}
		}
		if errs < len(data)/2 {
			t.Errorf("%s: only %d of %d cuts failed", name, errs, len(data))
		}
	}
}

func TestGarbage(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	seeds := fuzzSeeds()
	for i := range 3000 {
		data := bytes.Clone(seeds[i%len(seeds)])
		// flip bytes, mostly in the header and IFD region
		for range 1 + rng.IntN(6) {
			if len(data) == 0 {
				break
			}
			data[rng.IntN(len(data))] = byte(rng.Uint32())
		}
		if rng.IntN(4) == 0 {
			data = data[:rng.IntN(len(data)+1)]
		}
		decodeBytes(data) // must not panic
	}
}

// decodeBytes runs the readers on an in-memory file, with the per-page cap
// lowered to 4 MiB so that corrupt sizes allocate little.
func decodeBytes(data []byte) {
	f, err := openTIFF(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return
	}
	f.maxImage = 1 << 22
	readInfo(f)
	readGray16(f, true)
	readFloat32(f, true)
}

func fuzzSeeds() [][]byte {
	rng := rand.New(rand.NewPCG(3, 4))
	var seeds [][]byte
	for _, comp := range []int{compNone, compLZW, compDeflate, compPackBits} {
		for _, st := range []sampleType{sampleTypes[0], sampleTypes[2]} {
			seeds = append(seeds,
				buildTIFF(makePages(rng, st, 2, 9, 5), buildOpts{bps: st.bps, sf: st.sf, comp: comp, rps: 2, pred: st.preds[len(st.preds)-1] * (comp % 2)}),
				buildTIFF(makePages(rng, st, 1, 9, 5), buildOpts{order: binary.BigEndian, big: true, bps: st.bps, sf: st.sf, comp: comp, tileW: 16, tileH: 16}))
		}
	}
	return seeds
}

func FuzzDecode(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		decodeBytes(data)
	})
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r *bytes.Reader
	n atomic.Int64
}

func (c *countingReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.n.Add(int64(n))
	return n, err
}

// TestReadsOnlyWhatItNeeds checks that the first page of a stack and the
// info of a file are read without reading the other pages' pixels.
func TestReadsOnlyWhatItNeeds(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	const n, w, h = 8, 300, 200
	var pages []*raster.Gray16
	for range n {
		pages = append(pages, randGray16(rng, w, h))
	}
	path := filepath.Join(t.TempDir(), "stack.tif")
	if err := WriteGray16Pages(path, pages); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	open := func() (*file, *countingReader) {
		c := &countingReader{r: bytes.NewReader(data)}
		f, err := openTIFF(c, int64(len(data)))
		if err != nil {
			t.Fatal(err)
		}
		return f, c
	}
	f, c := open()
	got, err := readGray16(f, false)
	if err != nil {
		t.Fatal(err)
	}
	sameGray16(t, "first page", got[0], pages[0])
	pageBytes := int64(w * h * 2)
	if c.n.Load() > pageBytes+4096 {
		t.Errorf("reading page 0 of %d read %d bytes; the page has %d (file %d)", n, c.n.Load(), pageBytes, len(data))
	}
	f, c = open()
	info, err := readInfo(f)
	if err != nil || info.Pages != n {
		t.Fatalf("info %+v, %v", info, err)
	}
	if c.n.Load() > 4096 {
		t.Errorf("ReadInfo read %d bytes of %d", c.n.Load(), len(data))
	}
	t.Logf("page 0: %d bytes read (page %d, file %d); info: %d bytes", pageBytes, pageBytes, len(data), c.n.Load())
}

// TestPageCap: the open file's maxImage caps the decoded size of a page and
// of a tile before anything is allocated (the default, maxImageBytes, is
// far above these; decodeBytes lowers it for the fuzz inputs).
func TestPageCap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	strips := buildTIFF(u16Pages(rng, 1, 20, 10), buildOpts{bps: 16, sf: 1, rps: 4})
	tiles := buildTIFF(u16Pages(rng, 1, 20, 10), buildOpts{bps: 16, sf: 1, tileW: 16, tileH: 16})
	for _, tc := range []struct {
		name string
		data []byte
		cap  int64
		want string // "" reads
	}{
		{"strips at the default cap", strips, maxImageBytes, ""},
		{"strips at their size", strips, 20 * 10 * 2, ""},
		{"strips one byte below", strips, 20*10*2 - 1, "20x10 16-bit image exceeds the 399-byte limit"},
		{"tiles at the image size", tiles, 20 * 10 * 2, "16x16 tiles exceed the 400-byte limit"},
		{"tiles at the tile size", tiles, 16 * 16 * 2, ""},
		{"tiles one byte below", tiles, 16*16*2 - 1, "16x16 tiles exceed the 511-byte limit"},
	} {
		f, err := openTIFF(bytes.NewReader(tc.data), int64(len(tc.data)))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		f.maxImage = tc.cap
		_, err = readGray16(f, true)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (!errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want ErrUnsupported naming %q", tc.name, err, tc.want)
		}
	}
}
