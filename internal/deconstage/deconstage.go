// Package deconstage is the deconvolution stage of one cycle: it reads the
// stitched planes of every channel, deconvolves each channel's z-stack with
// the original's PSF and Richardson-Lucy settings (internal/psf,
// internal/decon) on the engine it is given, and writes the original's
// layout atomically (internal/staging):
//
//	data/processed/stitched/cycNN/CH{c}/{z:02d}.tif             input, uint16 (needs stitched/cycNN/.snakemake_complete)
//	data/processed/deconvolved/cycNN/CH{c}/deconv_{k:03d}.tif  output, uint16, k = 1.. in z order
//	data/processed/deconvolved/cycNN/DECONV_parameters.txt      settings, PSF and iterations per channel
//	data/processed/deconvolved/cycNN/.snakemake_complete        sentinel (key=value, stage=decon)
//
// Stacks are (z, y, x), x fastest, in counts. Channels run one after the
// other (each uses the whole device); planes are read and written by
// goroutines. Bad input (planes of different sizes, a missing or extra
// plane, no stitch sentinel, missing or non-physical optics keys, an
// all-zero channel) is an error wrapping ErrInput that names the file or
// key, found before anything is written.
package deconstage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/decon"
	"github.com/kintsugi-hpc/kintsugi-go/internal/par"
	"github.com/kintsugi-hpc/kintsugi-go/internal/psf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/staging"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// ErrInput marks errors caused by the input data or config (exit code 2);
// it is staging.ErrInput, shared by every stage.
var ErrInput = staging.ErrInput

// Engine is a device that deconvolves stacks.
type Engine interface {
	decon.Deconvolver
	Name() string
	Close() error
}

// Gray16Engine is an Engine that also rounds to uint16 itself (the GPU,
// which then copies half the bytes back); the result equals
// decon.Quantize of Deconvolve's.
type Gray16Engine interface {
	Engine
	DeconvolveGray16(ctx context.Context, in *raster.Stack, k *psf.Kernel, p decon.Params) ([]*raster.Gray16, decon.Stats, error)
}

// CPUEngine is the reference engine (decon.CPU on Workers goroutines).
type CPUEngine struct {
	decon.CPU
	Workers int
}

// Name describes the engine for logs and the sentinel.
func (c CPUEngine) Name() string { return fmt.Sprintf("cpu (%d workers)", c.Workers) }

// Close does nothing.
func (CPUEngine) Close() error { return nil }

// DefaultCPUBudget bounds the CPU's per-window temporaries (5 float32
// arrays of a window): 2 GiB keeps a production channel (12676 x 7493 x 20)
// near 36 GB of host memory in all.
const DefaultCPUBudget = 2 << 30

// Options of a run.
type Options struct {
	Config  *config.Config
	Cycle   int
	Engine  Engine
	Workers int
	Logger  *slog.Logger
	// CPU marks the CPU engine (its window budget defaults to DefaultCPUBudget).
	CPU bool
}

// Channel is one channel's outcome.
type Channel struct {
	Channel  int
	Planes   int
	W, H     int
	PSF      string
	Info     psf.Info
	Stats    decon.Stats
	Seconds  float64 // deconvolution, excluding I/O
	ReadSec  float64
	WriteSec float64
}

// Result of a run.
type Result struct {
	Dir      string
	Channels []Channel
	Seconds  float64
}

// InputDir is the stitched directory of a cycle.
func InputDir(project string, cycle int) string {
	return filepath.Join(project, "data", "processed", "stitched", config.CycleName(cycle))
}

// OutDir is the stage's output directory of a cycle.
func OutDir(project string, cycle int) string {
	return filepath.Join(project, "data", "processed", "deconvolved", config.CycleName(cycle))
}

// Params returns the decon settings of the config.
func Params(cfg *config.Config) (decon.Params, error) {
	d := cfg.Decon
	p := decon.Params{Algorithm: d.Algorithm, Iterations: d.Iterations, StopCriterion: d.StopCriterion,
		Damping: d.Damping, HistClip: d.HistClip, MemoryBudget: int64(d.MemoryBudgetMB) << 20}
	if err := p.Validate(); err != nil {
		return p, &config.Error{File: cfg.Path, Key: "decon", Msg: err.Error()}
	}
	return p, nil
}

