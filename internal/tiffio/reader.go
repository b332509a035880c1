package tiffio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
)

// TIFF tags used here.
const (
	tagNewSubfileType   = 254
	tagImageWidth       = 256
	tagImageLength      = 257
	tagBitsPerSample    = 258
	tagCompression      = 259
	tagPhotometric      = 262
	tagImageDescription = 270
	tagStripOffsets     = 273
	tagSamplesPerPixel  = 277
	tagRowsPerStrip     = 278
	tagStripByteCounts  = 279
	tagPlanarConfig     = 284
	tagPredictor        = 317
	tagTileWidth        = 322
	tagTileLength       = 323
	tagTileOffsets      = 324
	tagTileByteCounts   = 325
	tagSampleFormat     = 339
)

// Field types.
const (
	typeByte      = 1
	typeASCII     = 2
	typeShort     = 3
	typeLong      = 4
	typeRational  = 5
	typeSByte     = 6
	typeUndefined = 7
	typeSShort    = 8
	typeSLong     = 9
	typeSRational = 10
	typeFloat     = 11
	typeDouble    = 12
	typeIFD       = 13
	typeLong8     = 16
	typeSLong8    = 17
	typeIFD8      = 18
)

// Compression schemes.
const (
	compNone        = 1
	compLZW         = 5
	compDeflate     = 8
	compDeflateOld  = 32946
	compPackBits    = 32773
	predNone        = 1
	predHorizontal  = 2
	predFloatingPt  = 3
	sampleUint      = 1
	sampleInt       = 2
	sampleFloat     = 3
	sampleUndefined = 4
)

// maxImageBytes is the default cap on the decoded size of one page
// (file.maxImage), so that a corrupt header cannot make the reader allocate
// without bound. 16 GiB is far above any plane this pipeline handles (a
// stitched plane is ~190 MB).
const maxImageBytes int64 = 16 << 30

// maxRatio bounds the decoded/compressed size of one chunk for each
// compression (PackBits: 2 bytes give at most 128; Deflate: at most ~1032x;
// LZW: a 12-bit code stands for at most ~3840 bytes). A chunk claiming more
// is corrupt; checking this before allocating keeps a small corrupt file
// from claiming gigabytes. ratioSlack covers headers of tiny chunks.
var maxRatio = map[int]int64{compPackBits: 64, compDeflate: 1040, compDeflateOld: 1040, compLZW: 2600}

const ratioSlack = 64

// maxIFDEntries caps the entry count of one IFD (real files have < 100).
const maxIFDEntries = 1 << 16

func typeSize(t uint16) int {
	switch t {
	case typeByte, typeASCII, typeSByte, typeUndefined:
		return 1
	case typeShort, typeSShort:
		return 2
	case typeLong, typeSLong, typeFloat, typeIFD:
		return 4
	case typeRational, typeSRational, typeDouble, typeLong8, typeSLong8, typeIFD8:
		return 8
	}
	return 0
}

// file is an open TIFF: byte order, flavour and size, read with ReadAt.
type file struct {
	r     io.ReaderAt
	size  int64
	bo    binary.ByteOrder
	big   bool
	first int64 // offset of the first IFD
	// maxImage caps the decoded bytes of one page or tile (maxImageBytes;
	// the fuzz tests lower it so that corrupt sizes allocate little).
	maxImage int64

	decoded int64  // image bytes claimed by this read so far (claim)
	spanned uint64 // chunk bytes claimed by this read so far
}

// readAt fills p from offset off, or reports what was cut short.
func (f *file) readAt(p []byte, off int64, what string) error {
	if off < 0 || off > f.size || int64(len(p)) > f.size-off {
		return truncErr("%s needs %d bytes at offset %d, file has %d bytes", what, len(p), off, f.size)
	}
	n, err := f.r.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		return truncErr("%s needs %d bytes at offset %d, got %d", what, len(p), off, n)
	}
	return fmt.Errorf("read %s at offset %d: %w", what, off, err)
}

