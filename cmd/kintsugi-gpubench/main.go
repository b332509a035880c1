//go:build cuda

// Command kintsugi-gpubench measures the CUDA engine stage by stage
// (-stage: stitch, the default, decon, edf, register, open, or all) on
// production-size synthetic data generated on the spot. For the stitch stage
// (default: 7 x 9 tiles of 1440 x 1920 px, 20 z-planes, 4 channels: 5040 raw
// TIFFs, 27.9 GB) it writes the raw tiles and config.yaml in the project
// layout, runs the real stage (stitch.Run: TIFF read, BaSiC fits,
// correction, alignment, blending, TIFF write) with the CUDA engine, and
// prints the per-step times, the whole stage, peak GPU memory, accuracy
// against the known truth, and the targets of the issue beside the
// original's times on the same card. With -cpu-compare it also runs the CPU
// reference on one plane (fit, translations, correction + blend) and prints
// times and differences. The other stages print their own tables.
//
// Run on a GPU machine: make gpu-bench GPU_BENCH_ARGS="-dir /tmp/kbench".
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/align"
	"github.com/kintsugi-hpc/kintsugi-go/internal/basic"
	"github.com/kintsugi-hpc/kintsugi-go/internal/blend"
	"github.com/kintsugi-hpc/kintsugi-go/internal/cliutil"
	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/gpu"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/membudget"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/stitch"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// stages maps a -stage name to its benchmark; each stage's file registers
// itself in an init function (stitch here, decon/edf/register in theirs) and
// defines its own extra flags there.
var stages = map[string]func(context.Context, flags) error{}

func stageNames() string {
	names := make([]string, 0, len(stages)+1)
	names = append(names, "stitch")
	for n := range stages {
		if n != "stitch" {
			names = append(names, n)
		}
	}
	sort.Strings(names[1:])
	return strings.Join(names, ", ")
}