// Kernel computes the PSF of channel ch from the config's microscope keys,
// wavelengths and decon.psf_model; errors name the key.
func Kernel(cfg *config.Config, ch int) (*psf.Kernel, psf.Info, error) {
	ex, em, err := cfg.Wavelength(ch)
	if err != nil {
		return nil, psf.Info{}, err
	}
	o := psf.Optics{DXY: cfg.XYPixelSize, DZ: cfg.ZStepSize, NA: cfg.NumericalAperture, RI: cfg.TissueRefractiveIndex,
		ExNM: ex, EmNM: em, SlitMM: cfg.Decon.SlitAperture, FCylMM: cfg.Decon.FCyl}
	k, info, err := psf.Make(cfg.Decon.PSFModel, o)
	if err != nil {
		var oe *psf.OpticsError
		if errors.As(err, &oe) {
			key := oe.Key
			if strings.HasPrefix(key, "wavelengths") {
				key = fmt.Sprintf("wavelengths.%d", ch)
			}
			return nil, info, &config.Error{File: cfg.Path, Key: key, Msg: oe.Msg}
		}
		return nil, info, fmt.Errorf("channel %d PSF: %w", ch, err)
	}
	return k, info, nil
}

var planeRE = regexp.MustCompile(`^(\d+)\.tif$`)

// Planes lists a channel directory's stitched planes {z:02d}.tif in z
// order and checks that they are consecutive, that there are nz of them
// when nz > 0 (the config's n_zplanes), and that all have one size.
func Planes(dir string, nz int) (paths []string, w, h int, err error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, 0, 0, staging.Inputf("stitched channel directory %s: %v", dir, err)
	}
	type pl struct {
		z    int
		path string
	}
	var ps []pl
	for _, e := range ents {
		m := planeRE.FindStringSubmatch(e.Name())
		if m == nil || e.IsDir() {
			continue
		}
		z, _ := strconv.Atoi(m[1])
		ps = append(ps, pl{z, filepath.Join(dir, e.Name())})
	}
	if len(ps) == 0 {
		return nil, 0, 0, staging.Inputf("%s: no stitched planes {z:02d}.tif", dir)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].z < ps[j].z })
	for i := 1; i < len(ps); i++ {
		if ps[i].z == ps[i-1].z {
			return nil, 0, 0, staging.Inputf("%s and %s: the same z-plane twice", ps[i-1].path, ps[i].path)
		}
		if ps[i].z != ps[i-1].z+1 {
			return nil, 0, 0, staging.Inputf("%s: missing plane %02d.tif (planes %d..%d present)", dir, ps[i-1].z+1, ps[0].z, ps[len(ps)-1].z)
		}
	}
	if nz > 0 && len(ps) != nz {
		what := "missing"
		if len(ps) > nz {
			what = "extra"
		}
		return nil, 0, 0, staging.Inputf("%s: %d planes (%02d..%02d), n_zplanes is %d: %s plane(s)", dir, len(ps), ps[0].z, ps[len(ps)-1].z, nz, what)
	}
	for i, p := range ps {
		info, err := tiffio.ReadInfo(p.path)
		if err != nil {
			return nil, 0, 0, staging.Inputf("%s: %v", p.path, err)
		}
		if info.SamplesPerPixel != 1 || info.BitsPerSample != 16 || info.SampleFormat == 3 {
			return nil, 0, 0, staging.Inputf("%s: want a uint16 grey plane (%d bits, format %d, %d samples)", p.path, info.BitsPerSample, info.SampleFormat, info.SamplesPerPixel)
		}
		if i == 0 {
			w, h = info.Width, info.Height
		} else if info.Width != w || info.Height != h {
			return nil, 0, 0, staging.Inputf("%s is %dx%d, %s is %dx%d: stitched planes of one channel must have one size", p.path, info.Width, info.Height, ps[0].path, w, h)
		}
		paths = append(paths, p.path)
	}
	return paths, w, h, nil
}

// ReadStack reads planes into a (z, y, x) stack in counts.
func ReadStack(ctx context.Context, paths []string, w, h, workers int) (*raster.Stack, error) {
	st := raster.NewStack(len(paths), h, w)
	err := par.ForEach(ctx, len(paths), workers, func(i int) error {
		img, err := tiffio.ReadGray16(paths[i])
		if err != nil {
			return staging.Inputf("%s: %v", paths[i], err)
		}
		if img.W != w || img.H != h {
			return staging.Inputf("%s is %dx%d, want %dx%d", paths[i], img.W, img.H, w, h)
		}
		dst := st.Plane(i)
		for j, v := range img.Pix {
			dst[j] = float32(v)
		}
		return nil
	})
	return st, err
}