func openTIFF(r io.ReaderAt, size int64) (*file, error) {
	var h [16]byte
	if size < 8 {
		return nil, truncErr("file has %d bytes, a tiff header needs 8", size)
	}
	if err := (&file{r: r, size: size}).readAt(h[:8], 0, "header"); err != nil {
		return nil, err
	}
	f := &file{r: r, size: size, maxImage: maxImageBytes}
	switch string(h[:2]) {
	case "II":
		f.bo = binary.LittleEndian
	case "MM":
		f.bo = binary.BigEndian
	default:
		return nil, formatErr("not a tiff file (starts with %q)", h[:2])
	}
	switch v := f.bo.Uint16(h[2:]); v {
	case 42:
		f.first = int64(f.bo.Uint32(h[4:]))
	case 43:
		f.big = true
		if err := f.readAt(h[:16], 0, "bigtiff header"); err != nil {
			return nil, err
		}
		if bs, z := f.bo.Uint16(h[4:]), f.bo.Uint16(h[6:]); bs != 8 || z != 0 {
			return nil, formatErr("bigtiff header has offset size %d (want 8)", bs)
		}
		off := f.bo.Uint64(h[8:])
		if off > uint64(size) {
			return nil, truncErr("first ifd at offset %d is past the end (file has %d bytes)", off, size)
		}
		f.first = int64(off)
	default:
		return nil, formatErr("tiff version %d (want 42 or 43)", v)
	}
	if f.first == 0 {
		return nil, formatErr("file has no image (first ifd offset is 0)")
	}
	return f, nil
}

// entry is one raw IFD entry; val holds the value/offset field (4 or 8 bytes).
type entry struct {
	tag, typ uint16
	count    uint64
	val      [8]byte
}

type ifd struct {
	off     int64
	entries []entry
	next    int64
}

// ifdSizes gives the entry-count field size, entry size and next-offset size.
func (f *file) ifdSizes() (cnt, ent, nxt int64) {
	if f.big {
		return 8, 20, 8
	}
	return 2, 12, 4
}

// readIFDHeader reads the entry count of the IFD at off.
func (f *file) readIFDCount(off int64, page int) (int64, error) {
	cnt, ent, _ := f.ifdSizes()
	var b [8]byte
	if err := f.readAt(b[:cnt], off, fmt.Sprintf("ifd %d", page)); err != nil {
		return 0, err
	}
	var n uint64
	if f.big {
		n = f.bo.Uint64(b[:])
	} else {
		n = uint64(f.bo.Uint16(b[:]))
	}
	if n == 0 {
		return 0, formatErr("ifd %d at offset %d has no entries", page, off)
	}
	if n > maxIFDEntries || int64(n) > (f.size-off)/ent {
		return 0, truncErr("ifd %d at offset %d claims %d entries, file has %d bytes", page, off, n, f.size)
	}
	return int64(n), nil
}

func (f *file) nextOffset(b []byte) int64 {
	if f.big {
		v := f.bo.Uint64(b)
		if v > uint64(f.size) {
			return -1
		}
		return int64(v)
	}
	return int64(f.bo.Uint32(b))
}

// readIFD reads the IFD of page number page at off.
func (f *file) readIFD(off int64, page int) (*ifd, error) {
	n, err := f.readIFDCount(off, page)
	if err != nil {
		return nil, err
	}
	cnt, ent, nxt := f.ifdSizes()
	buf := make([]byte, n*ent+nxt)
	if err := f.readAt(buf, off+cnt, fmt.Sprintf("ifd %d", page)); err != nil {
		return nil, err
	}
	d := &ifd{off: off, entries: make([]entry, n)}
	for i := range d.entries {
		b := buf[int64(i)*ent:]
		e := &d.entries[i]
		e.tag = f.bo.Uint16(b)
		e.typ = f.bo.Uint16(b[2:])
		if f.big {
			e.count = f.bo.Uint64(b[4:])
			copy(e.val[:], b[12:20])
		} else {
			e.count = uint64(f.bo.Uint32(b[4:]))
			copy(e.val[:4], b[8:12])
		}
	}
	d.next = f.nextOffset(buf[n*ent:])
	if d.next < 0 {
		return nil, truncErr("ifd %d points to a next ifd past the end of the file", page)
	}
	return d, nil
}

// nextIFD returns the next-IFD offset of the IFD at off without decoding it.
func (f *file) nextIFD(off int64, page int) (int64, error) {
	n, err := f.readIFDCount(off, page)
	if err != nil {
		return 0, err
	}
	cnt, ent, nxt := f.ifdSizes()
	var b [8]byte
	if err := f.readAt(b[:nxt], off+cnt+n*ent, fmt.Sprintf("ifd %d", page)); err != nil {
		return 0, err
	}
	next := f.nextOffset(b[:])
	if next < 0 {
		return 0, truncErr("ifd %d points to a next ifd past the end of the file", page)
	}
	return next, nil
}

