package ometiff

import (
	"encoding/binary"
	"fmt"
)

// TIFF tags, field types and values written here.
const (
	tagNewSubfileType   = 254
	tagImageWidth       = 256
	tagImageLength      = 257
	tagBitsPerSample    = 258
	tagCompression      = 259
	tagPhotometric      = 262
	tagImageDescription = 270
	tagSamplesPerPixel  = 277
	tagPlanarConfig     = 284
	tagPredictor        = 317
	tagTileWidth        = 322
	tagTileLength       = 323
	tagTileOffsets      = 324
	tagTileByteCounts   = 325
	tagSubIFDs          = 330
	tagSampleFormat     = 339

	typeASCII = 2
	typeShort = 3
	typeLong  = 4
	typeLong8 = 16
	typeIFD8  = 18

	compDeflate    = 8
	predHorizontal = 2

	bigHeaderSize = 16
)

var le = binary.LittleEndian

// ifdSpec is one image (a channel's full-resolution plane or one of its
// reduced levels) as it appears in the file.
type ifdSpec struct {
	w, h     int
	reduced  bool   // NewSubfileType 1
	desc     string // ImageDescription; only the first IFD has one
	tileSize int
	// offsets and counts of the tiles, row-major; filled as they are written
	offsets, counts []uint64
	subs            []int // indices (in the spec list) of this IFD's reduced levels
	next            int   // index of the next IFD in the chain, -1 at the end
	pos             int64 // offset of the IFD in the file
}

func (s *ifdSpec) tilesAcross() int { return (s.w + s.tileSize - 1) / s.tileSize }
func (s *ifdSpec) tilesDown() int   { return (s.h + s.tileSize - 1) / s.tileSize }

// field is one IFD entry; data holds its values, little-endian.
type field struct {
	tag, typ uint16
	count    uint64
	data     []byte
}

func short(tag uint16, v int) field {
	return field{tag, typeShort, 1, le.AppendUint16(nil, uint16(v))}
}

func long(tag uint16, v int) field {
	return field{tag, typeLong, 1, le.AppendUint32(nil, uint32(v))}
}

func long8s(tag, typ uint16, vs []uint64) field {
	b := make([]byte, 0, 8*len(vs))
	for _, v := range vs {
		b = le.AppendUint64(b, v)
	}
	return field{tag, typ, uint64(len(vs)), b}
}

func ascii(tag uint16, s string) field {
	b := append([]byte(s), 0)
	return field{tag, typeASCII, uint64(len(b)), b}
}

// encode returns the IFD of s at s.pos followed by its out-of-line values,
// padded to a multiple of 8 bytes. Its length depends only on the tag set
// and the value counts, never on the values, so the layout can be fixed
// before any tile is written and the IFDs re-encoded once offsets are known.
func (s *ifdSpec) encode(specs []ifdSpec) []byte {
	sub := 0
	if s.reduced {
		sub = 1
	}
	fs := []field{
		long(tagNewSubfileType, sub),
		long(tagImageWidth, s.w),
		long(tagImageLength, s.h),
		short(tagBitsPerSample, 16),
		short(tagCompression, compDeflate),
		short(tagPhotometric, 1), // BlackIsZero
	}
	if s.desc != "" {
		fs = append(fs, ascii(tagImageDescription, s.desc))
	}
	fs = append(fs,
		short(tagSamplesPerPixel, 1),
		short(tagPlanarConfig, 1),
		short(tagPredictor, predHorizontal),
		long(tagTileWidth, s.tileSize),
		long(tagTileLength, s.tileSize),
		long8s(tagTileOffsets, typeLong8, s.offsets),
		long8s(tagTileByteCounts, typeLong8, s.counts),
	)
	if len(s.subs) > 0 {
		offs := make([]uint64, len(s.subs))
		for i, k := range s.subs {
			offs[i] = uint64(specs[k].pos)
		}
		fs = append(fs, long8s(tagSubIFDs, typeIFD8, offs))
	}
	fs = append(fs, short(tagSampleFormat, 1))
	var next int64
	if s.next >= 0 {
		next = specs[s.next].pos
	}
	return serializeIFD(s.pos, fs, next)
}

// serializeIFD lays out a BigTIFF IFD at pos: entry count, entries, next
// offset, then the values longer than 8 bytes, each on an 8-byte boundary.
func serializeIFD(pos int64, fs []field, next int64) []byte {
	n := int64(len(fs))
	head := 8 + 20*n + 8
	head += pad8(head) // values start on an 8-byte boundary (pos is one)
	b := make([]byte, 0, head)
	b = le.AppendUint64(b, uint64(n))
	var tail []byte
	for i, f := range fs {
		if i > 0 && f.tag <= fs[i-1].tag {
			panic(fmt.Sprintf("ometiff: tag %d after %d", f.tag, fs[i-1].tag))
		}
		b = le.AppendUint16(b, f.tag)
		b = le.AppendUint16(b, f.typ)
		b = le.AppendUint64(b, f.count)
		if len(f.data) <= 8 {
			var v [8]byte
			copy(v[:], f.data)
			b = append(b, v[:]...)
			continue
		}
		b = le.AppendUint64(b, uint64(pos+head+int64(len(tail))))
		tail = append(tail, f.data...)
		tail = append(tail, make([]byte, pad8(int64(len(tail))))...)
	}
	b = le.AppendUint64(b, uint64(next))
	b = append(b, make([]byte, head-int64(len(b)))...)
	return append(b, tail...)
}

// pad8 is the number of bytes that bring n to a multiple of 8.
func pad8(n int64) int64 { return (8 - n%8) % 8 }

// bigHeader is the BigTIFF header pointing at the first IFD.
func bigHeader(first int64) []byte {
	b := []byte("II")
	b = le.AppendUint16(b, 43)
	b = le.AppendUint16(b, 8)
	b = le.AppendUint16(b, 0)
	return le.AppendUint64(b, uint64(first))
}
