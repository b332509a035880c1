package tiffio

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// decoder holds buffers reused across the chunks of a page.
type decoder struct {
	f    *file
	cbuf []byte // compressed chunk
	dbuf []byte // decoded chunk
	zr   io.ReadCloser
	br   bytes.Reader
	lzw  lzwDecoder
}

// decodePage decodes every strip or tile of p and hands each image row
// segment to put: the samples of row y starting at column x, as raw bytes in
// the file's byte order.
func (f *file) decodePage(p *page, put func(y, x int, row []byte)) error {
	dec := &decoder{f: f}
	defer func() {
		if dec.zr != nil {
			dec.zr.Close()
		}
	}()
	rowBytes := int64(p.chunkW) * p.bytesPerSample
	for cy := 0; cy < p.chunksDown; cy++ {
		y0 := cy * p.chunkH
		rows := min(p.chunkH, p.height-y0)
		for cx := 0; cx < p.chunksAcross; cx++ {
			x0 := cx * p.chunkW
			cols := min(p.chunkW, p.width-x0)
			i := cy*p.chunksAcross + cx
			data, err := dec.chunk(p, i, p.chunkNeed(i))
			if err != nil {
				return err
			}
			if err := unpredict(p, data, int(rowBytes), f.bo); err != nil {
				return err
			}
			segBytes := int64(cols) * p.bytesPerSample
			for r := range rows {
				o := int64(r) * rowBytes
				put(y0+r, x0, data[o:o+segBytes])
			}
		}
	}
	return nil
}

// chunk returns the need decoded bytes of chunk i (checkChunks has
// verified that its bytes lie inside the file).
func (dec *decoder) chunk(p *page, i int, need int64) ([]byte, error) {
	f := dec.f
	off := int64(p.offsets[i])
	kind := p.chunkKind()
	what := fmt.Sprintf("%s %d of page %d", kind, i, p.index)
	if int64(cap(dec.dbuf)) < need {
		dec.dbuf = make([]byte, need)
	}
	dst := dec.dbuf[:need]
	if p.compression == compNone {
		if err := f.readAt(dst, off, what); err != nil {
			return nil, err
		}
		return dst, nil
	}
	n := int64(p.counts[i])
	if int64(cap(dec.cbuf)) < n {
		dec.cbuf = make([]byte, n)
	}
	src := dec.cbuf[:n]
	if err := f.readAt(src, off, what); err != nil {
		return nil, err
	}
	var got int
	var err error
	switch p.compression {
	case compDeflate, compDeflateOld:
		got, err = dec.inflate(dst, src)
	case compLZW:
		got, err = dec.lzw.decode(dst, src)
	case compPackBits:
		got, err = unpackBits(dst, src)
	}
	if err != nil {
		return nil, formatErr("%s: %v", what, err)
	}
	if int64(got) < need {
		return nil, formatErr("%s: compressed data gives %d bytes, %d needed", what, got, need)
	}
	return dst, nil
}

func (dec *decoder) inflate(dst, src []byte) (int, error) {
	dec.br.Reset(src)
	var err error
	if dec.zr == nil {
		dec.zr, err = zlib.NewReader(&dec.br)
	} else {
		err = dec.zr.(zlib.Resetter).Reset(&dec.br, nil)
	}
	if err != nil {
		return 0, fmt.Errorf("deflate: %w", err)
	}
	n, err := io.ReadFull(dec.zr, dst)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return n, fmt.Errorf("deflate: %w", err)
	}
	return n, nil
}

// unpackBits decodes PackBits into dst, stopping when dst is full; it
// returns the number of bytes written.
func unpackBits(dst, src []byte) (int, error) {
	o := 0
	for i := 0; i < len(src) && o < len(dst); {
		n := int(int8(src[i]))
		i++
		switch {
		case n >= 0: // n+1 literal bytes
			if i+n+1 > len(src) {
				return o, errors.New("packbits: literal run past end of data")
			}
			o += copy(dst[o:], src[i:i+n+1])
			i += n + 1
		case n > -128: // next byte repeated 1-n times
			if i >= len(src) {
				return o, errors.New("packbits: repeat run past end of data")
			}
			b := src[i]
			i++
			end := min(o+1-n, len(dst))
			for ; o < end; o++ {
				dst[o] = b
			}
		}
	}
	return o, nil
}

// unpredict undoes the predictor on a decoded chunk of rows of rowBytes.
func unpredict(p *page, data []byte, rowBytes int, bo binary.ByteOrder) error {
	switch p.predictor {
	case predHorizontal:
		for o := 0; o+rowBytes <= len(data); o += rowBytes {
			undoHorizontal(data[o:o+rowBytes], int(p.bytesPerSample), bo)
		}
	case predFloatingPt:
		tmp := make([]byte, rowBytes)
		for o := 0; o+rowBytes <= len(data); o += rowBytes {
			undoFloat(data[o:o+rowBytes], tmp, int(p.bytesPerSample), bo)
		}
	}
	return nil
}

