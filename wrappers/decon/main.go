// Command kintsugi-decon runs the deconvolution stage of one cycle (the
// original's light-sheet PSF and Richardson-Lucy per channel) or
// deconvolves one tile's z-stack with the same PSF and settings. The stage
// lives in internal/deconstage; this package holds the flags and the
// command functions (config, workers, engine choice).
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kintsugi-hpc/kintsugi-go/internal/cliutil"
	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/deconstage"
	"github.com/kintsugi-hpc/kintsugi-go/internal/gpu"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

func main() {
	app := cliutil.NewApp("kintsugi-decon", "deconvolve one cycle of a CODEX/PhenoCycler project",
		`Commands:
  run   deconvolve every channel of one cycle: reads
        data/processed/stitched/cycNN/CH{c}/{z:02d}.tif (after the stitch
        sentinel), writes data/processed/deconvolved/cycNN/CH{c}/deconv_{k:03d}.tif,
        DECONV_parameters.txt and the sentinel, atomically.
  tile  deconvolve one tile's z-stack (a directory of planes or a multi-page
        TIFF) with the PSF and settings of --channel; writes a multi-page
        uint16 TIFF.
Settings: the decon: block of the config (psf_model lightsheet|widefield,
algorithm richardson_lucy|biggs_andrews, iterations 25, stop_criterion 5 %,
damping 0, hist_clip 0.01 %, slit_aperture 6.5 mm, f_cyl 1 mm,
memory_budget_mb 0 = automatic) and the microscope keys (xy_pixel_size,
z_step_size, numerical_aperture, tissue_refractive_index, wavelengths).
The device is the GPU unless --device cpu (or KINTSUGI_DEVICE_MODE=cpu) is
given; a GPU that cannot be used is an error, never a switch to the CPU.`, nil, nil)
	devFlags := []cli.Flag{
		cliutil.DeviceFlag(),
		&cli.IntFlag{Name: "gpu", Usage: "GPU index among the visible devices (SLURM sets CUDA_VISIBLE_DEVICES)"},
		&cli.BoolFlag{Name: "gpu-debug", Usage: "synchronise after every GPU launch (slow; pins down CUDA errors)"},
		&cli.IntFlag{Name: "gpu-mem-cap", Usage: "GPU memory the deconvolution may use, MB (overrides decon.memory_budget_mb; 0 = the config's, automatic when 0 there); stacks whose iterates exceed it are streamed through the GPU in y-slabs with the same result"},
		cliutil.WorkersFlag(),
		cliutil.MemBudgetFlag(),
	}
	devFlags = append(devFlags, cliutil.LoggingFlags()...)
	cfgFlag := &cli.StringFlag{Name: "config", Aliases: []string{"c"}, Required: true, Usage: "pipeline config.yaml"}
	app.Commands = []*cli.Command{
		{
			Name:  "run",
			Usage: "deconvolve one cycle",
			Flags: append([]cli.Flag{cfgFlag, &cli.IntFlag{Name: "cycle", Required: true, Usage: "cycle number"}}, devFlags...),
			Action: func(c *cli.Context) error {
				return withSetup(c, func(o opts) error { return runCommand(c.Context, o, c.Int("cycle")) })
			},
		},
		{
			Name:  "tile",
			Usage: "deconvolve one tile's z-stack",
			Flags: append([]cli.Flag{cfgFlag,
				&cli.StringFlag{Name: "in", Required: true, Usage: "z-stack: a directory of TIFF planes (name order) or a multi-page TIFF"},
				&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Required: true, Usage: "output multi-page uint16 TIFF, one page per z-plane"},
				&cli.IntFlag{Name: "channel", Required: true, Usage: "channel number (selects the wavelengths)"},
			}, devFlags...),
			Action: func(c *cli.Context) error {
				return withSetup(c, func(o opts) error {
					return tileCommand(c.Context, o, c.String("in"), c.String("out"), c.Int("channel"))
				})
			},
		},
	}
	cliutil.Main(app)
}

type opts struct {
	configPath string
	workers    int
	device     string
	gpu        int
	gpuDebug   bool
	memCapMB   int
	lg         *slog.Logger
}

