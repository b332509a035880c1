//go:build cuda

package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/decon"
	"github.com/kintsugi-hpc/kintsugi-go/internal/deconstage"
	"github.com/kintsugi-hpc/kintsugi-go/internal/gpu"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/membudget"
	"github.com/kintsugi-hpc/kintsugi-go/internal/par"
	"github.com/kintsugi-hpc/kintsugi-go/internal/psf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/staging"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// The deconvolution benchmark: per channel a z x H x W float32 stack
// (default the original's 20 x 7493 x 12676) generated in memory (a
// 512 x 512 decon.NewScene blurred with the channel's PSF, with Poisson and
// read noise, tiled over the plane; deterministic), deconvolved on the GPU
// with the original's settings (25 iterations, 5 % stop rule, 0.01 % clip)
// and the original's light-sheet PSF for the 4 default channels, then with
// the widefield 3D PSF. Prints per channel the upload, the device time (the
// device-buffer form: padding, iterations, percentiles, rescale; no I/O), the
// download, iterations and peak GPU memory; the TIFF write of one channel;
// and a GPU/CPU comparison on a crop with the CPU's time per voxel.
// Then, for channel 1 with the light-sheet PSF, the host form (float32 in
// and out) unchunked and under a GPU memory cap (-decon-cap-mb: the
// iterates streamed through the card in y-slabs from pinned host memory),
// with times, slabs and peak GPU memory, and whether the results are equal;
// and one FFT-path case (-decon-fft: a 33x33x3 Gaussian PSF, 3267 taps,
// beyond the direct kernels' limit), with its device time and peak memory.
// Before all that (-decon-stage channels, 0: skip; -decon-stage-only: only
// this), the whole stage: a stitched cycle written as TIFF planes under
// -dir and deconstage.Run on this engine under -mem-budget, with its wall
// time (TIFF I/O included), memory plan and peak host memory (VmHWM).
var deconFlags struct {
	h, w, z, channels, wfChannels, crop int
	alg                                 string
	io                                  bool
	capMB                               int
	fft                                 bool
	stage                               int
	stageOnly                           bool
}

func init() {
	stages["decon"] = runDecon
	flag.IntVar(&deconFlags.h, "decon-h", 7493, "decon: plane height, px")
	flag.IntVar(&deconFlags.w, "decon-w", 12676, "decon: plane width, px")
	flag.IntVar(&deconFlags.z, "decon-z", 20, "decon: planes per channel")
	flag.IntVar(&deconFlags.channels, "decon-channels", 4, "decon: channels with the light-sheet PSF (default wavelengths 1..4)")
	flag.IntVar(&deconFlags.wfChannels, "decon-wf-channels", 1, "decon: channels with the widefield 3D PSF")
	flag.IntVar(&deconFlags.crop, "decon-crop", 512, "decon: side of the crop compared with the CPU reference (0: none)")
	flag.StringVar(&deconFlags.alg, "decon-alg", decon.RichardsonLucy, "decon: algorithm")
	flag.BoolVar(&deconFlags.io, "decon-io", true, "decon: time the TIFF write of one channel (needs ~4 GB in -dir)")
	flag.IntVar(&deconFlags.capMB, "decon-cap-mb", 16384, "decon: GPU memory cap of the chunked (streamed) run of channel 1, MB (0: skip)")
	flag.BoolVar(&deconFlags.fft, "decon-fft", true, "decon: time one FFT-path case (33x33x3 Gaussian PSF)")
	flag.IntVar(&deconFlags.stage, "decon-stage", 4, "decon: channels of the whole-stage measurement (stitched TIFF planes in -dir, deconstage.Run under -mem-budget; 0: skip)")
	flag.BoolVar(&deconFlags.stageOnly, "decon-stage-only", false, "decon: only the whole-stage measurement (skip the engine-only ones)")
}

var deconWaves = [][2]float64{{358, 461}, {753, 775}, {560, 575}, {648, 668}}

func deconOptics(ch int) psf.Optics {
	w := deconWaves[(ch-1)%4]
	return psf.Optics{DXY: 377, DZ: 1500, NA: 0.75, RI: 1.44, ExNM: w[0], EmNM: w[1], SlitMM: 6.5, FCylMM: 1}
}

// deconStack tiles a 512 x 512 scene over the plane.
func deconStack(ctx context.Context, z, h, w int, k *psf.Kernel, seed uint64, workers int) (*raster.Stack, error) {
	const T = 512
	sc := decon.NewScene(seed, z, T, T, k, 3)
	st := raster.NewStack(z, h, w)
	err := par.ForEach(ctx, z*h, workers, func(r int) error {
		zz, y := r/h, r%h
		src := sc.Noisy.Pix[(zz*T+y%T)*T:][:T]
		dst := st.Pix[(zz*h+y)*w:][:w]
		for x := 0; x < w; x += T {
			copy(dst[x:min(w, x+T)], src)
		}
		return nil
	})
	return st, err
}

