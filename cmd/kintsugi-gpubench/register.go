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
	"sync"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/accuracy"
	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/gpu"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/membudget"
	"github.com/kintsugi-hpc/kintsugi-go/internal/par"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/register"
	"github.com/kintsugi-hpc/kintsugi-go/internal/regstage"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// The registration benchmark: cycles of H x W uint16 EDF images with
// several channels (default the 13 cycles of 7493 x 12676, 4
// channels), generated in memory (synth.RegScene: nuclei-like texture,
// DAPI and one marker channel rendered per cycle, further channels cheap
// byte-permuted copies of the marker: the warp's cost does not depend on
// the content, and rendering 52 full images would dominate the run;
// per-cycle intensities and noise, known rigid transforms with
// translations up to -reg-shift px and rotations up to -reg-rot degrees,
// smooth warps up to -reg-warp px). Cycle 1 is the reference; every other
// cycle's DAPI is registered with the config's defaults (rigid at 4096 px,
// non-rigid at 4096 px, sigma 0.01) and all of its channels are warped at
// full resolution. Timed: the reference's levels plus, per cycle,
// registration and the warp of every channel (host<->device copies
// included; generation and TIFF I/O excluded, there is none). Printed:
// total and per-step times (downsampling, block phase correlation, warp,
// host work), peak GPU memory, and per cycle the RMS error of the
// recovered mapping over tissue against the truth.
//
// With -reg-io the generated cycles are also written as a project's EDF
// outputs under -dir (uint16 TIFFs, config.yaml, sentinels) and the real
// stage (regstage.Run on the GPU: TIFF reads, registration, warps, TIFF
// writes, transforms, QC, the pyramidal OME-TIFF) runs on them; its wall
// time, with the I/O, is printed separately, with its memory plan (logged
// by the stage: "memory plan") and its peak host memory (VmHWM, reset
// before the stage) against the budget: -mem-budget MB, else as the
// executables decide it (SLURM, cgroup, 80 % of the physical memory).
// With -reg-io -skip-gen the project already in -dir (from a run with
// -keep) is reused and only the stage runs, in a fresh process: the
// cleanest measure of its peak.
var regFlags struct {
	h, w, cycles, channels int
	shift, rot, warp       float64
	io                     bool
}

func init() {
	stages["register"] = runRegister
	flag.IntVar(&regFlags.h, "reg-h", 7493, "register: image height, px")
	flag.IntVar(&regFlags.w, "reg-w", 12676, "register: image width, px")
	flag.IntVar(&regFlags.cycles, "reg-cycles", 13, "register: cycles (cycle 1 is the reference)")
	flag.IntVar(&regFlags.channels, "reg-channels", 4, "register: channels per cycle (channel 1 is DAPI)")
	flag.Float64Var(&regFlags.shift, "reg-shift", 100, "register: largest translation per axis, px")
	flag.Float64Var(&regFlags.rot, "reg-rot", 1, "register: largest rotation, degrees")
	flag.Float64Var(&regFlags.warp, "reg-warp", 5, "register: largest non-rigid displacement, px")
	flag.BoolVar(&regFlags.io, "reg-io", false, "register: also write the cycles as a project in -dir and time the whole stage with TIFF I/O (needs ~30 GB)")
}

// regProject is the project -reg-io writes.
type regProject struct {
	dir    string
	cfg    *config.Config
	wrote  time.Duration
	nBytes int64
}

func newRegProject(dir string, cycles, channels int) (*regProject, error) {
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	o, err := synth.Preset("tiny")
	if err != nil {
		return nil, err
	}
	o.OutDir, o.NCycles, o.NChannels, o.Cycles = dir, cycles, channels, nil
	o.BlankFirstCycle = false // one marker name per channel (a blank cycle 1 names channels 2.. all "Blank")
	path := synth.ConfigPath(dir)
	if err := synth.WriteConfig(path, o, nil); err != nil {
		return nil, err
	}
	cfg, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	return &regProject{dir: dir, cfg: cfg}, nil
}

