package main

import (
	"context"

	"github.com/urfave/cli/v2"

	"github.com/kintsugi-hpc/kintsugi-go/internal/cliutil"
	"github.com/kintsugi-hpc/kintsugi-go/internal/cliutil/stagecli"
	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/edf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/edfstage"
	"github.com/kintsugi-hpc/kintsugi-go/internal/gpu"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// The CUDA engine is the stage's Fuser with its device-buffer form.
var _ edfstage.Streamer = (*gpu.Engine)(nil)

type opts struct {
	stagecli.Opts
	configPath string
}

func withSetup(c *cli.Context, fn func(opts) error) error {
	so, err := stagecli.Setup(c, true)
	if err != nil {
		return err
	}
	return fn(opts{Opts: so, configPath: c.String("config")})
}

// engine decides the workers and opens the device's Fuser; release frees it.
func engine(o opts) (f edf.Fuser, workers int, release func() error, err error) {
	n, dev, err := o.Resolve()
	if err != nil {
		return nil, 0, nil, err
	}
	f, release, err = stagecli.Open(o.Opts, dev,
		func() edf.Fuser { return edf.CPU{Workers: n} },
		func(e *gpu.Engine) edf.Fuser { return e })
	return f, n, release, err
}

// inputAsUsage maps errors caused by the input data to the usage exit code.
func inputAsUsage(err error) error {
	return stagecli.InputAsUsage(err, edfstage.ErrInput, edf.ErrTooFewSlices)
}

// runCommand is `kintsugi-edf run`.
func runCommand(ctx context.Context, o opts, cycle int) error {
	cfg, err := cliutil.LoadConfig(o.configPath)
	if err != nil {
		return err
	}
	if err := cliutil.CheckCycle(cfg, cycle); err != nil {
		return err
	}
	if err := edf.FromConfig(cfg.EDF).Validate(); err != nil {
		return cliutil.Usagef("%s: %w", cfg.Path, err)
	}
	f, workers, release, err := engine(o)
	if err != nil {
		return err
	}
	defer release()
	dev, err := cliutil.ParseDevice(o.Device)
	if err != nil {
		return err
	}
	if ctx, err = cliutil.LockContext(ctx, cliutil.LockJob{Config: cfg, Stage: "edf", Cycle: cycle, Device: dev}, nil, o.Logger); err != nil {
		return err
	}
	_, err = edfstage.Run(ctx, edfstage.Options{Config: cfg, Cycle: cycle, Engine: f, Workers: workers, Logger: o.Logger,
		MemBudget: o.MemBudget, MemBudgetSource: o.MemBudgetSource})
	return inputAsUsage(err)
}

// tileCommand is `kintsugi-edf tile`.
func tileCommand(ctx context.Context, o opts, in, out string) error {
	if err := cliutil.CheckOutput("--out", out, in, o.configPath); err != nil {
		return err
	}
	p, g := edf.DefaultParams(), edf.GateFromConfig(config.DefaultQualityGate())
	if o.configPath != "" {
		cfg, err := cliutil.LoadConfig(o.configPath)
		if err != nil {
			return err
		}
		p, g = edf.FromConfig(cfg.EDF), edf.GateFromConfig(cfg.QualityGate)
	}
	if err := p.Validate(); err != nil {
		return cliutil.AsUsage(err)
	}
	f, workers, release, err := engine(o)
	if err != nil {
		return err
	}
	defer release()
	planes, err := edfstage.ReadStackPath(ctx, in, workers)
	if err != nil {
		return inputAsUsage(err)
	}
	res, err := f.EDF(ctx, planes, g, p)
	if err != nil {
		return inputAsUsage(err)
	}
	if err := tiffio.WriteGray16(out, res.Out); err != nil {
		return err
	}
	o.Logger.Info("stack fused", "in", in, "planes", len(planes), "used", len(res.Used), "method", p.Method, "engine", f.Name(), "out", out)
	return nil
}
