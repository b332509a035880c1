package tiffio

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"slices"
)

// A TIFF builder for tests, written independently of the package's writer:
// any byte order, classic or BigTIFF, strips or tiles, compression none,
// Deflate, LZW (encoder below) or PackBits, predictors 2 and 3, IFDs after
// the pixel data, and a hook to corrupt tags.

type byteOrder interface {
	binary.ByteOrder
	binary.AppendByteOrder
}

type buildOpts struct {
	order        byteOrder
	big          bool
	bps, sf      int
	comp, pred   int
	rps          int // rows per strip (0: whole image)
	tileW, tileH int // tiles when non-zero
	mutate       func(page int, tags map[uint16]tagVal)
}

type tagVal struct {
	typ  uint16
	vals []uint64
}

// buildPage holds one page's samples as raw bit patterns (uint16 counts,
// float32 bits, ...), row-major.
type buildPage struct {
	w, h    int
	samples []uint64
}

func putSample(dst []byte, v uint64, size int, bo binary.ByteOrder) {
	switch size {
	case 1:
		dst[0] = byte(v)
	case 2:
		bo.PutUint16(dst, uint16(v))
	case 4:
		bo.PutUint32(dst, uint32(v))
	case 8:
		bo.PutUint64(dst, v)
	}
}

func getSample(src []byte, size int, bo binary.ByteOrder) uint64 {
	switch size {
	case 1:
		return uint64(src[0])
	case 2:
		return uint64(bo.Uint16(src))
	case 4:
		return uint64(bo.Uint32(src))
	}
	return bo.Uint64(src)
}

// predictRow applies the predictor to one row of samples in place.
func predictRow(row []byte, size, pred int, bo binary.ByteOrder) {
	n := len(row) / size
	switch pred {
	case predHorizontal:
		for i := n - 1; i > 0; i-- {
			d := getSample(row[i*size:], size, bo) - getSample(row[(i-1)*size:], size, bo)
			putSample(row[i*size:], d, size, bo)
		}
	case predFloatingPt:
		tmp := make([]byte, len(row))
		for s := range n {
			v := getSample(row[s*size:], size, bo)
			for b := range size { // plane b holds byte b counted from the most significant
				tmp[b*n+s] = byte(v >> (8 * (size - 1 - b)))
			}
		}
		for i := len(tmp) - 1; i > 0; i-- {
			tmp[i] -= tmp[i-1]
		}
		copy(row, tmp)
	}
}

func compress(data []byte, comp int) []byte {
	switch comp {
	case compDeflate, compDeflateOld:
		var b bytes.Buffer
		zw := zlib.NewWriter(&b)
		zw.Write(data)
		zw.Close()
		return b.Bytes()
	case compLZW:
		return lzwEncode(data)
	case compPackBits:
		return packBits(data)
	}
	return slices.Clone(data)
}

// lzwEncode is a TIFF LZW encoder (MSB-first codes, early change, a clear
// code first and whenever the table fills).
func lzwEncode(src []byte) []byte {
	var out []byte
	var acc uint64
	var nbits uint
	width := uint(9)
	put := func(code int) {
		acc = acc<<width | uint64(code)
		nbits += width
		for nbits >= 8 {
			out = append(out, byte(acc>>(nbits-8)))
			nbits -= 8
		}
	}
	dict := map[int]int{}
	next := lzwFirst
	put(lzwClear)
	grow := func() {
		next++
		if next == 4094 {
			put(lzwClear)
			clear(dict)
			next, width = lzwFirst, 9
		} else if next == 1<<width && width < 12 {
			width++
		}
	}
	if len(src) > 0 {
		prefix := int(src[0])
		for _, b := range src[1:] {
			key := prefix<<8 | int(b)
			if c, ok := dict[key]; ok {
				prefix = c
				continue
			}
			put(prefix)
			dict[key] = next
			grow()
			prefix = int(b)
		}
		put(prefix)
		next++ // the decoder adds an entry on reading this code
		if next == 1<<width && width < 12 {
			width++
		}
	}
	put(lzwEOI)
	if nbits > 0 {
		out = append(out, byte(acc<<(8-nbits)))
	}
	return out
}

// packBits encodes runs of 3+ equal bytes as repeats, the rest as literals.
func packBits(src []byte) []byte {
	var out []byte
	for i := 0; i < len(src); {
		run := 1
		for i+run < len(src) && run < 128 && src[i+run] == src[i] {
			run++
		}
		if run >= 3 {
			out = append(out, byte(int8(1-run)), src[i])
			i += run
			continue
		}
		j := i
		for j < len(src) && j-i < 128 {
			if j+2 < len(src) && src[j] == src[j+1] && src[j] == src[j+2] {
				break
			}
			j++
		}
		out = append(out, byte(j-i-1))
		out = append(out, src[i:j]...)
		i = j
	}
	return out
}

