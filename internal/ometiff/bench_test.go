package ometiff

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth"
)

// BenchmarkWrite writes 4 synthetic registration channels (synth.RegScene,
// nuclei on autofluorescence with noise) of 3000 x 4000 px and prints the
// throughput (uncompressed full-resolution bytes per second of wall time
// and per cpu-second of the process) and the file size relative to the raw
// pyramid, for deflate levels Adaptive (0, the default), Huffman-only (-2),
// 1 and 6, each at 1, 2 and 4 workers. The write includes the temp file's fsync.
func BenchmarkWrite(b *testing.B) {
	const w, h = 3000, 4000
	scene, err := synth.NewRegScene(synth.RegOptions{H: h, W: w, Channels: 4, Seed: 1, Workers: runtime.NumCPU()})
	if err != nil {
		b.Fatal(err)
	}
	planes, _, err := scene.RenderCycle(context.Background(), 1)
	if err != nil {
		b.Fatal(err)
	}
	ch := make([]Channel, len(planes))
	for c, p := range planes {
		ch[c] = Channel{Name: fmt.Sprintf("ch%d", c+1), Load: func() (*raster.Gray16, error) { return p, nil }}
	}
	raw := 0
	for _, sz := range LevelSizes(w, h) {
		raw += 2 * sz[0] * sz[1] * len(planes)
	}
	path := filepath.Join(b.TempDir(), "bench.ome.tif")
	for _, level := range []int{Adaptive, HuffmanOnly, BestSpeed, 6} {
		for _, workers := range []int{1, 2, 4} {
			b.Run(fmt.Sprintf("zlib%d/workers%d", level, workers), func(b *testing.B) {
				var el, cpu time.Duration
				for b.Loop() {
					t0, c0 := time.Now(), cpuTime(b)
					if err := Write(context.Background(), path, w, h, ch, Options{PixelSizeNM: 325, Workers: workers, Level: level}); err != nil {
						b.Fatal(err)
					}
					el += time.Since(t0)
					cpu += cpuTime(b) - c0
				}
				st, err := os.Stat(path)
				if err != nil {
					b.Fatal(err)
				}
				full := float64(2 * w * h * len(planes))
				b.ReportMetric(full*float64(b.N)/el.Seconds()/1e6, "MB/s")
				b.ReportMetric(full*float64(b.N)/cpu.Seconds()/1e6, "MB/cpu-s")
				b.ReportMetric(float64(st.Size())/float64(raw), "size/raw")
				fmt.Printf("ometiff: zlib level %d, %d workers: %.0f MB/s of full-resolution planes (%.0f MB per cpu-second), file %.1f MB = %.3f of the raw pyramid (%.1f MB)\n",
					level, workers, full*float64(b.N)/el.Seconds()/1e6, full*float64(b.N)/cpu.Seconds()/1e6, float64(st.Size())/1e6, float64(st.Size())/float64(raw), float64(raw)/1e6)
			})
		}
	}
}

// cpuTime is the process's user + system CPU time so far (all threads).
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
