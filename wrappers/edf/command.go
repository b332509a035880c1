package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"slices"

	"github.com/urfave/cli/v2"

	"github.com/kintsugi-hpc/kintsugi-go/internal/cliutil"
	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/edf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/edfstage"
	"github.com/kintsugi-hpc/kintsugi-go/internal/gpu"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

type opts struct {
	configPath string
	workers    int
	device     string
	gpu        int
	gpuDebug   bool
	lg         *slog.Logger
}

func withSetup(c *cli.Context, fn func(opts) error) error {
	lg, err := cliutil.SetupLogging(c)
	if err != nil {
		return err
	}
	if c.NArg() > 0 {
		return cliutil.Usagef("unexpected arguments %v", c.Args().Slice())
	}
	// The memory budget (--mem-budget, SLURM, cgroup, physical memory),
	// logged with its source; it sets the Go soft limit (the stage has no
	// budget option yet).
	if _, _, err := cliutil.MemBudget(c.Int("mem-budget"), os.Getenv, lg); err != nil {
		return err
	}
	return fn(opts{configPath: c.String("config"), workers: c.Int("workers"), device: c.String("device"),
		gpu: c.Int("gpu"), gpuDebug: c.Bool("gpu-debug"), lg: lg})
}

// fuser is an edf.Fuser with a Close.
type fuser interface {
	edf.Fuser
	Close() error
}

type cpuFuser struct{ edf.CPU }

func (cpuFuser) Close() error { return nil }

// engine decides the workers and opens the device's Fuser.
func engine(o opts) (fuser, int, error) {
	n, src, err := cliutil.Workers(o.workers, os.Getenv)
	if err != nil {
		return nil, 0, err
	}
	o.lg.Info("workers", "count", n, "source", src)
	dev, err := cliutil.ParseDevice(o.device)
	if err != nil {
		return nil, 0, err
	}
	if dev == cliutil.DeviceCPU {
		o.lg.Warn("running on the CPU because --device cpu was given (the reference path; GPU jobs never fall back to it)")
		return cpuFuser{edf.CPU{Workers: n}}, n, nil
	}
	g, err := gpu.Open(gpu.Options{Device: o.gpu, Debug: o.gpuDebug})
	if err != nil {
		if errors.Is(err, gpu.ErrNoCUDA) {
			return nil, 0, cliutil.AsUsage(err)
		}
		return nil, 0, err
	}
	o.lg.Info("gpu", "device", g.Device())
	return g, n, nil
}

// inputAsUsage maps errors caused by the input data to the usage exit code.
func inputAsUsage(err error) error {
	if errors.Is(err, edfstage.ErrInput) || errors.Is(err, edf.ErrTooFewSlices) {
		return cliutil.AsUsage(err)
	}
	return err
}

// runCommand is `kintsugi-edf run`.
func runCommand(ctx context.Context, o opts, cycle int) error {
	cfg, err := config.Load(o.configPath)
	if err != nil {
		return cliutil.AsUsage(err)
	}
	if !slices.Contains(cfg.Cycles, cycle) {
		return cliutil.Usagef("--cycle %d: not in the config's cycles %v", cycle, cfg.Cycles)
	}
	if err := edf.FromConfig(cfg.EDF).Validate(); err != nil {
		return cliutil.Usagef("%s: %w", cfg.Path, err)
	}
	f, workers, err := engine(o)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = edfstage.Run(ctx, edfstage.Options{Config: cfg, Cycle: cycle, Fuser: f, Workers: workers, Logger: o.lg})
	return inputAsUsage(err)
}

// tileCommand is `kintsugi-edf tile`.
func tileCommand(ctx context.Context, o opts, in, out string) error {
	p, g := edf.DefaultParams(), edf.GateFromConfig(config.DefaultQualityGate())
	if o.configPath != "" {
		cfg, err := config.Load(o.configPath)
		if err != nil {
			return cliutil.AsUsage(err)
		}
		p, g = edf.FromConfig(cfg.EDF), edf.GateFromConfig(cfg.QualityGate)
	}
	if err := p.Validate(); err != nil {
		return cliutil.AsUsage(err)
	}
	f, workers, err := engine(o)
	if err != nil {
		return err
	}
	defer f.Close()
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
	o.lg.Info("stack fused", "in", in, "planes", len(planes), "used", len(res.Used), "method", p.Method, "engine", f.Name(), "out", out)
	return nil
}
