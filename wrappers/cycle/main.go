// Command kintsugi-cycle runs stitch, decon and EDF of one cycle as one job
// on one engine (the fused cycle, internal/cyclestage): the raw tiles are
// read once and each later stage is fed from memory (on the GPU, from
// device stacks) instead of from the files of the one before; the outputs
// are the three stages' own, byte for byte. This package holds the flags
// and the command function (config, workers, engine choice, locks).
package main

import (
	"context"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/kintsugi-hpc/kintsugi-go/internal/cliutil"
	"github.com/kintsugi-hpc/kintsugi-go/internal/cliutil/stagecli"
	"github.com/kintsugi-hpc/kintsugi-go/internal/cyclestage"
	"github.com/kintsugi-hpc/kintsugi-go/internal/dataset"
	"github.com/kintsugi-hpc/kintsugi-go/internal/deconstage"
	"github.com/kintsugi-hpc/kintsugi-go/internal/edf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/edfstage"
	"github.com/kintsugi-hpc/kintsugi-go/internal/gpu"
	"github.com/kintsugi-hpc/kintsugi-go/internal/stitch"
)

// The CUDA engine is every stage's engine, with the device-buffer forms
// the fused cycle hands its planes through.
var (
	_ stitch.Engine          = (*gpu.Engine)(nil)
	_ deconstage.PlaneEngine = (*gpu.Engine)(nil)
	_ edfstage.Streamer      = (*gpu.Engine)(nil)
)

func main() {
	app := cliutil.NewApp("kintsugi-cycle", "stitch, deconvolve and fuse one cycle of a CODEX/PhenoCycler project in one job",
		`Commands:
  run   the three stages of one cycle in one process: reads the raw tiles of
        cycle N once and writes what kintsugi-stitch, kintsugi-decon and
        kintsugi-edf run would (data/processed/stitched, deconvolved and
        edf/cycNN with their sentinels), byte for byte; each directory is
        committed atomically, in stage order. With keep_intermediates: false
        in the config the stitched and deconvolved planes are not written
        (their profiles, tile_positions.csv, DECONV_parameters.txt and the
        sentinels are).
Settings: those of the three stages (see their --help); the memory budget
(--mem-budget, or SLURM's) is the whole job's, named resources.mem_cycle.
The device is the GPU unless --device cpu (or KINTSUGI_DEVICE_MODE=cpu) is
given; a GPU that cannot be used is an error, never a switch to the CPU.`, nil, nil)
	app.Commands = []*cli.Command{{
		Name:  "run",
		Usage: "stitch, deconvolve and fuse one cycle",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Required: true, Usage: "pipeline config.yaml"},
			&cli.IntFlag{Name: "cycle", Required: true, Usage: "cycle number"},
		}, stagecli.Flags(&cli.IntFlag{Name: "batch", Usage: fmt.Sprintf("planes fitted together (0: %d on the GPU, the CPU's workers on the CPU)", stitch.DefaultFusedGPUBatch)})...),
		Action: func(c *cli.Context) error {
			o, err := stagecli.Setup(c, true)
			if err != nil {
				return err
			}
			stop, err := cliutil.Profile()
			if err != nil {
				return err
			}
			defer stop()
			return runCommand(c.Context, o, c.String("config"), c.Int("cycle"), c.Int("batch"))
		},
	}}
	cliutil.Main(app)
}

// engines opens the device's engines (the stitch stage's *gpu.Engine and,
// for decon and EDF, a lane of it (gpu.Engine.Lane), so that a channel is
// deconvolved and fused on the GPU while the next one is stitched; or the
// three CPU references); release frees them.
func engines(o stagecli.Opts, workers int, dev cliutil.Device) (cyclestage.Engines, func() error, error) {
	return stagecli.OpenFrom(o, dev,
		func() cyclestage.Engines {
			return cyclestage.Engines{Stitch: stitch.NewCPUEngine(workers), Decon: deconstage.CPUEngine{Workers: workers}, EDF: edf.CPU{Workers: workers}}
		},
		func(e *gpu.Engine) (cyclestage.Engines, error) {
			l, err := e.Lane()
			return cyclestage.Engines{Stitch: e, Decon: l, EDF: l}, err
		})
}

// runCommand is `kintsugi-cycle run`.
func runCommand(ctx context.Context, o stagecli.Opts, configPath string, cycle, batch int) (err error) {
	cfg, err := cliutil.LoadConfig(configPath)
	if err != nil {
		return err
	}
	if err := cliutil.CheckCycle(cfg, cycle); err != nil {
		return err
	}
	if batch < 0 {
		return cliutil.Usagef("--batch %d: want >= 0", batch)
	}
	workers, dev, err := o.Resolve()
	if err != nil {
		return err
	}
	eng, release, err := engines(o, workers, dev)
	if err != nil {
		return err
	}
	defer o.Release(release, &err)
	if dev == cliutil.DeviceGPU && batch == 0 {
		batch = stitch.DefaultFusedGPUBatch
	}
	lock := func(ctx context.Context, stage string) (context.Context, error) {
		return cliutil.LockContext(ctx, cliutil.LockJob{Config: cfg, Stage: stage, Cycle: cycle, Device: dev}, nil, o.Logger)
	}
	_, err = cyclestage.Run(ctx, cyclestage.Options{Config: cfg, Cycle: cycle, Engines: eng, Workers: workers, Batch: batch,
		KeepIntermediates: cfg.KeepIntermediates, MemBudget: o.MemBudget, MemBudgetSource: o.MemBudgetSource,
		Logger: o.Logger, Lock: lock})
	return stagecli.InputAsUsage(err, cyclestage.ErrInput, dataset.ErrInput, edf.ErrTooFewSlices)
}
