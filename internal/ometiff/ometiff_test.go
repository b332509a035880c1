package ometiff

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/xml"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// The fixture: 3 channels of 1499 x 2101 px (odd sizes: edge tiles of
// 475 x 53 px at level 0 and odd last columns/rows in the 2x2 means), so
// the pyramid has 3 levels (1499x2101, 750x1051, 375x526). The names need
// XML escaping and one is not ASCII.
const (
	fixW, fixH = 1499, 2101
	fixPixelNM = 325
)

var fixNames = []string{"DAPI", `CD3 <T & "B">`, "Ki67 µ'α"}

// fixPlane is channel c of the fixture: a ramp that differs per channel,
// seeded noise, and a band of 0 and 65535 to exercise rounding at the
// limits; channel 0's first 600 rows are zero background, so its first row
// of 512-px tiles is deflated with LZ (Adaptive) and the others Huffman-only.
func fixPlane(c int) *raster.Gray16 {
	rng := rand.New(rand.NewPCG(7, uint64(c)))
	g := raster.NewGray16(fixW, fixH)
	for y := range fixH {
		for x := range fixW {
			v := uint16(9000*c+13*x+7*y) + uint16(rng.IntN(256))
			if y%97 == 3 {
				v = uint16(65535 * (x & 1))
			}
			if c == 0 && y < 600 {
				v = 0
			}
			g.Pix[y*fixW+x] = v
		}
	}
	return g
}

func fixChannels(loads *int) []Channel {
	ch := make([]Channel, len(fixNames))
	for c, name := range fixNames {
		ch[c] = Channel{Name: name, Load: func() (*raster.Gray16, error) {
			if loads != nil {
				*loads++
			}
			return fixPlane(c), nil
		}}
	}
	return ch
}

// writeFixture writes the fixture to dir/name with the given options.
func writeFixture(t *testing.T, dir, name string, o Options) string {
	t.Helper()
	path := filepath.Join(dir, name)
	loads := 0
	if err := Write(context.Background(), path, fixW, fixH, fixChannels(&loads), o); err != nil {
		t.Fatal(err)
	}
	if loads != len(fixNames) {
		t.Fatalf("%d loads for %d channels", loads, len(fixNames))
	}
	return path
}

// A minimal BigTIFF (little-endian) IFD reader, independent of tiffio, for
// the tag checks.
type tag struct {
	typ  uint16
	vals []uint64 // integer types
	str  string   // ASCII
}

type rawIFD struct {
	off  int64
	tags map[uint16]tag
	next int64
}

func parseIFD(t *testing.T, b []byte, off int64) rawIFD {
	t.Helper()
	le := binary.LittleEndian
	n := le.Uint64(b[off:])
	d := rawIFD{off: off, tags: map[uint16]tag{}}
	prev := -1
	for i := range int64(n) {
		e := b[off+8+20*i:]
		code, typ, count := le.Uint16(e), le.Uint16(e[2:]), le.Uint64(e[4:])
		if int(code) <= prev {
			t.Fatalf("ifd at %d: tag %d after %d (tags must ascend)", off, code, prev)
		}
		prev = int(code)
		size := map[uint16]uint64{typeASCII: 1, typeShort: 2, typeLong: 4, typeLong8: 8, typeIFD8: 8}[typ]
		if size == 0 {
			t.Fatalf("ifd at %d: tag %d has unexpected type %d", off, code, typ)
		}
		val := e[12:20]
		if size*count > 8 {
			p := le.Uint64(val)
			val = b[p : p+size*count]
		}
		tg := tag{typ: typ}
		if typ == typeASCII {
			tg.str = string(bytes.TrimRight(val[:count], "\x00"))
		}
		for k := range count {
			switch size {
			case 2:
				tg.vals = append(tg.vals, uint64(le.Uint16(val[2*k:])))
			case 4:
				tg.vals = append(tg.vals, uint64(le.Uint32(val[4*k:])))
			case 8:
				tg.vals = append(tg.vals, le.Uint64(val[8*k:]))
			}
		}
		d.tags[code] = tg
	}
	d.next = int64(le.Uint64(b[off+8+20*int64(n):]))
	return d
}

func (d rawIFD) one(t *testing.T, code uint16) uint64 {
	t.Helper()
	tg, ok := d.tags[code]
	if !ok || len(tg.vals) != 1 {
		t.Fatalf("ifd at %d: tag %d is %+v, want one value", d.off, code, tg)
	}
	return tg.vals[0]
}

