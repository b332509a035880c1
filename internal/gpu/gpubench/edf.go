//go:build cuda

package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/edf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/edfstage"
	"github.com/kintsugi-hpc/kintsugi-go/internal/gpu"
	"github.com/kintsugi-hpc/kintsugi-go/internal/par"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// The EDF benchmark: per channel a z x H x W uint16 stack (default the
// original's 20 x 7493 x 12676) generated in memory, fused on the GPU with
// the config's defaults (variance, sigma 10, radius 2, z smoothing 1);
// prints per channel the host->device upload, the quality gate and the
// processing on the device (synchronised phases), the download, the TIFF
// write and read of one channel's planes, the peak GPU memory, and an exact
// CPU/GPU comparison of the index map on a crop.
var edfFlags struct {
	h, w, z, channels int
	crop              int
	io                bool
	wavelet           bool
}

func init() {
	stages["edf"] = runEDF
	flag.IntVar(&edfFlags.h, "edf-h", 7493, "edf: plane height, px")
	flag.IntVar(&edfFlags.w, "edf-w", 12676, "edf: plane width, px")
	flag.IntVar(&edfFlags.z, "edf-z", 20, "edf: slices per channel")
	flag.IntVar(&edfFlags.channels, "edf-channels", 4, "edf: channels")
	flag.IntVar(&edfFlags.crop, "edf-crop", 384, "edf: side of the crop compared with the CPU reference (0: none)")
	flag.BoolVar(&edfFlags.io, "edf-io", true, "edf: time TIFF write and read of one channel (needs ~4 GB in -dir)")
	flag.BoolVar(&edfFlags.wavelet, "edf-wavelet", true, "edf: also time the wavelet method on the last channel")
}

// edfStack renders a z x h x w stack fast: a 512 x 512 texture tile
// (synth.MakeEDFStack, Gaussian blobs with read noise) rendered once at the
// integer defoci 0..8 (more defocus is clipped to 8), tiled over the plane
// (shifted per channel), each pixel taking the tile at |z - depth(y, x)|
// rounded, for a smooth depth map spanning slices 3..z-4
// (synth.EDFStackOptions.EDFDepth).
func edfStack(ctx context.Context, z, h, w, ch, workers int) ([]*raster.Gray16, error) {
	const T, maxDefocus = 512, 8
	if edfTile == nil {
		to := synth.DefaultEDFStack()
		to.W, to.H, to.NZ, to.DepthLo, to.DepthHi = T, T, maxDefocus+1, 0, 0
		t, err := synth.MakeEDFStack(to)
		if err != nil {
			return nil, err
		}
		edfTile = t
	}
	tile := edfTile
	do := synth.DefaultEDFStack()
	do.W, do.H, do.DepthLo, do.DepthHi = w, h, 3, float64(z-4)
	planes := make([]*raster.Gray16, z)
	for k := range planes {
		planes[k] = raster.NewGray16(w, h)
	}
	err := par.ForEach(ctx, h, workers, func(y int) error {
		ty := (y + 131*ch) % T
		for x := 0; x < w; x++ {
			d := do.EDFDepth(float64(y), float64(x))
			tx := (x + 97*ch) % T
			for k := range planes {
				dz := int(math.Round(math.Abs(float64(k) - d)))
				planes[k].Pix[y*w+x] = tile.Planes[min(dz, maxDefocus)].Pix[ty*T+tx]
			}
		}
		return nil
	})
	return planes, err
}

var edfTile *synth.EDFStack