func runDecon(ctx context.Context, f flags) error {
	df := deconFlags
	eng, err := gpu.Open(gpu.Options{Device: f.device})
	if err != nil {
		return err
	}
	defer eng.Close()
	if df.stage > 0 {
		// first, so that the engine-only runs' buffers do not count
		if err := deconBenchStage(ctx, eng, f, df.stage); err != nil {
			return err
		}
	}
	if df.stageOnly {
		return nil
	}
	fmt.Printf("decon bench: %d x %d x %d (x,y,z) per channel, %s, engine %s, %d workers\n", df.w, df.h, df.z, df.alg, eng.Name(), f.workers)
	p := decon.Params{Algorithm: df.alg, Iterations: 25, StopCriterion: 5, HistClip: 0.01}
	jobs, err := deconBenchJobs()
	if err != nil {
		return err
	}
	var sumLS, sumWF float64
	var nLS, nWF int
	var lastOut *raster.Stack
	for _, j := range jobs {
		out, dev, err := deconBenchChannel(ctx, eng, f, j, p)
		if err != nil {
			return err
		}
		if j.name == "lightsheet" {
			sumLS += dev
			nLS++
		} else {
			sumWF += dev
			nWF++
		}
		lastOut = out
		runtime.GC()
	}
	if nLS > 0 {
		fmt.Printf("light-sheet: %.3f s per channel on the device (target <= 1.5 s; original 100.5 s on the same card)\n", sumLS/float64(nLS))
	}
	if nWF > 0 {
		fmt.Printf("widefield 3D PSF: %.3f s per channel on the device (target <= 5 s)\n", sumWF/float64(nWF))
	}
	if df.io && lastOut != nil {
		deconBenchWrite(ctx, f, lastOut)
	}
	if df.capMB > 0 {
		if err := deconBenchCap(ctx, eng, f, p); err != nil {
			return err
		}
	}
	if df.fft {
		if err := deconBenchFFT(ctx, eng, f, p); err != nil {
			return err
		}
	}
	if df.crop > 0 {
		return deconBenchCrop(ctx, eng, f, p)
	}
	return nil
}

// deconJob is one benchmarked channel: its PSF model and kernel.
type deconJob struct {
	name string
	ch   int
	k    *psf.Kernel
}

// deconBenchJobs lists the light-sheet channels, then the widefield ones.
func deconBenchJobs() ([]deconJob, error) {
	df := deconFlags
	var jobs []deconJob
	for c := 1; c <= df.channels; c++ {
		k, _, err := psf.LightSheet(deconOptics(c))
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, deconJob{"lightsheet", c, k})
	}
	for c := 1; c <= df.wfChannels; c++ {
		k, _, err := psf.Widefield(deconOptics(c))
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, deconJob{"widefield", c, k})
	}
	return jobs, nil
}

// deconBenchChannel times one channel on the device form (upload,
// deconvolution, download; and for channel 1 the stage's form) and prints
// the figures; it returns the result and the device seconds.
func deconBenchChannel(ctx context.Context, eng *gpu.Engine, f flags, j deconJob, p decon.Params) (*raster.Stack, float64, error) {
	df := deconFlags
	t0 := time.Now()
	st, err := deconStack(ctx, df.z, df.h, df.w, j.k, uint64(j.ch), f.workers)
	if err != nil {
		return nil, 0, err
	}
	gen := time.Since(t0).Seconds()
	if err := freshDevice(eng); err != nil {
		return nil, 0, err
	}
	t1 := time.Now()
	din, err := eng.UploadStack(ctx, st)
	if err != nil {
		return nil, 0, err
	}
	up := time.Since(t1).Seconds()
	t2 := time.Now()
	dout, s, err := eng.DeconvolveDevice(ctx, din, j.k, p)
	if err != nil {
		eng.FreeStack(din)
		return nil, 0, fmt.Errorf("%s channel %d: %w", j.name, j.ch, err)
	}
	dev := time.Since(t2).Seconds()
	t3 := time.Now()
	out, err := eng.DownloadStack(ctx, dout)
	if err != nil {
		return nil, 0, err
	}
	down := time.Since(t3).Seconds()
	ms, err := eng.MemInfo()
	if err != nil {
		return nil, 0, err
	}
	eng.FreeStack(din)
	eng.FreeStack(dout)
	fmt.Printf("  %-10s ch %d PSF %-7s (x,y,z): device %.3f s (%d iterations, %.1f ms/iteration incl. pad+percentile+scale; stopped %v, padded %v, windows %d), upload %.2f s, download %.2f s, peak GPU %.1f GiB (pool %.1f GiB), lo/hi %.4g/%.4g, generate %.1f s\n",
		j.name, j.ch, j.k, dev, s.Iterations, 1000*dev/float64(s.Iterations), s.Stopped, s.Padded, s.Chunks, up, down,
		gib(ms.DevicePeak), gib(ms.PoolPeak), s.Lo, s.Hi, gen)
	if j.ch == 1 {
		// the stage's form: host stack in, uint16 planes out (upload,
		// device, rounding on the device, download), no TIFF I/O
		t4 := time.Now()
		pages, _, err := eng.DeconvolveGray16(ctx, st, j.k, p)
		if err != nil {
			return nil, 0, err
		}
		fmt.Printf("  %-10s ch %d stage form (host float32 in, uint16 planes out, no TIFF I/O): %.3f s for %d planes\n", j.name, j.ch, time.Since(t4).Seconds(), len(pages))
	}
	return out, dev, nil
}