// ReadTileStack reads one tile's z-stack: a multi-page TIFF, or a
// directory of single-plane TIFFs in name order.
func ReadTileStack(path string) (*raster.Stack, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, staging.Inputf("--in %s: %v", path, err)
	}
	var pages []*raster.Gray16
	if fi.IsDir() {
		ents, err := os.ReadDir(path)
		if err != nil {
			return nil, staging.Inputf("--in %s: %v", path, err)
		}
		var names []string
		for _, e := range ents {
			if n := strings.ToLower(e.Name()); !e.IsDir() && (strings.HasSuffix(n, ".tif") || strings.HasSuffix(n, ".tiff")) {
				names = append(names, e.Name())
			}
		}
		sort.Strings(names)
		for _, n := range names {
			img, err := tiffio.ReadGray16(filepath.Join(path, n))
			if err != nil {
				return nil, staging.Inputf("%s: %v", filepath.Join(path, n), err)
			}
			pages = append(pages, img)
		}
	} else {
		pages, err = tiffio.ReadGray16Pages(path)
		if err != nil {
			return nil, staging.Inputf("%s: %v", path, err)
		}
	}
	if len(pages) == 0 {
		return nil, staging.Inputf("--in %s: no TIFF planes", path)
	}
	st := raster.NewStack(len(pages), pages[0].H, pages[0].W)
	for i, p := range pages {
		if p.W != st.W || p.H != st.H {
			return nil, staging.Inputf("--in %s: plane %d is %dx%d, plane 1 is %dx%d", path, i+1, p.W, p.H, st.W, st.H)
		}
		for j, v := range p.Pix {
			st.Pix[i*st.H*st.W+j] = float32(v)
		}
	}
	return st, nil
}

// ToPages quantises a result (counts) into uint16 planes.
func ToPages(st *raster.Stack) []*raster.Gray16 {
	pages := make([]*raster.Gray16, st.N)
	for z := range pages {
		pages[z] = &raster.Gray16{W: st.W, H: st.H, Pix: decon.Quantize(nil, st.Plane(z))}
	}
	return pages
}

// settings returns the parameters and the PSF for channel ch from the
// config (a bad setting wraps ErrInput), with the worker count and, on the
// CPU (cpu), DefaultCPUBudget unless the config sets a budget.
func settings(cfg *config.Config, ch int, cpu bool, workers int) (decon.Params, *psf.Kernel, psf.Info, error) {
	p, err := Params(cfg)
	if err != nil {
		return p, nil, psf.Info{}, fmt.Errorf("%w: %w", ErrInput, err)
	}
	k, info, err := Kernel(cfg, ch)
	if err != nil {
		return p, nil, info, fmt.Errorf("%w: %w", ErrInput, err)
	}
	p.Workers = workers
	if cpu && p.MemoryBudget == 0 {
		p.MemoryBudget = DefaultCPUBudget
	}
	return p, k, info, nil
}

// algInput marks the algorithm's input errors (decon.ErrInput) as the
// stage's (ErrInput).
func algInput(err error) error {
	if errors.Is(err, decon.ErrInput) {
		return fmt.Errorf("%w: %w", ErrInput, err)
	}
	return err
}

// Deconvolve runs one stack with the config's settings for channel ch.
func Deconvolve(ctx context.Context, eng Engine, cfg *config.Config, ch int, st *raster.Stack, cpu bool, workers int) (*raster.Stack, decon.Stats, *psf.Kernel, psf.Info, error) {
	p, k, info, err := settings(cfg, ch, cpu, workers)
	if err != nil {
		return nil, decon.Stats{}, nil, info, err
	}
	out, s, err := eng.Deconvolve(ctx, st, k, p)
	return out, s, k, info, algInput(err)
}

