// Package cliutil holds what every executable of the project shares: logging
// (log/slog with tint on a terminal, JSON for machines), the worker count
// (from SLURM's cpus_per_task), the device choice (gpu|cpu, never a silent
// fallback), signal handling and the exit codes (the mapping from errors to
// them lives in package exitcode).
package cliutil

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lmittmann/tint"
	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/kintsugi-hpc/kintsugi-go/internal/exitcode"
	"github.com/kintsugi-hpc/kintsugi-go/internal/membudget"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// Exit codes shared by every executable (package exitcode, which the tests
// that run a stage in a child process share); ExitCodesHelp lists them for
// help texts.
const (
	ExitOK      = exitcode.OK      // success
	ExitFailure = exitcode.Failure // processing failed (I/O, numerical, GPU error)
	ExitUsage   = exitcode.Usage   // bad flags, bad config or bad input data
	ExitSignal  = exitcode.Signal  // interrupted by SIGINT/SIGTERM (SLURM time limit)
	ExitLocked  = exitcode.Locked  // another job holds the output's lock (staging.ErrLocked)
)

// ExitCodesHelp is appended to every command's description.
const ExitCodesHelp = exitcode.Help

// UsageError marks an error caused by the user's input (flags, config, data);
// it maps to ExitUsage.
type UsageError = exitcode.UsageError

// Usagef returns a UsageError with a formatted message.
func Usagef(format string, args ...any) error { return exitcode.Usagef(format, args...) }

// AsUsage wraps err as a UsageError (nil stays nil).
func AsUsage(err error) error { return exitcode.AsUsage(err) }

// ExitCode maps an error to the process exit code (exitcode.Of).
func ExitCode(err error) int { return exitcode.Of(err) }

// LoggingFlags are the flags every command has.
func LoggingFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "log-format", Value: "auto", Usage: "log format: auto (colour on a terminal, plain text otherwise), text or json", EnvVars: []string{"KINTSUGI_LOG_FORMAT"}},
		&cli.StringFlag{Name: "log-level", Value: "info", Usage: "log level: debug, info, warn or error", EnvVars: []string{"KINTSUGI_LOG_LEVEL"}},
	}
}

// NewLogger builds the logger for format (auto|text|json) and level, writing
// to w. Colour is used only when format is auto and w is a terminal.
func NewLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, Usagef("--log-level %q: want debug, info, warn or error", level)
	}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lv})), nil
	case "auto", "text":
		color := false
		if f, ok := w.(*os.File); ok && format == "auto" {
			color = term.IsTerminal(int(f.Fd()))
		}
		return slog.New(tint.NewHandler(w, &tint.Options{Level: lv, NoColor: !color, TimeFormat: time.DateTime})), nil
	default:
		return nil, Usagef("--log-format %q: want auto, text or json", format)
	}
}

// SetupLogging installs the logger chosen by the command's flags as the
// default slog logger (stderr) and returns it.
func SetupLogging(c *cli.Context) (*slog.Logger, error) {
	lg, err := NewLogger(os.Stderr, lookup(c, "log-format"), lookup(c, "log-level"))
	if err != nil {
		return nil, err
	}
	slog.SetDefault(lg)
	return lg, nil
}

// lookup returns a string flag from the nearest command that set it, so a
// flag works before or after a subcommand's name.
func lookup(c *cli.Context, name string) string {
	for _, x := range c.Lineage() {
		if x.IsSet(name) {
			return x.String(name)
		}
	}
	return c.String(name)
}

// MaxWorkers bounds the worker count (flag or environment): per-worker
// buffers must not be sized from an absurd value.
const MaxWorkers = 1 << 12

// WorkersFlag is the --workers flag (0: from the environment).
func WorkersFlag() cli.Flag {
	return &cli.IntFlag{Name: "workers", Usage: "worker goroutines (0: SLURM_CPUS_PER_TASK, then cpus_per_task, then the number of CPUs)"}
}

// Workers decides the worker-pool size. Order: flag (> 0), the environment
// variable SLURM_CPUS_PER_TASK (set by SLURM from cpus_per_task), then
// cpus_per_task (exported by the Snakefile outside SLURM), then
// runtime.NumCPU(). A malformed or non-positive environment value is an error
// naming the variable, never a silent default. It returns the count and
// where it came from.
func Workers(flag int, getenv func(string) string) (int, string, error) {
	if flag < 0 || flag > MaxWorkers {
		return 0, "", Usagef("--workers %d: want 0..%d", flag, MaxWorkers)
	}
	if flag > 0 {
		return flag, "--workers", nil
	}
	for _, name := range []string{"SLURM_CPUS_PER_TASK", "cpus_per_task"} {
		v := strings.TrimSpace(getenv(name))
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 || n > MaxWorkers {
			return 0, "", Usagef("environment variable %s=%q: want a positive integer up to %d", name, v, MaxWorkers)
		}
		return n, name, nil
	}
	return runtime.NumCPU(), "runtime.NumCPU", nil
}

// MemBudgetFlag is the --mem-budget flag (MB; 0: from the environment).
func MemBudgetFlag() cli.Flag {
	return &cli.IntFlag{Name: "mem-budget", Usage: "memory budget, MB (0: SLURM_MEM_PER_NODE, then SLURM_MEM_PER_CPU x SLURM_CPUS_PER_TASK, then mem_mb, then the cgroup limit, then 80% of the physical memory)"}
}

