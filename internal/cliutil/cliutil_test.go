package cliutil

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

func TestWorkers(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	cases := []struct {
		flag     int
		env      map[string]string
		want     int
		source   string
		errMatch string
	}{
		{3, map[string]string{"SLURM_CPUS_PER_TASK": "8"}, 3, "--workers", ""},
		{0, map[string]string{"SLURM_CPUS_PER_TASK": "8", "cpus_per_task": "2"}, 8, "SLURM_CPUS_PER_TASK", ""},
		{0, map[string]string{"cpus_per_task": " 2 "}, 2, "cpus_per_task", ""},
		{0, nil, runtime.NumCPU(), "runtime.NumCPU", ""},
		{0, map[string]string{"SLURM_CPUS_PER_TASK": "four"}, 0, "", "SLURM_CPUS_PER_TASK"},
		{0, map[string]string{"cpus_per_task": "0"}, 0, "", "cpus_per_task"},
		{0, map[string]string{"cpus_per_task": "-2"}, 0, "", "cpus_per_task"},
		{-1, nil, 0, "", "--workers"},
		{MaxWorkers, nil, MaxWorkers, "--workers", ""},
		{MaxWorkers + 1, nil, 0, "", "--workers 4097: want 0..4096"},
		{0, map[string]string{"SLURM_CPUS_PER_TASK": "1000000"}, 0, "", "SLURM_CPUS_PER_TASK"},
	}
	for _, tc := range cases {
		n, src, err := Workers(tc.flag, env(tc.env))
		if tc.errMatch != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errMatch) || ExitCode(err) != ExitUsage {
				t.Errorf("%+v: err = %v, want usage error naming %s", tc, err, tc.errMatch)
			}
			continue
		}
		if err != nil || n != tc.want || src != tc.source {
			t.Errorf("%+v: got %d %q %v", tc, n, src, err)
		}
	}
}

func TestParseDevice(t *testing.T) {
	for in, want := range map[string]Device{"gpu": DeviceGPU, "GPU": DeviceGPU, "cpu": DeviceCPU, " cpu ": DeviceCPU, "": DeviceGPU} {
		if d, err := ParseDevice(in); err != nil || d != want {
			t.Errorf("%q: %v %v", in, d, err)
		}
	}
	for _, in := range []string{"auto", "cuda", "none"} {
		if _, err := ParseDevice(in); err == nil || ExitCode(err) != ExitUsage {
			t.Errorf("%q: want usage error, got %v", in, err)
		}
	}
}

func TestExitCode(t *testing.T) {
	cases := map[error]int{
		nil:                                   ExitOK,
		errors.New("x"):                       ExitFailure,
		Usagef("bad key"):                     ExitUsage,
		fmt.Errorf("w: %w", Usagef("k")):      ExitUsage,
		fmt.Errorf("w: %w", context.Canceled): ExitSignal,
	}
	for err, want := range cases {
		if got := ExitCode(err); got != want {
			t.Errorf("%v: %d want %d", err, got, want)
		}
	}
}

func TestLoggerFormats(t *testing.T) {
	var buf bytes.Buffer
	lg, err := NewLogger(&buf, "json", "debug")
	if err != nil {
		t.Fatal(err)
	}
	lg.Debug("hello", "workers", 4)
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil || m["msg"] != "hello" || m["workers"] != 4.0 {
		t.Errorf("json log %q: %v", buf.String(), err)
	}
	buf.Reset()
	lg, _ = NewLogger(&buf, "auto", "info")
	lg.Info("plain", "k", "v")
	if strings.Contains(buf.String(), "\x1b[") {
		t.Errorf("colour written to a non-terminal: %q", buf.String())
	}
	if _, err := NewLogger(&buf, "xml", "info"); err == nil {
		t.Error("bad format accepted")
	}
	if _, err := NewLogger(&buf, "json", "loud"); err == nil {
		t.Error("bad level accepted")
	}
}

// TestFlagErrorsExitUsage: a missing required flag and an unknown command
// (errors urfave/cli returns without OnUsageError) exit ExitUsage, like a
// malformed flag value.
func TestFlagErrorsExitUsage(t *testing.T) {
	app := NewApp("x", "", "", nil, nil)
	app.Commands = []*cli.Command{{Name: "run", Flags: []cli.Flag{&cli.IntFlag{Name: "cycle", Required: true}},
		Action: func(*cli.Context) error { return nil }},
		{Name: "tile", Flags: []cli.Flag{&cli.StringFlag{Name: "in", Required: true}, &cli.StringFlag{Name: "out", Required: true}},
			Action: func(*cli.Context) error { return nil }}}
	app.Writer, app.ErrWriter = io.Discard, io.Discard
	usageErrors(app.Commands)
	for _, args := range [][]string{{"x", "run"}, {"x", "tile"}, {"x", "tile", "--in", "a"}, {"x", "frob"}, {"x", "run", "--cycle", "one"}} {
		err := requiredAsUsage(app.Run(args))
		if code := ExitCode(err); code != ExitUsage {
			t.Errorf("%v: %v: exit %d, want %d", args, err, code, ExitUsage)
		}
	}
	if err := requiredAsUsage(app.Run([]string{"x", "run", "--cycle", "1"})); err != nil {
		t.Errorf("valid flags: %v", err)
	}
	if code := ExitCode(requiredAsUsage(errors.New("disk on fire"))); code != ExitFailure {
		t.Errorf("other errors: exit %d, want %d", code, ExitFailure)
	}
}
