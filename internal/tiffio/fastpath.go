package tiffio

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math/bits"
	"unsafe"
)

// Fast paths for uncompressed pages, where the pixels in memory and the
// bytes in the file are the same bytes: the writer hands a page's pixel
// memory to the file in one write, and the reader reads runs of adjacent
// strips straight into the image (one positioned read per run), swapping
// bytes in place when the file's byte order is not the host's. Both give
// exactly the bytes and pixels of the portable per-sample loops
// (encode/decodePage), which remain for compressed, predicted, tiled or
// converted pages and on big-endian hosts; fastpath_test.go compares them.

// hostLittleEndian: the host stores integers and floats little-endian,
// the byte order this package writes.
var hostLittleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// hostOrder is the host's byte order as the reader spells file orders.
var hostOrder binary.ByteOrder = binary.BigEndian

func init() {
	if hostLittleEndian {
		hostOrder = binary.LittleEndian
	}
}

// sampleBytes is the memory of a pixel slice, in host byte order.
func sampleBytes[T uint16 | float32](pix []T) []byte {
	if len(pix) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(pix))), len(pix)*int(unsafe.Sizeof(pix[0])))
}

// rawLE is pix's memory when it already is the little-endian samples the
// writer emits (a little-endian host), else nil.
func rawLE[T uint16 | float32](pix []T) []byte {
	if !hostLittleEndian {
		return nil
	}
	return sampleBytes(pix)
}

// writePixels writes page p's strips (laid out by l, contiguous from
// l.dataOff): p.raw in one write where the page has it, else strip by strip
// through p.encode into scratch (grown as needed and kept for the next page).
func writePixels(bw *bufio.Writer, p outPage, l pageLayout, scratch *[]byte) error {
	if p.raw != nil {
		_, err := bw.Write(p.raw) // bufio writes a large slice straight through
		return err
	}
	stripBytes := int(l.rowBytes) * l.rowsPerStrip
	if cap(*scratch) < stripBytes {
		*scratch = make([]byte, stripBytes)
	}
	for y := 0; y < p.h; y += l.rowsPerStrip {
		y1 := min(y+l.rowsPerStrip, p.h)
		buf := (*scratch)[:int64(y1-y)*l.rowBytes]
		p.encode(buf, y, y1)
		if _, err := bw.Write(buf); err != nil {
			return err
		}
	}
	return nil
}

// direct reports whether page p decodes to samples of size bytes by copying
// its bytes: uncompressed strips, no predictor, samples of that size.
func (p *page) direct(size int64) bool {
	return p.compression == compNone && p.predictor == predNone && !p.tiled && p.bytesPerSample == size
}

// readDirect reads the pixels of a direct page (see direct) into dst, its
// width x height samples of size bytes in host order: runs of strips that
// are adjacent in the file in one read each, then a byte swap in place when
// the file's order is not the host's.
func (f *file) readDirect(p *page, dst []byte, size int) error {
	rowBytes := int64(p.width) * int64(size)
	if int64(len(dst)) != rowBytes*int64(p.height) {
		panic("tiffio: readDirect destination does not fit the page")
	}
	n := p.chunksDown
	for i := 0; i < n; {
		// strips i..j-1 follow each other in the file and in the image
		start := int64(p.offsets[i])
		end := start + p.chunkNeed(i)
		j := i + 1
		for ; j < n && int64(p.offsets[j]) == end; j++ {
			end += p.chunkNeed(j)
		}
		y0 := int64(i) * int64(p.chunkH)
		buf := dst[y0*rowBytes : y0*rowBytes+end-start]
		what := fmt.Sprintf("%s %d of page %d", p.chunkKind(), i, p.index)
		if j > i+1 {
			what = fmt.Sprintf("%ss %d to %d of page %d", p.chunkKind(), i, j-1, p.index)
		}
		if err := f.readAt(buf, start, what); err != nil {
			return err
		}
		i = j
	}
	if f.bo != hostOrder {
		swapBytes(dst, size)
	}
	return nil
}

// swapBytes reverses the bytes of every size-byte sample of b in place.
func swapBytes(b []byte, size int) {
	switch size {
	case 2:
		for i := 0; i+2 <= len(b); i += 2 {
			v := binary.LittleEndian.Uint16(b[i:])
			binary.LittleEndian.PutUint16(b[i:], bits.ReverseBytes16(v))
		}
	case 4:
		for i := 0; i+4 <= len(b); i += 4 {
			v := binary.LittleEndian.Uint32(b[i:])
			binary.LittleEndian.PutUint32(b[i:], bits.ReverseBytes32(v))
		}
	}
}

// decodeGray16 decodes a 16-bit unsigned page into pix (width x height):
// directly where the page allows (readDirect), else through decodePage.
func (f *file) decodeGray16(p *page, pix []uint16) error {
	if p.direct(2) {
		return f.readDirect(p, sampleBytes(pix), 2)
	}
	return f.decodeGray16Rows(p, pix)
}

// decodeGray16Rows is decodeGray16 through decodePage and toUint16, for any
// page of 16-bit unsigned samples.
func (f *file) decodeGray16Rows(p *page, pix []uint16) error {
	bo := f.bo
	return f.decodePage(p, func(y, x int, row []byte) {
		o := y*p.width + x
		toUint16(pix[o:o+len(row)/2], row, bo)
	})
}

// decodeFloat32 decodes a page of sample kind kind into pix (width x
// height) as float32: 32-bit float pages directly where the page allows
// (readDirect), other pages through decodePage and toFloat32.
func (f *file) decodeFloat32(p *page, kind int, pix []float32) error {
	if kind == kF32 && p.direct(4) {
		return f.readDirect(p, sampleBytes(pix), 4)
	}
	return f.decodeFloat32Rows(p, kind, pix)
}

// decodeFloat32Rows is decodeFloat32 through decodePage and toFloat32.
func (f *file) decodeFloat32Rows(p *page, kind int, pix []float32) error {
	bo := f.bo
	size := int(p.bytesPerSample)
	return f.decodePage(p, func(y, x int, row []byte) {
		o := y*p.width + x
		toFloat32(pix[o:o+len(row)/size], row, kind, bo)
	})
}
