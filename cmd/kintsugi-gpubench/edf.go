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
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/membudget"
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
	stage             bool // whole-stage measurement (edfstage.Run)
	stageOnly         bool // only the whole-stage measurement
	stageChannels     int
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
	flag.BoolVar(&edfFlags.stage, "edf-stage", true, "edf: also run the whole stage (edfstage.Run on the GPU, TIFFs in -dir, under -mem-budget) and print its wall time and peak host memory (needs ~3.8 GB per channel in -dir)")
	flag.BoolVar(&edfFlags.stageOnly, "edf-stage-only", false, "edf: only the whole-stage measurement")
	flag.IntVar(&edfFlags.stageChannels, "edf-stage-channels", 4, "edf: channels of the whole-stage cycle")
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
	if edfFlags.stage || edfFlags.stageOnly {
		if err := runEDFStage(ctx, f, eng); err != nil {
			return fmt.Errorf("edf stage: %w", err)
		}
		if edfFlags.stageOnly {
			return nil
		}
	}
	g := edfstage.Gate(config.DefaultQualityGate())
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
		if err := edfBenchWavelet(ctx, eng, planes, g, p); err != nil {
			return err
		}
	}
	if edfFlags.crop > 0 {
		if err := edfBenchCrop(ctx, eng, f, planes, g, p); err != nil {
			return err
		}
	}
	if edfFlags.io {
		return edfBenchIO(ctx, eng, f, planes, g, p, gb)
	}
	return nil
}

// edfBenchWavelet times the wavelet method twice on the last channel's
// planes and prints its peak GPU memory.
func edfBenchWavelet(ctx context.Context, eng *gpu.Engine, planes []*raster.Gray16, g edf.Gate, p edf.Params) error {
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
			edf.AutoLevels(edfFlags.w, edfFlags.h), rep+1, tm.Upload, tm.Gate, tm.Fuse, tm.Download)
	}
	if ms, err := eng.MemInfo(); err == nil {
		fmt.Printf("wavelet peak GPU memory: %.2f GiB on the device\n", gib(ms.DevicePeak))
	}
	return nil
}

// edfBenchCrop compares the GPU with the CPU reference, both methods, on
// a centred crop of -edf-crop px of the last channel.
func edfBenchCrop(ctx context.Context, eng *gpu.Engine, f flags, planes []*raster.Gray16, g edf.Gate, p edf.Params) error {
	h, w := edfFlags.h, edfFlags.w
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
	diffIdx, worst := edfDiff(want, got)
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
	diffIdx, worst = edfDiff(wantW, gotW)
	fmt.Printf("wavelet on the crop: GPU height map differs at %d of %d pixels, output by up to %d counts\n", diffIdx, c*c, worst)
	return nil
}

// edfDiff counts the pixels whose index differs between two results and
// the largest output difference, counts.
func edfDiff(want, got *edf.Result) (diffIdx, worst int) {
	for i := range want.Index {
		if got.Index[i] != want.Index[i] {
			diffIdx++
		}
		worst = max(worst, int(math.Abs(float64(got.Out.Pix[i])-float64(want.Out.Pix[i]))))
	}
	return diffIdx, worst
}

