package tiffio

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// ImageJ's own file layout (ij.io.TiffEncoder), built here byte by byte so the
// reader and the fuzz corpus see what Fiji/ImageJ writes, independently of
// this package's writer and of the generic test builder:
//
//	header "MM\0*" (ImageJ writes big-endian unless asked otherwise), first
//	IFD at 8; IFD 0 with 10 entries and no Compression tag (default none);
//	after it the ImageDescription ("ImageJ=1.54f\nimages=N\nslices=N\n...");
//	then the pixels of every page, contiguous, one strip per page; then the
//	IFDs of pages 1..N-1, each pointing at its page's
//	strip and the same description. 32-bit pages carry SampleFormat 3.

var updateCorpus = flag.Bool("tiffio.corpus", false, "rewrite testdata/imagej/*.tif and the FuzzDecode seed corpus")

// imagejFile is one committed ImageJ-layout file and how to regenerate it.
type imagejFile struct {
	name    string
	order   binary.ByteOrder
	float   bool
	n, w, h int
	seed    uint64
}

var imagejFiles = []imagejFile{
	{"be_u16_stack.tif", binary.BigEndian, false, 3, 13, 7, 1},
	{"be_u16_single.tif", binary.BigEndian, false, 1, 16, 9, 2},
	{"be_f32_stack.tif", binary.BigEndian, true, 2, 11, 6, 3},
	{"le_u16_stack.tif", binary.LittleEndian, false, 2, 9, 5, 4},
}

// samples returns page p's values as bit patterns (uint16 counts or float32 bits).
func (f imagejFile) samples() [][]uint32 {
	rng := rand.New(rand.NewPCG(f.seed, 77))
	out := make([][]uint32, f.n)
	for p := range out {
		out[p] = make([]uint32, f.w*f.h)
		for i := range out[p] {
			if f.float {
				out[p][i] = math.Float32bits(float32(rng.NormFloat64()*300 + 1000))
			} else {
				out[p][i] = uint32(rng.IntN(65536))
			}
		}
		out[p][0] = 0 // ImageJ stacks often hold 0 and saturated pixels
		if !f.float {
			out[p][1] = 65535
		}
	}
	return out
}

// imagejTIFF lays out pages as ImageJ's TiffEncoder does.
func imagejTIFF(f imagejFile) []byte {
	bo := f.order
	bps := 16
	if f.float {
		bps = 32
	}
	desc := fmt.Sprintf("ImageJ=1.54f\nimages=%d\nslices=%d\nunit=micron\nloop=false\nmin=0.0\nmax=65535.0\n\x00", f.n, f.n)
	if f.n == 1 {
		desc = "ImageJ=1.54f\nmin=0.0\nmax=65535.0\n\x00"
	}
	nEntries := 10
	if f.float {
		nEntries = 11
	}
	ifdSize := 2 + 12*nEntries + 4
	pageBytes := f.w * f.h * bps / 8
	descOff := 8 + ifdSize
	dataOff := descOff + len(desc)
	ifdOff := func(p int) int { // IFD of page p
		if p == 0 {
			return 8
		}
		return dataOff + f.n*pageBytes + (p-1)*ifdSize
	}
	var buf bytes.Buffer
	w16 := func(v uint16) { binary.Write(&buf, bo, v) }
	w32 := func(v uint32) { binary.Write(&buf, bo, v) }
	entry := func(tag, typ uint16, count, val uint32) {
		w16(tag)
		w16(typ)
		w32(count)
		if typ == typeShort && count == 1 {
			w16(uint16(val)) // left-justified in the 4-byte field
			w16(0)
		} else {
			w32(val)
		}
	}
	ifd := func(p int) {
		w16(uint16(nEntries))
		entry(tagNewSubfileType, typeLong, 1, 0)
		entry(tagImageWidth, typeLong, 1, uint32(f.w))
		entry(tagImageLength, typeLong, 1, uint32(f.h))
		entry(tagBitsPerSample, typeShort, 1, uint32(bps))
		entry(tagPhotometric, typeShort, 1, 1)
		entry(tagImageDescription, typeASCII, uint32(len(desc)), uint32(descOff)) // every IFD points at the one description
		entry(tagStripOffsets, typeLong, 1, uint32(dataOff+p*pageBytes))
		entry(tagSamplesPerPixel, typeShort, 1, 1)
		entry(tagRowsPerStrip, typeShort, 1, uint32(f.h))
		entry(tagStripByteCounts, typeLong, 1, uint32(pageBytes))
		if f.float {
			entry(tagSampleFormat, typeShort, 1, sampleFloat)
		}
		next := uint32(0)
		if p+1 < f.n {
			next = uint32(ifdOff(p + 1))
		}
		w32(next)
	}
	buf.WriteString(map[bool]string{true: "MM", false: "II"}[bo == binary.BigEndian])
	w16(42)
	w32(8)
	ifd(0)
	buf.WriteString(desc)
	for _, pg := range f.samples() {
		for _, v := range pg {
			if f.float {
				w32(v)
			} else {
				w16(uint16(v))
			}
		}
	}
	for p := 1; p < f.n; p++ {
		ifd(p)
	}
	return buf.Bytes()
}

// TestImageJFiles reads the committed ImageJ-layout files (big- and
// little-endian, 16-bit and 32-bit float stacks) and checks every pixel
// against the values they were built from; the same files seed FuzzDecode.
func TestImageJFiles(t *testing.T) {
	dir := filepath.Join("testdata", "imagej")
	corpus := filepath.Join("testdata", "fuzz", "FuzzDecode")
	for _, f := range imagejFiles {
		data := imagejTIFF(f)
		path := filepath.Join(dir, f.name)
		if *updateCorpus {
			os.MkdirAll(dir, 0o755)
			os.MkdirAll(corpus, 0o755)
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			enc := "go test fuzz v1\n[]byte(" + strconv.Quote(string(data)) + ")\n"
			if err := os.WriteFile(filepath.Join(corpus, "imagej_"+f.name), []byte(enc), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		committed, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (regenerate with go test -run TestImageJFiles -tiffio.corpus)", err)
		}
		if !bytes.Equal(committed, data) {
			t.Errorf("%s differs from the ImageJ layout built here", path)
		}
		info, err := ReadInfo(path)
		if err != nil {
			t.Fatal(err)
		}
		wantBPS := map[bool]int{true: 32, false: 16}[f.float]
		if info.Width != f.w || info.Height != f.h || info.Pages != f.n || info.BitsPerSample != wantBPS {
			t.Errorf("%s: info %+v, want %dx%d, %d pages, %d bits", f.name, info, f.w, f.h, f.n, wantBPS)
		}
		want := f.samples()
		if f.float {
			pages, err := ReadFloat32Pages(path)
			if err != nil {
				t.Fatal(err)
			}
			for p := range want {
				for i, v := range want[p] {
					if math.Float32bits(pages[p].Pix[i]) != v {
						t.Fatalf("%s page %d pixel %d: %g, want %g", f.name, p, i, pages[p].Pix[i], math.Float32frombits(v))
					}
				}
			}
			continue
		}
		pages, err := ReadGray16Pages(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(pages) != f.n {
			t.Fatalf("%s: %d pages, want %d", f.name, len(pages), f.n)
		}
		for p := range want {
			for i, v := range want[p] {
				if uint32(pages[p].Pix[i]) != v {
					t.Fatalf("%s page %d pixel %d: %d, want %d", f.name, p, i, pages[p].Pix[i], v)
				}
			}
		}
	}
}
