package tiffio

import "errors"

// TIFF LZW (compression 5): codes are read most significant bit first,
// starting at 9 bits; 256 clears the table, 257 ends the data, new strings
// start at 258. The code width grows one code early ("early change"): to
// 10 bits once the next free code is 511, 11 at 1023, 12 at 2047.
const (
	lzwClear    = 256
	lzwEOI      = 257
	lzwFirst    = 258
	lzwMaxCodes = 4096
)

type lzwDecoder struct {
	prefix [lzwMaxCodes]uint16 // code of the string without its last byte
	suffix [lzwMaxCodes]byte   // last byte of the string
	first  [lzwMaxCodes]byte   // first byte of the string
	length [lzwMaxCodes]int    // string length
}

var errLZWOld = errors.New("lzw: old-style (pre-TIFF 6, LSB-first) lzw is not supported")

// decode writes the decoded bytes of src into dst, stopping when dst is full
// or at the end-of-information code, and returns how many it wrote.
func (d *lzwDecoder) decode(dst, src []byte) (int, error) {
	if len(src) >= 2 && src[0] == 0 && src[1]&1 == 1 {
		return 0, errLZWOld
	}
	for i := range 256 {
		d.suffix[i] = byte(i)
		d.first[i] = byte(i)
		d.length[i] = 1
	}
	var (
		acc   uint64 // bit accumulator, next bits at the top of the low nbits
		nbits uint
		pos   int
		width uint = 9
		next       = lzwFirst
		prev       = -1
		o          = 0
	)
	for o < len(dst) {
		for nbits < width {
			if pos >= len(src) {
				return o, nil // data ended without an end code; accepted, like libtiff
			}
			acc = acc<<8 | uint64(src[pos])
			pos++
			nbits += 8
		}
		code := int(acc>>(nbits-width)) & (1<<width - 1)
		nbits -= width
		switch {
		case code == lzwClear:
			next, width, prev = lzwFirst, 9, -1
			continue
		case code == lzwEOI:
			return o, nil
		case prev < 0:
			if code > 255 {
				return o, errors.New("lzw: first code after a clear is not a literal")
			}
			dst[o] = byte(code)
			o++
			prev = code
			continue
		}
		var c0 byte // first byte of the string for code
		switch {
		case code < next:
			c0 = d.first[code]
		case code == next: // the string being defined: prev + first byte of prev
			c0 = d.first[prev]
		default:
			return o, errors.New("lzw: code beyond the table")
		}
		if next < lzwMaxCodes {
			d.prefix[next] = uint16(prev)
			d.suffix[next] = c0
			d.first[next] = d.first[prev]
			d.length[next] = d.length[prev] + 1
			next++
		}
		// Emit the string for code, writing backwards from its end.
		n := d.length[code]
		end := o + n
		c := code
		for end > len(dst) { // keep only what fits
			c = int(d.prefix[c])
			end--
			n--
		}
		for i := end - 1; i >= o; i-- {
			dst[i] = d.suffix[c]
			c = int(d.prefix[c])
		}
		o = end
		prev = code
		if next+1 == 1<<width && width < 12 {
			width++
		}
	}
	return o, nil
}
