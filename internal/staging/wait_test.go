package staging

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// waitOptions wait for a holder with params for at most limit, polling fast.
func waitOptions(params string, limit time.Duration, log *bytes.Buffer) Options {
	return Options{Stage: "child job", Params: params, Logger: logTo(log), Poll: 20 * time.Millisecond, LogEvery: 100 * time.Millisecond,
		WaitUntil: func() (time.Time, string) { return time.Now().Add(limit), "test limit" }}
}

// A job that finds its output being written by a live job with the same
// parameters waits for it, logging the holder (at the start and every
// LogEvery), and when the holder completes the output returns ErrCompleted
// without touching the output: the holder's files are in place, no lock
// or staging directory is left.
func TestWaitForSameParamsCompleted(t *testing.T) {
	dir := t.TempDir()
	final := filepath.Join(dir, "deconvolved", "cyc01")
	goFile := filepath.Join(dir, "go")
	cmd := startChild(t, final, "STAGING_TEST_PARAMS=p1", "STAGING_TEST_COMMIT_ON="+goFile)
	time.AfterFunc(400*time.Millisecond, func() { os.WriteFile(goFile, nil, 0o644) })
	var log bytes.Buffer
	t0 := time.Now()
	d, err := NewContext(WithOptions(context.Background(), waitOptions("p1", time.Minute, &log)), final)
	waited := time.Since(t0)
	if err := cmd.Wait(); err != nil {
		t.Errorf("holder: %v", err)
	}
	if d != nil {
		d.Abort()
	}
	var ce *CompletedError
	if !errors.Is(err, ErrCompleted) || !errors.As(err, &ce) || ce.Holder.PID != cmd.Process.Pid {
		t.Fatalf("after the holder completed: %v (%T), want a *CompletedError naming pid %d", err, err, cmd.Process.Pid)
	}
	if errors.Is(err, ErrLocked) {
		t.Error("ErrCompleted also matches ErrLocked")
	}
	if waited < 300*time.Millisecond {
		t.Errorf("returned after %s, before the holder completed", waited)
	}
	if b, _ := os.ReadFile(filepath.Join(final, "01.tif")); string(b) != "complete" {
		t.Errorf("the holder's output reads %q", b)
	}
	if got := strings.Join(names(t, filepath.Dir(final)), " "); got != "cyc01" {
		t.Errorf("left beside the output: %s", got)
	}
	for _, want := range []string{"waiting for the job writing this output with the same parameters", "still waiting", "SLURM job 4242", "released it"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, log.String())
		}
	}
}

// A holder that fails (releases its lock without output) has not completed
// the output, even where an earlier run's sentinel is still in place: the
// waiting job takes the output over.
func TestWaitForSameParamsHolderFails(t *testing.T) {
	dir := t.TempDir()
	final := filepath.Join(dir, "deconvolved", "cyc01")
	os.MkdirAll(final, 0o755)
	old := filepath.Join(final, SentinelName)
	if err := WriteSentinel(old, [][2]string{{"stage", "earlier run"}}); err != nil {
		t.Fatal(err)
	}
	hourAgo := time.Now().Add(-time.Hour)
	os.Chtimes(old, hourAgo, hourAgo)
	goFile := filepath.Join(dir, "go")
	cmd := startChild(t, final, "STAGING_TEST_PARAMS=p1", "STAGING_TEST_ABORT_ON="+goFile)
	time.AfterFunc(300*time.Millisecond, func() { os.WriteFile(goFile, nil, 0o644) })
	var log bytes.Buffer
	d, err := NewContext(WithOptions(context.Background(), waitOptions("p1", time.Minute, &log)), final)
	cmd.Wait()
	if err != nil {
		t.Fatalf("after the holder failed: %v, want the output taken over\n%s", err, log.String())
	}
	d.Abort()
	if !strings.Contains(log.String(), "released it") {
		t.Errorf("log lacks the release:\n%s", log.String())
	}
}