// walk calls fn with the offset of every IFD in the chain, in order, until fn
// returns false or the chain ends; loops in the chain are format errors.
func (f *file) walk(fn func(page int, off int64) (more bool, err error)) error {
	seen := make(map[int64]bool)
	off := f.first
	for page := 0; off != 0; page++ {
		if seen[off] {
			return formatErr("ifd chain loops back to offset %d at page %d", off, page)
		}
		seen[off] = true
		more, err := fn(page, off)
		if err != nil || !more {
			return err
		}
		if off, err = f.nextIFD(off, page); err != nil {
			return err
		}
	}
	return nil
}

func (d *ifd) find(tag uint16) *entry {
	for i := range d.entries {
		if d.entries[i].tag == tag {
			return &d.entries[i]
		}
	}
	return nil
}

// uints decodes an integer-typed entry; limit caps the count accepted.
func (f *file) uints(e *entry, page int) ([]uint64, error) {
	sz := typeSize(e.typ)
	switch e.typ {
	case typeByte, typeUndefined, typeShort, typeLong, typeIFD, typeLong8, typeIFD8:
	default:
		return nil, formatErr("page %d: tag %d has type %d, want an unsigned integer", page, e.tag, e.typ)
	}
	if e.count == 0 {
		return nil, formatErr("page %d: tag %d has no values", page, e.tag)
	}
	if e.count > uint64(f.size)/uint64(sz)+1 {
		return nil, truncErr("page %d: tag %d claims %d values, file has %d bytes", page, e.tag, e.count, f.size)
	}
	total := int(e.count) * sz
	inline := 4
	if f.big {
		inline = 8
	}
	var raw []byte
	if total <= inline {
		raw = e.val[:total]
	} else {
		var off uint64
		if f.big {
			off = f.bo.Uint64(e.val[:])
		} else {
			off = uint64(f.bo.Uint32(e.val[:]))
		}
		if off > uint64(f.size) {
			return nil, truncErr("page %d: tag %d values at offset %d are past the end (file has %d bytes)", page, e.tag, off, f.size)
		}
		raw = make([]byte, total)
		if err := f.readAt(raw, int64(off), fmt.Sprintf("page %d tag %d", page, e.tag)); err != nil {
			return nil, err
		}
	}
	out := make([]uint64, e.count)
	switch sz {
	case 1:
		for i := range out {
			out[i] = uint64(raw[i])
		}
	case 2:
		for i := range out {
			out[i] = uint64(f.bo.Uint16(raw[2*i:]))
		}
	case 4:
		for i := range out {
			out[i] = uint64(f.bo.Uint32(raw[4*i:]))
		}
	case 8:
		for i := range out {
			out[i] = f.bo.Uint64(raw[8*i:])
		}
	}
	return out, nil
}

// scalar reads a tag that must have one value (or, for per-sample tags, all
// values equal); def is returned when the tag is absent.
func (f *file) scalar(d *ifd, tag uint16, def uint64, page int) (uint64, error) {
	e := d.find(tag)
	if e == nil {
		return def, nil
	}
	v, err := f.uints(e, page)
	if err != nil {
		return 0, err
	}
	for _, x := range v[1:] {
		if x != v[0] {
			return 0, unsupErr("page %d: tag %d has differing per-sample values %v", page, tag, v)
		}
	}
	return v[0], nil
}

// page is a parsed IFD: what is needed to describe and decode one image.
type page struct {
	index                      int
	width, height              int
	bps, sf, spp               int
	compression, predictor     int
	planar                     int
	tiled                      bool
	chunkW, chunkH             int // tile size, or (width, rows per strip)
	offsets, counts            []uint64
	hasCounts                  bool
	chunksAcross, chunksDown   int
	bytesPerSample, imageBytes int64
}

const maxDim = 1<<31 - 1

