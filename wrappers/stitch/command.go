package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"

	"github.com/kintsugi-hpc/kintsugi-go/internal/cliutil"
	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/dataset"
	"github.com/kintsugi-hpc/kintsugi-go/internal/gpu"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/stitch"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// commandOptions are what the flags shared by both commands give.
type commandOptions struct {
	ConfigPath string
	Cycle      int
	Workers    int // --workers (0: from the environment)
	MemBudget  int // --mem-budget, MB (0: from the environment)
	Logger     *slog.Logger
	// Getenv reads the environment (SLURM_CPUS_PER_TASK, cpus_per_task);
	// nil means os.Getenv. Tests pass their own.
	Getenv func(string) string

	budget       int64 // bytes, decided by load
	budgetSource string
}

// runOptions are the flags of `run`.
type runOptions struct {
	Device   string
	GPU      int
	GPUDebug bool
	Batch    int
	// OpenGPU opens the GPU engine; nil means stitch.OpenGPU. Tests pass
	// their own to run the command without a device.
	OpenGPU func(index int, debug bool) (stitch.Engine, error)
}

// load reads the config and decides the worker count.
func (o *commandOptions) load() (*config.Config, int, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	cfg, err := cliutil.LoadConfig(o.ConfigPath)
	if err != nil {
		return nil, 0, err
	}
	if !slices.Contains(cfg.Cycles, o.Cycle) {
		return nil, 0, cliutil.Usagef("--cycle %d: not in the config's cycles %v", o.Cycle, cfg.Cycles)
	}
	n, src, err := cliutil.Workers(o.Workers, getenv)
	if err != nil {
		return nil, 0, err
	}
	o.Logger.Info("workers", "count", n, "source", src)
	if o.budget, o.budgetSource, err = cliutil.MemBudget(o.MemBudget, getenv, o.Logger); err != nil {
		return nil, 0, err
	}
	return cfg, n, nil
}

// runCommand is `kintsugi-stitch run`: it opens the engine the device asks
// for (never falling back to the CPU) and runs the stage.
func runCommand(ctx context.Context, o commandOptions, r runOptions) (err error) {
	cfg, workers, err := o.load()
	if err != nil {
		return err
	}
	dev, err := cliutil.ParseDevice(r.Device)
	if err != nil {
		return err
	}
	var eng stitch.Engine
	batch := r.Batch
	switch dev {
	case cliutil.DeviceGPU:
		if r.GPU < 0 {
			return cliutil.Usagef("--gpu %d: want a device index >= 0 among the visible devices", r.GPU)
		}
		open := r.OpenGPU
		if open == nil {
			open = func(i int, d bool) (stitch.Engine, error) { return stitch.OpenGPU(i, d) }
		}
		g, err := open(r.GPU, r.GPUDebug)
		if err != nil {
			if errors.Is(err, gpu.ErrNoCUDA) {
				return cliutil.AsUsage(err)
			}
			return err
		}
		eng = g
		if batch == 0 {
			batch = stitch.DefaultGPUBatch
		}
	case cliutil.DeviceCPU:
		o.Logger.Warn("running on the CPU because --device cpu was given (the reference path; GPU jobs never fall back to it)")
		eng = stitch.NewCPUEngine(workers)
	}
	defer func() {
		if cerr := eng.Close(); cerr != nil {
			if err == nil {
				err = fmt.Errorf("close %s: %w", eng.Name(), cerr)
			} else {
				o.Logger.Warn("closing the engine after a failure", "engine", eng.Name(), "err", cerr.Error())
			}
		}
	}()
	if ctx, err = cliutil.LockContext(ctx, cliutil.LockJob{Config: cfg, Stage: "stitch", Cycle: o.Cycle, Device: dev}, o.Getenv, o.Logger); err != nil {
		return err
	}
	_, err = stitch.Run(ctx, stitch.Options{Config: cfg, Cycle: o.Cycle, Engine: eng, Workers: workers, Batch: batch,
		MemBudget: o.budget, MemBudgetSource: o.budgetSource, Logger: o.Logger})
	return inputAsUsage(err)
}

// inputAsUsage maps errors caused by the input data to the usage exit code.
func inputAsUsage(err error) error {
	if errors.Is(err, dataset.ErrInput) {
		return cliutil.AsUsage(err)
	}
	return err
}

// correctOptions select the tile of `kintsugi-stitch correct`.
type correctOptions struct {
	Channel, Tile int
	Profiles      string  // profile directory; "" = the run's
	FlatfieldMin  float64 // 0 = config
	Out           string
}

// correctCommand corrects one tile's z-stack with saved profiles and writes
// it as a multi-page uint16 TIFF (one page per z-plane, ascending).
func correctCommand(ctx context.Context, o commandOptions, t correctOptions) error {
	cfg, workers, err := o.load()
	if err != nil {
		return err
	}
	if !slices.Contains(cfg.Channels, t.Channel) {
		return cliutil.Usagef("--channel %d: not in the config's channels %v", t.Channel, cfg.Channels)
	}
	if t.Tile < 1 || t.Tile > cfg.TileRows*cfg.TileCols {
		return cliutil.Usagef("--tile %d: want 1..%d (tile_rows x tile_cols)", t.Tile, cfg.TileRows*cfg.TileCols)
	}
	flatMin := cfg.BasicFlatfieldMin
	if t.FlatfieldMin != 0 {
		if t.FlatfieldMin < 0 || t.FlatfieldMin > 1 {
			return cliutil.Usagef("--flatfield-min %g: want (0, 1]", t.FlatfieldMin)
		}
		flatMin = t.FlatfieldMin
	}
	dir := t.Profiles
	if dir == "" {
		dir = filepath.Join(stitch.OutDir(cfg.ProjectDir, o.Cycle), layout.ChannelDir(t.Channel), layout.BaSiCDir)
	}
	cyc, err := dataset.Discover(ctx, cfg.ProjectDir, o.Cycle, dataset.Options{
		Rows: cfg.TileRows, Cols: cfg.TileCols, Channels: []int{t.Channel}, NZPlanes: cfg.NZPlanes, Workers: workers})
	if err != nil {
		return inputAsUsage(err)
	}
	inputs := []string{o.ConfigPath}
	for _, z := range cyc.Z {
		p := filepath.Join(dir, fmt.Sprintf("%02d", z))
		inputs = append(inputs, cyc.Path(t.Tile, z, t.Channel), p+"_flatfield.tif", p+"_darkfield.tif")
	}
	if err := cliutil.CheckOutput("--out", t.Out, inputs...); err != nil {
		return err
	}
	pages := make([]*raster.Gray16, len(cyc.Z))
	for i, z := range cyc.Z {
		raw, err := tiffio.ReadGray16(cyc.Path(t.Tile, z, t.Channel))
		if err != nil {
			return cliutil.AsUsage(err)
		}
		prof, err := stitch.LoadProfile(filepath.Join(dir, fmt.Sprintf("%02d", z)), raw.W, raw.H)
		if err != nil {
			return cliutil.AsUsage(err)
		}
		corr, err := stitch.Correct(ctx, []*raster.Gray16{raw}, prof, float32(flatMin), 1)
		if err != nil {
			return err
		}
		pages[i] = &raster.Gray16{W: raw.W, H: raw.H, Pix: raster.Quantize16(nil, corr[0].Pix)}
	}
	if err := tiffio.WriteGray16Pages(t.Out, pages); err != nil {
		return err
	}
	o.Logger.Info("tile corrected", "cycle", o.Cycle, "channel", t.Channel, "tile", t.Tile, "z", len(pages), "profiles", dir, "out", t.Out)
	return nil
}