// deconvolvePages is Deconvolve rounded to uint16 planes, on the device
// when the engine can.
func deconvolvePages(ctx context.Context, eng Engine, cfg *config.Config, ch int, st *raster.Stack, cpu bool, workers int) ([]*raster.Gray16, decon.Stats, *psf.Kernel, psf.Info, error) {
	g, ok := eng.(Gray16Engine)
	if !ok {
		out, s, k, info, err := Deconvolve(ctx, eng, cfg, ch, st, cpu, workers)
		if err != nil {
			return nil, s, k, info, err
		}
		return ToPages(out), s, k, info, nil
	}
	// A Gray16Engine is a device engine: cpu is false here.
	p, k, info, err := settings(cfg, ch, cpu, workers)
	if err != nil {
		return nil, decon.Stats{}, nil, info, err
	}
	pages, s, err := g.DeconvolveGray16(ctx, st, k, p)
	return pages, s, k, info, algInput(err)
}

// Run deconvolves one cycle.
func Run(ctx context.Context, o Options) (*Result, error) {
	start := time.Now()
	cfg, lg := o.Config, o.Logger
	if lg == nil {
		lg = slog.Default()
	}
	workers := max(1, o.Workers)
	in := InputDir(cfg.ProjectDir, o.Cycle)
	if err := staging.RequireSentinel(in, o.Cycle, "stitch"); err != nil {
		return nil, err
	}
	if len(cfg.Channels) == 0 {
		return nil, staging.Inputf("config %s: key channels: empty", cfg.Path)
	}
	// Every check before any output.
	if _, err := Params(cfg); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInput, err)
	}
	type chIn struct {
		paths []string
		w, h  int
	}
	ins := make([]chIn, len(cfg.Channels))
	for i, ch := range cfg.Channels {
		if _, _, err := Kernel(cfg, ch); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInput, err)
		}
		paths, w, h, err := Planes(filepath.Join(in, fmt.Sprintf("CH%d", ch)), cfg.NZPlanes)
		if err != nil {
			return nil, err
		}
		ins[i] = chIn{paths, w, h}
	}
	final := OutDir(cfg.ProjectDir, o.Cycle)
	stage, err := staging.New(final)
	if err != nil {
		return nil, err
	}
	defer stage.Abort()
	res := &Result{Dir: final}
	lg.Info("deconvolving cycle", "cycle", o.Cycle, "channels", cfg.Channels, "engine", o.Engine.Name(), "workers", workers,
		"psf_model", cfg.Decon.PSFModel, "algorithm", cfg.Decon.Algorithm, "iterations", cfg.Decon.Iterations)
	for i, ch := range cfg.Channels {
		c := Channel{Channel: ch, Planes: len(ins[i].paths), W: ins[i].w, H: ins[i].h}
		t0 := time.Now()
		st, err := ReadStack(ctx, ins[i].paths, ins[i].w, ins[i].h, workers)
		if err != nil {
			return nil, err
		}
		c.ReadSec = time.Since(t0).Seconds()
		t1 := time.Now()
		pages, s, k, info, err := deconvolvePages(ctx, o.Engine, cfg, ch, st, o.CPU, workers)
		if err != nil {
			if errors.Is(err, ErrInput) {
				return nil, fmt.Errorf("channel %d (%s): %w", ch, filepath.Dir(ins[i].paths[0]), err)
			}
			return nil, fmt.Errorf("channel %d: %w", ch, err)
		}
		c.Seconds = time.Since(t1).Seconds()
		c.Stats, c.Info, c.PSF = s, info, k.String()
		st = nil
		t2 := time.Now()
		chDir := filepath.Join(stage.Path, fmt.Sprintf("CH%d", ch))
		if err := os.MkdirAll(chDir, 0o755); err != nil {
			return nil, err
		}
		if err := par.ForEach(ctx, len(pages), workers, func(z int) error {
			return tiffio.WriteGray16(filepath.Join(chDir, fmt.Sprintf("deconv_%03d.tif", z+1)), pages[z])
		}); err != nil {
			return nil, fmt.Errorf("channel %d: write: %w", ch, err)
		}
		c.WriteSec = time.Since(t2).Seconds()
		lg.Info("channel deconvolved", "cycle", o.Cycle, "channel", ch, "planes", c.Planes, "size", fmt.Sprintf("%dx%d", c.W, c.H),
			"psf", c.PSF+" (x,y,z)", "iterations", s.Iterations, "stopped", s.Stopped, "chunks", s.Chunks, "streamed", s.Streamed,
			"lo", s.Lo, "hi", s.Hi, "raw_max", s.RawMax, "decon_s", fmt.Sprintf("%.2f", c.Seconds),
			"read_s", fmt.Sprintf("%.2f", c.ReadSec), "write_s", fmt.Sprintf("%.2f", c.WriteSec))
		res.Channels = append(res.Channels, c)
	}
	res.Seconds = time.Since(start).Seconds()
	if err := os.WriteFile(filepath.Join(stage.Path, "DECONV_parameters.txt"), []byte(ParametersText(cfg, o, res)), 0o644); err != nil {
		return nil, err
	}
	chs := make([]string, len(res.Channels))
	for i, c := range res.Channels {
		chs[i] = fmt.Sprint(c.Channel)
	}
	its := make([]string, len(res.Channels))
	for i, c := range res.Channels {
		its[i] = fmt.Sprint(c.Stats.Iterations)
	}
	if err := staging.WriteSentinel(filepath.Join(stage.Path, ".snakemake_complete"), [][2]string{
		{"stage", "decon"},
		{"cycle", fmt.Sprint(o.Cycle)},
		{"completed", time.Now().UTC().Format(time.RFC3339)},
		{"channels", strings.Join(chs, ",")},
		{"successful", strings.Join(chs, ",")},
		{"failed", ""},
		{"duration_minutes", fmt.Sprintf("%.2f", res.Seconds/60)},
		{"engine", o.Engine.Name()},
		{"workers", fmt.Sprint(workers)},
		{"psf_model", cfg.Decon.PSFModel},
		{"algorithm", cfg.Decon.Algorithm},
		{"iterations", strings.Join(its, ",")},
	}); err != nil {
		return nil, err
	}
	if err := stage.Commit(); err != nil {
		return nil, err
	}
	lg.Info("cycle deconvolved", "cycle", o.Cycle, "dir", final, "seconds", fmt.Sprintf("%.1f", res.Seconds))
	return res, nil
}

