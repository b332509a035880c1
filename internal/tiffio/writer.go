package tiffio

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"

	"github.com/kintsugi-hpc/kintsugi-go/internal/atomicfile"
)

// outPage describes one page to write: size, sample type and an encoder
// that writes rows [y0, y1) as little-endian samples into dst; raw, when
// not nil, is all those bytes already in memory (fastpath.go).
type outPage struct {
	w, h, bps, sf int
	encode        func(dst []byte, y0, y1 int)
	raw           []byte
}

// Writer settings.
const (
	targetStripBytes = 512 << 10 // rows per strip chosen so strips are about this size
	writeBufferBytes = 1 << 20
	// classicLimit is the largest file written as classic TIFF; beyond it
	// offsets would not fit 32 bits (with a margin for rounding slack).
	classicLimit = 1<<32 - 1<<20
	filePerm     = 0o666 // under the umask, as creat(2)
)

// writeOptions are the writer's settings; the exported writers use the zero
// value.
type writeOptions struct {
	// bigTIFF writes BigTIFF whatever the size (by default a file is classic
	// TIFF when it fits classicLimit); the tests set it.
	bigTIFF bool
}

// pageLayout is the precomputed placement of one page in the output file.
type pageLayout struct {
	ifdOff       int64 // offset of the IFD
	nEntries     int
	arraysOff    int64 // out-of-line strip offsets then byte counts
	dataOff      int64 // first strip
	rowsPerStrip int
	nStrips      int
	rowBytes     int64
	end          int64 // end of this page's data
}

func rowsPerStrip(rowBytes int64, h int) int {
	r := max(1, targetStripBytes/rowBytes)
	return int(min(r, int64(h)))
}

const nEntries = 11

// layout places every page for a classic (big=false) or BigTIFF file and
// returns the total size.
func layout(pages []outPage, big bool) ([]pageLayout, int64) {
	hdr, cnt, ent, nxt, word := int64(8), int64(2), int64(12), int64(4), int64(4)
	if big {
		hdr, cnt, ent, nxt, word = 16, 8, 20, 8, 8
	}
	out := make([]pageLayout, len(pages))
	pos := hdr
	for i, p := range pages {
		l := &out[i]
		l.rowBytes = int64(p.w) * int64(p.bps/8)
		l.rowsPerStrip = rowsPerStrip(l.rowBytes, p.h)
		l.nStrips = ceilDiv(p.h, l.rowsPerStrip)
		l.nEntries = nEntries
		l.ifdOff = pos
		pos += cnt + int64(l.nEntries)*ent + nxt
		l.arraysOff = pos
		if l.nStrips > 1 { // arrays of one value fit in the entry
			pos += 2 * int64(l.nStrips) * word
		}
		pos = (pos + 15) &^ 15 // start the pixels on a 16-byte boundary
		l.dataOff = pos
		pos += l.rowBytes * int64(p.h)
		pos = (pos + 1) &^ 1 // IFDs must start on a word boundary
		l.end = pos
	}
	return out, pos
}

// writePages writes pages atomically to path.
func writePages(path string, pages []outPage, o writeOptions) error {
	if len(pages) == 0 {
		return fmt.Errorf("tiff %s: no pages to write", path)
	}
	lay, size := layout(pages, false)
	big := o.bigTIFF || size > classicLimit
	if big {
		lay, _ = layout(pages, true)
	}
	err := atomicfile.Write(path, filePerm, func(w io.Writer) error {
		bw := bufio.NewWriterSize(w, writeBufferBytes)
		if err := encodeFile(bw, pages, lay, big); err != nil {
			return err
		}
		return bw.Flush()
	})
	if err != nil {
		return fmt.Errorf("tiff %s: %w", path, err)
	}
	return nil
}

func encodeFile(bw *bufio.Writer, pages []outPage, lay []pageLayout, big bool) error {
	le := binary.LittleEndian
	var hdr []byte
	if big {
		hdr = le.AppendUint16([]byte("II"), 43)
		hdr = le.AppendUint16(hdr, 8)
		hdr = le.AppendUint16(hdr, 0)
		hdr = le.AppendUint64(hdr, uint64(lay[0].ifdOff))
	} else {
		hdr = le.AppendUint16([]byte("II"), 42)
		hdr = le.AppendUint32(hdr, uint32(lay[0].ifdOff))
	}
	if _, err := bw.Write(hdr); err != nil {
		return err
	}
	pos := int64(len(hdr))
	var scratch []byte
	for i, p := range pages {
		l := lay[i]
		var next int64
		if i+1 < len(pages) {
			next = lay[i+1].ifdOff
		}
		meta := encodeIFD(p, l, next, big)
		if pos != l.ifdOff {
			panic("tiffio: layout mismatch")
		}
		// meta covers the IFD and arrays; pad up to the pixel data.
		meta = append(meta, make([]byte, l.dataOff-l.ifdOff-int64(len(meta)))...)
		if _, err := bw.Write(meta); err != nil {
			return err
		}
		if err := writePixels(bw, p, l, &scratch); err != nil {
			return err
		}
		pos = l.dataOff + l.rowBytes*int64(p.h)
		if pad := l.end - pos; pad > 0 {
			if _, err := bw.Write(make([]byte, pad)); err != nil {
				return err
			}
			pos += pad
		}
	}
	return nil
}

