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
	"syscall"
	"time"
)

// ErrLocked is returned (wrapped in a *LockedError) by New when another job
// holds the lock of the same output. The executables map it to exit code 4.
var ErrLocked = errors.New("output is locked by another job")

// Holder describes the job holding an output's lock, as written in the lock
// file (one key=value per line).
type Holder struct {
	JobID     string    // SLURM_JOB_ID ("" outside SLURM)
	Host      string    // os.Hostname
	PID       int       // process id on Host
	Started   time.Time // when the lock was taken
	Stage     string    // what runs, e.g. "stitch cycle 1"
	BootID    string    // /proc/sys/kernel/random/boot_id of Host ("" where unknown)
	ProcStart uint64    // start time of PID in clock ticks since boot (0 where unknown): tells a reused pid apart
}

func (h Holder) String() string {
	job := "no SLURM job"
	if h.JobID != "" {
		job = "SLURM job " + h.JobID
	}
	return fmt.Sprintf("%s on host %s (pid %d, %q, since %s)", job, h.Host, h.PID, h.Stage, h.Started.Format(time.RFC3339))
}

func (h Holder) encode() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "job=%s\nhost=%s\npid=%d\nstarted=%s\nstage=%s\nboot_id=%s\nproc_start=%d\n",
		h.JobID, h.Host, h.PID, h.Started.UTC().Format(time.RFC3339Nano), strings.ReplaceAll(h.Stage, "\n", " "), h.BootID, h.ProcStart)
	return b.Bytes()
}

func parseHolder(data []byte) (Holder, error) {
	var h Holder
	seen := 0
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			continue
		}
		var err error
		switch k {
		case "job":
			h.JobID = v
		case "host":
			h.Host = v
			seen++
		case "pid":
			h.PID, err = strconv.Atoi(v)
			seen++
		case "started":
			h.Started, err = time.Parse(time.RFC3339Nano, v)
		case "stage":
			h.Stage = v
		case "boot_id":
			h.BootID = v
		case "proc_start":
			h.ProcStart, err = strconv.ParseUint(v, 10, 64)
		}
		if err != nil {
			return h, fmt.Errorf("key %s: %w", k, err)
		}
	}
	if seen < 2 || h.PID <= 0 {
		return h, errors.New("no host or pid")
	}
	return h, nil
}

// LockedError says who holds the lock of an output.
type LockedError struct {
	Final  string // the output
	Lock   string // the lock file
	Holder Holder
	Reason string // why the holder counts as alive
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("%s is being written by %s (%s); lock file %s: wait for that job or cancel it, and delete the lock only if it is gone",
		e.Final, e.Holder, e.Reason, e.Lock)
}

func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// Options configure NewWithOptions.
type Options struct {
	// Stage names what writes the output, for the lock file and messages
	// (e.g. "stitch cycle 1"); default: the output's last two path elements.
	Stage string
	// Logger receives the take-over and clean-up messages (default slog.Default()).
	Logger *slog.Logger
	// Getenv reads SLURM_JOB_ID (default os.Getenv).
	Getenv func(string) string
	// JobState tells whether a SLURM job still runs; default: squeue, then
	// scontrol, when found in PATH. known is false when SLURM cannot say.
	JobState func(ctx context.Context, jobID string) (running, known bool, state string)
}

// lockPath is the lock file of final: <parent>/.<name>.lock.
func lockPath(final string) string {
	return filepath.Join(filepath.Dir(final), "."+filepath.Base(final)+".lock")
}

// acquire takes the lock of final, taking over one whose holder is gone.
func acquire(final string, o Options) (string, Holder, error) {
	lg := o.Logger
	path := lockPath(final)
	me := self(o)
	tmp := fmt.Sprintf("%s.%d-%d.tmp", path, me.PID, time.Now().UnixNano())
	if err := os.WriteFile(tmp, me.encode(), 0o644); err != nil {
		return "", me, fmt.Errorf("lock %s: %w", path, err)
	}
	defer os.Remove(tmp)
	for attempt := 0; ; attempt++ {
		// link is atomic and fails if the lock exists: the lock appears
		// with its whole content or not at all.
		err := os.Link(tmp, path)
		if err == nil {
			return path, me, nil
		}
		if !errors.Is(err, os.ErrExist) {
			return "", me, fmt.Errorf("lock %s: %w", path, err)
		}
		data, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) && attempt < 5 {
			continue // released meanwhile
		}
		if err != nil {
			return "", me, fmt.Errorf("lock %s: %w", path, err)
		}
		h, perr := parseHolder(data)
		if perr != nil {
			return "", me, &LockedError{Final: final, Lock: path, Holder: h, Reason: "unreadable lock file: " + perr.Error()}
		}
		alive, reason := holderAlive(h, o)
		if alive {
			return "", me, &LockedError{Final: final, Lock: path, Holder: h, Reason: reason}
		}
		if attempt >= 5 {
			return "", me, fmt.Errorf("lock %s: could not take over from %s after %d attempts", path, h, attempt)
		}
		// Take over: under an exclusive flock of the parent directory,
		// remove the lock only if it still holds the dead holder's content,
		// so two jobs taking over at once cannot both win.
		removed, err := removeIfSame(path, data)
		if err != nil {
			return "", me, err
		}
		if removed {
			lg.Warn("took over the lock of a job that is gone", "output", final, "lock", path, "holder", h.String(), "why", reason)
		}
	}
}