// The parts of the OME-XML checked here.
type omeDoc struct {
	XMLName xml.Name `xml:"http://www.openmicroscopy.org/Schemas/OME/2016-06 OME"`
	UUID    string   `xml:"UUID,attr"`
	Creator string   `xml:"Creator,attr"`
	Image   struct {
		ID     string `xml:"ID,attr"`
		Name   string `xml:"Name,attr"`
		Pixels struct {
			DimensionOrder, Type              string  `xml:",attr"`
			SizeX, SizeY, SizeC, SizeZ, SizeT int     `xml:",attr"`
			PhysicalSizeX, PhysicalSizeY      float64 `xml:",attr"`
			PhysicalSizeXUnit                 string  `xml:",attr"`
			PhysicalSizeYUnit                 string  `xml:",attr"`
			Channels                          []struct {
				ID              string `xml:"ID,attr"`
				Name            string `xml:"Name,attr"`
				SamplesPerPixel int    `xml:",attr"`
			} `xml:"Channel"`
			TiffData []struct {
				FirstC, FirstZ, FirstT, IFD, PlaneCount int `xml:",attr"`
				UUID                                    struct {
					FileName string `xml:",attr"`
					Value    string `xml:",chardata"`
				}
			}
		}
	}
}

// TestGoReadback checks the file's structure with the minimal IFD reader
// above and its pixels with tiffio (the chain and the SubIFDs).
func TestGoReadback(t *testing.T) {
	dir := t.TempDir()
	path := writeFixture(t, dir, "fixture.ome.tif", Options{PixelSizeNM: fixPixelNM, Workers: 3})
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	if string(b[:2]) != "II" || le.Uint16(b[2:]) != 43 || le.Uint16(b[4:]) != 8 || le.Uint16(b[6:]) != 0 {
		t.Fatalf("header % x is not little-endian BigTIFF", b[:8])
	}
	levels := LevelSizes(fixW, fixH)
	if len(levels) != 3 {
		t.Fatalf("fixture has %d levels, want 3", len(levels))
	}

	// structure: C chained IFDs with len(levels)-1 SubIFDs each; all
	// metadata before the first tile; tiles contiguous in file order
	var (
		mains    []rawIFD
		metaEnd  int64
		nextTile = int64(-1)
	)
	for off := int64(le.Uint64(b[8:])); off != 0; {
		d := parseIFD(t, b, off)
		mains = append(mains, d)
		off = d.next
	}
	if len(mains) != len(fixNames) {
		t.Fatalf("%d IFDs in the chain, want %d", len(mains), len(fixNames))
	}
	for c, d := range mains {
		ifds := []rawIFD{d}
		subs := d.tags[tagSubIFDs]
		if subs.typ != typeIFD8 || len(subs.vals) != len(levels)-1 {
			t.Fatalf("channel %d: SubIFDs %+v, want %d of type IFD8", c, subs, len(levels)-1)
		}
		for _, off := range subs.vals {
			s := parseIFD(t, b, int64(off))
			if s.next != 0 {
				t.Errorf("channel %d: subifd at %d has next %d, want 0", c, off, s.next)
			}
			if _, ok := s.tags[tagSubIFDs]; ok {
				t.Errorf("channel %d: subifd at %d has SubIFDs", c, off)
			}
			ifds = append(ifds, s)
		}
		for k, s := range ifds {
			metaEnd = max(metaEnd, s.off)
			want := map[uint16]uint64{
				tagNewSubfileType: uint64(min(k, 1)), tagImageWidth: uint64(levels[k][0]), tagImageLength: uint64(levels[k][1]),
				tagBitsPerSample: 16, tagCompression: compDeflate, tagPhotometric: 1, tagSamplesPerPixel: 1,
				tagPlanarConfig: 1, tagPredictor: predHorizontal, tagTileWidth: 512, tagTileLength: 512, tagSampleFormat: 1,
			}
			for code, v := range want {
				if got := s.one(t, code); got != v {
					t.Errorf("channel %d level %d: tag %d = %d, want %d", c, k, code, got, v)
				}
			}
			_, hasDesc := s.tags[tagImageDescription]
			if hasDesc != (c == 0 && k == 0) {
				t.Errorf("channel %d level %d: ImageDescription present = %v", c, k, hasDesc)
			}
			offs, cnts := s.tags[tagTileOffsets].vals, s.tags[tagTileByteCounts].vals
			nt := ((levels[k][0] + 511) / 512) * ((levels[k][1] + 511) / 512)
			if len(offs) != nt || len(cnts) != nt {
				t.Fatalf("channel %d level %d: %d offsets, %d counts, want %d", c, k, len(offs), len(cnts), nt)
			}
			for i := range offs {
				if nextTile >= 0 && int64(offs[i]) != nextTile {
					t.Fatalf("channel %d level %d tile %d at %d, want %d (contiguous, in file order)", c, k, i, offs[i], nextTile)
				}
				if nextTile < 0 && int64(offs[i]) <= metaEnd {
					t.Fatalf("first tile at %d, before metadata end %d", offs[i], metaEnd)
				}
				nextTile = int64(offs[i] + cnts[i])
			}
			// Channel 0's first full-resolution tile is zero background:
			// Adaptive codes it with LZ, far below Huffman coding's floor
			// of 1 bit a byte (512*512*2/8 bytes).
			if c == 0 && k == 0 && cnts[0] >= 512*512*2/8/16 {
				t.Errorf("zero tile deflated to %d bytes: not LZ-coded", cnts[0])
			}
		}
	}
	if nextTile != int64(len(b)) {
		t.Errorf("tiles end at %d, file has %d bytes", nextTile, len(b))
	}

	// OME-XML
	var doc omeDoc
	desc := mains[0].tags[tagImageDescription].str
	if err := xml.Unmarshal([]byte(desc), &doc); err != nil {
		t.Fatalf("OME-XML: %v\n%s", err, desc)
	}
	px := doc.Image.Pixels
	if !strings.HasPrefix(doc.UUID, "urn:uuid:") || len(doc.UUID) != len("urn:uuid:")+36 || doc.Creator != Creator {
		t.Errorf("OME UUID %q, Creator %q", doc.UUID, doc.Creator)
	}
	if doc.Image.Name != "fixture" || px.DimensionOrder != "XYCZT" || px.Type != "uint16" ||
		px.SizeX != fixW || px.SizeY != fixH || px.SizeC != len(fixNames) || px.SizeZ != 1 || px.SizeT != 1 {
		t.Errorf("Image/Pixels: %q %+v", doc.Image.Name, px)
	}
	if px.PhysicalSizeX != fixPixelNM/1000.0 || px.PhysicalSizeY != fixPixelNM/1000.0 ||
		px.PhysicalSizeXUnit != "µm" || px.PhysicalSizeYUnit != "µm" {
		t.Errorf("physical size %g %q x %g %q, want %g µm", px.PhysicalSizeX, px.PhysicalSizeXUnit,
			px.PhysicalSizeY, px.PhysicalSizeYUnit, fixPixelNM/1000.0)
	}
	if len(px.Channels) != len(fixNames) || len(px.TiffData) != len(fixNames) {
		t.Fatalf("%d channels, %d TiffData, want %d", len(px.Channels), len(px.TiffData), len(fixNames))
	}
	for c, name := range fixNames {
		ch, td := px.Channels[c], px.TiffData[c]
		if ch.Name != name || ch.SamplesPerPixel != 1 {
			t.Errorf("channel %d: %+v, want name %q", c, ch, name)
		}
		if td.FirstC != c || td.FirstZ != 0 || td.FirstT != 0 || td.IFD != c || td.PlaneCount != 1 ||
			td.UUID.FileName != "fixture.ome.tif" || td.UUID.Value != doc.UUID {
			t.Errorf("TiffData %d: %+v", c, td)
		}
	}

	// pixels, read by tiffio
	pages, err := tiffio.ReadGray16Pages(path)
	if err != nil {
		t.Fatal(err)
	}
	for c := range fixNames {
		want := fixPlane(c)
		samePlane(t, "channel "+fixNames[c]+" level 0", pages[c], want)
		subs, err := tiffio.ReadGray16SubIFDs(path, c)
		if err != nil {
			t.Fatal(err)
		}
		if len(subs) != len(levels)-1 {
			t.Fatalf("channel %d: %d sub-levels", c, len(subs))
		}
		for k, got := range subs {
			want = naiveDownsample(want)
			samePlane(t, "channel "+fixNames[c]+" level "+string(rune('1'+k)), got, want)
		}
	}
}