// deconBenchWrite times the TIFF write of one channel's result (rounded
// to uint16) into a scratch directory under f.dir.
func deconBenchWrite(ctx context.Context, f flags, out *raster.Stack) {
	dir := filepath.Join(f.dir, "decon-io")
	os.MkdirAll(dir, 0o755)
	t0 := time.Now()
	err := par.ForEach(ctx, out.N, f.workers, func(z int) error {
		pg := &raster.Gray16{W: out.W, H: out.H, Pix: decon.Quantize(nil, out.Plane(z))}
		return tiffio.WriteGray16(filepath.Join(dir, layout.DeconPlane(z+1)), pg)
	})
	fmt.Printf("TIFF write of one channel (%d uint16 planes, incl. rounding): %.2f s (err %v)\n", out.N, time.Since(t0).Seconds(), err)
	os.RemoveAll(dir)
}

// deconBenchCrop compares the GPU with the CPU on a crop of -decon-crop px
// and extrapolates the CPU's time to a production channel.
func deconBenchCrop(ctx context.Context, eng *gpu.Engine, f flags, p decon.Params) error {
	df := deconFlags
	k, _, _ := psf.LightSheet(deconOptics(1))
	st, err := deconStack(ctx, df.z, df.crop, df.crop, k, 1, f.workers)
	if err != nil {
		return err
	}
	t0 := time.Now()
	want, ws, err := decon.CPU{}.Deconvolve(ctx, st, k, p)
	if err != nil {
		return err
	}
	cpuSec := time.Since(t0).Seconds()
	got, gs, err := eng.Deconvolver().Deconvolve(ctx, st, k, p)
	if err != nil {
		return err
	}
	var m, d float64
	for i := range want.Pix {
		m = math.Max(m, float64(want.Pix[i]))
		d = math.Max(d, math.Abs(float64(got.Pix[i]-want.Pix[i])))
	}
	perVox := cpuSec / float64(ws.Iterations) / float64(len(st.Pix))
	fmt.Printf("crop %dx%dx%d: CPU %.2f s (%d iterations, %d cores), GPU %d iterations, max |GPU-CPU| %.3g of %.4g; CPU estimate for a production channel (%d iterations): %.0f s\n",
		df.crop, df.crop, df.z, cpuSec, ws.Iterations, runtime.GOMAXPROCS(0), gs.Iterations, d, m, ws.Iterations,
		perVox*float64(ws.Iterations)*float64(df.z)*float64(df.h)*float64(df.w))
	return nil
}

// deconBenchRun times the host form with p and returns the result, the
// stats, the seconds and the peak GPU memory.
func deconBenchRun(ctx context.Context, eng *gpu.Engine, st *raster.Stack, k *psf.Kernel, p decon.Params) (*raster.Stack, decon.Stats, float64, gpu.MemStats, error) {
	if err := freshDevice(eng); err != nil {
		return nil, decon.Stats{}, 0, gpu.MemStats{}, err
	}
	t0 := time.Now()
	out, s, err := eng.Deconvolver().Deconvolve(ctx, st, k, p)
	sec := time.Since(t0).Seconds()
	if err != nil {
		return nil, s, sec, gpu.MemStats{}, err
	}
	ms, err := eng.MemInfo()
	return out, s, sec, ms, err
}