// parsePage decodes the structural tags of an IFD. Data-layout tags are
// read only when layout is true (ReadInfo does not need them).
func (f *file) parsePage(d *ifd, index int, layout bool) (*page, error) {
	p := &page{index: index}
	get := func(tag uint16, def uint64, min, max uint64, name string) (int, error) {
		v, err := f.scalar(d, tag, def, index)
		if err != nil {
			return 0, err
		}
		if v < min || v > max {
			return 0, formatErr("page %d: %s is %d", index, name, v)
		}
		return int(v), nil
	}
	var err error
	if d.find(tagImageWidth) == nil || d.find(tagImageLength) == nil {
		return nil, formatErr("page %d: missing image width or length", index)
	}
	if p.width, err = get(tagImageWidth, 0, 1, maxDim, "image width"); err != nil {
		return nil, err
	}
	if p.height, err = get(tagImageLength, 0, 1, maxDim, "image length"); err != nil {
		return nil, err
	}
	if p.spp, err = get(tagSamplesPerPixel, 1, 1, 1<<15, "samples per pixel"); err != nil {
		return nil, err
	}
	if p.bps, err = get(tagBitsPerSample, 1, 1, 128, "bits per sample"); err != nil {
		return nil, err
	}
	if p.sf, err = get(tagSampleFormat, sampleUint, 1, 1<<16, "sample format"); err != nil {
		return nil, err
	}
	if !layout {
		return p, nil
	}
	if p.compression, err = get(tagCompression, compNone, 0, 1<<16, "compression"); err != nil {
		return nil, err
	}
	if p.predictor, err = get(tagPredictor, predNone, 0, 1<<16, "predictor"); err != nil {
		return nil, err
	}
	if p.planar, err = get(tagPlanarConfig, 1, 1, 2, "planar configuration"); err != nil {
		return nil, err
	}
	if err := p.checkDecodable(); err != nil {
		return nil, err
	}
	p.bytesPerSample = int64(p.bps / 8)
	ib, ok := mul3(int64(p.width), int64(p.height), p.bytesPerSample)
	if !ok || ib > f.maxImage {
		return nil, unsupErr("page %d: %dx%d %d-bit image exceeds the %d-byte limit", index, p.width, p.height, p.bps, f.maxImage)
	}
	p.imageBytes = ib

	offTag, cntTag := uint16(tagStripOffsets), uint16(tagStripByteCounts)
	if d.find(tagTileWidth) != nil || d.find(tagTileLength) != nil {
		p.tiled = true
		offTag, cntTag = tagTileOffsets, tagTileByteCounts
		if p.chunkW, err = get(tagTileWidth, 0, 1, maxDim, "tile width"); err != nil {
			return nil, err
		}
		if p.chunkH, err = get(tagTileLength, 0, 1, maxDim, "tile length"); err != nil {
			return nil, err
		}
		// A tile larger than the image (rounded up to TIFF's multiple of 16)
		// and than 4096 px would only make a small image claim a large buffer.
		if lim := max(ceilDiv(p.width, 16)*16, 4096); p.chunkW > lim {
			return nil, unsupErr("page %d: tile width %d for an image %d wide (at most %d)", index, p.chunkW, p.width, lim)
		}
		if lim := max(ceilDiv(p.height, 16)*16, 4096); p.chunkH > lim {
			return nil, unsupErr("page %d: tile length %d for an image %d long (at most %d)", index, p.chunkH, p.height, lim)
		}
		tb, ok := mul3(int64(p.chunkW), int64(p.chunkH), p.bytesPerSample)
		if !ok || tb > f.maxImage {
			return nil, unsupErr("page %d: %dx%d tiles exceed the %d-byte limit", index, p.chunkW, p.chunkH, f.maxImage)
		}
	} else {
		rps, err := f.scalar(d, tagRowsPerStrip, 1<<32-1, index)
		if err != nil {
			return nil, err
		}
		if rps == 0 {
			return nil, formatErr("page %d: rows per strip is 0", index)
		}
		p.chunkW = p.width
		p.chunkH = int(min(rps, uint64(p.height)))
	}
	p.chunksAcross = ceilDiv(p.width, p.chunkW)
	p.chunksDown = ceilDiv(p.height, p.chunkH)
	n := p.chunksAcross * p.chunksDown // each factor < 2^31
	kind := p.chunkKind()
	oe := d.find(offTag)
	if oe == nil {
		return nil, formatErr("page %d: missing %s offsets", index, kind)
	}
	if p.offsets, err = f.uints(oe, index); err != nil {
		return nil, err
	}
	if len(p.offsets) < n {
		return nil, formatErr("page %d: %d %s offsets, image needs %d", index, len(p.offsets), kind, n)
	}
	if ce := d.find(cntTag); ce != nil {
		if p.counts, err = f.uints(ce, index); err != nil {
			return nil, err
		}
		if len(p.counts) < n {
			return nil, formatErr("page %d: %d %s byte counts, image needs %d", index, len(p.counts), kind, n)
		}
		p.hasCounts = true
	} else if p.compression != compNone {
		return nil, formatErr("page %d: missing %s byte counts", index, kind)
	}
	if err := p.checkChunks(f.size); err != nil {
		return nil, err
	}
	return p, nil
}