// ParametersText is DECONV_parameters.txt: the original's lines (LsDeconv's
// info file), one block per channel.
func ParametersText(cfg *config.Config, o Options, res *Result) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("deconvolution finished at %s", time.Now().UTC().Format(time.RFC3339))
	w("data processed on: %s", o.Engine.Name())
	w("elapsed time: %02d:%02d", int(res.Seconds)/3600, int(res.Seconds)%3600/60)
	w("")
	w("psf model: %s", cfg.Decon.PSFModel)
	w("algorithm: %s", cfg.Decon.Algorithm)
	w("focal length of cylinder lens (mm): %g", cfg.Decon.FCyl)
	w("width of slit aperture (mm): %g", cfg.Decon.SlitAperture)
	w("histogram clipping value (%%): %g", cfg.Decon.HistClip)
	w("numerical aperture: %g", cfg.NumericalAperture)
	w("refractive index: %g", cfg.TissueRefractiveIndex)
	w("max. iterations: %d", cfg.Decon.Iterations)
	w("damping factor (%%): %g", cfg.Decon.Damping)
	w("stop criterion (%%): %g", cfg.Decon.StopCriterion)
	w("source data folder: %s", InputDir(cfg.ProjectDir, o.Cycle))
	w("voxel size : %g nm x %g nm x %g nm", cfg.XYPixelSize, cfg.XYPixelSize, cfg.ZStepSize)
	for _, c := range res.Channels {
		ex, em, _ := cfg.Wavelength(c.Channel)
		w("")
		w("channel: %d", c.Channel)
		w("excitation wavelength (nm): %g", ex)
		w("emission wavelength (nm): %g", em)
		w("size of PSF (pixel): %s", strings.ReplaceAll(c.PSF, "x", " x "))
		w("PSF sampling (nm): %g x %g", c.Info.SampleXY, c.Info.SampleZ)
		w("FWHHM of PSF lateral (nm): %g", c.Info.FWHMxy)
		w("FWHHM of PSF axial (nm): %g", c.Info.FWHMz)
		w("Rayleigh range of objective lateral (nm): %g", 0.61*em/cfg.NumericalAperture)
		w("Rayleigh range of objective axial (nm): %g", 2*em*cfg.TissueRefractiveIndex/(cfg.NumericalAperture*cfg.NumericalAperture))
		w("iterations: %d (stopped by criterion: %v)", c.Stats.Iterations, c.Stats.Stopped)
		w("highest intensity value in deconvolved data: %g", c.Stats.RawMax)
		w("clip values (low, high): %g, %g", c.Stats.Lo, c.Stats.Hi)
		w("stack (x y z): %d x %d x %d", c.W, c.H, c.Planes)
	}
	return b.String()
}
