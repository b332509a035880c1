package stitch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/kintsugi-hpc/kintsugi-go/internal/basic"
	"github.com/kintsugi-hpc/kintsugi-go/internal/cliutil"
	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/dataset"
	"github.com/kintsugi-hpc/kintsugi-go/internal/gpu"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// DefaultGPUBatch is the number of planes a GPU engine fits at once.
const DefaultGPUBatch = 8

// CommandOptions are what the wrapper's flags give.
type CommandOptions struct {
	ConfigPath string
	Cycle      int
	Workers    int // --workers (0: from the environment)
	Device     string
	GPU        int
	GPUDebug   bool
	Batch      int
	Logger     *slog.Logger
}

// load reads the config and decides the worker count.
func (o *CommandOptions) load() (*config.Config, int, error) {
	cfg, err := config.Load(o.ConfigPath)
	if err != nil {
		return nil, 0, cliutil.AsUsage(err)
	}
	if !contains(cfg.Cycles, o.Cycle) {
		return nil, 0, cliutil.Usagef("--cycle %d: not in the config's cycles %v", o.Cycle, cfg.Cycles)
	}
	n, src, err := cliutil.Workers(o.Workers, os.Getenv)
	if err != nil {
		return nil, 0, err
	}
	o.Logger.Info("workers", "count", n, "source", src)
	return cfg, n, nil
}

// RunCommand is `kintsugi-stitch run`.
func RunCommand(ctx context.Context, o CommandOptions) error {
	cfg, workers, err := o.load()
	if err != nil {
		return err
	}
	dev, err := cliutil.ParseDevice(o.Device)
	if err != nil {
		return err
	}
	var eng Engine
	batch := o.Batch
	switch dev {
	case cliutil.DeviceGPU:
		g, err := OpenGPU(o.GPU, o.GPUDebug)
		if err != nil {
			if errors.Is(err, gpu.ErrNoCUDA) {
				return cliutil.AsUsage(err)
			}
			return err
		}
		eng = g
		if batch == 0 {
			batch = DefaultGPUBatch
		}
	case cliutil.DeviceCPU:
		o.Logger.Warn("running on the CPU because --device cpu was given (the reference path; GPU jobs never fall back to it)")
		eng = NewCPUEngine(workers)
	}
	defer eng.Close()
	_, err = Run(ctx, Options{Config: cfg, Cycle: o.Cycle, Engine: eng, Workers: workers, Batch: batch, Logger: o.Logger})
	return inputAsUsage(err)
}

// inputAsUsage maps errors caused by the input data to the usage exit code.
func inputAsUsage(err error) error {
	if errors.Is(err, dataset.ErrInput) {
		return cliutil.AsUsage(err)
	}
	return err
}

// CorrectTileOptions select the tile of `kintsugi-stitch correct`.
type CorrectTileOptions struct {
	Channel, Tile int
	Profiles      string  // profile directory; "" = the run's
	FlatfieldMin  float64 // 0 = config
	Out           string
}

// CorrectTileCommand corrects one tile's z-stack with saved profiles and
// writes it as a multi-page uint16 TIFF (one page per z-plane, ascending).
func CorrectTileCommand(ctx context.Context, o CommandOptions, t CorrectTileOptions) error {
	cfg, workers, err := o.load()
	if err != nil {
		return err
	}
	if !contains(cfg.Channels, t.Channel) {
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
		dir = filepath.Join(OutDir(cfg.ProjectDir, o.Cycle), fmt.Sprintf("CH%d", t.Channel), "basic")
	}
	cyc, err := dataset.Discover(ctx, cfg.ProjectDir, o.Cycle, dataset.Options{
		Rows: cfg.TileRows, Cols: cfg.TileCols, Channels: []int{t.Channel}, NZPlanes: cfg.NZPlanes, Workers: workers})
	if err != nil {
		return inputAsUsage(err)
	}
	pages := make([]*raster.Gray16, len(cyc.Z))
	for i, z := range cyc.Z {
		prof, err := LoadProfile(filepath.Join(dir, fmt.Sprintf("%02d", z)))
		if err != nil {
			return cliutil.AsUsage(err)
		}
		raw, err := tiffio.ReadGray16(cyc.Path(t.Tile, z, t.Channel))
		if err != nil {
			return cliutil.AsUsage(err)
		}
		corr, err := Correct(ctx, []*raster.Gray16{raw}, prof, float32(flatMin), 1)
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

// LoadProfile reads <prefix>_flatfield.tif (mean 1) and <prefix>_darkfield.tif
// (counts) as written by a run; the darkfield comes back normalised (/65535).
func LoadProfile(prefix string) (*basic.Profile, error) {
	flat, err := tiffio.ReadFloat32(prefix + "_flatfield.tif")
	if err != nil {
		return nil, fmt.Errorf("basic profile: %w", err)
	}
	dark, err := tiffio.ReadFloat32(prefix + "_darkfield.tif")
	if err != nil {
		return nil, fmt.Errorf("basic profile: %w", err)
	}
	if flat.W != dark.W || flat.H != dark.H {
		return nil, fmt.Errorf("basic profile %s: flatfield %dx%d and darkfield %dx%d differ", prefix, flat.W, flat.H, dark.W, dark.H)
	}
	for i := range dark.Pix {
		dark.Pix[i] /= 65535
	}
	return &basic.Profile{W: flat.W, H: flat.H, Flatfield: flat.Pix, Darkfield: dark.Pix}, nil
}

func contains(xs []int, v int) bool {
	for _, x := range xs {
		if x == v {
			return true
		}
	}
	return false
}