func samePlane(t *testing.T, what string, got, want *raster.Gray16) {
	t.Helper()
	if got.W != want.W || got.H != want.H {
		t.Fatalf("%s: %dx%d, want %dx%d", what, got.W, got.H, want.W, want.H)
	}
	if i := firstDiff(got.Pix, want.Pix); i >= 0 {
		t.Fatalf("%s: pixel (y=%d, x=%d) = %d, want %d", what, i/want.W, i%want.W, got.Pix[i], want.Pix[i])
	}
}

// TestWorkersSameBytes: the file does not depend on the worker count, and a
// rerun writes the same bytes (the UUID is a hash of the content); other
// pixels give another UUID. 256-px tiles on a 1100 x 700 image: 2 levels,
// partial edge tiles on both.
func TestWorkersSameBytes(t *testing.T) {
	const w, h = 1100, 700
	rng := rand.New(rand.NewPCG(3, 3))
	planes := []*raster.Gray16{randPlane(rng, w, h), randPlane(rng, w, h)}
	ch := []Channel{
		{Name: "a", Load: func() (*raster.Gray16, error) { return planes[0], nil }},
		{Name: "b", Load: func() (*raster.Gray16, error) { return planes[1], nil }},
	}
	path := filepath.Join(t.TempDir(), "w.ome.tif")
	var files [][]byte
	uuidOf := func(b []byte) string {
		i := bytes.Index(b, []byte(`UUID="urn:uuid:`))
		if i < 0 {
			t.Fatal("no UUID in the file")
		}
		return string(b[i+6 : i+6+9+36])
	}
	for _, workers := range []int{1, 4, 1} {
		if err := Write(context.Background(), path, w, h, ch, Options{PixelSizeNM: 500, Workers: workers, TileSize: 256}); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, b)
	}
	if !bytes.Equal(files[0], files[1]) || !bytes.Equal(files[0], files[2]) {
		t.Fatal("1 and 4 workers, or a rerun, wrote different files")
	}
	if u := uuidOf(files[0]); u == placeholderUUID {
		t.Fatalf("UUID %s is the placeholder", u)
	}
	planes[1].Pix[12345]++
	other := filepath.Join(t.TempDir(), "o.ome.tif")
	if err := Write(context.Background(), other, w, h, ch, Options{PixelSizeNM: 500, TileSize: 256}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(other)
	if err != nil {
		t.Fatal(err)
	}
	if uuidOf(b) == uuidOf(files[0]) {
		t.Fatal("one changed pixel kept the UUID")
	}
	planes[1].Pix[12345]--
	pages, err := tiffio.ReadGray16Pages(path)
	if err != nil {
		t.Fatal(err)
	}
	subs, err := tiffio.ReadGray16SubIFDs(path, 1)
	if err != nil {
		t.Fatal(err)
	}
	samePlane(t, "256-px tiles, channel b", pages[1], planes[1])
	if len(subs) != 1 {
		t.Fatalf("%d sub-levels, want 1", len(subs))
	}
	samePlane(t, "256-px tiles, channel b, level 1", subs[0], naiveDownsample(planes[1]))
}

