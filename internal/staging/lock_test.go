package staging

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestMain lets the tests re-execute the test binary as a second job.
func TestMain(m *testing.M) {
	if final := os.Getenv("STAGING_TEST_CHILD"); final != "" {
		child(final)
		return
	}
	os.Exit(m.Run())
}

// child takes the lock of final, writes a partial file, says "ready" and
// waits to be killed.
// With STAGING_TEST_PARAMS it records those parameters; with
// STAGING_TEST_COMMIT_ON=<file> it completes the output (sentinel, commit,
// exit 0) once that file exists.
func child(final string) {
	d, err := NewWithOptions(final, Options{Stage: "child job", Params: os.Getenv("STAGING_TEST_PARAMS")})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	os.WriteFile(filepath.Join(d.Path, "01.tif"), []byte("partial"), 0o644)
	fmt.Println("ready")
	if on := os.Getenv("STAGING_TEST_ABORT_ON"); on != "" {
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if _, err := os.Stat(on); err == nil {
				d.Abort()
				os.Exit(1)
			}
		}
	}
	if on := os.Getenv("STAGING_TEST_COMMIT_ON"); on != "" {
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if _, err := os.Stat(on); err == nil {
				os.WriteFile(filepath.Join(d.Path, "01.tif"), []byte("complete"), 0o644)
				if err := WriteSentinel(filepath.Join(d.Path, SentinelName), [][2]string{{"stage", "child"}}); err != nil {
					fmt.Println("error:", err)
					os.Exit(1)
				}
				if err := d.Commit(); err != nil {
					fmt.Println("error:", err)
					os.Exit(1)
				}
				os.Exit(0)
			}
		}
	}
	time.Sleep(time.Minute)
	os.Exit(2)
}

// startChild runs the test binary as a job holding final's lock.
func startChild(t *testing.T, final string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), "STAGING_TEST_CHILD="+final, "SLURM_JOB_ID=4242"), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child: %q", line)
	}
	return cmd
}

// names lists a directory.
func names(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func logTo(buf *bytes.Buffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(buf, nil))
}

