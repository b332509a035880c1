// Package edfstage is the EDF stage of one cycle: it reads every channel's
// deconvolved z-stack, applies the quality gate, fuses the stack into one
// in-focus plane (internal/edf) and writes the original's marker-named
// outputs, atomically per cycle (internal/staging).
//
//	data/processed/deconvolved/cycNN/.snakemake_complete          input sentinel (required)
//	data/processed/deconvolved/cycNN/CH{c}/deconv_*.tif            input, uint16, z order = sorted names
//	data/processed/edf/cycNN/<marker>.tif                          output, uint16 (config.EDFFileName)
//	data/processed/edf/cycNN/.snakemake_complete                   sentinel (key=value, stage=edf)
//
// Bad input is an error wrapping ErrInput that names the file or config
// key: a missing decon sentinel, channel directory or plane; planes of
// different sizes; a non-16-bit or corrupt TIFF; two channels of the cycle
// with the same output name; a channel whose stack fails the quality gate
// (fewer than quality_gate.min_valid_slices valid slices: an empty or
// saturated stack, for example). The original logged such a channel and
// went on; here the cycle fails with nothing written, because registration
// needs every marker's plane and a silent hole surfaces only later.
//
// Memory: the stage plans from Options.MemBudget (memory.go): on the GPU
// the planes go to the device stack as they are read (gpu.EDFStack), so the
// host holds a few planes, not a channel; the CPU reference holds one or two
// channel stacks. A budget below the smallest working set is a
// *membudget.NeedError naming resources.mem_edf (exit 2), before any output.
package edfstage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/edf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/membudget"
	"github.com/kintsugi-hpc/kintsugi-go/internal/par"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/staging"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// ErrInput marks errors caused by the input data or configuration; it is
// staging.ErrInput, shared by every stage.
var ErrInput = staging.ErrInput

// InputDir is deconvolved/cycNN of a project (layout.Deconvolved).
func InputDir(project string, cycle int) string { return layout.Deconvolved(project, cycle) }

// OutDir is edf/cycNN of a project (layout.EDFOut).
func OutDir(project string, cycle int) string { return layout.EDFOut(project, cycle) }

// Options configure Run.
type Options struct {
	Config  *config.Config
	Cycle   int
	Fuser   edf.Fuser
	Workers int
	Logger  *slog.Logger
	// MemBudget is the host memory (resident set, bytes) the stage may use
	// (cliutil.MemBudget: --mem-budget, SLURM, cgroup, physical memory):
	// the stage plans its read-ahead within it (memory.go) and refuses a
	// budget below its smallest working set with a *membudget.NeedError
	// naming ConfigKeyMem before any output. 0: no budget (the preferred
	// plan).
	MemBudget int64
	// MemBudgetSource says where MemBudget came from, for logs and errors.
	MemBudgetSource string
}

// Channel is one channel's outcome.
type Channel struct {
	Channel int
	File    string // output name
	Planes  int
	Used    []int // 0-based plane indices fused
	ReadS   float64
	EDFS    float64
	WriteS  float64
}

// Result is a cycle's outcome.
type Result struct {
	OutDir   string
	Channels []Channel
	Seconds  float64
	// MemPlan is the memory plan taken (memory.go) and MemPlanned the
	// budget it needs, bytes.
	MemPlan    string
	MemPlanned int64
}

// Stack lists one channel's input planes: deconv_*.tif, sorted by name.
func Stack(project string, cycle, ch int) ([]string, error) {
	dir := filepath.Join(InputDir(project, cycle), layout.ChannelDir(ch))
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, staging.Inputf("channel %d: no deconvolved directory %s", ch, dir)
	}
	files, err := filepath.Glob(filepath.Join(dir, layout.DeconPlaneGlob))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, staging.Inputf("channel %d: no deconv_*.tif planes in %s", ch, dir)
	}
	sort.Strings(files)
	return files, nil
}

// ReadPlanes reads uint16 planes (one per file) on workers goroutines and
// checks that they all have the first one's size; errors name the file.
func ReadPlanes(ctx context.Context, files []string, workers int) ([]*raster.Gray16, error) {
	planes := make([]*raster.Gray16, len(files))
	err := par.ForEach(ctx, len(files), workers, func(i int) error {
		g, err := tiffio.ReadGray16(files[i])
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInput, err)
		}
		planes[i] = g
		return nil
	})
	if err != nil {
		return nil, err
	}
	return planes, checkSizes(planes, files)
}