func runEDF(ctx context.Context, f flags) error {
	z, h, w := edfFlags.z, edfFlags.h, edfFlags.w
	gb := float64(z) * float64(h) * float64(w) * 2 / 1e9
	fmt.Printf("edf bench: %d channels of %d x %d x %d uint16 (%.2f GB per channel), %d workers\n", edfFlags.channels, z, h, w, gb, f.workers)
	eng, err := openEngine(f)
	if err != nil {
		return err
	}
	defer eng.Close()
	g := edf.GateFromConfig(config.DefaultQualityGate())
	p := edf.DefaultParams()
	var sum gpu.EDFTimings
	var planes []*raster.Gray16
	fmt.Printf("%-8s %9s %9s %9s %9s %11s   (seconds; target gate+processing <= 0.5 s, original 4.4 + 7.8 = 12.2 s)\n",
		"channel", "upload", "gate", "process", "download", "gate+proc")
	for ch := 1; ch <= edfFlags.channels; ch++ {
		tg := time.Now()
		planes, err = edfStack(ctx, z, h, w, ch, f.workers)
		if err != nil {
			return err
		}
		genS := time.Since(tg).Seconds()
		res, tm, err := eng.EDFTimed(ctx, planes, g, p, true)
		if err != nil {
			return fmt.Errorf("channel %d: %w", ch, err)
		}
		fmt.Printf("%-8d %9.3f %9.3f %9.3f %9.3f %11.3f   (generated in %.1f s; slices used %d-%d)\n", ch, tm.Upload, tm.Gate, tm.Fuse, tm.Download,
			tm.Gate+tm.Fuse, genS, res.Used[0]+1, res.Used[len(res.Used)-1]+1)
		if ch > 1 || edfFlags.channels == 1 {
			sum.Upload += tm.Upload
			sum.Gate += tm.Gate
			sum.Fuse += tm.Fuse
			sum.Download += tm.Download
		}
		if ch < edfFlags.channels {
			planes = nil
		}
	}
	n := float64(max(1, edfFlags.channels-1))
	fmt.Printf("mean of channels 2..%d: upload %.3f s (%.1f GB/s), gate %.3f s, processing %.3f s, gate+processing %.3f s per channel, download %.3f s\n",
		edfFlags.channels, sum.Upload/n, gb/(sum.Upload/n), sum.Gate/n, sum.Fuse/n, (sum.Gate+sum.Fuse)/n, sum.Download/n)
	ms, err := eng.MemInfo()
	if err != nil {
		return err
	}
	printPeakGPU(ms)

	if edfFlags.wavelet {
		pw := p
		pw.Method = edf.MethodWavelet
		if err := eng.ResetPeak(); err != nil {
			return err
		}
		for rep := 0; rep < 2; rep++ {
			_, tm, err := eng.EDFTimed(ctx, planes, g, pw, true)
			if err != nil {
				return fmt.Errorf("wavelet: %w", err)
			}
			fmt.Printf("wavelet method (%d levels), last channel, run %d: upload %.3f s, gate %.3f s, processing %.3f s, download %.3f s\n",
				edf.AutoLevels(w, h), rep+1, tm.Upload, tm.Gate, tm.Fuse, tm.Download)
		}
		if ms, err := eng.MemInfo(); err == nil {
			fmt.Printf("wavelet peak GPU memory: %.2f GiB on the device\n", gib(ms.DevicePeak))
		}
	}

	if edfFlags.crop > 0 {
		c := min(edfFlags.crop, h, w)
		crop := make([]*raster.Gray16, len(planes))
		for k, pl := range planes {
			cp := raster.NewGray16(c, c)
			for y := range c {
				copy(cp.Pix[y*c:(y+1)*c], pl.Pix[(h/2+y)*w+w/2:][:c])
			}
			crop[k] = cp
		}
		tc := time.Now()
		want, err := edf.CPU{Workers: f.workers}.EDF(ctx, crop, g, p)
		if err != nil {
			return err
		}
		cpuS := time.Since(tc).Seconds()
		got, err := eng.EDF(ctx, crop, g, p)
		if err != nil {
			return err
		}
		diffIdx, worst := 0, 0
		for i := range want.Index {
			if got.Index[i] != want.Index[i] {
				diffIdx++
			}
			worst = max(worst, int(math.Abs(float64(got.Out.Pix[i])-float64(want.Out.Pix[i]))))
		}
		fmt.Printf("CPU reference on a %d x %d crop (%.2f s): GPU index map differs at %d of %d pixels, output by up to %d counts\n",
			c, c, cpuS, diffIdx, c*c, worst)
		pw := p
		pw.Method = edf.MethodWavelet
		wantW, err := edf.CPU{Workers: f.workers}.EDF(ctx, crop, g, pw)
		if err != nil {
			return err
		}
		gotW, err := eng.EDF(ctx, crop, g, pw)
		if err != nil {
			return err
		}
		diffIdx, worst = 0, 0
		for i := range wantW.Index {
			if gotW.Index[i] != wantW.Index[i] {
				diffIdx++
			}
			worst = max(worst, int(math.Abs(float64(gotW.Out.Pix[i])-float64(wantW.Out.Pix[i]))))
		}
		fmt.Printf("wavelet on the crop: GPU height map differs at %d of %d pixels, output by up to %d counts\n", diffIdx, c*c, worst)
	}

	if edfFlags.io {
		dir := filepath.Join(f.dir, "edf-io")
		os.RemoveAll(dir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		files := make([]string, len(planes))
		for k := range files {
			files[k] = filepath.Join(dir, fmt.Sprintf("deconv_%03d.tif", k+1))
		}
		tw := time.Now()
		if err := par.ForEach(ctx, len(planes), f.workers, func(k int) error { return tiffio.WriteGray16(files[k], planes[k]) }); err != nil {
			return err
		}
		wS := time.Since(tw).Seconds()
		tr := time.Now()
		back, err := edfstage.ReadPlanes(ctx, files, f.workers)
		if err != nil {
			return err
		}
		rS := time.Since(tr).Seconds()
		res, err := eng.EDF(ctx, back, g, p)
		if err != nil {
			return err
		}
		to := time.Now()
		if err := tiffio.WriteGray16(filepath.Join(dir, "out.tif"), res.Out); err != nil {
			return err
		}
		oS := time.Since(to).Seconds()
		fmt.Printf("TIFF I/O of one channel (%d workers, page cache warm): write %d planes %.2f s (%.2f GB/s), read %.2f s (%.2f GB/s), write the EDF plane %.2f s\n",
			f.workers, len(planes), wS, gb/wS, rS, gb/rS, oS)
	}
	return nil
}