// chunkNeed is the decoded size of chunk i: whole tiles, or the rows of a
// strip that lie inside the image.
func (p *page) chunkNeed(i int) int64 {
	rows := p.chunkH
	if !p.tiled {
		rows = min(p.chunkH, p.height-(i/p.chunksAcross)*p.chunkH)
	}
	return int64(p.chunkW) * int64(rows) * p.bytesPerSample
}

// checkChunks verifies, before anything is allocated, that every chunk lies
// inside the file and can hold the data it must decode to.
func (p *page) checkChunks(size int64) error {
	kind := p.chunkKind()
	for i := range p.chunksAcross * p.chunksDown {
		off, need := p.offsets[i], p.chunkNeed(i)
		if off > uint64(size) {
			return truncErr("%s %d of page %d starts at offset %d, file has %d bytes", kind, i, p.index, off, size)
		}
		if p.compression == compNone {
			if p.hasCounts && p.counts[i] < uint64(need) {
				return formatErr("%s %d of page %d has %d bytes, %d needed", kind, i, p.index, p.counts[i], need)
			}
			if uint64(need) > uint64(size)-off {
				return truncErr("%s %d of page %d needs %d bytes at offset %d, file has %d bytes", kind, i, p.index, need, off, size)
			}
			continue
		}
		n := p.counts[i]
		if n > uint64(size)-off {
			return truncErr("%s %d of page %d needs %d bytes at offset %d, file has %d bytes", kind, i, p.index, n, off, size)
		}
		if need > int64(n)*maxRatio[p.compression]+ratioSlack {
			return formatErr("%s %d of page %d: %d compressed bytes cannot decode to %d", kind, i, p.index, n, need)
		}
	}
	return nil
}

func (p *page) chunkKind() string {
	if p.tiled {
		return "tile"
	}
	return "strip"
}

// checkDecodable rejects what the decoder does not handle.
func (p *page) checkDecodable() error {
	if p.spp != 1 {
		return unsupErr("page %d has %d samples per pixel (only 1 is supported)", p.index, p.spp)
	}
	if _, ok := sampleKind(p.sf, p.bps); !ok {
		return unsupErr("page %d has %s samples", p.index, p.describeSample())
	}
	switch p.compression {
	case compNone, compLZW, compDeflate, compDeflateOld, compPackBits:
	default:
		return unsupErr("page %d uses compression %d", p.index, p.compression)
	}
	switch p.predictor {
	case predNone, predHorizontal:
	case predFloatingPt:
		if p.sf != sampleFloat {
			return formatErr("page %d: floating-point predictor on %s samples", p.index, p.describeSample())
		}
	default:
		return unsupErr("page %d uses predictor %d", p.index, p.predictor)
	}
	return nil
}

// describeSample names the sample type, e.g. "32-bit float".
func (p *page) describeSample() string {
	return describeSample(p.sf, p.bps)
}

func describeSample(sf, bps int) string {
	switch sf {
	case sampleUint:
		return fmt.Sprintf("%d-bit unsigned", bps)
	case sampleInt:
		return fmt.Sprintf("%d-bit signed", bps)
	case sampleFloat:
		return fmt.Sprintf("%d-bit float", bps)
	case sampleUndefined:
		return fmt.Sprintf("%d-bit undefined-format", bps)
	}
	return fmt.Sprintf("%d-bit sample-format-%d", bps, sf)
}

// Sample kinds the decoder converts.
const (
	kU8 = iota
	kU16
	kU32
	kI8
	kI16
	kI32
	kF32
	kF64
)

func sampleKind(sf, bps int) (int, bool) {
	switch {
	case sf == sampleUint && bps == 8:
		return kU8, true
	case sf == sampleUint && bps == 16:
		return kU16, true
	case sf == sampleUint && bps == 32:
		return kU32, true
	case sf == sampleInt && bps == 8:
		return kI8, true
	case sf == sampleInt && bps == 16:
		return kI16, true
	case sf == sampleInt && bps == 32:
		return kI32, true
	case sf == sampleFloat && bps == 32:
		return kF32, true
	case sf == sampleFloat && bps == 64:
		return kF64, true
	}
	return 0, false
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// mul3 multiplies non-negative a*b*c, reporting overflow of int64.
func mul3(a, b, c int64) (int64, bool) {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > 1<<62 {
		return 0, false
	}
	hi, lo = bits.Mul64(lo, uint64(c))
	if hi != 0 || lo > 1<<62 {
		return 0, false
	}
	return int64(lo), true
}