// undoHorizontal adds each sample to the previous one (modulo 2^bits).
func undoHorizontal(row []byte, size int, bo binary.ByteOrder) {
	switch size {
	case 1:
		for i := 1; i < len(row); i++ {
			row[i] += row[i-1]
		}
	case 2:
		prev := bo.Uint16(row)
		for i := 2; i+2 <= len(row); i += 2 {
			prev += bo.Uint16(row[i:])
			bo.PutUint16(row[i:], prev)
		}
	case 4:
		prev := bo.Uint32(row)
		for i := 4; i+4 <= len(row); i += 4 {
			prev += bo.Uint32(row[i:])
			bo.PutUint32(row[i:], prev)
		}
	case 8:
		prev := bo.Uint64(row)
		for i := 8; i+8 <= len(row); i += 8 {
			prev += bo.Uint64(row[i:])
			bo.PutUint64(row[i:], prev)
		}
	}
}

// undoFloat reverses the floating-point predictor (Adobe TIFF technote 3):
// bytes were differenced along the row after being regrouped into planes,
// most significant byte of every sample first.
func undoFloat(row, tmp []byte, size int, bo binary.ByteOrder) {
	for i := 1; i < len(row); i++ {
		row[i] += row[i-1]
	}
	copy(tmp, row)
	n := len(row) / size
	big := bo == binary.BigEndian
	for s := range n {
		for b := range size { // b: 0 = most significant
			v := tmp[b*n+s]
			if big {
				row[s*size+b] = v
			} else {
				row[s*size+size-1-b] = v
			}
		}
	}
}

// Converters from raw samples to pixels. They call binary.LittleEndian and
// binary.BigEndian directly, not through the ByteOrder interface, so the
// loads compile to single (byte-swapped) loads instead of a call per sample.

// toUint16 converts raw 16-bit samples in byte order bo.
func toUint16(dst []uint16, src []byte, bo binary.ByteOrder) {
	src = src[:2*len(dst)]
	if bo == binary.ByteOrder(binary.LittleEndian) {
		for i := range dst {
			dst[i] = binary.LittleEndian.Uint16(src[2*i:])
		}
		return
	}
	for i := range dst {
		dst[i] = binary.BigEndian.Uint16(src[2*i:])
	}
}

// toFloat32 converts raw samples of the given kind to float32.
func toFloat32(dst []float32, src []byte, kind int, bo binary.ByteOrder) {
	if bo == binary.ByteOrder(binary.LittleEndian) {
		toFloat32LE(dst, src, kind)
	} else {
		toFloat32BE(dst, src, kind)
	}
}

func toFloat32LE(dst []float32, src []byte, kind int) {
	le := binary.LittleEndian
	switch kind {
	case kU8:
		for i, v := range src[:len(dst)] {
			dst[i] = float32(v)
		}
	case kI8:
		for i, v := range src[:len(dst)] {
			dst[i] = float32(int8(v))
		}
	case kU16:
		src = src[:2*len(dst)]
		for i := range dst {
			dst[i] = float32(le.Uint16(src[2*i:]))
		}
	case kI16:
		src = src[:2*len(dst)]
		for i := range dst {
			dst[i] = float32(int16(le.Uint16(src[2*i:])))
		}
	case kU32:
		src = src[:4*len(dst)]
		for i := range dst {
			dst[i] = float32(le.Uint32(src[4*i:]))
		}
	case kI32:
		src = src[:4*len(dst)]
		for i := range dst {
			dst[i] = float32(int32(le.Uint32(src[4*i:])))
		}
	case kF32:
		src = src[:4*len(dst)]
		for i := range dst {
			dst[i] = math.Float32frombits(le.Uint32(src[4*i:]))
		}
	case kF64:
		src = src[:8*len(dst)]
		for i := range dst {
			dst[i] = float32(math.Float64frombits(le.Uint64(src[8*i:])))
		}
	}
}

func toFloat32BE(dst []float32, src []byte, kind int) {
	be := binary.BigEndian
	switch kind {
	case kU8, kI8:
		toFloat32LE(dst, src, kind) // single bytes: no order
	case kU16:
		src = src[:2*len(dst)]
		for i := range dst {
			dst[i] = float32(be.Uint16(src[2*i:]))
		}
	case kI16:
		src = src[:2*len(dst)]
		for i := range dst {
			dst[i] = float32(int16(be.Uint16(src[2*i:])))
		}
	case kU32:
		src = src[:4*len(dst)]
		for i := range dst {
			dst[i] = float32(be.Uint32(src[4*i:]))
		}
	case kI32:
		src = src[:4*len(dst)]
		for i := range dst {
			dst[i] = float32(int32(be.Uint32(src[4*i:])))
		}
	case kF32:
		src = src[:4*len(dst)]
		for i := range dst {
			dst[i] = math.Float32frombits(be.Uint32(src[4*i:]))
		}
	case kF64:
		src = src[:8*len(dst)]
		for i := range dst {
			dst[i] = float32(math.Float64frombits(be.Uint64(src[8*i:])))
		}
	}
}