func checkSizes(planes []*raster.Gray16, names []string) error {
	for i, p := range planes {
		if p.W != planes[0].W || p.H != planes[0].H {
			return staging.Inputf("%s is %d x %d px, %s is %d x %d (W x H): the planes of a stack must have one size",
				names[i], p.W, p.H, names[0], planes[0].W, planes[0].H)
		}
	}
	return nil
}

// ReadStackPath reads a z-stack given as a directory of single-plane TIFFs
// (*.tif and *.tiff, sorted by name) or as one multi-page TIFF.
func ReadStackPath(ctx context.Context, path string, workers int) ([]*raster.Gray16, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, staging.Inputf("--in %s: %v", path, err)
	}
	if !st.IsDir() {
		pages, err := tiffio.ReadGray16Pages(path)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInput, err)
		}
		names := make([]string, len(pages))
		for i := range names {
			names[i] = fmt.Sprintf("%s page %d", path, i+1)
		}
		return pages, checkSizes(pages, names)
	}
	var files []string
	for _, pat := range []string{"*.tif", "*.tiff"} {
		m, _ := filepath.Glob(filepath.Join(path, pat))
		files = append(files, m...)
	}
	if len(files) == 0 {
		return nil, staging.Inputf("--in %s: no *.tif planes in the directory", path)
	}
	sort.Strings(files)
	return ReadPlanes(ctx, files, workers)
}

// Run runs the stage for one cycle.
func Run(ctx context.Context, o Options) (*Result, error) {
	t0 := time.Now()
	cfg := o.Config
	lg := o.Logger
	if lg == nil {
		lg = slog.Default()
	}
	p := Params(cfg.EDF)
	if err := p.Validate(); err != nil {
		return nil, staging.Inputf("%s: %w", cfg.Path, err)
	}
	g := Gate(cfg.QualityGate)
	in := InputDir(cfg.ProjectDir, o.Cycle)
	if err := staging.RequireSentinel(in, o.Cycle, "decon"); err != nil {
		return nil, err
	}
	// Output names: unique within the cycle.
	names := map[string]int{}
	stacks := make([][]string, len(cfg.Channels))
	for i, ch := range cfg.Channels {
		name := cfg.EDFFileName(o.Cycle, ch)
		if prev, dup := names[name]; dup {
			return nil, staging.Inputf("%s: key channel_names.%d: channels %d and %d of cycle %d both give the output name %s",
				cfg.Path, o.Cycle, prev, ch, o.Cycle, name)
		}
		names[name] = ch
		files, err := Stack(cfg.ProjectDir, o.Cycle, ch)
		if err != nil {
			return nil, err
		}
		stacks[i] = files
	}
	// The memory plan, from the planes' TIFF headers: a budget below the
	// smallest working set stops here, before any output.
	dims := make([][2]int, len(stacks)) // H, W per channel
	maxN, maxH, maxW := 0, 0, 0
	for i, files := range stacks {
		info, err := tiffio.ReadInfo(files[0])
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInput, err)
		}
		dims[i] = [2]int{info.Height, info.Width}
		maxN = max(maxN, len(files))
		if int64(info.Height)*int64(info.Width) > int64(maxH)*int64(maxW) {
			maxH, maxW = info.Height, info.Width
		}
	}
	mm := newMemModel(o.Fuser, maxN, maxH, maxW, o.Workers, p, membudget.RSS(), o.MemBudget, o.MemBudgetSource)
	mp, err := mm.choose()
	if err != nil {
		return nil, err
	}
	defer membudget.SetGoLimit(mm.goLimit())()

	final := OutDir(cfg.ProjectDir, o.Cycle)
	stage, err := staging.NewContext(ctx, final)
	if err != nil {
		return nil, err
	}
	defer stage.Abort()
	lg.Info("edf", "cycle", o.Cycle, "channels", cfg.Channels, "method", p.Method, "engine", o.Fuser.Name(),
		"sigma", p.Sigma, "radius_x", p.RadiusX, "radius_y", p.RadiusY, "z_smooth_sigma", p.ZSmoothSigma)
	lg.Info("memory plan", "cycle", o.Cycle, "budget", membudget.Describe(o.MemBudget, o.MemBudgetSource),
		"plan", mp.String(), "planned", membudget.Format(mm.need(mp)), "fixed", membudget.Format(mm.fixed),
		"go_limit", membudget.Format(mm.goLimit()), "plane", fmt.Sprintf("%dx%d px, %s", maxW, maxH, membudget.Format(mm.plane())),
		"planes_per_channel", maxN)
	res := &Result{OutDir: final, MemPlan: mp.String(), MemPlanned: mm.need(mp)}
	// Under a budget, garbage (planes fused or sent to the device) is
	// collected as soon as it is made instead of when the heap nears the
	// Go limit.
	collect := func() {
		if o.MemBudget > 0 {
			runtime.GC()
		}
	}

	// done fuses nothing: it writes channel i's result and logs it.
	done := func(i int, r *edf.Result, nPlanes int, readS, edfS float64) error {
		ch := cfg.Channels[i]
		c := Channel{Channel: ch, File: cfg.EDFFileName(o.Cycle, ch), Planes: nPlanes, Used: r.Used,
			ReadS: readS, EDFS: edfS}
		t := time.Now()
		if err := tiffio.WriteGray16(filepath.Join(stage.Path, c.File), r.Out); err != nil {
			return err
		}
		c.WriteS = time.Since(t).Seconds()
		zeros := edf.StatsOf(r.Out.Pix).ZeroFrac()
		if zeros > 0.05 {
			lg.Warn("edf output has more than 5% zero pixels", "channel", ch, "file", c.File, "zero_fraction", zeros)
		}
		lg.Info("channel done", "cycle", o.Cycle, "channel", ch, "file", c.File, "planes", c.Planes,
			"used", sliceRange(r.Used), "read_s", f2(c.ReadS), "edf_s", f2(c.EDFS), "write_s", f2(c.WriteS))
		res.Channels = append(res.Channels, c)
		return nil
	}
	fuseErr := func(i int, err error) error {
		ch, dir := cfg.Channels[i], filepath.Dir(stacks[i][0])
		if errors.Is(err, edf.ErrTooFewSlices) {
			return staging.Inputf("channel %d (%s): %w", ch, dir, err)
		}
		return fmt.Errorf("channel %d (%s): %w", ch, dir, err)
	}

	if mp.Streamed {
		st := streamerOf(o.Fuser)
		for i := range stacks {
			t := time.Now()
			r, readS, err := fuseStreamed(ctx, st, stacks[i], dims[i][0], dims[i][1], mp.Readers, g, p, collect)
			if err != nil {
				return nil, fuseErr(i, err)
			}
			if err := done(i, r, len(stacks[i]), readS, time.Since(t).Seconds()-readS); err != nil {
				return nil, err
			}
			r = nil
			collect()
		}
	} else if err := fuseStacked(ctx, o, stacks, mp, g, p, collect, fuseErr, done); err != nil {
		return nil, err
	}
	res.Seconds = time.Since(t0).Seconds()
	if err := writeSentinel(layout.Sentinel(stage.Path), o, p, res); err != nil {
		return nil, err
	}
	if err := stage.Commit(); err != nil {
		return nil, err
	}
	lg.Info("cycle done", "cycle", o.Cycle, "out", final, "seconds", f2(res.Seconds))
	return res, nil
}