// write writes one cycle's EDF images and sentinel.
func (p *regProject) write(ctx context.Context, cycle int, imgs []*raster.Gray16, workers int) error {
	t0 := time.Now()
	d := regstage.EDFDir(p.dir, cycle)
	if err := os.MkdirAll(d, 0o755); err != nil {
		return err
	}
	err := par.ForEach(ctx, len(imgs), workers, func(i int) error {
		return tiffio.WriteGray16(filepath.Join(d, p.cfg.EDFFileName(cycle, i+1)), imgs[i])
	})
	if err != nil {
		return err
	}
	for _, g := range imgs {
		p.nBytes += int64(len(g.Pix)) * 2
	}
	p.wrote += time.Since(t0)
	return os.WriteFile(layout.Sentinel(d), []byte("stage=edf\n"), 0o644)
}

// timedBackend sums the wall time of each Backend method.
type timedBackend struct {
	register.Backend
	mu                  sync.Mutex
	down, blocks, warp  time.Duration
	nDown, nBlk, nWarps int
}

func (t *timedBackend) Downsample(ctx context.Context, img *raster.Gray16, ks []int) ([]*raster.Float32, error) {
	t0 := time.Now()
	r, err := t.Backend.Downsample(ctx, img, ks)
	t.mu.Lock()
	t.down += time.Since(t0)
	t.nDown++
	t.mu.Unlock()
	return r, err
}

func (t *timedBackend) BlockShifts(ctx context.Context, f, m *raster.Float32, k int, maps []*register.Mapping, b []register.Block, bh, bw int) ([]register.Shift, error) {
	t0 := time.Now()
	r, err := t.Backend.BlockShifts(ctx, f, m, k, maps, b, bh, bw)
	t.mu.Lock()
	t.blocks += time.Since(t0)
	t.nBlk += len(b)
	t.mu.Unlock()
	return r, err
}

func (t *timedBackend) Warp(ctx context.Context, imgs []*raster.Gray16, m *register.Mapping, h, w int) ([]*raster.Gray16, error) {
	t0 := time.Now()
	r, err := t.Backend.Warp(ctx, imgs, m, h, w)
	t.mu.Lock()
	t.warp += time.Since(t0)
	t.nWarps += len(imgs)
	t.mu.Unlock()
	return r, err
}

func runRegister(ctx context.Context, f flags) error {
	rf := regFlags
	fmt.Printf("register: %d cycles of %d x %d px, %d channels (%.1f GB uint16 in all), translations <= %g px, rotations <= %g°, warps <= %g px, %d workers\n",
		rf.cycles, rf.w, rf.h, rf.channels, float64(rf.cycles*rf.channels*rf.h*rf.w*2)/1e9, rf.shift, rf.rot, rf.warp, f.workers)
	eng, err := openEngine(f)
	if err != nil {
		return err
	}
	defer eng.Close()
	if rf.io && f.skipGen {
		cfg, err := config.Load(synth.ConfigPath(f.dir))
		if err != nil {
			return fmt.Errorf("-skip-gen: %w (run once with -reg-io -keep first)", err)
		}
		if !f.keep {
			defer os.RemoveAll(f.dir)
		}
		return runRegStage(ctx, f, eng, &regProject{dir: f.dir, cfg: cfg})
	}
	sc, err := synth.NewRegScene(synth.RegOptions{H: rf.h, W: rf.w, Channels: min(rf.channels, 2), Seed: 1,
		MaxShift: rf.shift, MaxRotDeg: rf.rot, WarpPx: rf.warp, Workers: f.workers})
	if err != nil {
		return err
	}
	p := register.DefaultParams()
	p.Workers = f.workers
	tb := &timedBackend{Backend: eng.Registrar()}
	if err := eng.ResetPeak(); err != nil {
		return err
	}

	var proj *regProject
	if rf.io {
		if proj, err = newRegProject(f.dir, rf.cycles, rf.channels); err != nil {
			return err
		}
		if !f.keep {
			defer os.RemoveAll(f.dir)
		}
	}
	var gen, total time.Duration
	tg := time.Now()
	ref, _, err := sc.RenderCycle(ctx, 1)
	if err != nil {
		return err
	}
	ref = moreChannels(ctx, ref, rf.channels, f.workers)
	gen += time.Since(tg)
	if proj != nil {
		if err := proj.write(ctx, 1, ref, f.workers); err != nil {
			return err
		}
	}
	ts := time.Now()
	R, err := register.NewReference(ctx, tb, ref[0], p)
	if err != nil {
		return err
	}
	total += time.Since(ts)
	ref = nil
	kc, kr, kn := p.Levels(rf.h, rf.w)
	fmt.Printf("levels: coarse 1/%d, rigid 1/%d, non-rigid 1/%d (sigma %.1f level px)\n", kc, kr, kn, p.SigmaRatio*float64(max(rf.h, rf.w)/kn))
	fmt.Println()
	fmt.Println("cycle  true rot°  est rot°   true t (y, x)     RMS before  RMS rigid  RMS final  max final  NCC before -> rigid -> final  jac min  blocks used   register  warp(all ch)")
	var worst float64
	for c := 2; c <= rf.cycles; c++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		rms, err := regBenchCycle(ctx, f, sc, tb, R, p, c, proj, &gen, &total)
		if err != nil {
			return err
		}
		worst = math.Max(worst, rms)
	}
	ms, err := eng.MemInfo()
	if err != nil {
		return err
	}
	printRegSteps(tb, rf.cycles-1, total, gen)
	printPeakGPU(ms)
	fmt.Printf("worst per-cycle RMS error of the mapping over tissue: %.3f px (bound 0.5 px)\n", worst)
	if proj == nil {
		return nil
	}
	fmt.Printf("\nproject written for the stage run: %.1f GB of EDF TIFFs in %.1f s (%s)\n", float64(proj.nBytes)/1e9, proj.wrote.Seconds(), f.dir)
	return runRegStage(ctx, f, eng, proj)
}