func removeIfSame(path string, data []byte) (bool, error) {
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return false, fmt.Errorf("lock %s: %w", path, err)
	}
	defer d.Close()
	if err := syscall.Flock(int(d.Fd()), syscall.LOCK_EX); err != nil {
		return false, fmt.Errorf("lock %s: flock of its directory: %w", path, err)
	}
	defer syscall.Flock(int(d.Fd()), syscall.LOCK_UN)
	now, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) || (err == nil && !bytes.Equal(now, data)) {
		return false, nil // someone else got there first
	}
	if err != nil {
		return false, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("lock %s: remove stale lock: %w", path, err)
	}
	return true, nil
}

// release removes the lock if it is still ours.
func release(path string, me Holder) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("release lock %s: %w", path, err)
	}
	if !bytes.Equal(data, me.encode()) {
		return fmt.Errorf("release lock %s: it was taken over by another job", path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("release lock %s: %w", path, err)
	}
	return nil
}

func self(o Options) Holder {
	host, _ := os.Hostname()
	h := Holder{
		JobID:   strings.TrimSpace(o.Getenv("SLURM_JOB_ID")),
		Host:    host,
		PID:     os.Getpid(),
		Started: time.Now(),
		Stage:   o.Stage,
		BootID:  bootID(),
	}
	h.ProcStart, _ = procStart(h.PID)
	return h
}

// holderAlive decides whether the holder of a lock still runs. On the same
// host the process decides (absent, a zombie, or a different process under
// a reused pid: gone); elsewhere SLURM does (job no longer running: gone).
// When neither can tell, the holder counts as alive.
func holderAlive(h Holder, o Options) (bool, string) {
	host, _ := os.Hostname()
	if h.Host == host {
		if b := bootID(); h.BootID != "" && b != "" && b != h.BootID {
			return false, "host rebooted since"
		}
		if !pidAlive(h.PID) {
			return false, fmt.Sprintf("pid %d is not running on this host", h.PID)
		}
		if h.ProcStart != 0 {
			if st, ok := procStart(h.PID); ok && st != h.ProcStart {
				return false, fmt.Sprintf("pid %d now belongs to another process", h.PID)
			}
		}
		return true, fmt.Sprintf("pid %d is running on this host", h.PID)
	}
	if h.JobID != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		running, known, state := o.JobState(ctx, h.JobID)
		if known && !running {
			return false, fmt.Sprintf("SLURM job %s is %s", h.JobID, state)
		}
		if known {
			return true, fmt.Sprintf("SLURM job %s is %s", h.JobID, state)
		}
		return true, fmt.Sprintf("SLURM cannot tell whether job %s runs (%s)", h.JobID, state)
	}
	return true, fmt.Sprintf("on another host without a SLURM job id: cannot check pid %d", h.PID)
}

// pidAlive reports whether pid exists and is not a zombie.
func pidAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		if i := bytes.LastIndexByte(st, ')'); i >= 0 && len(st) > i+2 && (st[i+2] == 'Z' || st[i+2] == 'X') {
			return false
		}
	}
	return true
}

// procStart reads field 22 of /proc/<pid>/stat (start time in clock ticks).
func procStart(pid int) (uint64, bool) {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(st, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(st[i+1:])) // f[0] is field 3 (state)
	if len(f) < 20 {
		return 0, false
	}
	v, err := strconv.ParseUint(f[19], 10, 64)
	return v, err == nil
}

func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// slurmJobState asks squeue, then scontrol, about a job.
func slurmJobState(ctx context.Context, id string) (running, known bool, state string) {
	if _, err := exec.LookPath("squeue"); err == nil {
		out, err := exec.CommandContext(ctx, "squeue", "-h", "-j", id, "-o", "%T").CombinedOutput()
		s := strings.TrimSpace(string(out))
		switch {
		case err == nil && s == "":
			return false, true, "no longer in the queue"
		case err == nil:
			st := strings.Fields(s)[0]
			return jobRunning(st), true, st
		case strings.Contains(s, "Invalid job id"):
			return false, true, "unknown to SLURM (finished)"
		}
	}
	if _, err := exec.LookPath("scontrol"); err == nil {
		out, err := exec.CommandContext(ctx, "scontrol", "show", "job", id).CombinedOutput()
		s := string(out)
		if i := strings.Index(s, "JobState="); err == nil && i >= 0 {
			st := strings.Fields(s[i+len("JobState="):])[0]
			return jobRunning(st), true, st
		}
		if strings.Contains(s, "Invalid job id") {
			return false, true, "unknown to SLURM (finished)"
		}
		return false, false, "scontrol: " + strings.TrimSpace(s)
	}
	return false, false, "squeue and scontrol not found"
}

// jobRunning: states in which the job's processes may still write.
func jobRunning(state string) bool {
	switch strings.TrimSuffix(state, "+") {
	case "PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "RESIZING", "STOPPED", "SIGNALING", "STAGE_OUT", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED":
		return true
	}
	return false
}

// cleanStale removes what a killed job left beside final: staging
// directories ".<name>.partial-*" (and their ".old" siblings) and the
// temporary files of a lock being taken (".<name>.lock.*.tmp"). Called
// under the lock.
func cleanStale(final string, lg *slog.Logger) error {
	parent, name := filepath.Dir(final), "."+filepath.Base(final)
	ents, err := os.ReadDir(parent)
	if err != nil {
		return fmt.Errorf("output directory %s: %w", parent, err)
	}
	for _, e := range ents {
		n := e.Name()
		if !strings.HasPrefix(n, name+".partial-") && !(strings.HasPrefix(n, name+".lock.") && strings.HasSuffix(n, ".tmp")) {
			continue
		}
		p := filepath.Join(parent, e.Name())
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("remove stale staging directory %s: %w", p, err)
		}
		lg.Warn("removed a staging directory a killed job left", "path", p)
	}
	return nil
}
