// Package childproc runs a stage in a fresh process for the memory-budget
// tests: the test binary re-executes itself, running only one test function
// that does the stage's work, so that the kernel's peak resident set of the
// child (VmHWM) is the stage's own and not the test binary's accumulated
// peak. It is test support; it has no CLI code.
//
// The parent calls Run with the child test's name, an environment variable
// and the arguments; the child test calls Serve with the same variable,
// which does nothing in a normal test run.
package childproc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/exitcode"
	"github.com/kintsugi-hpc/kintsugi-go/internal/membudget"
)

// Serve is the child side. When env is set, it calls run with the
// comma-separated fields of its value, prints the process's peak resident
// set (bytes) and the values run returns, one "KEY value" line each, and
// exits: 0 on success, else exitcode.Of the error (printed to
// stderr). When env is not set it returns at once.
func Serve(env string, run func(args []string) (map[string]string, error)) {
	spec := os.Getenv(env)
	if spec == "" {
		return
	}
	vals, err := run(strings.Split(spec, ","))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(exitcode.Of(err))
	}
	fmt.Printf("VMHWM %d\n", membudget.PeakRSS())
	for k, v := range vals {
		fmt.Printf("%s %s\n", k, v)
	}
	os.Exit(0)
}

// ServeStage is Serve for a stage run on the arguments "config path, budget
// bytes, workers" (what the parent passes to Run): run gets the loaded
// config, the budget and the worker count.
func ServeStage(env string, run func(cfg *config.Config, budget int64, workers int) (map[string]string, error)) {
	Serve(env, func(f []string) (map[string]string, error) {
		if len(f) != 3 {
			return nil, fmt.Errorf("childproc: %s=%q: want config,budget,workers", env, strings.Join(f, ","))
		}
		budget, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("childproc: budget %q: %w", f[1], err)
		}
		workers, err := strconv.Atoi(f[2])
		if err != nil {
			return nil, fmt.Errorf("childproc: workers %q: %w", f[2], err)
		}
		cfg, err := config.Load(f[0])
		if err != nil {
			return nil, err
		}
		return run(cfg, budget, workers)
	})
}

// Result is what a child run reported.
type Result struct {
	Peak   int64             // the child's VmHWM, bytes (0 when it failed)
	Values map[string]string // the values its run function returned
	Stderr string
	Code   int // exit code
}

// Int returns the value of key as an integer, 0 if absent or malformed.
func (r Result) Int(key string) int64 {
	v, _ := strconv.ParseInt(r.Values[key], 10, 64)
	return v
}

// Run re-executes the test binary running only the test named test, with
// env set to args joined by commas, the Go runtime's memory settings
// cleared (GOMEMLIMIT, GOGC: the stage sets its own), and returns what the
// child reported. A child that exits 0 without a peak fails the test.
func Run(t testing.TB, test, env string, args ...any) Result {
	t.Helper()
	parts := make([]string, len(args))
	for i, a := range args {
		parts[i] = fmt.Sprint(a)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env+"="+strings.Join(parts, ","), "GOMEMLIMIT=", "GOGC=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := Result{Values: map[string]string{}, Stderr: stderr.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.Code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s child: %v", test, err)
	}
	for _, line := range strings.Split(stdout.String(), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if k == "VMHWM" {
			r.Peak, _ = strconv.ParseInt(v, 10, 64)
		} else {
			r.Values[k] = v
		}
	}
	if r.Code == 0 && r.Peak <= 0 {
		t.Fatalf("%s child printed no peak:\n%s\n%s", test, stdout.String(), stderr.String())
	}
	return r
}
