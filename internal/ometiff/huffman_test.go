package ometiff

import (
	"bytes"
	"compress/zlib"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/ometiff/ometifftest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// TestCoderStreams: every tile's stream (CPUCoder, tile sides from one
// block per tile to 16, edge tiles included) decodes with the standard
// library's zlib reader, which checks the Adler-32, to the tile's
// predicted bytes, and is no longer than its bytes stored plus the
// framing.
func TestCoderStreams(t *testing.T) {
	for name, img := range ometifftest.CoderImages() {
		for _, ts := range []int{16, 48, 256, 512} {
			streams, err := CodeTiles(context.Background(), CPUCoder{Workers: 2}, img, ts, 2)
			if err != nil {
				t.Fatalf("%s ts %d: %v", name, ts, err)
			}
			across, down := (img.W+ts-1)/ts, (img.H+ts-1)/ts
			if len(streams) != across*down {
				t.Fatalf("%s ts %d: %d streams for %d tiles", name, ts, len(streams), across*down)
			}
			e := tileEncoder{raw: make([]byte, 2*ts*ts)}
			coded, raw := 0, 0
			for i, s := range streams {
				e.predict(img, i%across*ts, i/across*ts, ts)
				zr, err := zlib.NewReader(bytes.NewReader(s))
				if err != nil {
					t.Fatalf("%s ts %d tile %d: %v", name, ts, i, err)
				}
				got, err := io.ReadAll(zr)
				if err != nil || !bytes.Equal(got, e.raw) {
					t.Fatalf("%s ts %d tile %d: decoded %d bytes (%v), want its %d predicted bytes", name, ts, i, len(got), err, len(e.raw))
				}
				blocks := (len(e.raw) + CodeBlock - 1) / CodeBlock
				if len(s) > len(e.raw)+6+5*blocks {
					t.Errorf("%s ts %d tile %d: %d bytes coded to %d, more than stored", name, ts, i, len(e.raw), len(s))
				}
				coded += len(s)
				raw += len(e.raw)
			}
			t.Logf("%s ts %d: %d tiles, %.3f of raw", name, ts, len(streams), float64(coded)/float64(raw))
		}
	}
}

// TestCoderWrite: a file written through a Coder reads back to the same
// pixels and levels, for Adaptive and HuffmanOnly, and Adaptive's level-1
// tiles make the background smaller, as with the tile encoder.
func TestCoderWrite(t *testing.T) {
	img := ometifftest.CoderImages()["mixed"]
	ch := []Channel{{Name: "a", Load: func() (*raster.Gray16, error) { return img, nil }}}
	size := map[int]int{}
	for _, level := range []int{Adaptive, HuffmanOnly} {
		path := t.TempDir() + "/c.ome.tif"
		if err := Write(context.Background(), path, img.W, img.H, ch, Options{PixelSizeNM: 500, TileSize: 256, Level: level, Workers: 2, Coder: CPUCoder{Workers: 2}}); err != nil {
			t.Fatal(err)
		}
		got, err := tiffio.ReadGray16(path)
		if err != nil {
			t.Fatal(err)
		}
		samePlane(t, fmt.Sprint("level ", level), got, img)
		subs, err := tiffio.ReadGray16SubIFDs(path, 0)
		if err != nil || len(subs) != 1 {
			t.Fatalf("level %d: %d sub-levels, %v", level, len(subs), err)
		}
		samePlane(t, fmt.Sprint("level ", level, " sub-level"), subs[0], Downsample(img))
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		size[level] = int(st.Size())
	}
	if size[Adaptive] >= size[HuffmanOnly] {
		t.Errorf("sizes %v: Adaptive should code the zero background tiles smaller", size)
	}
}

// TestHuffLengths: the lengths form a complete prefix code within the
// limit, only the occurring symbols (or two made-up ones) have codes, more
// frequent symbols never get longer codes, and where the limit does not
// bind the total is Huffman's optimum.
func TestHuffLengths(t *testing.T) {
	var keys []uint64
	var nodes []huffNode
	check := func(name string, freq []uint32, maxLen int) []uint8 {
		lens := make([]uint8, len(freq))
		huffLengths(freq, maxLen, lens, &keys, &nodes)
		kraft, coded := 0, 0
		for s, l := range lens {
			if int(l) > maxLen {
				t.Fatalf("%s: symbol %d has %d bits, limit %d", name, s, l, maxLen)
			}
			if l > 0 {
				kraft += 1 << (maxLen - int(l))
				coded++
			} else if freq[s] > 0 {
				t.Fatalf("%s: symbol %d occurs %d times and has no code", name, s, freq[s])
			}
			for u, f := range freq {
				if f > freq[s] && lens[u] > l && l > 0 {
					t.Fatalf("%s: symbol %d (%d times) has %d bits, %d (%d times) %d", name, u, f, lens[u], s, freq[s], l)
				}
			}
		}
		if kraft != 1<<maxLen || coded < 2 {
			t.Fatalf("%s: Kraft sum %d/%d with %d codes: not a complete code", name, kraft, 1<<maxLen, coded)
		}
		return lens
	}
	check("one symbol", []uint32{0, 0, 5, 0}, 7)
	check("none", make([]uint32, 19), 7)
	fib := make([]uint32, 30)
	fib[0], fib[1] = 1, 1
	for i := 2; i < len(fib); i++ {
		fib[i] = fib[i-1] + fib[i-2]
	}
	if lens := check("fibonacci", fib, 15); lens[0] != 15 {
		t.Errorf("fibonacci: the rarest symbol has %d bits, want the limit 15", lens[0])
	}
	// A block's 257 symbols (the radix sort's path), frequencies spread
	// over 5 decades, many equal.
	r := rand.New(rand.NewPCG(7, 7))
	for range 20 {
		f := make([]uint32, litCodes)
		for s := range f {
			f[s] = uint32(r.ExpFloat64() * float64([]int{1, 10, 1000, 100000}[r.IntN(4)]))
		}
		check("block", f, 15)
	}
	// Huffman's optimum for 1, 1, 2, 4: lengths 3, 3, 2, 1, 14 bits.
	lens := check("small", []uint32{1, 1, 2, 4}, 15)
	if got := int(lens[0]) + int(lens[1]) + 2*int(lens[2]) + 4*int(lens[3]); got != 14 {
		t.Errorf("small: lengths %v code 1, 1, 2, 4 in %d bits, want 14", lens, got)
	}
}
