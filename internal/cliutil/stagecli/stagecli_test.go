//go:build !cuda

package stagecli

import (
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/cliutil"
	"github.com/kintsugi-hpc/kintsugi-go/internal/gpu"
)

// TestOpen: the CPU only when asked; without CUDA the GPU is a usage error
// (exit 2) naming the device, never a switch to the CPU.
func TestOpen(t *testing.T) {
	var logs strings.Builder
	o := Opts{GPU: 1, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	cpuCalls := 0
	cpu := func() named { cpuCalls++; return "cpu" }
	onGPU := func(*gpu.Engine) named { return "gpu" }
	e, release, err := Open(o, cliutil.DeviceCPU, cpu, onGPU)
	if err != nil || e != "cpu" || release == nil {
		t.Fatalf("cpu: %q, %v", e, err)
	}
	release()
	if !regexp.MustCompile(`msg="peak host memory" vmhwm_mib=[1-9][0-9]*`).MatchString(logs.String()) {
		t.Errorf("release did not log the peak resident memory:\n%s", logs.String())
	}
	_, _, err = Open(o, cliutil.DeviceGPU, cpu, onGPU)
	if !errors.Is(err, gpu.ErrNoCUDA) || cliutil.ExitCode(err) != cliutil.ExitUsage || !strings.Contains(err.Error(), "open GPU 1") {
		t.Errorf("gpu without CUDA: exit %d, %v", cliutil.ExitCode(err), err)
	}
	if cpuCalls != 1 {
		t.Errorf("the CPU engine was made %d times, want once (no fallback)", cpuCalls)
	}
	// A GPU engine whose close fails: the error of a finished command,
	// a warning beside a failure.
	down := errors.New("device reset failed")
	_, release, err = OpenWith(o, cliutil.DeviceGPU, cpu, func(opts gpu.Options) (named, func() error, error) {
		return named(fmt.Sprintf("gpu %d", opts.Device)), func() error { return down }, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var runErr error
	o.Release(release, &runErr)
	if !errors.Is(runErr, down) || !strings.Contains(runErr.Error(), "close gpu 1") {
		t.Errorf("close failure after success: %v", runErr)
	}
	runErr = errors.New("stage failed")
	o.Release(release, &runErr)
	if runErr.Error() != "stage failed" || !strings.Contains(logs.String(), "closing the engine after a failure") {
		t.Errorf("close failure after a failure: %v\n%s", runErr, logs.String())
	}
	// The device is resolved here for every stage: a negative --gpu is a
	// usage error.
	if _, err := (Opts{GPU: -1, Logger: o.Logger}).ResolveDevice(); cliutil.ExitCode(err) != cliutil.ExitUsage || !strings.Contains(err.Error(), "--gpu -1") {
		t.Errorf("--gpu -1: %v", err)
	}
	bad := errors.New("bad input")
	if err := InputAsUsage(errors.Join(bad), errors.New("other"), bad); cliutil.ExitCode(err) != cliutil.ExitUsage {
		t.Errorf("input error: exit %d", cliutil.ExitCode(err))
	}
	if err := InputAsUsage(errors.New("disk full"), bad); cliutil.ExitCode(err) != cliutil.ExitFailure {
		t.Errorf("other error: exit %d", cliutil.ExitCode(err))
	}
}

// named is an engine that is only its name.
type named string

func (n named) Name() string { return string(n) }
