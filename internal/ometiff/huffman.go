package ometiff

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/bits"
	"slices"

	"github.com/kintsugi-hpc/kintsugi-go/internal/par"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// huffman.go: the tiles' Huffman-only zlib streams made with a Coder (a
// GPU, or CPUCoder, its reference), the streams zlib's Z_HUFFMAN_ONLY
// strategy writes: the predicted bytes (predict) coded as literals, no LZ
// matches. A tile's bytes are cut into blocks of CodeBlock bytes; each
// block is one deflate block (RFC 1951) with a Huffman code fitted to its
// bytes (the code follows the tile from background to tissue), or stored
// where coding would not shrink it, so no tile grows by more than the
// blocks' 5-byte headers and the stream's 6 bytes. The per-byte work (the
// predictor, the byte counts, the coded bits) is the Coder's; the codes,
// the blocks' headers and the streams' framing are made here, the same for
// every Coder, so a GPU and CPUCoder give the same bytes.

// CodeBlock is the bytes of predicted tile in one deflate block.
const CodeBlock = 1 << 15

// CodeGrid is the Coder's geometry of a w x h image in ts x ts tiles: the
// tiles across and down, and the blocks per tile.
func CodeGrid(w, h, ts int) (across, down, bpt int) {
	return (w + ts - 1) / ts, (h + ts - 1) / ts, (2*ts*ts + CodeBlock - 1) / CodeBlock
}

// blockBytes is block b's byte range in a tile of tb predicted bytes.
func blockBytes(b, tb int) (lo, hi int) { return b * CodeBlock, min((b+1)*CodeBlock, tb) }

const (
	litCodes   = 257 // literal bytes 0..255 and end-of-block (256)
	endOfBlock = 256
	maxLitLen  = 15 // RFC 1951's longest code
	maxCLLen   = 7  // the code-length code's longest code
	clCodes    = 19
)

// clOrder is the order in which the code-length code's lengths are sent.
var clOrder = [clCodes]uint8{16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15}

// A Coder does the per-byte work of Huffman coding the tiles of an image.
// HuffmanTiles predicts the ts x ts tiles of img (row-major, tilesAcross x
// tilesDown, edge tiles zero-padded; each tile's bytes as predict writes
// them: 2·ts·ts bytes, rows horizontally differenced, uint16
// little-endian), cuts each tile's bytes into blocks of CodeBlock bytes
// (the last one shorter when 2·ts·ts is not a multiple), block i = tile
// i / bpt, block i % bpt of it, and counts every block's bytes. It calls
// plan with hist (256 counts per block) and sums (per block its Adler-32
// sums: s1 = Σ x_j, s2 = Σ (L - j + 1) x_j over its L bytes x_1..x_L,
// exact), and then writes into a zeroed buffer of the n bytes plan
// returns every block i with at[i] >= 0: its bytes coded LSB first (RFC
// 1951 3.1.1) from bit at[i] of the buffer, byte x with the code
// lut[256·i + x] = bit-reversed code | length << 16; bits it does not
// write stay zero. It returns the buffer.
type Coder interface {
	HuffmanTiles(ctx context.Context, img *raster.Gray16, ts int,
		plan func(hist []uint32, sums []uint64) (lut []uint32, at []int64, n int, err error)) ([]byte, error)
}

// CPUCoder is the Coder of the CPU, the reference of the GPU's.
type CPUCoder struct {
	Workers int // goroutines (0: 1)
}

