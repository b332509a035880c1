// Package stagecli is the command set-up every stage executable shares
// (kintsugi-stitch, kintsugi-decon, kintsugi-edf, kintsugi-register): their
// device flags, the worker count, the memory budget, the device choice
// (cpu or gpu, the GPU index, debug) and opening the engine, each with the
// exit code cliutil maps it to. The device is resolved here and only here:
// a stage package receives an engine that satisfies its own small
// interface (the CUDA engine, *gpu.Engine, satisfies every stage's) and
// never imports internal/gpu.
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
	"strings"
	"time"

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
	// Getenv reads the environment (SLURM_CPUS_PER_TASK, cpus_per_task,
	// the SLURM memory variables); nil means os.Getenv. Tests pass their
	// own.
	Getenv func(string) string
}

func (o Opts) getenv() func(string) string {
	if o.Getenv == nil {
		return os.Getenv
	}
	return o.Getenv
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

// Resolve decides the worker count (ResolveWorkers) and parses the device
// (--device, a --gpu index >= 0 for the GPU); both fail as usage errors.
func (o Opts) Resolve() (workers int, dev cliutil.Device, err error) {
	n, err := o.ResolveWorkers()
	if err != nil {
		return 0, "", err
	}
	dev, err = o.ResolveDevice()
	if err != nil {
		return 0, "", err
	}
	return n, dev, nil
}

// ResolveDevice parses --device (or KINTSUGI_DEVICE_MODE) and checks the
// --gpu index of the GPU; both fail as usage errors.
func (o Opts) ResolveDevice() (cliutil.Device, error) {
	dev, err := cliutil.ParseDevice(o.Device)
	if err != nil {
		return "", err
	}
	if dev == cliutil.DeviceGPU && o.GPU < 0 {
		return "", cliutil.Usagef("--gpu %d: want a device index >= 0 among the visible devices", o.GPU)
	}
	return dev, nil
}

// ResolveWorkers decides the worker count (--workers, SLURM_CPUS_PER_TASK,
// cpus_per_task, the CPUs), logged with where it came from; a bad value is
// a usage error.
func (o Opts) ResolveWorkers() (int, error) {
	n, src, err := cliutil.Workers(o.Workers, o.getenv())
	if err != nil {
		return 0, err
	}
	o.Logger.Info("workers", "count", n, "source", src)
	return n, nil
}

// The CUDA engine reports its host memory to every stage's memory model.
var _ membudget.MemoryReporter = (*gpu.Engine)(nil)

// Engine is what Open needs of a stage's engine: its name, logged once
// the device is open.
type Engine interface{ Name() string }

// Open returns the stage's engine on dev: cpu() for cliutil.DeviceCPU
// (logged as a warning: the reference path, taken only when asked), else
// onGPU of the CUDA engine at o.GPU (with o.GPUDebug). There is no
// fallback: a GPU that cannot be opened is an error, a usage error (exit 2)
// when the binary was built without CUDA. release closes the CUDA engine,
// returning its error (callers that ignore it may), and logs the process's
// peak resident memory (VmHWM) so that every stage job reports it beside
// the budget logged at Setup, and the device memory (logDevice).
func Open[E Engine](o Opts, dev cliutil.Device, cpu func() E, onGPU func(*gpu.Engine) E) (eng E, release func() error, err error) {
	return OpenFrom(o, dev, cpu, func(e *gpu.Engine) (E, error) { return onGPU(e), nil })
}

// OpenFrom is Open whose onGPU may fail (e.g. opening a lane of the
// engine); the engine is then closed and the error returned.
func OpenFrom[E Engine](o Opts, dev cliutil.Device, cpu func() E, onGPU func(*gpu.Engine) (E, error)) (eng E, release func() error, err error) {
	return OpenWith(o, dev, cpu, func(opts gpu.Options) (E, func() error, error) {
		var none E
		e, err := gpu.Open(opts)
		if err != nil {
			return none, nil, err
		}
		eng, err := onGPU(e)
		if err != nil {
			_ = e.Close()
			return none, nil, err
		}
		return eng, func() error {
			o.logDevice(e)
			t0 := time.Now()
			err := e.Close()
			o.Logger.Info("engine closed", "seconds", fmt.Sprintf("%.2f", time.Since(t0).Seconds()))
			return err
		}, nil
	})
}

// logDevice logs the CUDA engine's device memory: its peak (cuMemGetInfo,
// the context and other processes on the GPU included), the buffer pool's
// peak and the card's total, in MiB; then the engine goroutine's time
// ("engine time": its total and the ops that took most, seconds/calls).
func (o Opts) logDevice(e *gpu.Engine) {
	if ms, err := e.MemInfo(); err == nil {
		o.Logger.Info("device memory", "peak_mib", ms.DevicePeak>>20, "pool_peak_mib", ms.PoolPeak>>20, "total_mib", ms.Total>>20)
	}
	if ops, err := e.Busy(); err == nil && len(ops) > 0 {
		o.Logger.Info("engine time", "busy_s", fmt.Sprintf("%.2f", busyTotal(ops)), "ops", busyOps(ops, 12))
	}
}

// busyTotal is the engine goroutine's time over all ops, seconds.
func busyTotal(ops []gpu.OpTime) float64 {
	var s float64
	for _, t := range ops {
		s += t.Seconds
	}
	return s
}

// busyOps describes the first n ops (most time first) as
// "op=seconds/calls, ...".
func busyOps(ops []gpu.OpTime, n int) string {
	var b strings.Builder
	for i, t := range ops[:min(n, len(ops))] {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s=%.2fs/%d", t.Op, t.Seconds, t.Calls)
	}
	return b.String()
}

// OpenWith is Open with the GPU opened by openGPU (returning the engine
// and its close), for commands whose tests stand a CPU engine in for the
// GPU's.
func OpenWith[E Engine](o Opts, dev cliutil.Device, cpu func() E, openGPU func(gpu.Options) (E, func() error, error)) (eng E, release func() error, err error) {
	if dev == cliutil.DeviceCPU {
		o.Logger.Warn("running on the CPU because --device cpu was given (the reference path; GPU jobs never fall back to it)")
		return cpu(), func() error { o.logPeak(); return nil }, nil
	}
	eng, closeGPU, err := openGPU(gpu.Options{Device: o.GPU, Debug: o.GPUDebug})
	if err != nil {
		err = fmt.Errorf("open GPU %d: %w", o.GPU, err)
		if errors.Is(err, gpu.ErrNoCUDA) {
			err = cliutil.AsUsage(err)
		}
		return eng, nil, err
	}
	o.Logger.Info("engine", "device", eng.Name())
	return eng, func() error {
		err := closeGPU()
		o.logPeak()
		if err != nil {
			return fmt.Errorf("close %s: %w", eng.Name(), err)
		}
		return nil
	}, nil
}

// Release runs release (Open's) when a command ends and folds its error
// into *err: a failed close after a successful run is the command's error
// (exit 1); after a failure it is logged as a warning beside the failure.
func (o Opts) Release(release func() error, err *error) {
	cerr := release()
	if cerr == nil {
		return
	}
	if *err == nil {
		*err = cerr
		return
	}
	o.Logger.Warn("closing the engine after a failure", "err", cerr.Error())
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