func f2(v float64) string { return fmt.Sprintf("%.2f", v) }

// sliceRange prints 0-based plane indices as 1-based slice numbers, e.g. "2-19" or "2,4,5".
func sliceRange(used []int) string {
	contiguous := true
	for i := 1; i < len(used); i++ {
		if used[i] != used[i-1]+1 {
			contiguous = false
		}
	}
	if contiguous && len(used) > 1 {
		return fmt.Sprintf("%d-%d", used[0]+1, used[len(used)-1]+1)
	}
	s := make([]string, len(used))
	for i, u := range used {
		s[i] = fmt.Sprint(u + 1)
	}
	return strings.Join(s, ",")
}

func writeSentinel(path string, o Options, p edf.Params, r *Result) error {
	chs := make([]string, len(r.Channels))
	used := make([]string, len(r.Channels))
	for i, c := range r.Channels {
		chs[i] = fmt.Sprint(c.Channel)
		used[i] = fmt.Sprintf("CH%d:%s", c.Channel, sliceRange(c.Used))
	}
	return staging.WriteSentinel(path, [][2]string{
		{"stage", "edf"},
		{"cycle", fmt.Sprint(o.Cycle)},
		{"completed", time.Now().UTC().Format(time.RFC3339)},
		{"channels", strings.Join(chs, ",")},
		{"successful", strings.Join(chs, ",")},
		{"skipped", ""},
		{"method", p.Method},
		{"slices_used", strings.Join(used, ";")},
		{"duration_minutes", fmt.Sprintf("%.2f", r.Seconds/60)},
		{"engine", o.Fuser.Name()},
		{"workers", fmt.Sprint(o.Workers)},
	})
}