// regBenchCycle renders cycle c (written into proj when set), registers it
// on R, warps every channel and prints its row; gen and total gather the
// generation and the registration + warp times. It returns the final RMS
// error of the mapping over tissue, px.
func regBenchCycle(ctx context.Context, f flags, sc *synth.RegScene, tb *timedBackend, R *register.Reference, p register.Params,
	c int, proj *regProject, gen, total *time.Duration) (float64, error) {
	rf := regFlags
	tg := time.Now()
	imgs, tr, err := sc.RenderCycle(ctx, c)
	if err != nil {
		return 0, err
	}
	imgs = moreChannels(ctx, imgs, rf.channels, f.workers)
	*gen += time.Since(tg)
	if proj != nil {
		if err := proj.write(ctx, c, imgs, f.workers); err != nil {
			return 0, err
		}
	}
	ts := time.Now()
	res, err := register.Register(ctx, tb, R, imgs[0], p)
	if err != nil {
		return 0, fmt.Errorf("cycle %d: %w", c, err)
	}
	treg := time.Since(ts)
	tw := time.Now()
	warped, err := tb.Warp(ctx, imgs, &res.Mapping, rf.h, rf.w)
	if err != nil {
		return 0, fmt.Errorf("cycle %d: warp: %w", c, err)
	}
	for _, g := range warped {
		raster.FreePlane(tb.Backend, g) // page-locked on the GPU
	}
	twarp := time.Since(tw)
	*total += time.Since(ts)
	rig, fin := accuracy.ScoreRegistration(sc, tr, res)
	m := res.Metrics
	fmt.Printf("%5d  %9.3f  %8.3f  (%7.1f, %7.1f)  %10.2f  %9.3f  %9.3f  %9.3f  %.3f -> %.3f -> %.3f    %7.3f  %5d/%-5d  %7.2f s  %7.2f s\n",
		c, tr.ThetaDeg, m.RotationDeg, tr.TY, tr.TX, fin.RMSBefore, rig.RMSAfter, fin.RMSAfter, fin.MaxAfter,
		m.NCCBefore, m.NCCRigid, m.NCCFinal, m.JacobianMin, m.NRBlocksUsed, m.NRBlocks, treg.Seconds(), twarp.Seconds())
	return fin.RMSAfter, nil
}