// runStages runs one stage's benchmark, or every stage's in the order of
// the pipeline for "all".
func runStages(ctx context.Context, stage string, f flags) error {
	if stage != "all" {
		fn, ok := stages[stage]
		if !ok {
			return fmt.Errorf("-stage %q: want one of %s, or all", stage, stageNames())
		}
		return fn(ctx, f)
	}
	for _, name := range []string{"stitch", "decon", "edf", "register"} {
		if fn, ok := stages[name]; ok {
			fmt.Printf("==== stage %s\n", name)
			if err := fn(ctx, f); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	return nil
}

func init() { stages["stitch"] = run }

type flags struct {
	dir        string
	preset     string
	gen        string
	nz, nch    int
	workers    int
	batch      int
	memBudget  int // MB
	device     int
	cpuCompare bool
	dropCaches bool
	keep       bool
	skipGen    bool
}

func main() {
	var f flags
	flag.StringVar(&f.dir, "dir", filepath.Join(os.TempDir(), "kintsugi-gpubench"), "project directory to generate into (needs ~45 GB free for production)")
	flag.StringVar(&f.preset, "preset", "production", "synthetic geometry: production (7x9 tiles of 1440x1920) or small or tiny")
	flag.StringVar(&f.gen, "gen", "fast", "raw data generator: fast (this command's, seconds) or synth (internal/synth, realistic, slower)")
	flag.IntVar(&f.nz, "z", 0, "z-planes (0: the preset's)")
	flag.IntVar(&f.nch, "channels", 0, "channels (0: the preset's)")
	flag.IntVar(&f.workers, "workers", runtime.NumCPU(), "goroutines for I/O and CPU work")
	flag.IntVar(&f.batch, "batch", 0, "planes read and fitted together by the stage (0: the stage's default)")
	flag.IntVar(&f.memBudget, "mem-budget", 0, "host memory budget of the stage, MB (0: as the executables decide it: SLURM, cgroup, 80% of the physical memory); the issue's target is 6144")
	flag.IntVar(&f.device, "gpu", 0, "GPU index among the visible devices")
	flag.BoolVar(&f.cpuCompare, "cpu-compare", false, "also run the CPU reference on one plane and compare")
	flag.BoolVar(&f.dropCaches, "drop-caches", false, "drop the page cache before the stage (cold TIFF reads; needs root)")
	flag.BoolVar(&f.keep, "keep", false, "keep the generated project")
	flag.BoolVar(&f.skipGen, "skip-gen", false, "reuse the project already in -dir")
	stage := flag.String("stage", "stitch", "what to measure: "+stageNames()+", or all")
	flag.Parse()
	// KINTSUGI_CPUPROFILE / KINTSUGI_TRACE, as the wrappers take them
	stop, err := cliutil.Profile()
	if err == nil {
		err = runStages(context.Background(), *stage, f)
		stop()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpubench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, f flags) error {
	o, rawGB, truthPos, truthFlat, err := benchProject(ctx, f)
	if err != nil {
		return err
	}
	if !f.keep {
		defer os.RemoveAll(f.dir)
	}
	cfg, err := config.Load(synth.ConfigPath(f.dir))
	if err != nil {
		return err
	}
	cold := false
	if f.dropCaches {
		exec.Command("sync").Run()
		if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0); err != nil {
			fmt.Println("could not drop the page cache (reads are warm):", err)
		} else {
			cold = true
			fmt.Println("page cache dropped: TIFF reads are cold")
		}
	}

	eng, err := openEngine(f)
	if err != nil {
		return err
	}
	defer eng.Close()
	lg := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	budget, budgetSrc, err := membudget.Resolve(f.memBudget, os.Getenv)
	if err != nil {
		return err
	}
	// The stage's own peak resident set: the generator's is forgotten.
	hp, rssOpen := startHostPeak()
	fmt.Printf("host memory: budget %s (%s); resident after the engine opened %s (CUDA context, libraries, staging buffers)\n",
		membudget.Format(budget), budgetSrc, membudget.Format(rssOpen))
	res, err := stitch.Run(ctx, stitch.Options{Config: cfg, Cycle: 1, Engine: eng, Workers: f.workers, Batch: f.batch,
		MemBudget: budget, MemBudgetSource: budgetSrc, Logger: lg})
	if err != nil {
		return fmt.Errorf("stitch stage: %w", err)
	}
	peak := hp.peak()
	fmt.Printf("peak host memory of the stitch stage (VmHWM): %.2f GiB; budget %.2f GiB (%s), target <= 6 GiB: %s; at most %d planes of raw tiles held at once\n",
		gib(peak), gib(budget), budgetSrc, map[bool]string{true: "met", false: "NOT met"}[peak <= 6<<30], res.PlanesInMemory)
	ms, err := eng.MemInfo()
	if err != nil {
		return err
	}
	printStitchTable(res, o, f, rawGB, cold, ms)

	if truthPos != nil {
		reportAccuracy(res, truthPos, truthFlat, o)
	}
	if f.cpuCompare {
		if err := compareCPU(ctx, eng, cfg, o, res); err != nil {
			return fmt.Errorf("cpu compare: %w", err)
		}
	}
	return nil
}

// benchProject returns the synthetic options of -preset (with -nz, -nch,
// one cycle) and the raw size in GB; unless -skip-gen it writes the raw
// tiles and config.yaml into -dir and, with the fast generator, returns the
// true tile positions (px, acquisition order) and flatfields.
func benchProject(ctx context.Context, f flags) (o synth.Options, rawGB float64, truthPos []raster.Point, truthFlat [][]float64, err error) {
	o, err = synth.Preset(f.preset)
	if err != nil {
		return o, 0, nil, nil, err
	}
	o.OutDir = f.dir
	o.Workers = f.workers
	o.WriteTruthScene = false
	if f.nz > 0 {
		o.NZ = f.nz
	}
	if f.nch > 0 {
		o.NChannels = f.nch
	}
	o.NCycles, o.Cycles = 1, []int{1}
	o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rawGB = float64(o.Rows*o.Cols*o.NZ*o.NChannels) * float64(o.TileH*o.TileW*2) / 1e9
	fmt.Printf("gpubench: %d x %d tiles of %d x %d px, %d z, %d channels (%.1f GB raw) in %s, %d workers\n",
		o.Rows, o.Cols, o.TileH, o.TileW, o.NZ, o.NChannels, rawGB, f.dir, f.workers)
	if out, err := exec.Command("df", "-h", filepath.Dir(filepath.Clean(f.dir))).CombinedOutput(); err == nil {
		fmt.Print(string(out))
	}

	if !f.skipGen {
		os.RemoveAll(f.dir)
		t0 := time.Now()
		switch f.gen {
		case "fast":
			truthPos, truthFlat, err = generateFast(ctx, o)
		case "synth":
			err = synth.Generate(ctx, o)
		default:
			err = fmt.Errorf("unknown generator %q", f.gen)
		}
		if err != nil {
			return o, 0, nil, nil, fmt.Errorf("generate: %w", err)
		}
		if err := synth.WriteConfig(synth.ConfigPath(f.dir), o, nil); err != nil {
			return o, 0, nil, nil, err
		}
		sec := time.Since(t0).Seconds()
		fmt.Printf("generated and wrote %d raw TIFFs (%.1f GB) with the %s generator in %.1f s (%.2f GB/s including generation)\n",
			o.Rows*o.Cols*o.NZ*o.NChannels, rawGB, f.gen, sec, rawGB/sec)
	}
	return o, rawGB, truthPos, truthFlat, nil
}

// printStitchTable prints the stitch stage's step times (s) of res beside
// the targets and the original's times on the H200, scaled to the
// planes run, and the peak GPU memory ms.
func printStitchTable(res *stitch.Result, o synth.Options, f flags, rawGB float64, cold bool, ms gpu.MemStats) {
	tm := res.Timings
	planes := res.Planes
	outGB := 0.0
	if m, err := tiffio.ReadInfo(filepath.Join(res.OutDir, "CH1", "01.tif")); err == nil {
		outGB = float64(planes) * float64(m.Width*m.Height*2) / 1e9
		fmt.Printf("stitched planes: %d of %d x %d px (%.1f GB uint16) in %s\n", planes, m.Width, m.Height, outGB, res.OutDir)
	}
	scale := func(orig float64, n int) float64 { return orig * float64(planes) / float64(n) }
	fmt.Println()
	fmt.Println("step (whole cycle)                 this run   target    original (H200)")
	row := func(name string, v, target, orig float64) {
		ts, os_ := "-", "-"
		if target > 0 {
			ts = fmt.Sprintf("<= %.0f s", target)
		}
		if orig > 0 {
			os_ = fmt.Sprintf("%.0f s", orig)
		}
		fmt.Printf("%-34s %7.2f s  %-9s %s\n", name, v, ts, os_)
	}
	row(fmt.Sprintf("TIFF read (%.1f GB, wall)", rawGB), tm.Read, 0, 0)
	row(fmt.Sprintf("BaSiC fits (%d)", planes), tm.Fit, scale(10, 80), scale(294, 80))
	row(fmt.Sprintf("correction + blending (%d planes)", planes), tm.CorrectBlend, scale(15, 80), scale(404, 80))
	row(fmt.Sprintf("alignment (%d pairs)", len(align.Pairs(o.Rows, o.Cols, gridOf(o)))), tm.Align, 5, 174)
	row(fmt.Sprintf("TIFF write (%.1f GB + profiles)*", outGB), tm.Write, 0, 0)
	row("whole stage, TIFF I/O included", tm.Total, scale(90, 80), 0)
	printPeakGPU(ms)
	fmt.Printf("(reading runs ahead of the GPU work and writing behind it; *write is busy time summed over up to %d concurrent writers;\n TIFF reads are %s)\n",
		f.workers, map[bool]string{true: "cold (page cache dropped)", false: "from the page cache (the files were just written)"}[cold])

}

// openEngine opens the GPU engine of -device, prints its name and how long
// opening took, and resets its peak-memory counters; the caller closes it.
func openEngine(f flags) (*gpu.Engine, error) {
	t0 := time.Now()
	eng, err := gpu.Open(gpu.Options{Device: f.device})
	if err != nil {
		return nil, err
	}
	fmt.Printf("engine: %s (open %.2f s)\n", eng.Name(), time.Since(t0).Seconds())
	if err := eng.ResetPeak(); err != nil {
		eng.Close()
		return nil, err
	}
	return eng, nil
}

// gib is n bytes in GiB.
func gib[T int64 | uint64 | int](n T) float64 { return float64(n) / (1 << 30) }

// printPeakGPU prints the peak GPU memory since the last ResetPeak.
func printPeakGPU(ms gpu.MemStats) {
	fmt.Printf("peak GPU memory: %.2f GiB in use on the device (this engine's pool peak %.2f GiB; %.1f GiB total)\n",
		gib(ms.DevicePeak), gib(ms.PoolPeak), gib(ms.Total))
}

func gridOf(o synth.Options) []align.GridPos {
	g := make([]align.GridPos, o.Rows*o.Cols)
	for k := range g {
		g[k].Row, g[k].Col = synth.SnakeRowCol(k, o.Cols)
	}
	return g
}

// ---------------------------------------------------------------- data

// hash is a 64-bit mixer (splitmix64 finaliser) for per-pixel noise and
// per-cell parameters, so generation is deterministic and parallel.
func hash(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func unit(x uint64) float64 { return float64(hash(x)>>11) / (1 << 53) }

// generateFast writes raw tiles of a cell-like scene (Gaussian blobs on a
// jittered 18 px lattice over a smooth background), cut at known integer
// positions (nominal grid + stage jitter of up to ±3 px), times a vignetting
// flatfield, plus a darkfield and shot-like noise. It returns the true
// positions (shifted to minimum 0) and flatfields (per channel).
func generateFast(ctx context.Context, o synth.Options) ([]raster.Point, [][]float64, error) {
	h, w := o.TileH, o.TileW
	n := o.Rows * o.Cols
	sy, sx := int(math.Round(float64(h)*(1-o.Overlap))), int(math.Round(float64(w)*(1-o.Overlap)))
	const margin = 8
	// Stage jitter within what the stage's pou (0.5 % of the tile) accepts
	// for the difference of two tiles: ±3 px at production size.
	jit := max(1, min(3, int(0.0025*float64(min(h, w)))))
	py, px := make([]int, n), make([]int, n)
	for k := range n {
		r, c := synth.SnakeRowCol(k, o.Cols)
		py[k] = margin + r*sy + int(hash(uint64(k)*2+1)%uint64(2*jit+1)) - jit
		px[k] = margin + c*sx + int(hash(uint64(k)*2+2)%uint64(2*jit+1)) - jit
	}
	mh := margin*2 + (o.Rows-1)*sy + h
	mw := margin*2 + (o.Cols-1)*sx + w
	miny, minx := py[0], px[0]
	for k := range n {
		miny, minx = min(miny, py[k]), min(minx, px[k])
	}
	truth := make([]raster.Point, n)
	for k := range n {
		truth[k] = raster.Point{Y: float64(py[k] - miny), X: float64(px[k] - minx)}
	}
	// Flatfield (vignetting, 30 % at the corners, mean 1) and darkfield.
	flat := make([]float64, h*w)
	var mf float64
	for y := range h {
		for x := range w {
			u, v := (float64(y)-0.47*float64(h))/(0.55*float64(h)), (float64(x)-0.52*float64(w))/(0.55*float64(w))
			flat[y*w+x] = math.Exp(-0.357 * (u*u + v*v) / 2)
			mf += flat[y*w+x]
		}
	}
	for i := range flat {
		flat[i] /= mf / float64(h*w)
	}
	dark := make([]float32, h*w)
	for y := range h {
		for x := range w {
			dark[y*w+x] = float32(460 + 12*float64(x)/float64(w))
		}
	}
	if err := os.MkdirAll(synth.RawDir(o.OutDir, 1), 0o755); err != nil {
		return nil, nil, err
	}
	scene := make([]float32, mh*mw)
	var flats [][]float64
	for ch := 1; ch <= o.NChannels; ch++ {
		flats = append(flats, flat)
		renderScene(scene, mh, mw, uint64(ch), 800+2500*float64(ch), o.Workers)
		type job struct{ z, k int }
		jobs := make(chan job)
		var wg sync.WaitGroup
		var firstErr atomic.Value
		for range o.Workers {
			wg.Go(func() {
				img := raster.NewGray16(w, h)
				for j := range jobs {
					zf := 1 - 0.015*math.Abs(float64(j.z)-float64(o.NZ+1)/2)
					seed := (uint64(ch)<<40 | uint64(j.z)<<24 | uint64(j.k)) * 0x100000001b3
					for y := range h {
						srow := scene[(py[j.k]+y)*mw+px[j.k]:][:w]
						frow := flat[y*w:][:w]
						drow := dark[y*w:][:w]
						orow := img.Pix[y*w:][:w]
						base := seed ^ uint64(y)<<12
						for x := range orow {
							s := float64(srow[x]) * frow[x] * zf
							r := hash(base + uint64(x))
							// sum of three 21-bit uniforms: mean 1.5, variance 1/4
							u := float64(r&0x1fffff)/(1<<21) + float64((r>>21)&0x1fffff)/(1<<21) + float64(r>>42)/(1<<22)
							c := s + float64(drow[x]) + 2*(u-1.5)*math.Sqrt(max(s, 0)) + 0.5
							orow[x] = uint16(min(max(c, 0), 65535))
						}
					}
					p := filepath.Join(synth.RawDir(o.OutDir, 1), synth.RawName(j.k+1, j.z+1, ch))
					if err := tiffio.WriteGray16(p, img); err != nil {
						firstErr.CompareAndSwap(nil, err)
					}
				}
			})
		}
		for z := range o.NZ {
			for k := range n {
				jobs <- job{z, k}
			}
		}
		close(jobs)
		wg.Wait()
		if v := firstErr.Load(); v != nil {
			return nil, nil, v.(error)
		}
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
	}
	return truth, flats, nil
}

// renderScene fills dst (mh x mw, counts) with tissue: a smooth background
// plus Gaussian cells on a jittered 18 px lattice, 20 % of sites empty.
func renderScene(dst []float32, mh, mw int, seed uint64, level float64, workers int) {
	const sp = 18
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				y := int(next.Add(1)) - 1
				if y >= mh {
					return
				}
				cy := y / sp
				for x := range mw {
					cx := x / sp
					v := 0.15 + 0.05*math.Sin(float64(x)*0.0021+float64(seed))*math.Cos(float64(y)*0.0017)
					for j := cy - 1; j <= cy+1; j++ {
						for i := cx - 1; i <= cx+1; i++ {
							if j < 0 || i < 0 {
								continue
							}
							id := (seed<<48 | uint64(j)<<24 | uint64(i)) * 3
							if unit(id) < 0.2 {
								continue
							}
							by := float64(j*sp) + sp/2 + 12*(unit(id+1)-0.5)
							bx := float64(i*sp) + sp/2 + 12*(unit(id+2)-0.5)
							sg := 2.5 + 2.5*unit(id+3)
							a := 0.2 + 0.8*unit(id+4)
							dy, dx := float64(y)-by, float64(x)-bx
							d2 := dy*dy + dx*dx
							if d2 < 16*sg*sg {
								v += a * math.Exp(-d2/(2*sg*sg))
							}
						}
					}
					dst[y*mw+x] = float32(level * v)
				}
			}
		})
	}
	wg.Wait()
}