// deconBenchCap: channel 1, light-sheet PSF, host form unchunked and under
// the cap.
func deconBenchCap(ctx context.Context, eng *gpu.Engine, f flags, p decon.Params) error {
	df := deconFlags
	k, _, err := psf.LightSheet(deconOptics(1))
	if err != nil {
		return err
	}
	st, err := deconStack(ctx, df.z, df.h, df.w, k, 1, f.workers)
	if err != nil {
		return err
	}
	one, s1, sec1, ms1, err := deconBenchRun(ctx, eng, st, k, p)
	if err != nil {
		return fmt.Errorf("unchunked: %w", err)
	}
	fmt.Printf("  chunking, lightsheet ch 1 PSF %s, host form (upload, device, download): unchunked %.3f s (%d iterations, streamed %v), peak GPU %.1f GiB\n",
		k, sec1, s1.Iterations, s1.Streamed, gib(ms1.DevicePeak))
	pc := p
	pc.MemoryBudget = int64(df.capMB) << 20
	runtime.GC()
	got, s2, sec2, ms2, err := deconBenchRun(ctx, eng, st, k, pc)
	if err != nil {
		return fmt.Errorf("under a %d MB cap: %w", df.capMB, err)
	}
	var d, m float64
	for i := range one.Pix {
		m = math.Max(m, float64(one.Pix[i]))
		d = math.Max(d, math.Abs(float64(got.Pix[i]-one.Pix[i])))
	}
	fmt.Printf("  chunking, under a %d MiB cap: %.3f s (%d iterations, streamed %v in %d y-slabs, pinned host state), peak GPU %.1f GiB (pool %.1f GiB); max |chunked - unchunked| %.3g of %.4g; phases (s): pin %.2f, pad %.2f, iterate %.2f (%.0f ms/iteration), finish %.2f\n",
		df.capMB, sec2, s2.Iterations, s2.Streamed, s2.Chunks, gib(ms2.DevicePeak), gib(ms2.PoolPeak), d, m,
		s2.Phases["pin"], s2.Phases["pad"], s2.Phases["iterate"], 1000*s2.Phases["iterate"]/float64(max(1, s2.Iterations)), s2.Phases["finish"])
	return nil
}

// deconBenchFFT: the production channel with a 33x33x3 Gaussian PSF (the
// FFT path), device form.
func deconBenchFFT(ctx context.Context, eng *gpu.Engine, f flags, p decon.Params) error {
	df := deconFlags
	k := &psf.Kernel{NZ: 3, NY: 33, NX: 33, Data: make([]float32, 3*33*33)}
	var sum float64
	v := make([]float64, len(k.Data))
	for z := 0; z < 3; z++ {
		for y := 0; y < 33; y++ {
			for x := 0; x < 33; x++ {
				dz, dy, dx := float64(z-1)/0.8, float64(y-16)/5, float64(x-16)/5
				i := (z*33+y)*33 + x
				v[i] = math.Exp(-(dz*dz + dy*dy + dx*dx) / 2)
				sum += v[i]
			}
		}
	}
	for i := range v {
		k.Data[i] = float32(v[i] / sum)
	}
	st, err := deconStack(ctx, df.z, df.h, df.w, k, 5, f.workers)
	if err != nil {
		return err
	}
	if err := freshDevice(eng); err != nil {
		return err
	}
	din, err := eng.UploadStack(ctx, st)
	if err != nil {
		return err
	}
	defer eng.FreeStack(din)
	t0 := time.Now()
	dout, s, err := eng.DeconvolveDevice(ctx, din, k, p)
	if err != nil {
		return fmt.Errorf("FFT path: %w", err)
	}
	sec := time.Since(t0).Seconds()
	eng.FreeStack(dout)
	ms, err := eng.MemInfo()
	if err != nil {
		return err
	}
	fmt.Printf("  FFT path, PSF %s (x,y,z) Gaussian, %d taps: device %.3f s (%d iterations, %.1f ms/iteration, padded %v, windows %d, streamed %v), peak GPU %.1f GiB\n",
		k, len(k.Data), sec, s.Iterations, 1000*sec/float64(s.Iterations), s.Padded, s.Chunks, s.Streamed, gib(ms.DevicePeak))
	return nil
}