// buildTIFF assembles a file: header, every page's chunks, then the IFDs.
func buildTIFF(pages []buildPage, o buildOpts) []byte {
	bo := o.order
	if bo == nil {
		bo = binary.LittleEndian
	}
	le := bo == byteOrder(binary.LittleEndian)
	size := o.bps / 8
	var buf []byte
	if le {
		buf = []byte("II")
	} else {
		buf = []byte("MM")
	}
	firstPtr := 4
	if o.big {
		buf = bo.AppendUint16(buf, 43)
		buf = bo.AppendUint16(buf, 8)
		buf = bo.AppendUint16(buf, 0)
		firstPtr = 8
		buf = bo.AppendUint64(buf, 0)
	} else {
		buf = bo.AppendUint16(buf, 42)
		buf = bo.AppendUint32(buf, 0)
	}
	prevPtr := firstPtr // where the offset of the next IFD goes
	tagsPerPage := make([]map[uint16]tagVal, len(pages))
	for pi, p := range pages {
		cw, ch := p.w, o.rps
		if ch == 0 {
			ch = p.h
		}
		tiled := o.tileW > 0
		if tiled {
			cw, ch = o.tileW, o.tileH
		}
		across, down := ceilDiv(p.w, cw), ceilDiv(p.h, ch)
		var offs, cnts []uint64
		for cy := range down {
			for cx := range across {
				rows := ch
				if !tiled {
					rows = min(ch, p.h-cy*ch)
				}
				raw := make([]byte, rows*cw*size)
				for r := range rows {
					y := cy*ch + r
					for c := range cw {
						x := cx*cw + c
						if y < p.h && x < p.w {
							putSample(raw[(r*cw+c)*size:], p.samples[y*p.w+x], size, bo)
						}
					}
					predictRow(raw[r*cw*size:(r+1)*cw*size], size, o.pred, bo)
				}
				data := compress(raw, o.comp)
				offs = append(offs, uint64(len(buf)))
				cnts = append(cnts, uint64(len(data)))
				buf = append(buf, data...)
				if len(buf)%2 == 1 {
					buf = append(buf, 0)
				}
			}
		}
		offType := uint16(typeLong)
		if o.big {
			offType = typeLong8
		}
		dimType := uint16(typeShort)
		if p.w > 65535 || p.h > 65535 {
			dimType = typeLong
		}
		tags := map[uint16]tagVal{
			tagNewSubfileType:  {typeLong, []uint64{0}},
			tagImageWidth:      {dimType, []uint64{uint64(p.w)}},
			tagImageLength:     {dimType, []uint64{uint64(p.h)}},
			tagBitsPerSample:   {typeShort, []uint64{uint64(o.bps)}},
			tagCompression:     {typeShort, []uint64{uint64(max(o.comp, 1))}},
			tagPhotometric:     {typeShort, []uint64{1}},
			tagSamplesPerPixel: {typeShort, []uint64{1}},
			tagPlanarConfig:    {typeShort, []uint64{1}},
			tagSampleFormat:    {typeShort, []uint64{uint64(o.sf)}},
		}
		if o.pred > 1 {
			tags[tagPredictor] = tagVal{typeShort, []uint64{uint64(o.pred)}}
		}
		if tiled {
			tags[tagTileWidth] = tagVal{typeLong, []uint64{uint64(cw)}}
			tags[tagTileLength] = tagVal{typeShort, []uint64{uint64(ch)}}
			tags[tagTileOffsets] = tagVal{offType, offs}
			tags[tagTileByteCounts] = tagVal{typeLong, cnts}
		} else {
			tags[tagRowsPerStrip] = tagVal{typeLong, []uint64{uint64(ch)}}
			tags[tagStripOffsets] = tagVal{offType, offs}
			tags[tagStripByteCounts] = tagVal{typeShort, cnts}
			if slices.Max(cnts) > 65535 {
				tags[tagStripByteCounts] = tagVal{typeLong, cnts}
			}
		}
		if o.mutate != nil {
			o.mutate(pi, tags)
		}
		tagsPerPage[pi] = tags
		// IFD: out-of-line arrays first, then the IFD itself.
		inline := 4
		if o.big {
			inline = 8
		}
		keys := slices.Sorted(func(yield func(uint16) bool) {
			for k := range tags {
				if !yield(k) {
					return
				}
			}
		})
		vals := make(map[uint16][]byte)
		for _, k := range keys {
			tv := tags[k]
			ts := typeSize(tv.typ)
			var b []byte
			for _, v := range tv.vals {
				b = append(b, make([]byte, ts)...)
				putSample(b[len(b)-ts:], v, ts, bo)
			}
			if len(b) > inline {
				off := len(buf)
				buf = append(buf, b...)
				if len(buf)%2 == 1 {
					buf = append(buf, 0)
				}
				b = make([]byte, inline)
				putSample(b, uint64(off), inline, bo)
			}
			vals[k] = append(b, make([]byte, inline-len(b))...)
		}
		ifdOff := len(buf)
		putSample(buf[prevPtr:], uint64(ifdOff), firstPtr, bo)
		if o.big {
			buf = bo.AppendUint64(buf, uint64(len(keys)))
		} else {
			buf = bo.AppendUint16(buf, uint16(len(keys)))
		}
		for _, k := range keys {
			buf = bo.AppendUint16(buf, k)
			buf = bo.AppendUint16(buf, tags[k].typ)
			if o.big {
				buf = bo.AppendUint64(buf, uint64(len(tags[k].vals)))
			} else {
				buf = bo.AppendUint32(buf, uint32(len(tags[k].vals)))
			}
			buf = append(buf, vals[k]...)
		}
		prevPtr = len(buf)
		buf = append(buf, make([]byte, firstPtr)...) // next IFD: 0 unless patched
	}
	return buf
}
