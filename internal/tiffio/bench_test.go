package tiffio

import (
	"bufio"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// The stitched plane size of the pipeline's reference dataset.
const benchW, benchH = 7479, 12662

func benchPlane() *raster.Gray16 {
	rng := rand.New(rand.NewPCG(4, 1))
	g := raster.NewGray16(benchW, benchH)
	for i := range g.Pix {
		g.Pix[i] = uint16(rng.Uint32())
	}
	return g
}

// BenchmarkWriteGray16Plane writes one stitched plane atomically (encode,
// 1 MiB buffered writes, fsync, rename, directory fsync); MB/s is of pixel
// bytes. Set TIFFIO_BENCH_DIR to measure another file system.
func BenchmarkWriteGray16Plane(b *testing.B) {
	g := benchPlane()
	dir := os.Getenv("TIFFIO_BENCH_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	path := filepath.Join(dir, "bench-plane.tif")
	defer os.Remove(path)
	b.SetBytes(int64(len(g.Pix)) * 2)
	b.ResetTimer()
	for b.Loop() {
		if err := WriteGray16(path, g); err != nil {
			b.Fatal(err)
		}
	}
}

// benchFile writes the benchmark plane to bench-plane.tif in
// TIFFIO_BENCH_DIR (else a temp dir), removed when b ends, and sets b's
// bytes per op to the plane's pixel bytes.
func benchFile(b *testing.B) (*raster.Gray16, string) {
	g := benchPlane()
	dir := os.Getenv("TIFFIO_BENCH_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	path := filepath.Join(dir, "bench-plane.tif")
	b.Cleanup(func() { os.Remove(path) })
	if err := WriteGray16(path, g); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(g.Pix)) * 2)
	return g, path
}

// BenchmarkReadGray16Plane reads one stitched plane (page cache warm after
// the first iteration).
func BenchmarkReadGray16Plane(b *testing.B) {
	_, path := benchFile(b)
	b.ResetTimer()
	for b.Loop() {
		if _, err := ReadGray16(path); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadFloat32Plane reads the same uint16 plane as float32 counts.
func BenchmarkReadFloat32Plane(b *testing.B) {
	_, path := benchFile(b)
	b.ResetTimer()
	for b.Loop() {
		if _, err := ReadFloat32(path); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeGray16 measures the writer without the file system: the
// same layout and encoder into a discarding writer.
func BenchmarkEncodeGray16(b *testing.B) {
	g := benchPlane()
	pages := []outPage{gray16Page(g.W, g.H, g.Pix)}
	lay, _ := layout(pages, false)
	b.SetBytes(int64(len(g.Pix)) * 2)
	b.ResetTimer()
	for b.Loop() {
		bw := newDiscardBuffered()
		if err := encodeFile(bw, pages, lay, false); err != nil {
			b.Fatal(err)
		}
		bw.Flush()
	}
}

func newDiscardBuffered() *bufio.Writer { return bufio.NewWriterSize(io.Discard, writeBufferBytes) }

// BenchmarkCopyReference is the floor the two benchmarks above are
// measured against, on the same plane's file and file system: Read is one
// positioned read of the whole file into a reused buffer (a page-cache
// copy, as cp's read side); Write is one write of the same bytes to a temp
// file, fsync and rename (what an atomic write cannot go below).
func BenchmarkCopyReference(b *testing.B) {
	g, path := benchFile(b)
	dir := filepath.Dir(path)
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("Read", func(b *testing.B) {
		fh, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		defer fh.Close()
		buf := make([]byte, len(data))
		b.SetBytes(int64(len(g.Pix)) * 2)
		for b.Loop() {
			if _, err := fh.ReadAt(buf, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Write", func(b *testing.B) {
		tmp := filepath.Join(dir, "bench-copy.tmp")
		defer os.Remove(tmp)
		b.SetBytes(int64(len(g.Pix)) * 2)
		for b.Loop() {
			fh, err := os.Create(tmp)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := fh.Write(data); err != nil {
				b.Fatal(err)
			}
			if err := fh.Sync(); err != nil {
				b.Fatal(err)
			}
			if err := fh.Close(); err != nil {
				b.Fatal(err)
			}
			if err := os.Rename(tmp, path+".copy"); err != nil {
				b.Fatal(err)
			}
		}
		os.Remove(path + ".copy")
	})
}