// deconBenchStage measures the whole stage (deconstage.Run on the GPU
// engine, TIFF I/O included) on a stitched cycle of n channels of
// -decon-z planes of -decon-w x -decon-h px written as TIFF files under
// -dir (reused with -skip-gen; kept with -keep), under the -mem-budget
// budget (0: as the executables resolve it): wall time, per channel read,
// device and write times, the memory plan and the peak host memory
// (VmHWM reset after the engine opened and the data was written).
func deconBenchStage(ctx context.Context, eng *gpu.Engine, f flags, n int) error {
	df := deconFlags
	o, err := synth.Preset("production")
	if err != nil {
		return err
	}
	o.OutDir, o.NZ, o.NChannels, o.NCycles, o.Cycles, o.Workers = f.dir, df.z, n, 1, []int{1}, f.workers
	cfgPath := synth.ConfigPath(f.dir)
	in := deconstage.InputDir(f.dir, 1)
	chGB := float64(df.z) * float64(df.h) * float64(df.w) * 2 / 1e9
	if !f.skipGen {
		os.RemoveAll(f.dir)
		if err := os.MkdirAll(f.dir, 0o755); err != nil {
			return err
		}
		if err := synth.WriteConfig(cfgPath, o, nil); err != nil {
			return err
		}
		cfg, err := config.Load(cfgPath)
		if err != nil {
			return err
		}
		t0 := time.Now()
		for _, ch := range cfg.Channels {
			k, _, err := deconstage.Kernel(cfg, ch)
			if err != nil {
				return err
			}
			const T = 512
			sc := decon.NewScene(uint64(ch), df.z, T, T, k, 3)
			dir := filepath.Join(in, layout.ChannelDir(ch))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			err = par.ForEach(ctx, df.z, f.workers, func(z int) error {
				tile := decon.Quantize(nil, sc.Noisy.Plane(z))
				pg := raster.NewGray16(df.w, df.h)
				for y := 0; y < df.h; y++ {
					src := tile[(y%T)*T:][:T]
					dst := pg.Pix[y*df.w:][:df.w]
					for x := 0; x < df.w; x += T {
						copy(dst[x:min(df.w, x+T)], src)
					}
				}
				return tiffio.WriteGray16(filepath.Join(dir, layout.StitchedPlane(z+1)), pg)
			})
			if err != nil {
				return err
			}
		}
		if err := staging.WriteSentinel(layout.Sentinel(in), [][2]string{{"stage", "stitch"}, {"cycle", "1"}}); err != nil {
			return err
		}
		fmt.Printf("decon stage: wrote %d channels of %d stitched planes of %d x %d px (%.1f GB uint16 per channel) in %.1f s to %s\n",
			n, df.z, df.w, df.h, chGB, time.Since(t0).Seconds(), in)
	}
	if !f.keep {
		defer os.RemoveAll(f.dir)
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return err
	}
	out := deconstage.OutDir(f.dir, 1)
	os.RemoveAll(out)
	defer os.RemoveAll(out)
	budget, src, err := membudget.Resolve(f.memBudget, os.Getenv)
	if err != nil {
		return err
	}
	if err := freshDevice(eng); err != nil {
		return err
	}
	hp, rssOpen := startHostPeak()
	fmt.Printf("decon stage: host memory budget %s (%s); resident with the engine open %s\n", membudget.Format(budget), src, membudget.Format(rssOpen))
	lg := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	res, err := deconstage.Run(ctx, deconstage.Options{Config: cfg, Cycle: 1, Engine: eng, Workers: f.workers,
		Logger: lg, MemBudget: budget, MemBudgetSource: src})
	if err != nil {
		return fmt.Errorf("decon stage: %w", err)
	}
	peak := hp.peak()
	for _, c := range res.Channels {
		fmt.Printf("  ch %d: read %.2f s, device %.2f s (%d iterations, streamed %v), write %.2f s\n",
			c.Channel, c.ReadSec, c.Seconds, c.Stats.Iterations, c.Stats.Streamed, c.WriteSec)
	}
	ms, err := eng.MemInfo()
	if err != nil {
		return err
	}
	fmt.Printf("decon stage: %d channels x %d planes of %d x %d px: whole stage %.2f s wall (TIFF I/O included; %.1f GB read, %.1f GB written)\n",
		len(res.Channels), df.z, df.w, df.h, res.Seconds, chGB*float64(len(res.Channels)), chGB*float64(len(res.Channels)))
	fmt.Printf("decon stage: plan %s\n", res.Plan)
	fmt.Printf("decon stage: PEAK HOST MEMORY (VmHWM) %.2f GiB (planned %.2f GiB, budget %.2f GiB %s: %s); peak GPU %.1f GiB\n",
		gib(peak), gib(res.PlannedBytes), gib(budget), src, map[bool]string{true: "within", false: "EXCEEDED"}[peak <= budget], gib(ms.DevicePeak))
	return nil
}

// freshDevice releases the engine's cached device memory (Trim) and resets
// its device peak, so that the next measurement's GPU figures are its own.
func freshDevice(eng *gpu.Engine) error {
	if err := eng.Trim(); err != nil {
		return err
	}
	return eng.ResetPeak()
}