// ------------------------------------------------------------ accuracy

func reportAccuracy(res *stitch.Result, truth []raster.Point, flats [][]float64, o synth.Options) {
	// Positions: remove the mean offset, then the worst distance.
	var oy, ox float64
	for k := range truth {
		oy += res.Positions[k].Y - truth[k].Y
		ox += res.Positions[k].X - truth[k].X
	}
	oy /= float64(len(truth))
	ox /= float64(len(truth))
	worst, at := 0.0, 0
	within := 0
	for k := range truth {
		d := math.Hypot(res.Positions[k].Y-truth[k].Y-oy, res.Positions[k].X-truth[k].X-ox)
		if d > worst {
			worst, at = d, k
		}
		if d <= 1 {
			within++
		}
	}
	fmt.Printf("accuracy: tile positions %d/%d within 1 px of the truth, worst %.2f px (tile %d)\n", within, len(truth), worst, at+1)
	// Flatfield of CH1 at the reference z against the truth.
	ff, err := tiffio.ReadFloat32(filepath.Join(res.OutDir, layout.ChannelDir(1), layout.BaSiCDir, layout.Flatfield(o.RefZ())))
	if err != nil {
		fmt.Println("accuracy: flatfield not read:", err)
		return
	}
	var ss, worstF float64
	for i, v := range ff.Pix {
		d := float64(v) - flats[0][i]
		ss += d * d
		worstF = max(worstF, math.Abs(d))
	}
	fmt.Printf("accuracy: CH1 Z%02d flatfield RMS error %.2f %%, worst %.2f %% (truth: 30 %% vignetting)\n",
		o.RefZ(), 100*math.Sqrt(ss/float64(len(ff.Pix))), 100*worstF)
	df, err := tiffio.ReadFloat32(filepath.Join(res.OutDir, layout.ChannelDir(1), layout.BaSiCDir, layout.Darkfield(o.RefZ())))
	if err == nil {
		var m float64
		for _, v := range df.Pix {
			m += float64(v)
		}
		fmt.Printf("accuracy: CH1 Z%02d darkfield mean %.1f counts (truth 466)\n", o.RefZ(), m/float64(len(df.Pix)))
	}
}