// entries lists dir (to see that nothing, not even a temp file, is left).
func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

func TestBadPlaneSize(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bad.ome.tif")
	ch := fixChannels(nil)
	ch[1].Load = func() (*raster.Gray16, error) { return raster.NewGray16(fixW, fixH-1), nil }
	err := Write(context.Background(), path, fixW, fixH, ch, Options{PixelSizeNM: fixPixelNM})
	if err == nil {
		t.Fatal("no error for a 1499x2100 plane in a 1499x2101 image")
	}
	for _, want := range []string{path, "channel 1", strconv.Quote(fixNames[1]), "1499x2100", "1499x2101"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if es := entries(t, dir); len(es) != 0 {
		t.Errorf("left behind: %v", es)
	}
}

func TestFailureLeavesNothing(t *testing.T) {
	boom := errors.New("boom")
	dir := t.TempDir()
	path := filepath.Join(dir, "x.ome.tif")
	ch := fixChannels(nil)
	ch[2].Load = func() (*raster.Gray16, error) { return nil, boom }
	err := Write(context.Background(), path, fixW, fixH, ch, Options{PixelSizeNM: fixPixelNM, Workers: 2})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "channel 2") {
		t.Errorf("error %v, want one wrapping the load error and naming channel 2", err)
	}
	if es := entries(t, dir); len(es) != 0 {
		t.Errorf("left behind after a failed load: %v", es)
	}

	// cancelled while compressing the first channel
	ctx, cancel := context.WithCancel(context.Background())
	ch = fixChannels(nil)
	ch[0].Load = func() (*raster.Gray16, error) { cancel(); return fixPlane(0), nil }
	err = Write(ctx, path, fixW, fixH, ch, Options{PixelSizeNM: fixPixelNM, Workers: 2})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want context.Canceled", err)
	}
	if es := entries(t, dir); len(es) != 0 {
		t.Errorf("left behind after cancellation: %v", es)
	}

	// an existing file is left as it was
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	ch = fixChannels(nil)
	ch[1].Load = func() (*raster.Gray16, error) { return nil, boom }
	if err := Write(context.Background(), path, fixW, fixH, ch, Options{PixelSizeNM: fixPixelNM}); !errors.Is(err, boom) {
		t.Errorf("error %v, want boom", err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "old" {
		t.Errorf("existing file now %q, %v", b, err)
	}
	if es := entries(t, dir); !slices.Equal(es, []string{"x.ome.tif"}) {
		t.Errorf("directory holds %v", es)
	}
}

func TestBadArguments(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.ome.tif")
	ok := fixChannels(nil)
	noName := fixChannels(nil)
	noName[1].Name = ""
	noLoad := fixChannels(nil)
	noLoad[2].Load = nil
	for _, c := range []struct {
		w, h int
		ch   []Channel
		o    Options
		want string
	}{
		{0, fixH, ok, Options{PixelSizeNM: 1}, "image size"},
		{fixW, fixH, nil, Options{PixelSizeNM: 1}, "no channels"},
		{fixW, fixH, noName, Options{PixelSizeNM: 1}, "channel 1 has no name"},
		{fixW, fixH, noLoad, Options{PixelSizeNM: 1}, "channel 2"},
		{fixW, fixH, ok, Options{}, "pixel size"},
		{fixW, fixH, ok, Options{PixelSizeNM: -3}, "pixel size"},
		{fixW, fixH, ok, Options{PixelSizeNM: 1, TileSize: 500}, "tile size 500"},
		{fixW, fixH, ok, Options{PixelSizeNM: 1, Workers: -1}, "workers"},
		{fixW, fixH, ok, Options{PixelSizeNM: 1, Level: 10}, "deflate level 10"},
		{fixW, fixH, ok, Options{PixelSizeNM: 1, Level: -1}, "deflate level -1"},
	} {
		err := Write(context.Background(), path, c.w, c.h, c.ch, c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%dx%d %+v: error %v, want one containing %q", c.w, c.h, c.o, err, c.want)
		}
	}
	if es := entries(t, dir); len(es) != 0 {
		t.Errorf("left behind: %v", es)
	}
}

// TestLevels: every deflate level reads back to the same pixels and the
// level changes the file. The plane is a synthetic registration channel
// (synth.RegScene: nuclei on noisy autofluorescence, few LZ matches worth
// having) whose first 300 rows are zero background (runs): Adaptive must
// beat Huffman-only (it codes the background tiles with LZ) and level 1
// (it codes the noise Huffman-only); level 9 is no larger than level 1.
func TestLevels(t *testing.T) {
	const w, h = 1100, 700
	scene, err := synth.NewRegScene(synth.RegOptions{H: h, W: w, Channels: 1, Seed: 5, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	planes, _, err := scene.RenderCycle(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	plane := planes[0]
	clear(plane.Pix[:300*w])
	ch := []Channel{{Name: "a", Load: func() (*raster.Gray16, error) { return plane, nil }}}
	dir := t.TempDir()
	size := map[int]int64{}
	for _, level := range []int{Adaptive, HuffmanOnly, BestSpeed, BestCompression} {
		path := filepath.Join(dir, strconv.Itoa(level)+".ome.tif")
		if err := Write(context.Background(), path, w, h, ch, Options{PixelSizeNM: 500, TileSize: 256, Level: level, Workers: 2}); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		size[level] = st.Size()
		got, err := tiffio.ReadGray16(path)
		if err != nil {
			t.Fatal(err)
		}
		samePlane(t, "level "+strconv.Itoa(level), got, plane)
		subs, err := tiffio.ReadGray16SubIFDs(path, 0)
		if err != nil || len(subs) != 1 {
			t.Fatalf("level %d: %d sub-levels, %v", level, len(subs), err)
		}
		samePlane(t, "level "+strconv.Itoa(level)+" sub-level", subs[0], Downsample(plane))
	}
	t.Logf("file sizes by level: %v", size)
	if !(size[Adaptive] < size[HuffmanOnly] && size[Adaptive] < size[BestSpeed] && size[BestCompression] <= size[BestSpeed]) {
		t.Errorf("file sizes by level %v: want adaptive (0) < Huffman-only (-2), adaptive < level 1, level 9 <= level 1", size)
	}
}

// TestSmallImageHasNoSubIFDs: an image below MinLevelSide is one level.
func TestSmallImageHasNoSubIFDs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.ome.tif")
	img := randPlane(rand.New(rand.NewPCG(2, 2)), 700, 33)
	ch := []Channel{{Name: "A", Load: func() (*raster.Gray16, error) { return img, nil }}}
	if err := Write(context.Background(), path, 700, 33, ch, Options{PixelSizeNM: 650}); err != nil {
		t.Fatal(err)
	}
	got, err := tiffio.ReadGray16(path)
	if err != nil {
		t.Fatal(err)
	}
	samePlane(t, "700x33", got, img)
	if subs, err := tiffio.ReadGray16SubIFDs(path, 0); err != nil || len(subs) != 0 {
		t.Errorf("sub-levels %d, %v; want none", len(subs), err)
	}
}

// TestOnePlaneAtATime: when a channel is loaded (while the one before is
// written), the heap holds the plane being written and the two reused sets
// of reduced levels (1/3 of a plane each) and write buffers, but not the
// plane written before it: below 2 planes above the first load (with it,
// 2 2/3 planes).
func TestOnePlaneAtATime(t *testing.T) {
	const w, h = 3000, 3000
	plane := int64(2 * w * h)
	var heap []int64
	ch := make([]Channel, 4)
	for c := range ch {
		ch[c] = Channel{Name: strconv.Itoa(c), Load: func() (*raster.Gray16, error) {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			heap = append(heap, int64(ms.HeapAlloc))
			return raster.NewGray16(w, h), nil // fresh each time, as read from a file
		}}
	}
	if err := Write(context.Background(), filepath.Join(t.TempDir(), "m.ome.tif"), w, h, ch, Options{PixelSizeNM: 1, Workers: 2}); err != nil {
		t.Fatal(err)
	}
	for c := 1; c < len(heap); c++ {
		if d := heap[c] - heap[0]; d > 2*plane {
			t.Errorf("heap at load of channel %d is %.1f MB above channel 0's (a plane is %.1f MB)", c, float64(d)/1e6, float64(plane)/1e6)
		}
	}
	t.Logf("heap at each load: %v bytes (plane %d)", heap, plane)
}

// TestLoadsAhead: the next channel is loaded (and downsampled) while the
// one before is written: the writing of channel c waits until channel
// c+1's load has started, which without the read-ahead never happens
// (the test fails after 20 s instead of hanging); loads are in order, once
// each; a load's error names its channel and is returned once the writer
// of the channel before has finished.
func TestLoadsAhead(t *testing.T) {
	const w, h = 1500, 1200
	rng := rand.New(rand.NewPCG(9, 9))
	planes := []*raster.Gray16{randPlane(rng, w, h), randPlane(rng, w, h), randPlane(rng, w, h)}
	started := make([]chan struct{}, len(planes))
	var loads []int
	ch := make([]Channel, len(planes))
	for c := range ch {
		started[c] = make(chan struct{})
		ch[c] = Channel{Name: strconv.Itoa(c), Load: func() (*raster.Gray16, error) {
			loads = append(loads, c) // one loader goroutine at a time
			close(started[c])
			return planes[c], nil
		}}
	}
	levels := len(LevelSizes(w, h))
	var written []int
	err := forEachLoaded(context.Background(), ch, w, h, levels, 2, func(c int, imgs []*raster.Gray16) error {
		if imgs[0] != planes[c] || len(imgs) != levels || !samePix(imgs[1], Downsample(planes[c])) {
			t.Errorf("channel %d: fn got another plane or its levels wrong", c)
		}
		if c+1 < len(planes) {
			select {
			case <-started[c+1]:
			case <-time.After(20 * time.Second):
				return fmt.Errorf("channel %d was not loaded while channel %d was written", c+1, c)
			}
		}
		written = append(written, c)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(loads, []int{0, 1, 2}) || !slices.Equal(written, []int{0, 1, 2}) {
		t.Errorf("loads %v, writes %v: want 0, 1, 2 each", loads, written)
	}

	for c := range ch {
		ch[c].Load = func() (*raster.Gray16, error) { return planes[c], nil }
	}
	ch[2].Load = func() (*raster.Gray16, error) { return nil, errors.New("disk on fire") }
	written = nil
	err = forEachLoaded(context.Background(), ch, w, h, levels, 2, func(c int, imgs []*raster.Gray16) error {
		written = append(written, c)
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), `channel 2 ("2"): load: disk on fire`) || !slices.Equal(written, []int{0, 1}) {
		t.Errorf("failing load: %v after writing %v; want channel 2's error after 0 and 1", err, written)
	}
}

func samePix(a, b *raster.Gray16) bool {
	return a.W == b.W && a.H == b.H && slices.Equal(a.Pix, b.Pix)
}

// TestDifferencePaths: the in-place uint16 differencing (little-endian
// hosts) writes the same bytes as the portable byte loop, for full rows,
// edge rows of every length (odd ones included) and extreme values.
func TestDifferencePaths(t *testing.T) {
	if !hostLittleEndian {
		t.Fatal("this test host is not little-endian: the native path cannot be compared here")
	}
	rng := rand.New(rand.NewPCG(9, 9))
	const ts = 64
	for cols := 1; cols <= ts; cols++ {
		src := make([]uint16, cols)
		for i := range src {
			src[i] = uint16(rng.Uint32())
			if i%5 == 2 {
				src[i] = 65535 * uint16(i&1)
			}
		}
		want := make([]byte, 2*ts)
		for i := range want {
			want[i] = 0xAB // both paths must overwrite every byte
		}
		got := bytes.Clone(want)
		differenceLE(want, src)
		differenceNative(unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(got))), ts), src)
		if !bytes.Equal(got, want) {
			t.Fatalf("%d of %d columns: native %v, portable %v", cols, ts, got, want)
		}
		// the portable path itself: decoding the differences gives src, then zeros
		var acc uint16
		for i := range ts {
			acc += binary.LittleEndian.Uint16(want[2*i:])
			var v uint16 // the zero padding
			if i < cols {
				v = src[i]
			}
			if acc != v {
				t.Fatalf("%d columns: sample %d decodes to %d, want %d", cols, i, acc, v)
			}
		}
	}
}

// TestRelease: each loaded plane is handed to Release once, after its
// channel is written: a Release that scribbles over the plane at once (as
// reuse would) leaves the same file as no Release, with every worker count
// and with a coder.
func TestRelease(t *testing.T) {
	const w, h = 1100, 700
	rng := rand.New(rand.NewPCG(5, 5))
	src := []*raster.Gray16{randPlane(rng, w, h), randPlane(rng, w, h), randPlane(rng, w, h)}
	dir := t.TempDir()
	write := func(name string, o Options, release bool) []byte {
		var released []int
		ch := make([]Channel, len(src))
		for c := range ch {
			ch[c] = Channel{Name: strconv.Itoa(c), Load: func() (*raster.Gray16, error) {
				return &raster.Gray16{W: w, H: h, Pix: slices.Clone(src[c].Pix)}, nil
			}}
			if release {
				ch[c].Release = func(g *raster.Gray16) {
					released = append(released, c)
					for i := range g.Pix {
						g.Pix[i] = 0xbeef
					}
				}
			}
		}
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name, "r.ome.tif") // the name is in the metadata
		if err := Write(context.Background(), path, w, h, ch, o); err != nil {
			t.Fatal(err)
		}
		if release && !slices.Equal(released, []int{0, 1, 2}) {
			t.Errorf("%s: released %v, want 0, 1, 2", name, released)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, o := range []Options{{Workers: 1}, {Workers: 4}, {Workers: 2, Coder: CPUCoder{}}} {
		o.PixelSizeNM, o.TileSize = 500, 256
		want := write("plain", o, false)
		if got := write("released", o, true); !bytes.Equal(got, want) {
			t.Errorf("workers %d, coder %v: releasing the planes changed the file", o.Workers, o.Coder != nil)
		}
	}
}