// encodeIFD returns the IFD of a page followed by its out-of-line arrays.
func encodeIFD(p outPage, l pageLayout, next int64, big bool) []byte {
	le := binary.LittleEndian
	var b []byte
	if big {
		b = le.AppendUint64(b, uint64(l.nEntries))
	} else {
		b = le.AppendUint16(b, uint16(l.nEntries))
	}
	offType := uint16(typeLong)
	if big {
		offType = typeLong8
	}
	// entry appends one entry whose value is v (inline) or, for arrays,
	// the offset of the array.
	entry := func(tag, typ uint16, count uint64, v uint64) {
		b = le.AppendUint16(b, tag)
		b = le.AppendUint16(b, typ)
		if big {
			b = le.AppendUint64(b, count)
		} else {
			b = le.AppendUint32(b, uint32(count))
		}
		var val [8]byte
		switch {
		case count > 1: // an offset
			le.PutUint64(val[:], v)
		case typ == typeShort:
			le.PutUint16(val[:], uint16(v))
		case typ == typeLong:
			le.PutUint32(val[:], uint32(v))
		default:
			le.PutUint64(val[:], v)
		}
		if big {
			b = append(b, val[:8]...)
		} else {
			b = append(b, val[:4]...)
		}
	}
	word := int64(4)
	if big {
		word = 8
	}
	stripBytes := l.rowBytes * int64(l.rowsPerStrip)
	lastBytes := l.rowBytes * int64(p.h-(l.nStrips-1)*l.rowsPerStrip)
	offsVal, cntsVal := uint64(l.dataOff), uint64(lastBytes) // one strip: inline
	if l.nStrips > 1 {
		offsVal = uint64(l.arraysOff)
		cntsVal = uint64(l.arraysOff + int64(l.nStrips)*word)
	}
	entry(tagImageWidth, typeLong, 1, uint64(p.w))
	entry(tagImageLength, typeLong, 1, uint64(p.h))
	entry(tagBitsPerSample, typeShort, 1, uint64(p.bps))
	entry(tagCompression, typeShort, 1, compNone)
	entry(tagPhotometric, typeShort, 1, 1) // BlackIsZero
	entry(tagStripOffsets, offType, uint64(l.nStrips), offsVal)
	entry(tagSamplesPerPixel, typeShort, 1, 1)
	entry(tagRowsPerStrip, typeLong, 1, uint64(l.rowsPerStrip))
	entry(tagStripByteCounts, offType, uint64(l.nStrips), cntsVal)
	entry(tagPlanarConfig, typeShort, 1, 1)
	entry(tagSampleFormat, typeShort, 1, uint64(p.sf))
	if big {
		b = le.AppendUint64(b, uint64(next))
	} else {
		b = le.AppendUint32(b, uint32(next))
	}
	if l.nStrips > 1 {
		put := func(v int64) {
			if big {
				b = le.AppendUint64(b, uint64(v))
			} else {
				b = le.AppendUint32(b, uint32(v))
			}
		}
		for s := range l.nStrips {
			put(l.dataOff + int64(s)*stripBytes)
		}
		for s := range l.nStrips {
			if s == l.nStrips-1 {
				put(lastBytes)
			} else {
				put(stripBytes)
			}
		}
	}
	return b
}

func gray16Page(w, h int, pix []uint16) outPage {
	return outPage{w: w, h: h, bps: 16, sf: sampleUint, raw: rawLE(pix), encode: func(dst []byte, y0, y1 int) {
		src := pix[y0*w : y1*w]
		_ = dst[2*len(src)-1]
		for i, v := range src {
			dst[2*i] = byte(v)
			dst[2*i+1] = byte(v >> 8)
		}
	}}
}

func float32Page(w, h int, pix []float32) outPage {
	return outPage{w: w, h: h, bps: 32, sf: sampleFloat, raw: rawLE(pix), encode: func(dst []byte, y0, y1 int) {
		src := pix[y0*w : y1*w]
		_ = dst[4*len(src)-1]
		for i, v := range src {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
		}
	}}
}