// TestConcurrentNew: of several jobs starting on one output at once, exactly
// one gets it; the others get ErrLocked naming the holder; after the holder
// commits, nothing but the output is left and the next job gets the lock.
func TestConcurrentNew(t *testing.T) {
	final := filepath.Join(t.TempDir(), "stitched", "cyc01")
	const n = 8
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		won    []*Dir
		locked []error
	)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			d, err := NewWithOptions(final, Options{Stage: fmt.Sprintf("stitch cycle 1 #%d", i)})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won = append(won, d)
			case errors.Is(err, ErrLocked):
				locked = append(locked, err)
			default:
				t.Errorf("job %d: %v", i, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(won) != 1 || len(locked) != n-1 {
		t.Fatalf("%d jobs got the output, %d were refused; want 1 and %d", len(won), len(locked), n-1)
	}
	host, _ := os.Hostname()
	var le *LockedError
	if !errors.As(locked[0], &le) {
		t.Fatalf("%T is not a *LockedError", locked[0])
	}
	msg := locked[0].Error()
	for _, want := range []string{final, "host " + host, fmt.Sprintf("pid %d", os.Getpid()), "stitch cycle 1 #", ".cyc01.lock"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q: %s", want, msg)
		}
	}
	d := won[0]
	if err := os.WriteFile(filepath.Join(d.Path, "x"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	d.Abort()
	if got := names(t, filepath.Dir(final)); len(got) != 1 || got[0] != "cyc01" {
		t.Errorf("after commit the parent holds %v, want [cyc01]", got)
	}
	d2, err := New(final)
	if err != nil {
		t.Fatalf("after the holder committed: %v", err)
	}
	d2.Abort()
	if got := names(t, filepath.Dir(final)); len(got) != 1 {
		t.Errorf("after abort the parent holds %v", got)
	}
}

// deadPID returns the pid of a process that has exited and been reaped.
func deadPID(t *testing.T) int {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

func writeLock(t *testing.T, final string, h Holder) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lockPath(final), h.encode(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestStaleLocks: locks whose holder is gone are taken over (logged); live
// ones are not.
func TestStaleLocks(t *testing.T) {
	host, _ := os.Hostname()
	me, _ := procStart(os.Getpid())
	running := func(context.Context, string) (bool, bool, string) { return true, true, "RUNNING" }
	gone := func(context.Context, string) (bool, bool, string) { return false, true, "CANCELLED" }
	unknown := func(context.Context, string) (bool, bool, string) { return false, false, "slurmctld down" }
	cases := []struct {
		name  string
		h     Holder
		state func(context.Context, string) (bool, bool, string)
		stale bool
		why   string
	}{
		{"dead pid on this host", Holder{Host: host, PID: deadPID(t), BootID: bootID()}, running, true, "is not running on this host"},
		{"reused pid", Holder{Host: host, PID: os.Getpid(), BootID: bootID(), ProcStart: me + 1}, running, true, "another process"},
		{"rebooted host", Holder{Host: host, PID: os.Getpid(), BootID: "another-boot"}, running, true, "rebooted"},
		{"live pid on this host", Holder{Host: host, PID: os.Getpid(), BootID: bootID(), ProcStart: me}, gone, false, "is running on this host"},
		{"other host, job running", Holder{JobID: "77", Host: "node9", PID: 1}, running, false, "SLURM job 77 is RUNNING"},
		{"other host, job cancelled", Holder{JobID: "77", Host: "node9", PID: 1}, gone, true, "SLURM job 77 is CANCELLED"},
		{"other host, SLURM unsure", Holder{JobID: "77", Host: "node9", PID: 1}, unknown, false, "cannot tell"},
		{"other host, no job", Holder{Host: "node9", PID: 1}, gone, false, "without a SLURM job id"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			final := filepath.Join(t.TempDir(), "cyc02")
			tc.h.Started, tc.h.Stage = time.Now().Add(-time.Hour), "stitch cycle 2"
			writeLock(t, final, tc.h)
			var log bytes.Buffer
			d, err := NewWithOptions(final, Options{Logger: logTo(&log), JobState: tc.state})
			if !tc.stale {
				if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), tc.why) {
					t.Fatalf("err = %v, want ErrLocked because %q", err, tc.why)
				}
				if got, _ := os.ReadFile(lockPath(final)); !bytes.Equal(got, tc.h.encode()) {
					t.Errorf("a live holder's lock was changed: %q", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("stale lock not taken over: %v", err)
			}
			defer d.Abort()
			if !strings.Contains(log.String(), "took over the lock") || !strings.Contains(log.String(), tc.why) {
				t.Errorf("take-over not logged with its reason %q: %s", tc.why, log.String())
			}
			got, _ := os.ReadFile(lockPath(final))
			h, err := parseHolder(got)
			if err != nil || h.PID != os.Getpid() {
				t.Errorf("lock now %q (%v), want this process", got, err)
			}
		})
	}
	// An unreadable lock is not taken over: it is reported.
	final := filepath.Join(t.TempDir(), "cyc03")
	os.WriteFile(lockPath(final), []byte("garbage"), 0o644)
	if _, err := New(final); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "unreadable") {
		t.Errorf("unreadable lock: %v", err)
	}
}

// TestKilledJob: a job killed with SIGKILL leaves its lock and staging
// directory; while it runs a second job is refused naming it; the next job
// after its death takes the lock over, removes the staging directory (and an
// old one of a replaced output), and leaves nothing but the output.
func TestKilledJob(t *testing.T) {
	final := filepath.Join(t.TempDir(), "stitched", "cyc01")
	cmd := startChild(t, final)
	_, err := New(final)
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", cmd.Process.Pid)) ||
		!strings.Contains(err.Error(), "SLURM job 4242") || !strings.Contains(err.Error(), "child job") {
		t.Errorf("while the first job runs: %v, want ErrLocked naming SLURM job 4242, pid %d", err, cmd.Process.Pid)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	parent := filepath.Dir(final)
	left := names(t, parent)
	if len(left) != 2 || !strings.HasPrefix(left[0], ".cyc01.lock") && !strings.HasPrefix(left[1], ".cyc01.lock") {
		t.Fatalf("the killed job left %v, want its lock and staging directory", left)
	}
	os.MkdirAll(filepath.Join(parent, ".cyc01.partial-123.old", "CH1"), 0o755) // killed inside Commit
	dead, err := os.ReadFile(lockPath(final))                                  // the killed job's holder record
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(parent, ".cyc01.lock.99-1.tmp"), dead, 0o644) // killed while locking
	os.WriteFile(filepath.Join(parent, ".cyc01.lock.98-1.tmp"), nil, 0o644)  // killed while writing it, 2 min ago
	old := time.Now().Add(-2 * time.Minute)
	os.Chtimes(filepath.Join(parent, ".cyc01.lock.98-1.tmp"), old, old)
	os.MkdirAll(filepath.Join(parent, ".cyc02.partial-9"), 0o755) // another cycle's: kept
	var log bytes.Buffer
	d, err := NewWithOptions(final, Options{Logger: logTo(&log)})
	if err != nil {
		t.Fatalf("after the kill: %v", err)
	}
	if n := strings.Count(log.String(), "removed a staging directory"); n != 2 {
		t.Errorf("%d staging directory removals logged, want 2:\n%s", n, log.String())
	}
	if n := strings.Count(log.String(), "removed the lock file a killed job left"); n != 2 {
		t.Errorf("%d lock temporary removals logged, want 2:\n%s", n, log.String())
	}
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	got := names(t, parent)
	if strings.Join(got, " ") != ".cyc02.partial-9 cyc01" {
		t.Errorf("after the rerun the parent holds %v, want [.cyc02.partial-9 cyc01]", got)
	}
}

// TestSlurmJobState runs the squeue query against a fake squeue.
func TestSlurmJobState(t *testing.T) {
	bin := t.TempDir()
	script := `#!/bin/sh
case "$3" in
  1) echo RUNNING;;
  2) echo COMPLETING;;
  3) ;;
  4) echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1;;
  5) echo CANCELLED;;
esac
`
	if err := os.WriteFile(filepath.Join(bin, "squeue"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	for id, want := range map[int]bool{1: true, 2: true, 3: false, 4: false, 5: false} {
		running, known, state := slurmJobState(context.Background(), strconv.Itoa(id))
		if !known || running != want {
			t.Errorf("job %d: running %v known %v (%s), want running %v", id, running, known, state, want)
		}
	}
	t.Setenv("PATH", t.TempDir())
	if _, known, _ := slurmJobState(context.Background(), "1"); known {
		t.Error("without squeue or scontrol the state is known")
	}
}