// edfBenchIO times the TIFF I/O of one channel (gb GB of planes) as the
// stage does it: its planes written, read back, fused and the EDF plane
// written.
func edfBenchIO(ctx context.Context, eng *gpu.Engine, f flags, planes []*raster.Gray16, g edf.Gate, p edf.Params, gb float64) error {
	dir := filepath.Join(f.dir, "edf-io")
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	files := make([]string, len(planes))
	for k := range files {
		files[k] = filepath.Join(dir, layout.DeconPlane(k+1))
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
	return nil
}

// runEDFStage measures the whole stage on a production-size deconvolved
// cycle: -edf-stage-channels channels of -edf-z planes of -edf-h x -edf-w
// px written as TIFFs under -dir/edf-stage (or reused with -skip-gen), then
// edfstage.Run on the GPU under the -mem-budget budget (resolved as the
// executables do); it prints the memory plan, the wall time (TIFF reads and
// writes included) and the stage's peak host memory (VmHWM, reset after the
// data are written).
func runEDFStage(ctx context.Context, f flags, eng *gpu.Engine) error {
	z, h, w, nch := edfFlags.z, edfFlags.h, edfFlags.w, edfFlags.stageChannels
	dir := filepath.Join(f.dir, "edf-stage")
	o, err := synth.Preset("tiny")
	if err != nil {
		return err
	}
	o.OutDir, o.NCycles, o.NChannels, o.BlankFirstCycle = dir, 1, nch, false
	cfgPath := synth.ConfigPath(dir)
	if !f.skipGen {
		os.RemoveAll(dir)
		tg := time.Now()
		for ch := 1; ch <= nch; ch++ {
			planes, err := edfStack(ctx, z, h, w, ch, f.workers)
			if err != nil {
				return err
			}
			d := filepath.Join(edfstage.InputDir(dir, 1), layout.ChannelDir(ch))
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
			if err := par.ForEach(ctx, len(planes), f.workers, func(k int) error {
				return tiffio.WriteGray16(filepath.Join(d, layout.DeconPlane(k+1)), planes[k])
			}); err != nil {
				return err
			}
		}
		if err := os.WriteFile(layout.Sentinel(edfstage.InputDir(dir, 1)), []byte("stage=decon\n"), 0o644); err != nil {
			return err
		}
		if err := synth.WriteConfig(cfgPath, o, nil); err != nil {
			return err
		}
		fmt.Printf("edf stage: wrote a deconvolved cycle of %d channels x %d planes of %d x %d px under %s in %.1f s\n",
			nch, z, w, h, dir, time.Since(tg).Seconds())
	}
	if !f.keep {
		defer os.RemoveAll(dir)
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return err
	}
	os.RemoveAll(edfstage.OutDir(dir, 1))
	budget, src, err := membudget.Resolve(f.memBudget, os.Getenv)
	if err != nil {
		return err
	}
	// The stage's own peak resident set: the generator's is forgotten.
	edfTile = nil
	hp, _ := startHostPeak()
	t0 := time.Now()
	res, err := edfstage.Run(ctx, edfstage.Options{Config: cfg, Cycle: 1, Engine: eng, Workers: f.workers,
		MemBudget: budget, MemBudgetSource: src})
	if err != nil {
		return err
	}
	wall := time.Since(t0).Seconds()
	var rd, ed, wr float64
	for _, c := range res.Channels {
		rd, ed, wr = rd+c.ReadS, ed+c.EDFS, wr+c.WriteS
	}
	fmt.Printf("edf stage (GPU, %d channels of %d x %d x %d, %d workers): wall %.2f s (read+upload %.2f s, gate+fuse+download %.2f s, write %.2f s)\n",
		nch, z, h, w, f.workers, wall, rd, ed, wr)
	fmt.Printf("edf stage memory plan: %s, planned %.2f GiB; budget %.2f GiB (%s)\n", res.MemPlan, gib(res.MemPlanned), gib(budget), src)
	peak := hp.peak()
	within := "yes"
	if peak > budget {
		within = "NO"
	}
	fmt.Printf("peak host memory of the edf stage (VmHWM): %.2f GiB (%d MiB); within the budget: %s\n", gib(peak), peak>>20, within)

	// The stage's output of channel 1 (streamed to the device plane by
	// plane) against EDF on the whole host stack.
	files, err := edfstage.Stack(dir, 1, 1)
	if err != nil {
		return err
	}
	planes, err := edfstage.ReadPlanes(ctx, files, f.workers)
	if err != nil {
		return err
	}
	want, err := eng.EDF(ctx, planes, edfstage.Gate(cfg.QualityGate), edfstage.Params(cfg.EDF))
	if err != nil {
		return err
	}
	got, err := tiffio.ReadGray16(filepath.Join(edfstage.OutDir(dir, 1), cfg.EDFFileName(1, 1)))
	if err != nil {
		return err
	}
	diff := 0
	for i := range want.Out.Pix {
		if got.Pix[i] != want.Out.Pix[i] {
			diff++
		}
	}
	fmt.Printf("edf stage output of channel 1 vs EDF on the whole host stack: %d of %d pixels differ (want 0)\n", diff, len(want.Out.Pix))
	return nil
}