// A waiting job whose holder dies (SIGKILL) takes the output over and
// removes the holder's staging directory.
func TestWaitForSameParamsHolderDies(t *testing.T) {
	final := filepath.Join(t.TempDir(), "edf", "cyc02")
	cmd := startChild(t, final, "STAGING_TEST_PARAMS=p1")
	time.AfterFunc(300*time.Millisecond, func() { cmd.Process.Signal(syscall.SIGKILL) })
	var log bytes.Buffer
	d, err := NewContext(WithOptions(context.Background(), waitOptions("p1", time.Minute, &log)), final)
	cmd.Wait()
	if err != nil {
		t.Fatalf("after the holder died: %v\n%s", err, log.String())
	}
	defer d.Abort()
	for _, want := range []string{"waiting for the job", "is gone", "took over the lock", "removed a staging directory"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, log.String())
		}
	}
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
}

// A holder with other parameters is an error at once, naming both; so is
// one with the same parameters when there is no time to wait, and after
// the wait limit; cancelling the context ends a wait.
func TestWaitRefusals(t *testing.T) {
	final := filepath.Join(t.TempDir(), "stitched", "cyc03")
	cmd := startChild(t, final, "STAGING_TEST_PARAMS=aaaa1111")
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var log bytes.Buffer
	t0 := time.Now()
	_, err := NewContext(WithOptions(context.Background(), waitOptions("bbbb2222", time.Minute, &log)), final)
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "other parameters (holder aaaa1111, this job bbbb2222)") || time.Since(t0) > 5*time.Second {
		t.Errorf("other parameters: %v after %s, want ErrLocked at once naming both", err, time.Since(t0))
	}
	if strings.Contains(log.String(), "waiting") {
		t.Errorf("waited for a holder with other parameters:\n%s", log.String())
	}
	_, err = NewContext(WithOptions(context.Background(), waitOptions("aaaa1111", 0, &log)), final)
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "no time left to wait") {
		t.Errorf("no time to wait: %v", err)
	}
	t0 = time.Now()
	_, err = NewContext(WithOptions(context.Background(), waitOptions("aaaa1111", 300*time.Millisecond, &log)), final)
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "waited") || time.Since(t0) < 300*time.Millisecond {
		t.Errorf("after the wait limit: %v after %s", err, time.Since(t0))
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	_, err = NewContext(WithOptions(ctx, waitOptions("aaaa1111", time.Minute, &log)), final)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled wait: %v", err)
	}
	// Without parameters, or without a wait limit, nothing waits (New's behaviour).
	for _, o := range []Options{{Stage: "child job"}, {Stage: "child job", Params: "aaaa1111"}} {
		if _, err := NewWithOptions(final, o); !errors.Is(err, ErrLocked) {
			t.Errorf("%+v: %v, want ErrLocked", o, err)
		}
	}
}

// Issue 15's race: the lock holder's clean-up must not remove the lock
// temporary of a live job that is trying to take the lock at that moment
// (it then failed with "link ...tmp: no such file" instead of exit 4); a
// dead process's temporary is removed.
func TestCleanStaleKeepsLiveLockTemp(t *testing.T) {
	final := filepath.Join(t.TempDir(), "registered")
	parent := filepath.Dir(final)
	me := self(Options{Getenv: os.Getenv, Stage: "a live job"})
	live := lockPath(final) + ".77-1.tmp"
	os.WriteFile(live, me.encode(), 0o644)
	deadH := me
	deadH.PID, deadH.ProcStart = 1<<22+1, 1 // beyond pid_max's default: no such process
	dead := lockPath(final) + ".78-1.tmp"
	os.WriteFile(dead, deadH.encode(), 0o644)
	young := lockPath(final) + ".79-1.tmp" // being written: empty, just created
	os.WriteFile(young, nil, 0o644)
	var log bytes.Buffer
	if err := cleanStale(final, logTo(&log)); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(names(t, parent), " ")
	if want := ".registered.lock.77-1.tmp .registered.lock.79-1.tmp"; got != want {
		t.Errorf("after clean-up: %s, want %s\n%s", got, want, log.String())
	}
}
