//go:build !cuda

package stagecli

import (
	"errors"
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
	cpu := func() string { cpuCalls++; return "cpu" }
	onGPU := func(*gpu.Engine) string { return "gpu" }
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
	bad := errors.New("bad input")
	if err := InputAsUsage(errors.Join(bad), errors.New("other"), bad); cliutil.ExitCode(err) != cliutil.ExitUsage {
		t.Errorf("input error: exit %d", cliutil.ExitCode(err))
	}
	if err := InputAsUsage(errors.New("disk full"), bad); cliutil.ExitCode(err) != cliutil.ExitFailure {
		t.Errorf("other error: exit %d", cliutil.ExitCode(err))
	}
}