// MemBudget decides the process's memory budget in bytes (membudget.Resolve:
// flag, SLURM allocation, mem_mb, cgroup limit, 80 % of the physical memory),
// logs it with its source like the worker count, and sets the Go runtime's
// soft memory limit to membudget.GoLimit of it, so the heap does not grow to
// twice the live data. It returns the budget and its source; a malformed
// value is a usage error naming the variable or file.
func MemBudget(flagMB int, getenv func(string) string, lg *slog.Logger) (int64, string, error) {
	b, src, err := membudget.Resolve(flagMB, getenv)
	if err != nil {
		return 0, "", AsUsage(err)
	}
	if lg == nil {
		lg = slog.Default()
	}
	if strings.Contains(src, "capped") {
		lg.Warn("memory budget above the machine's memory: capped", "mb", b/membudget.MB, "source", src)
	} else {
		lg.Info("memory budget", "mb", b/membudget.MB, "source", src)
	}
	membudget.SetGoLimit(membudget.GoLimit(b))
	tiffio.SetDecodeLimit(b) // no single TIFF read may decode to more than the budget
	return b, src, nil
}

// Device is the compute device a command runs on.
type Device string

const (
	DeviceGPU Device = "gpu"
	DeviceCPU Device = "cpu"
)

// DeviceFlag is the --device flag; the default is gpu.
func DeviceFlag() cli.Flag {
	return &cli.StringFlag{Name: "device", Value: string(DeviceGPU), EnvVars: []string{"KINTSUGI_DEVICE_MODE"},
		Usage: "compute device: gpu (default; fails if no usable GPU) or cpu (reference path, only when asked for)"}
}

// ParseDevice validates a --device value; empty (an exported but empty
// KINTSUGI_DEVICE_MODE) means the default, gpu.
func ParseDevice(s string) (Device, error) {
	switch Device(strings.ToLower(strings.TrimSpace(s))) {
	case "":
		return DeviceGPU, nil
	case DeviceGPU:
		return DeviceGPU, nil
	case DeviceCPU:
		return DeviceCPU, nil
	}
	return "", Usagef("--device %q (or KINTSUGI_DEVICE_MODE): want gpu or cpu", s)
}

// SignalContext returns a context cancelled on SIGINT or SIGTERM (SLURM sends
// SIGTERM at the time limit).
func SignalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// Main runs app and exits with the code ExitCode maps its error to, logging
// the error first.
func Main(app *cli.App) {
	if lg, err := NewLogger(os.Stderr, "auto", "info"); err == nil {
		slog.SetDefault(lg) // until the command's own flags are parsed
	}
	usageErrors(app.Commands)
	exitCodesInHelp(app.Commands)
	// Until a command resolves its memory budget, no TIFF read may decode to
	// more than the machine's memory.
	if m, _, err := (membudget.Env{}).Machine(); err == nil {
		tiffio.SetDecodeLimit(m)
	}
	ctx, stop := SignalContext()
	err := app.RunContext(ctx, os.Args)
	interrupted := ctx.Err() != nil
	stop()
	err = requiredAsUsage(err)
	if err != nil && ExitCode(err) == ExitOK {
		slog.Info("nothing to do", "why", err.Error())
	} else if err != nil {
		if interrupted && !errors.Is(err, context.Canceled) {
			err = fmt.Errorf("%w (interrupted: %w)", err, context.Canceled)
		}
		slog.Error("failed", "err", err.Error(), "exit", ExitCode(err))
	}
	os.Exit(ExitCode(err))
}

// requiredAsUsage maps urfave/cli's errors for a missing required flag and
// an unknown command (which bypass OnUsageError) to a UsageError, so they
// exit ExitUsage like every other flag error.
func requiredAsUsage(err error) error {
	if err == nil {
		return nil
	}
	var ue *UsageError
	if errors.As(err, &ue) {
		return err
	}
	if m := err.Error(); strings.HasPrefix(m, "Required flag \"") || strings.HasPrefix(m, "Required flags \"") ||
		strings.HasPrefix(m, "No help topic for '") {
		return AsUsage(err)
	}
	return err
}

// usageErrors maps flag errors of subcommands to ExitUsage, as NewApp does
// for the app.
func usageErrors(cmds []*cli.Command) {
	for _, c := range cmds {
		if c.OnUsageError == nil {
			c.OnUsageError = func(_ *cli.Context, err error, _ bool) error { return AsUsage(err) }
		}
		usageErrors(c.Subcommands)
	}
}

// exitCodesInHelp appends ExitCodesHelp to every subcommand's description,
// so `<exe> <command> --help` lists the exit codes too.
func exitCodesInHelp(cmds []*cli.Command) {
	for _, c := range cmds {
		if !strings.Contains(c.Description, ExitCodesHelp) {
			c.Description = strings.TrimSpace(strings.TrimSpace(c.Description) + "\n\n" + ExitCodesHelp)
		}
		exitCodesInHelp(c.Subcommands)
	}
}

// NewApp builds a urfave/cli app with the project's conventions: the logging
// flags, exit codes in the description, and flag errors mapped to ExitUsage.
func NewApp(name, usage, description string, flags []cli.Flag, action cli.ActionFunc) *cli.App {
	return &cli.App{
		Name:            name,
		Usage:           usage,
		Description:     strings.TrimSpace(description) + "\n\n" + ExitCodesHelp,
		Flags:           append(flags, LoggingFlags()...),
		Action:          action,
		HideHelpCommand: true,
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return AsUsage(err)
		},
		ExitErrHandler: func(*cli.Context, error) {}, // Main decides the exit code
	}
}
