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

// BenchmarkReadGray16Plane reads one stitched plane (page cache warm after
// the first iteration).
func BenchmarkReadGray16Plane(b *testing.B) {
	g := benchPlane()
	dir := os.Getenv("TIFFIO_BENCH_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	path := filepath.Join(dir, "bench-plane.tif")
	defer os.Remove(path)
	if err := WriteGray16(path, g); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(g.Pix)) * 2)
	b.ResetTimer()
	for b.Loop() {
		if _, err := ReadGray16(path); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadFloat32Plane reads the same uint16 plane as float32 counts.
func BenchmarkReadFloat32Plane(b *testing.B) {
	g := benchPlane()
	path := filepath.Join(b.TempDir(), "bench-plane.tif")
	if err := WriteGray16(path, g); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(g.Pix)) * 2)
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
