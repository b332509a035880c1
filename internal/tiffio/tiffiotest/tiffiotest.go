// Package tiffiotest builds hostile TIFF files for tests, byte by byte and
// independently of package tiffio (it imports nothing of the project).
package tiffiotest

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
)

// SharedStrips is a w x h uint16 Deflate TIFF (little-endian, classic),
// one row per strip, whose strips all point at one compressed row of zeros:
// tiny on disk (about 8h bytes of offsets and counts plus ~30 bytes of
// payload), w*h*2 bytes decoded. Issue 15's 180 KB file of this kind
// claimed 16 GB.
func SharedStrips(w, h int) []byte {
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	zw.Write(make([]byte, 2*w))
	zw.Close()
	le := binary.LittleEndian
	const nEnt = 9
	offArr := 8 + 2 + 12*nEnt + 4
	cntArr := offArr + 4*h
	payload := cntArr + 4*h
	var b bytes.Buffer
	b.WriteString("II")
	binary.Write(&b, le, uint16(42))
	binary.Write(&b, le, uint32(8))
	binary.Write(&b, le, uint16(nEnt))
	for _, e := range [][4]uint32{{256, 4, 1, uint32(w)}, {257, 4, 1, uint32(h)}, {258, 3, 1, 16}, {259, 3, 1, 8}, {262, 3, 1, 1},
		{273, 4, uint32(h), uint32(offArr)}, {277, 3, 1, 1}, {278, 4, 1, 1}, {279, 4, uint32(h), uint32(cntArr)}} {
		binary.Write(&b, le, uint16(e[0]))
		binary.Write(&b, le, uint16(e[1]))
		binary.Write(&b, le, e[2])
		if e[1] == 3 {
			binary.Write(&b, le, uint16(e[3]))
			binary.Write(&b, le, uint16(0))
		} else {
			binary.Write(&b, le, e[3])
		}
	}
	binary.Write(&b, le, uint32(0))
	for range h {
		binary.Write(&b, le, uint32(payload))
	}
	for range h {
		binary.Write(&b, le, uint32(z.Len()))
	}
	b.Write(z.Bytes())
	return b.Bytes()
}