func withSetup(c *cli.Context, fn func(opts) error) error {
	lg, err := cliutil.SetupLogging(c)
	if err != nil {
		return err
	}
	// The memory budget (--mem-budget, SLURM, cgroup, physical memory),
	// logged with its source; it sets the Go soft limit (the stage has no
	// budget option yet).
	if _, _, err := cliutil.MemBudget(c.Int("mem-budget"), os.Getenv, lg); err != nil {
		return err
	}
	return fn(opts{configPath: c.String("config"), workers: c.Int("workers"), device: c.String("device"),
		gpu: c.Int("gpu"), gpuDebug: c.Bool("gpu-debug"), memCapMB: c.Int("gpu-mem-cap"), lg: lg})
}

// setup loads the config, decides the workers and opens the engine.
func setup(o opts) (*config.Config, int, deconstage.Engine, bool, error) {
	cfg, err := config.Load(o.configPath)
	if err != nil {
		return nil, 0, nil, false, cliutil.AsUsage(err)
	}
	n, src, err := cliutil.Workers(o.workers, os.Getenv)
	if err != nil {
		return nil, 0, nil, false, err
	}
	o.lg.Info("workers", "count", n, "source", src)
	dev, err := cliutil.ParseDevice(o.device)
	if err != nil {
		return nil, 0, nil, false, err
	}
	if o.memCapMB < 0 {
		return nil, 0, nil, false, cliutil.Usagef("--gpu-mem-cap %d: want MB >= 0", o.memCapMB)
	}
	if o.memCapMB > 0 {
		if dev == cliutil.DeviceCPU {
			return nil, 0, nil, false, cliutil.Usagef("--gpu-mem-cap applies to the GPU; with --device cpu set decon.memory_budget_mb")
		}
		cfg.Decon.MemoryBudgetMB = o.memCapMB
		o.lg.Info("GPU memory cap", "MB", o.memCapMB, "source", "--gpu-mem-cap")
	}
	if dev == cliutil.DeviceCPU {
		o.lg.Warn("running on the CPU because --device cpu was given (the reference path; GPU jobs never fall back to it)")
		return cfg, n, deconstage.CPUEngine{Workers: n}, true, nil
	}
	g, err := deconstage.OpenGPU(o.gpu, o.gpuDebug)
	if err != nil {
		if errors.Is(err, gpu.ErrNoCUDA) {
			return nil, 0, nil, false, cliutil.AsUsage(err)
		}
		return nil, 0, nil, false, err
	}
	o.lg.Info("engine", "device", g.Name())
	return cfg, n, g, false, nil
}

func asExit(err error) error {
	if errors.Is(err, deconstage.ErrInput) {
		return cliutil.AsUsage(err)
	}
	return err
}

func runCommand(ctx context.Context, o opts, cycle int) error {
	cfg, workers, eng, cpu, err := setup(o)
	if err != nil {
		return err
	}
	defer eng.Close()
	if !slices.Contains(cfg.Cycles, cycle) {
		return cliutil.Usagef("--cycle %d: not in the config's cycles %v", cycle, cfg.Cycles)
	}
	_, err = deconstage.Run(ctx, deconstage.Options{Config: cfg, Cycle: cycle, Engine: eng, Workers: workers, Logger: o.lg, CPU: cpu})
	return asExit(err)
}

func tileCommand(ctx context.Context, o opts, in, out string, ch int) error {
	cfg, workers, eng, cpu, err := setup(o)
	if err != nil {
		return err
	}
	defer eng.Close()
	if !slices.Contains(cfg.Channels, ch) {
		return cliutil.Usagef("--channel %d: not in the config's channels %v", ch, cfg.Channels)
	}
	st, err := deconstage.ReadTileStack(in)
	if err != nil {
		return asExit(err)
	}
	t0 := time.Now()
	res, s, k, _, err := deconstage.Deconvolve(ctx, eng, cfg, ch, st, cpu, workers)
	if err != nil {
		return asExit(fmt.Errorf("--in %s: %w", in, err))
	}
	if err := tiffio.WriteGray16Pages(out, deconstage.ToPages(res)); err != nil {
		return err
	}
	o.lg.Info("tile deconvolved", "in", in, "out", out, "channel", ch, "z", st.N, "size", fmt.Sprintf("%dx%d", st.W, st.H),
		"psf", k.String()+" (x,y,z)", "iterations", s.Iterations, "seconds", fmt.Sprintf("%.2f", time.Since(t0).Seconds()))
	return nil
}