// HuffmanTiles implements Coder.
func (c CPUCoder) HuffmanTiles(ctx context.Context, img *raster.Gray16, ts int,
	plan func(hist []uint32, sums []uint64) (lut []uint32, at []int64, n int, err error)) ([]byte, error) {
	across, down, bpt := CodeGrid(img.W, img.H, ts)
	tb := 2 * ts * ts
	tiles := across * down
	hist := make([]uint32, 256*tiles*bpt)
	sums := make([]uint64, 2*tiles*bpt)
	pred := make([]byte, tiles*tb)
	workers := max(1, c.Workers)
	err := par.ForEach(ctx, tiles, workers, func(t int) error {
		e := tileEncoder{raw: pred[t*tb : (t+1)*tb]}
		e.predict(img, t%across*ts, t/across*ts, ts)
		for b := range bpt {
			i := t*bpt + b
			h := hist[256*i : 256*(i+1)]
			var a1, a2 uint64
			lo, hi := blockBytes(b, tb)
			for _, x := range e.raw[lo:hi] {
				h[x]++
				a1 += uint64(x)
				a2 += a1
			}
			sums[2*i], sums[2*i+1] = a1, a2
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	lut, at, n, err := plan(hist, sums)
	if err != nil {
		return nil, err
	}
	out := make([]byte, n)
	// A tile's blocks share bytes at their edges: one goroutine per tile.
	err = par.ForEach(ctx, tiles, workers, func(t int) error {
		for b := range bpt {
			if i := t*bpt + b; at[i] >= 0 {
				lo, hi := blockBytes(b, tb)
				orCoded(out, at[i], pred[t*tb+lo:t*tb+hi], lut[256*i:256*(i+1)])
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// orCoded ORs p coded with lut into buf from bit pos.
func orCoded(buf []byte, pos int64, p []byte, lut []uint32) {
	w := bitWriter{n: uint(pos & 7)}
	for _, x := range p {
		e := lut[x]
		w.put(uint64(e&0xffff), uint(e>>16))
	}
	orBytes(buf, pos>>3, w.flush())
}

// CodeTiles returns the zlib stream of every ts x ts tile of img
// (row-major, edge tiles zero-padded) coded Huffman-only by coder (see
// Coder and the file's comment); workers goroutines plan the codes and
// frame the streams.
func CodeTiles(ctx context.Context, coder Coder, img *raster.Gray16, ts, workers int) ([][]byte, error) {
	across, down, bpt := CodeGrid(img.W, img.H, ts)
	tb := 2 * ts * ts
	tiles := across * down
	codes := make([]blockCode, tiles*bpt)
	start := make([]int64, tiles+1) // each tile's stream's first byte in the buffer
	adler := make([]uint32, tiles)
	plan := func(hist []uint32, sums []uint64) ([]uint32, []int64, int, error) {
		if len(hist) != 256*tiles*bpt || len(sums) != 2*tiles*bpt {
			return nil, nil, 0, fmt.Errorf("coder: %d counts and %d sums for %d blocks", len(hist), len(sums), tiles*bpt)
		}
		lut := make([]uint32, 256*tiles*bpt)
		size := make([]int64, tiles) // bytes of each tile's stream
		err := par.ForEach(ctx, tiles, max(1, workers), func(t int) error {
			var sc huffScratch
			pos := int64(16) // after the zlib header; streams start on a byte
			var s1, s2 uint64
			for b := range bpt {
				i := t*bpt + b
				lo, hi := blockBytes(b, tb)
				c := &codes[i]
				c.plan((*[256]uint32)(hist[256*i:256*(i+1)]), hi-lo, b == bpt-1, &sc, lut[256*i:256*(i+1)])
				c.at = pos
				if c.stored {
					pos = (pos+3+7)&^7 + 32 + 8*int64(hi-lo) // 3 bits, padding, LEN and NLEN, the bytes
				} else {
					pos += int64(c.hdrBits) + c.bodyBits + int64(c.eobLen)
				}
				// Adler-32 of the tile from its blocks' sums: the byte at
				// tile offset lo+j (of tb) weighs tb-lo-j+1 in s2.
				s2 += sums[2*i+1] + uint64(tb-hi)*sums[2*i]
				s1 += sums[2*i]
			}
			adler[t] = uint32((1+s1)%65521) | uint32((uint64(tb)+s2)%65521)<<16
			size[t] = (pos+7)/8 + 4
			return nil
		})
		if err != nil {
			return nil, nil, 0, err
		}
		at := make([]int64, tiles*bpt)
		for t := range tiles {
			start[t+1] = start[t] + size[t]
			for b := range bpt {
				i := t*bpt + b
				at[i] = -1
				if c := &codes[i]; !c.stored {
					at[i] = 8*start[t] + c.at + int64(c.hdrBits)
				}
			}
		}
		return lut, at, int(start[tiles]), nil
	}
	buf, err := coder.HuffmanTiles(ctx, img, ts, plan)
	if err != nil {
		return nil, err
	}
	if len(buf) != int(start[tiles]) {
		return nil, fmt.Errorf("coder returned %d bytes, want %d", len(buf), start[tiles])
	}
	out := make([][]byte, tiles)
	err = par.ForEach(ctx, tiles, max(1, workers), func(t int) error {
		s := buf[start[t]:start[t+1]:start[t+1]]
		s[0], s[1] = 0x78, 0x01 // deflate, 32 KiB window, fastest: 0x7801 % 31 == 0
		var raw []byte          // the tile's predicted bytes, made when a block is stored
		for b := range bpt {
			c := &codes[t*bpt+b]
			if !c.stored {
				orBits(s, c.at, c.hdr, c.hdrBits)
				orBits(s, c.at+int64(c.hdrBits)+c.bodyBits, []byte{byte(c.eob), byte(c.eob >> 8)}, int(c.eobLen))
				continue
			}
			if raw == nil {
				e := tileEncoder{raw: make([]byte, tb)}
				e.predict(img, t%across*ts, t/across*ts, ts)
				raw = e.raw
			}
			lo, hi := blockBytes(b, tb)
			if b == bpt-1 {
				orBits(s, c.at, []byte{1}, 3) // BFINAL, BTYPE 00
			}
			o := (c.at + 3 + 7) / 8
			binary.LittleEndian.PutUint16(s[o:], uint16(hi-lo))
			binary.LittleEndian.PutUint16(s[o+2:], ^uint16(hi-lo))
			copy(s[o+4:], raw[lo:hi])
		}
		binary.BigEndian.PutUint32(s[len(s)-4:], adler[t])
		out[t] = s
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// blockCode is one deflate block's plan: stored, or its Huffman code.
type blockCode struct {
	stored   bool
	hdr      []byte // BFINAL, BTYPE 10 and the dynamic header, LSB first
	hdrBits  int
	bodyBits int64 // the block's bytes coded
	eob      uint16
	eobLen   uint8
	at       int64 // the block's first bit in its tile's stream
}

// huffScratch is a planner's reusable scratch.
type huffScratch struct {
	freq  [litCodes]uint32
	lens  [litCodes]uint8
	code  [litCodes]uint16
	keys  []uint64
	nodes []huffNode
	hdr   bitWriter
}

// plan fits the code of a block of l bytes with counts hist (final: the
// stream's last block), writes its code table into lut (code | length <<
// 16 per byte) and decides whether coding or storing it is smaller.
func (c *blockCode) plan(hist *[256]uint32, l int, final bool, sc *huffScratch, lut []uint32) {
	copy(sc.freq[:256], hist[:])
	sc.freq[endOfBlock] = 1
	huffLengths(sc.freq[:], maxLitLen, sc.lens[:], &sc.keys, &sc.nodes)
	var bits int64
	for s, f := range sc.freq[:256] {
		bits += int64(f) * int64(sc.lens[s])
	}
	w := &sc.hdr
	w.buf, w.acc, w.n = w.buf[:0], 0, 0
	fin := uint64(0)
	if final {
		fin = 1
	}
	w.put(fin|2<<1, 3) // BFINAL, BTYPE 10
	header(w, &sc.lens, sc)
	hdrBits := 8*len(w.buf) + int(w.n)
	*c = blockCode{}
	// Stored: 3 bits, up to 7 of padding, LEN and NLEN, the bytes.
	if int64(hdrBits)+bits+int64(sc.lens[endOfBlock]) >= 3+32+8*int64(l) {
		c.stored = true
		clear(lut)
		return
	}
	canonicalCodes(sc.lens[:], sc.code[:])
	for b := range 256 {
		lut[b] = uint32(sc.code[b]) | uint32(sc.lens[b])<<16
	}
	c.hdr = slices.Clone(w.flush())
	c.hdrBits = hdrBits
	c.bodyBits = bits
	c.eob, c.eobLen = sc.code[endOfBlock], sc.lens[endOfBlock]
}

// header writes the dynamic block header for lens after BFINAL and BTYPE:
// 257 literal/length codes, two distance codes of 1 bit (as zlib sends
// them: a distance code is required, and one of 1 bit alone would be an
// incomplete code to some decoders), the code-length code and the
// run-length coded lengths (RFC 1951 3.2.7: symbols 0-15, 16 = repeat the
// previous 3-6 times, 17 = 3-10 zeros, 18 = 11-138 zeros); sc is scratch
// (its lengths are not used).
func header(w *bitWriter, lens *[litCodes]uint8, sc *huffScratch) {
	var all [litCodes + 2]uint8
	copy(all[:], lens[:])
	all[litCodes], all[litCodes+1] = 1, 1
	type rl struct{ sym, extra, nExtra uint8 }
	var syms [litCodes + 2]rl
	n := 0
	var clFreq [clCodes]uint32
	emit := func(sym, extra, nExtra uint8) {
		syms[n] = rl{sym, extra, nExtra}
		n++
		clFreq[sym]++
	}
	for i := 0; i < len(all); {
		l := all[i]
		run := 1
		for i+run < len(all) && all[i+run] == l {
			run++
		}
		i += run
		if l == 0 {
			for run >= 11 {
				r := min(run, 138)
				emit(18, uint8(r-11), 7)
				run -= r
			}
			if run >= 3 {
				emit(17, uint8(run-3), 3)
				run = 0
			}
		} else {
			emit(l, 0, 0)
			run--
			for run >= 3 {
				r := min(run, 6)
				emit(16, uint8(r-3), 2)
				run -= r
			}
		}
		for ; run > 0; run-- {
			emit(l, 0, 0)
		}
	}
	var clLens [clCodes]uint8
	var clCode [clCodes]uint16
	huffLengths(clFreq[:], maxCLLen, clLens[:], &sc.keys, &sc.nodes)
	canonicalCodes(clLens[:], clCode[:])
	hclen := clCodes
	for hclen > 4 && clLens[clOrder[hclen-1]] == 0 {
		hclen--
	}
	w.put(0, 5) // HLIT: 257 codes
	w.put(1, 5) // HDIST: 2 codes
	w.put(uint64(hclen-4), 4)
	for _, s := range clOrder[:hclen] {
		w.put(uint64(clLens[s]), 3)
	}
	for _, s := range syms[:n] {
		w.put(uint64(clCode[s.sym]), uint(clLens[s.sym]))
		if s.nExtra > 0 {
			w.put(uint64(s.extra), uint(s.nExtra))
		}
	}
}

// orBits ORs the first n bits of bits (LSB first) into buf from bit pos.
func orBits(buf []byte, pos int64, bits []byte, n int) {
	w := bitWriter{n: uint(pos & 7)}
	for k := 0; k < n; k += 8 {
		m := min(8, n-k)
		w.put(uint64(bits[k/8])&(1<<m-1), uint(m))
	}
	orBytes(buf, pos>>3, w.flush())
}

// orBytes ORs p into buf at byte o.
func orBytes(buf []byte, o int64, p []byte) {
	for j, x := range p {
		buf[o+int64(j)] |= x
	}
}

// bitWriter appends bits LSB first to buf (RFC 1951 3.1.1).
type bitWriter struct {
	buf []byte
	acc uint64
	n   uint // pending bits in acc, < 8 between calls
}

// put appends the low nBits (<= 32) of v.
func (w *bitWriter) put(v uint64, nBits uint) {
	w.acc |= v << w.n
	w.n += nBits
	for w.n >= 8 {
		w.buf = append(w.buf, byte(w.acc))
		w.acc >>= 8
		w.n -= 8
	}
}

// flush pads the pending bits to a byte and returns buf.
func (w *bitWriter) flush() []byte {
	if w.n > 0 {
		w.buf = append(w.buf, byte(w.acc))
	}
	w.acc, w.n = 0, 0
	return w.buf
}

type huffNode struct {
	freq   uint64
	parent int32
	depth  uint8
}

// huffLengths sets lens to the lengths of a complete prefix code, no longer
// than maxLen, for the symbols with freq > 0 (0 for the others): Huffman's
// code, its overlong codes shortened by moving leaves as zlib does (each
// move takes one unit off the Kraft sum, so the code stays complete), the
// shorter lengths going to the more frequent symbols (ties: the lower
// symbol). When fewer than two symbols occur, the lowest unused symbols
// make up two codes of 1 bit, as decoders expect. keys and nodes are
// scratch, grown as needed. len(freq) <= 1<<maxLen.
func huffLengths(freq []uint32, maxLen int, lens []uint8, keys *[]uint64, nodes *[]huffNode) {
	clear(lens)
	// symbols in ascending frequency, ties by symbol descending (so that,
	// taken from the end, the lower symbol of equal frequency gets the
	// shorter code): sorted as frequency<<16 | (0xffff - symbol)
	ord := (*keys)[:0]
	for s, f := range freq {
		if f > 0 {
			ord = append(ord, uint64(f)<<16|uint64(0xffff-s))
		}
	}
	for s := 0; len(ord) < 2; s++ {
		if freq[s] == 0 {
			ord = append(ord, uint64(0xffff-s))
		}
	}
	ord = sortKeys(ord, keys)
	for i, k := range ord {
		ord[i] = 0xffff - k&0xffff // the key becomes its symbol
	}
	n := len(ord)
	// Huffman's tree by the two-queue method: leaves 0..n-1 in ascending
	// order, internal nodes n..2n-2 made in ascending order of weight.
	nd := slices.Grow((*nodes)[:0], 2*n-1)[:2*n-1]
	*nodes = nd
	for i, s := range ord {
		nd[i] = huffNode{freq: uint64(freq[s])}
	}
	leaf, inner := 0, n
	pick := func(next int) int {
		if leaf < n && (inner >= next || nd[leaf].freq <= nd[inner].freq) {
			leaf++
			return leaf - 1
		}
		inner++
		return inner - 1
	}
	for k := n; k < 2*n-1; k++ {
		a := pick(k)
		b := pick(k)
		nd[k] = huffNode{freq: nd[a].freq + nd[b].freq}
		nd[a].parent, nd[b].parent = int32(k), int32(k)
	}
	// depths from the root (parents after children), leaves per length
	var count [maxLitLen + 2]int
	nd[2*n-2].depth = 0
	kraft := 0 // in units of 2^-maxLen
	for k := 2*n - 3; k >= 0; k-- {
		nd[k].depth = nd[nd[k].parent].depth + 1
		if k < n {
			l := min(int(nd[k].depth), maxLen)
			count[l]++
			kraft += 1 << (maxLen - l)
		}
	}
	// Clamped leaves overfill the code; each move (a leaf from the deepest
	// length b < maxLen down to b+1 with a clamped leaf as its sibling)
	// takes one unit off.
	for ; kraft > 1<<maxLen; kraft-- {
		b := maxLen - 1
		for count[b] == 0 {
			b--
		}
		count[b]--
		count[b+1] += 2
		count[maxLen]--
	}
	// the shortest lengths to the most frequent symbols
	i := n - 1
	for l := 1; l <= maxLen; l++ {
		for range count[l] {
			lens[ord[i]] = uint8(l)
			i--
		}
	}
}

// sortKeys sorts the keys ascending: an LSD radix sort on bytes
// (the few hundred keys of a block's code, 48 bits at most: frequencies up
// to 2^32), with scratch from buf (which it keeps, with the sorted keys
// first). It returns the sorted keys.
func sortKeys(k []uint64, buf *[]uint64) []uint64 {
	n := len(k)
	if n < 64 {
		slices.Sort(k)
		*buf = k
		return k
	}
	all := slices.Grow(k, n)[:2*n] // k, then as much scratch
	a, b := all[:n], all[n:]
	var hi uint64
	for _, v := range a {
		hi |= v
	}
	for shift := uint(0); shift < 64 && hi>>shift != 0; shift += 8 {
		var count [1 << 8]int
		for _, v := range a {
			count[v>>shift&(1<<8-1)]++
		}
		sum := 0
		for d, c := range count {
			count[d] = sum
			sum += c
		}
		for _, v := range a {
			d := v >> shift & (1<<8 - 1)
			b[count[d]] = v
			count[d]++
		}
		a, b = b, a
	}
	if &a[0] != &all[0] {
		copy(all[:n], a)
	}
	*buf = all[:n]
	return all[:n]
}

// canonicalCodes sets code to the canonical code of lens (RFC 1951 3.2.2),
// each code bit-reversed so that it is sent LSB first.
func canonicalCodes(lens []uint8, code []uint16) {
	var count [maxLitLen + 1]uint16
	for _, l := range lens {
		count[l]++
	}
	count[0] = 0
	var next [maxLitLen + 1]uint16
	c := uint16(0)
	for l := 1; l <= maxLitLen; l++ {
		c = (c + count[l-1]) << 1
		next[l] = c
	}
	for s, l := range lens {
		if l == 0 {
			code[s] = 0
			continue
		}
		code[s] = bits.Reverse16(next[l]) >> (16 - l)
		next[l]++
	}
}
