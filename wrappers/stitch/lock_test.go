package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/exectest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/staging"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth/synthtest"
)

// tinyProject writes the tiny synthetic project (1 cycle, nz z-planes) and
// its config under dir.
func tinyProject(t *testing.T, dir string, nz int) (cfg, out string) {
	t.Helper()
	o := synthtest.Tiny(t)
	o.OutDir, o.NCycles, o.NZ = dir, 1, nz
	return synthtest.Generate(t, o), layout.Stitched(dir, 1)
}

func stitchCmd(bin, cfg string, extraEnv ...string) *exec.Cmd {
	cmd := exec.Command(bin, "run", "-c", cfg, "--cycle", "1", "--device", "cpu", "--workers", "2")
	cmd.Env = append(os.Environ(), "KINTSUGI_DEVICE_MODE=", "SLURM_CPUS_PER_TASK=", "cpus_per_task=", "KINTSUGI_LOCK_WAIT=", "SLURM_JOB_END_TIME=")
	cmd.Env = append(cmd.Env, extraEnv...)
	return cmd
}

func exitCode(t *testing.T, err error) int {
	t.Helper()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0
}

// waitFor polls until path exists.
func waitFor(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
	}
	t.Fatalf("%s did not appear", path)
}

// onlyOutput checks that the output's parent holds the output and nothing
// else: no lock, no staging directory.
func onlyOutput(t *testing.T, out string) {
	t.Helper()
	ents, err := os.ReadDir(filepath.Dir(out))
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != filepath.Base(out) {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("%s holds %v, want only %s", filepath.Dir(out), names, filepath.Base(out))
	}
}

// TestTwoRunsAndKill runs kintsugi-stitch as Snakemake and a stale
// coordinator would: a second run of the same cycle while the first runs
// exits 4 naming the first (its SLURM job and pid) and writes nothing; the
// first still completes. A run killed with SIGKILL leaves its lock and
// staging directory; the rerun takes the lock over, removes them, and
// writes outputs byte-identical to an uninterrupted run. Every run's help
// lists exit code 4.
func TestTwoRunsAndKill(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the stage four times")
	}
	dir := t.TempDir()
	bin := exectest.Build(t, "kintsugi-stitch", ".")
	cfg, out := tinyProject(t, filepath.Join(dir, "p"), 2)
	lock := filepath.Join(filepath.Dir(out), ".cyc01.lock")

	// Two at once: the first is stopped (SIGSTOP) as soon as it holds the
	// lock, so the second surely starts while the first is alive. The
	// second does not wait for it (KINTSUGI_LOCK_WAIT=0; inside SLURM a run
	// with the same parameters would: tests/lockrace).
	first := stitchCmd(bin, cfg, "SLURM_JOB_ID=1001")
	var firstLog bytes.Buffer
	first.Stdout, first.Stderr = &firstLog, &firstLog
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, lock)
	first.Process.Signal(syscall.SIGSTOP)
	second := stitchCmd(bin, cfg, "SLURM_JOB_ID=1002", "KINTSUGI_LOCK_WAIT=0")
	msg, err := second.CombinedOutput()
	first.Process.Signal(syscall.SIGCONT)
	if code := exitCode(t, err); code != 4 {
		t.Errorf("second run: exit %d, want 4\n%s", code, msg)
	}
	for _, w := range []string{"SLURM job 1001", fmt.Sprintf("pid %d", first.Process.Pid), ".cyc01.lock"} {
		if !strings.Contains(string(msg), w) {
			t.Errorf("second run's message lacks %q:\n%s", w, msg)
		}
	}
	if code := exitCode(t, first.Wait()); code != 0 {
		t.Fatalf("first run: exit %d\n%s", code, firstLog.String())
	}
	onlyOutput(t, out)
	want := exectest.ReadTree(t, out) // the first run was not interrupted (a stop is no kill)

	// Killed with SIGKILL once it holds the lock and has begun writing.
	killed := stitchCmd(bin, cfg, "SLURM_JOB_ID=1003")
	if err := killed.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, lock)
	time.Sleep(300 * time.Millisecond)
	killed.Process.Signal(syscall.SIGKILL)
	killed.Wait()
	ents, _ := os.ReadDir(filepath.Dir(out))
	partial := 0
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".cyc01.partial-") {
			partial++
		}
	}
	if _, err := os.Stat(lock); err != nil || partial != 1 {
		t.Logf("after SIGKILL: lock %v, %d staging directories (the kill may have come after the commit)", err, partial)
	}
	msg, err = stitchCmd(bin, cfg, "SLURM_JOB_ID=1004").CombinedOutput()
	if code := exitCode(t, err); code != 0 {
		t.Fatalf("rerun after SIGKILL: exit %d\n%s", code, msg)
	}
	if partial == 1 && (!strings.Contains(string(msg), "took over the lock") || !strings.Contains(string(msg), "removed a staging directory")) {
		t.Errorf("rerun did not log the take-over and clean-up:\n%s", msg)
	}
	onlyOutput(t, out)
	got := exectest.ReadTree(t, out)
	if len(got) != len(want) {
		t.Errorf("rerun wrote %d files, the uninterrupted run %d", len(got), len(want))
	}
	for _, name := range exectest.Differing(want, got) {
		t.Errorf("%s differs from the uninterrupted run", name)
	}

	// A lock held by this test process: exit 4 naming it, output untouched.
	d, err := staging.NewWithOptions(out, staging.Options{Stage: "test holder"})
	if err != nil {
		t.Fatal(err)
	}
	msg, err = stitchCmd(bin, cfg).CombinedOutput()
	if code := exitCode(t, err); code != 4 || !strings.Contains(string(msg), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Errorf("run against a held lock: exit %d, want 4 naming pid %d\n%s", code, os.Getpid(), msg)
	}
	d.Abort()
	onlyOutput(t, out)
	if help, _ := exec.Command(bin, "run", "--help").CombinedOutput(); !strings.Contains(string(help), "4  another job") {
		t.Errorf("run --help does not list exit code 4:\n%s", help)
	}
}
