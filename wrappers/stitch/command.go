package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"

	"github.com/kintsugi-hpc/kintsugi-go/internal/cliutil"
	"github.com/kintsugi-hpc/kintsugi-go/internal/cliutil/stagecli"
	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/dataset"
	"github.com/kintsugi-hpc/kintsugi-go/internal/gpu"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/stitch"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// commandOptions are what the flags shared by both commands give: the
// stage set-up (stagecli: workers, memory budget, logging and, for run,
// the device), the config and the cycle.
type commandOptions struct {
	stagecli.Opts
	ConfigPath string
	Cycle      int
}

// runOptions are the flags of `run` beyond the device's.
type runOptions struct {
	Batch int
	// OpenGPU opens the GPU engine; nil means stagecli.Open's gpu.Open
	// (the CUDA engine is a stitch.Engine as it is). Tests pass their own
	// to run the command without a device.
	OpenGPU func(gpu.Options) (stitch.Engine, error)
}

// load reads the config, checks the cycle and decides the worker count.
func (o *commandOptions) load() (*config.Config, int, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	cfg, err := cliutil.LoadConfig(o.ConfigPath)
	if err != nil {
		return nil, 0, err
	}
	if !slices.Contains(cfg.Cycles, o.Cycle) {
		return nil, 0, cliutil.Usagef("--cycle %d: not in the config's cycles %v", o.Cycle, cfg.Cycles)
	}
	n, err := o.ResolveWorkers()
	if err != nil {
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
	dev, err := o.ResolveDevice()
	if err != nil {
		return err
	}
	cpu := func() stitch.Engine { return stitch.NewCPUEngine(workers) }
	var eng stitch.Engine
	var release func() error
	if r.OpenGPU == nil {
		eng, release, err = stagecli.Open(o.Opts, dev, cpu, func(e *gpu.Engine) stitch.Engine { return e })
	} else {
		eng, release, err = stagecli.OpenWith(o.Opts, dev, cpu, func(opts gpu.Options) (stitch.Engine, func() error, error) {
			e, err := r.OpenGPU(opts)
			if err != nil {
				return nil, nil, err
			}
			return e, e.Close, nil
		})
	}
	if err != nil {
		return err
	}
	defer o.Release(release, &err)
	batch := r.Batch
	if dev == cliutil.DeviceGPU && batch == 0 {
		batch = stitch.DefaultGPUBatch
	}
	if ctx, err = cliutil.LockContext(ctx, cliutil.LockJob{Config: cfg, Stage: "stitch", Cycle: o.Cycle, Device: dev}, o.Getenv, o.Logger); err != nil {
		return err
	}
	_, err = stitch.Run(ctx, stitch.Options{Config: cfg, Cycle: o.Cycle, Engine: eng, Workers: workers, Batch: batch,
		MemBudget: o.MemBudget, MemBudgetSource: o.MemBudgetSource, Logger: o.Logger})
	return inputAsUsage(err)
}

// inputAsUsage maps errors caused by the input data to the usage exit code.
func inputAsUsage(err error) error { return stagecli.InputAsUsage(err, dataset.ErrInput) }

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
		dir = filepath.Join(stitch.OutDir(cfg.ProjectDir, o.Cycle), fmt.Sprintf("CH%d", t.Channel), "basic")
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
