// Package stagecli is the command set-up the GPU stage executables share
// (kintsugi-decon, kintsugi-edf, kintsugi-register): their device flags,
// the worker count, the device choice and opening the
// engine, each with the exit code cliutil maps it to.
//
// It is a package apart from cliutil because it imports internal/gpu, which
// is cgo (libcuda, cuFFT) under the cuda tag: the executables without a
// device (assign, qc, synth, accuracy) import cliutil only and stay
// runnable where no CUDA driver is installed.
package stagecli

import (
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/kintsugi-hpc/kintsugi-go/internal/cliutil"
	"github.com/kintsugi-hpc/kintsugi-go/internal/gpu"
	"github.com/kintsugi-hpc/kintsugi-go/internal/membudget"
)

// Flags returns a stage command's device flags: --device, --gpu,
// --gpu-debug, then extra (the stage's own device flags), --workers,
// --mem-budget and the logging flags. Setup reads them.
func Flags(extra ...cli.Flag) []cli.Flag {
	fl := []cli.Flag{
		cliutil.DeviceFlag(),
		&cli.IntFlag{Name: "gpu", Usage: "GPU index among the visible devices (SLURM sets CUDA_VISIBLE_DEVICES)"},
		&cli.BoolFlag{Name: "gpu-debug", Usage: "synchronise after every GPU launch (slow; pins down CUDA errors)"},
	}
	fl = append(fl, extra...)
	fl = append(fl, cliutil.WorkersFlag(), cliutil.MemBudgetFlag())
	return append(fl, cliutil.LoggingFlags()...)
}

// Opts holds what Flags set.
type Opts struct {
	Workers  int    // --workers; 0: from SLURM_CPUS_PER_TASK, cpus_per_task, else the CPUs
	Device   string // --device (or KINTSUGI_DEVICE_MODE), parsed by Resolve
	GPU      int    // --gpu: index among the visible devices
	GPUDebug bool   // --gpu-debug
	Logger   *slog.Logger
	// MemBudget is the job's host memory budget in bytes and MemBudgetSource
	// where it came from (--mem-budget, SLURM, cgroup, physical memory), as
	// resolved and logged by Setup; the stage plans within it.
	MemBudget       int64
	MemBudgetSource string
}

// Setup sets up logging from the flags, refuses positional arguments as a
// usage error when noArgs, resolves the memory budget (--mem-budget, SLURM,
// cgroup, physical memory; logged with its source, it sets the Go soft
// limit) and returns the Opts of c.
func Setup(c *cli.Context, noArgs bool) (Opts, error) {
	lg, err := cliutil.SetupLogging(c)
	if err != nil {
		return Opts{}, err
	}
	if noArgs {
		if err := cliutil.NoArgs(c); err != nil {
			return Opts{}, err
		}
	}
	budget, src, err := cliutil.MemBudget(c.Int("mem-budget"), os.Getenv, lg)
	if err != nil {
		return Opts{}, err
	}
	return Opts{Workers: c.Int("workers"), Device: c.String("device"), GPU: c.Int("gpu"), GPUDebug: c.Bool("gpu-debug"), Logger: lg,
		MemBudget: budget, MemBudgetSource: src}, nil
}

// Resolve decides the worker count (logged with where it came from) and
// parses the device; both fail as usage errors.
func (o Opts) Resolve() (workers int, dev cliutil.Device, err error) {
	n, src, err := cliutil.Workers(o.Workers, os.Getenv)
	if err != nil {
		return 0, "", err
	}
	o.Logger.Info("workers", "count", n, "source", src)
	dev, err = cliutil.ParseDevice(o.Device)
	if err != nil {
		return 0, "", err
	}
	return n, dev, nil
}

// Open returns the stage's engine on dev: cpu() for cliutil.DeviceCPU
// (logged as a warning: the reference path, taken only when asked), else
// onGPU of the CUDA engine at o.GPU. There is no fallback: a GPU that
// cannot be opened is an error, a usage error (exit 2) when the binary was
// built without CUDA. release frees the engine and logs the process's peak
// resident memory (VmHWM) so that every stage job reports it beside the
// budget logged at Setup.
func Open[E any](o Opts, dev cliutil.Device, cpu func() E, onGPU func(*gpu.Engine) E) (eng E, release func(), err error) {
	if dev == cliutil.DeviceCPU {
		o.Logger.Warn("running on the CPU because --device cpu was given (the reference path; GPU jobs never fall back to it)")
		return cpu(), func() { o.logPeak() }, nil
	}
	e, err := gpu.Open(gpu.Options{Device: o.GPU, Debug: o.GPUDebug})
	if err != nil {
		err = fmt.Errorf("open GPU %d: %w", o.GPU, err)
		if errors.Is(err, gpu.ErrNoCUDA) {
			err = cliutil.AsUsage(err)
		}
		return eng, nil, err
	}
	o.Logger.Info("engine", "device", e.Name())
	return onGPU(e), func() { e.Close(); o.logPeak() }, nil
}

// logPeak logs the peak resident memory of the process so far, in MiB.
func (o Opts) logPeak() {
	o.Logger.Info("peak host memory", "vmhwm_mib", fmt.Sprintf("%.0f", float64(membudget.PeakRSS())/(1<<20)))
}

// InputAsUsage maps errors caused by the input data (those matching one of
// inputErrs, e.g. the stage's ErrInput) to a usage error (exit 2).
func InputAsUsage(err error, inputErrs ...error) error {
	for _, target := range inputErrs {
		if errors.Is(err, target) {
			return cliutil.AsUsage(err)
		}
	}
	return err
}