// ---------------------------------------------------------- CPU compare

// compareCPU runs the CPU reference on the reference plane of CH1 and
// compares with the GPU: BaSiC fit, pair translations, correction + blend.
func compareCPU(ctx context.Context, eng *gpu.Engine, cfg *config.Config, o synth.Options, res *stitch.Result) error {
	z := o.RefZ()
	n := o.Rows * o.Cols
	tiles := make([]*raster.Gray16, n)
	for k := range n {
		t, err := tiffio.ReadGray16(filepath.Join(synth.RawDir(o.OutDir, 1), synth.RawName(k+1, z, 1)))
		if err != nil {
			return err
		}
		tiles[k] = t
	}
	st := raster.NewStack(n, o.TileH, o.TileW)
	for k, t := range tiles {
		raster.Normalize16(st.Plane(k), t.Pix)
	}
	p := basic.Production()
	fmt.Printf("\nCPU reference vs GPU on one plane (CH1 Z%02d, %d tiles), %d CPU workers:\n", z, n, runtime.NumCPU())
	t0 := time.Now()
	gp, err := eng.Fit(ctx, [][]*raster.Gray16{tiles}, p)
	if err != nil {
		return err
	}
	tg := time.Since(t0).Seconds()
	t0 = time.Now()
	cp, err := basic.CPU{}.Fit(ctx, []*raster.Stack{st}, p)
	if err != nil {
		return err
	}
	tc := time.Since(t0).Seconds()
	fd, dd := 0.0, 0.0
	for i := range gp[0].Flatfield {
		fd = max(fd, math.Abs(float64(gp[0].Flatfield[i]-cp[0].Flatfield[i])))
		dd = max(dd, 65535*math.Abs(float64(gp[0].Darkfield[i]-cp[0].Darkfield[i])))
	}
	fmt.Printf("  BaSiC fit: GPU %.2f s (one plane alone), CPU %.2f s; worst |flat diff| %.2g, worst |dark diff| %.2g counts; rounds/iterations GPU %d/%d CPU %d/%d\n",
		tg, tc, fd, dd, gp[0].Reweights, gp[0].Iterations, cp[0].Reweights, cp[0].Iterations)

	corr, err := stitch.Correct(ctx, tiles, &cp[0], float32(cfg.BasicFlatfieldMin), runtime.NumCPU())
	if err != nil {
		return err
	}
	grid := gridOf(o)
	pairs := align.Pairs(o.Rows, o.Cols, grid)
	ap := align.Params{Overlap: cfg.TileOverlap, NCCThreshold: cfg.NCCThreshold, POU: cfg.POU, Subpixel: true}
	t0 = time.Now()
	tgr, err := eng.Translator().Translate(ctx, corr, pairs, ap)
	if err != nil {
		return err
	}
	tg = time.Since(t0).Seconds()
	t0 = time.Now()
	tcr, err := align.CPU{}.Translate(ctx, corr, pairs, ap)
	if err != nil {
		return err
	}
	tc = time.Since(t0).Seconds()
	worst := 0.0
	for i := range tgr {
		worst = max(worst, math.Abs(tgr[i].DY-tcr[i].DY), math.Abs(tgr[i].DX-tcr[i].DX))
	}
	fmt.Printf("  translations (%d pairs): GPU %.2f s, CPU %.2f s; worst |GPU - CPU| %.2g px\n", len(pairs), tg, tc, worst)

	bp := blend.Params{Sigma: cfg.BlendSigma, OverlapY: cfg.TileOverlap, OverlapX: cfg.TileOverlap}
	t0 = time.Now()
	gm, err := eng.CorrectAndBlend(ctx, tiles, &cp[0], float32(cfg.BasicFlatfieldMin), res.Positions, bp)
	if err != nil {
		return err
	}
	tg = time.Since(t0).Seconds()
	t0 = time.Now()
	cm, err := stitch.NewCPUEngine(runtime.NumCPU()).CorrectAndBlend(ctx, tiles, &cp[0], float32(cfg.BasicFlatfieldMin), res.Positions, bp)
	if err != nil {
		return err
	}
	tc = time.Since(t0).Seconds()
	diff, wd := 0, 0
	for i := range cm.Pix {
		if d := int(gm.Pix[i]) - int(cm.Pix[i]); d != 0 {
			diff++
			wd = max(wd, d, -d)
		}
	}
	fmt.Printf("  correction + blend (one plane): GPU %.2f s, CPU %.2f s; %d of %d pixels differ, by at most %d counts\n",
		tg, tc, diff, len(cm.Pix), wd)
	return nil
}

// hostPeak measures the peak host memory (VmHWM) of one stage run in this
// process; startHostPeak starts it.
type hostPeak struct{ resetErr error }

// startHostPeak forgets the memory of what ran before (the generator's, the
// benchmark's own): a garbage collection returns the freed memory to the
// OS, then the kernel's peak is reset. It returns the measurement and the
// resident set at its start, bytes.
func startHostPeak() (hostPeak, int64) {
	runtime.GC()
	debug.FreeOSMemory()
	rss := membudget.RSS()
	return hostPeak{resetErr: membudget.ResetPeak()}, rss
}

// peak returns the peak resident set since startHostPeak, bytes; where the
// reset failed it says so (the figure is then the whole process's).
func (h hostPeak) peak() int64 {
	p := membudget.PeakRSS()
	if h.resetErr != nil {
		fmt.Printf("peak host memory (VmHWM) of the process, not of the stage alone (could not reset the peak: %v)\n", h.resetErr)
	}
	return p
}