// printRegSteps prints the time per step over n registered cycles.
func printRegSteps(tb *timedBackend, n int, total, gen time.Duration) {
	host := total - tb.down - tb.blocks - tb.warp
	fmt.Println()
	fmt.Printf("step                                        time      per cycle\n")
	fmt.Printf("downsampling (%d calls, uploads incl.)       %7.2f s  %6.3f s\n", tb.nDown, tb.down.Seconds(), tb.down.Seconds()/float64(n))
	fmt.Printf("block phase correlation (%d blocks)     %7.2f s  %6.3f s\n", tb.nBlk, tb.blocks.Seconds(), tb.blocks.Seconds()/float64(n))
	fmt.Printf("warp of every channel (%d images)            %7.2f s  %6.3f s\n", tb.nWarps, tb.warp.Seconds(), tb.warp.Seconds()/float64(n))
	fmt.Printf("host (fits, field smoothing, NCC metrics)   %7.2f s  %6.3f s\n", host.Seconds(), host.Seconds()/float64(n))
	fmt.Printf("TOTAL, %d cycles registered + %d images warped, TIFF I/O excluded: %.2f s (target <= 30 s; original 67.9 min on a B200)\n",
		n, tb.nWarps, total.Seconds())
	fmt.Printf("data generation (not timed above): %.1f s\n", gen.Seconds())
}

// runRegStage runs the registration stage on the project's EDF outputs
// and prints its wall time, peak host memory and peak GPU memory.
func runRegStage(ctx context.Context, f flags, eng *gpu.Engine, proj *regProject) error {
	if proj.nBytes == 0 {
		filepath.Walk(filepath.Join(layout.ProcessedDir(proj.dir), layout.EDFDir), func(_ string, fi os.FileInfo, err error) error {
			if err == nil && !fi.IsDir() && filepath.Ext(fi.Name()) == ".tif" {
				proj.nBytes += fi.Size()
			}
			return nil
		})
	}
	if err := os.RemoveAll(regstage.OutDir(proj.dir)); err != nil { // a previous run's output: disk
		return err
	}
	if err := eng.ResetPeak(); err != nil {
		return err
	}
	budget, budgetSrc, err := membudget.Resolve(f.memBudget, os.Getenv)
	if err != nil {
		return err
	}
	// The stage's own peak resident set: the benchmark's is forgotten.
	hp, rssStart := startHostPeak()
	fmt.Printf("host memory: budget %s (%s); resident before the stage %s (CUDA context, libraries, staging buffers)\n",
		membudget.Format(budget), budgetSrc, membudget.Format(rssStart))
	lg := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	t1 := time.Now()
	res, err := regstage.Run(ctx, regstage.Options{Config: proj.cfg, Engine: eng.Registrar(), Workers: f.workers, Logger: lg,
		MemBudget: budget, MemBudgetSource: budgetSrc})
	if err != nil {
		return fmt.Errorf("registration stage: %w", err)
	}
	stage := time.Since(t1)
	peak := hp.peak()
	fmt.Printf("peak host memory of the registration stage (VmHWM): %.2f GiB (%d MiB); budget %.2f GiB (%s): %s; at most %d full-size planes held at once\n",
		gib(peak), peak>>20, gib(budget), budgetSrc, map[bool]string{true: "within", false: "EXCEEDED"}[peak <= budget], res.PlanesInMemory)
	var outBytes int64
	filepath.Walk(res.OutDir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			outBytes += fi.Size()
		}
		return nil
	})
	ms, _ := eng.MemInfo()
	fmt.Printf("whole stage (regstage.Run, GPU): %.1f s with TIFF I/O (read %.1f GB, wrote %.1f GB incl. the OME-TIFF); peak GPU memory %.2f GiB\n",
		stage.Seconds(), float64(proj.nBytes)/1e9, float64(outBytes)/1e9, gib(ms.DevicePeak))
	return nil
}

// moreChannels appends cheap byte-permuted copies of the last channel up to
// n channels (see the benchmark's comment).
func moreChannels(ctx context.Context, imgs []*raster.Gray16, n, workers int) []*raster.Gray16 {
	for len(imgs) < n {
		src := imgs[len(imgs)-1]
		g := raster.NewGray16(src.W, src.H)
		key := uint16(0x5a5a + 0x1111*len(imgs))
		par.ForEach(ctx, src.H, workers, func(y int) error {
			for x, v := range src.Pix[y*src.W : (y+1)*src.W] {
				g.Pix[y*src.W+x] = v ^ key
			}
			return nil
		})
		imgs = append(imgs, g)
	}
	return imgs
}
