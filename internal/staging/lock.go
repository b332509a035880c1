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

	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
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
	// Params is the fingerprint of what the holder computes (Options.Params;
	// "" where the holder did not say): a job with the same fingerprint
	// waits for the holder instead of failing (see Options.WaitUntil).
	Params string
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
	fmt.Fprintf(&b, "job=%s\nhost=%s\npid=%d\nstarted=%s\nstage=%s\nboot_id=%s\nproc_start=%d\nparams=%s\n",
		h.JobID, h.Host, h.PID, h.Started.UTC().Format(time.RFC3339Nano), strings.ReplaceAll(h.Stage, "\n", " "), h.BootID, h.ProcStart,
		strings.ReplaceAll(h.Params, "\n", " "))
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
		case "params":
			h.Params = v
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
	Params string // this job's parameters (Options.Params), "" if it gave none
}

func (e *LockedError) Error() string {
	why := e.Reason
	switch {
	case e.Params != "" && e.Holder.Params != e.Params:
		holder := short(e.Holder.Params)
		if holder == "" {
			holder = "not recorded"
		}
		why += fmt.Sprintf("; it computes with other parameters (holder %s, this job %s)", holder, short(e.Params))
	case e.Params != "":
		why += "; same parameters"
	}
	return fmt.Sprintf("%s is being written by %s (%s); lock file %s: wait for that job or cancel it, and delete the lock only if it is gone",
		e.Final, e.Holder, why, e.Lock)
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

	// Params is the fingerprint of what this job computes (the executables:
	// a hash of the config keys that shape the output, the stage, the cycle,
	// the device and the executable itself), recorded in the lock file. A
	// live holder of the same output with the same Params and Stage is
	// waited for (WaitUntil); one with other Params, or any holder when
	// Params is "", is an error (ErrLocked).
	Params string
	// WaitUntil says until when this job may wait for a live holder with
	// the same Params, and where that limit comes from (e.g. the SLURM
	// job's end time); a zero time means not at all. It is called only when
	// such a holder is found; nil means no waiting.
	WaitUntil func() (until time.Time, source string)
	// Sentinel is the file whose presence means a holder completed the
	// output (key=value lines, written after the holder started); default
	// <final>/.snakemake_complete.
	Sentinel string
	// Poll is how often a waiting job looks at its holder (default 2 s;
	// SLURM is asked at most every 15 s); LogEvery how often it logs the
	// holder (default 1 min).
	Poll, LogEvery time.Duration

	ctx context.Context // NewContext's: cancels a wait
}

type optionsKey struct{}

// WithOptions returns ctx carrying o for NewContext: an executable sets its
// Params and WaitUntil once, and every output its stage writes uses them.
func WithOptions(ctx context.Context, o Options) context.Context {
	return context.WithValue(ctx, optionsKey{}, o)
}

// NewContext is NewWithOptions with the Options ctx carries (WithOptions;
// none: the defaults, as New). Cancelling ctx ends a wait for a holder
// with an error wrapping context.Canceled. Besides the errors of
// NewWithOptions it returns a *CompletedError (ErrCompleted) when it waited
// for a holder with the same parameters that completed the output: the
// caller has nothing left to do.
func NewContext(ctx context.Context, final string) (*Dir, error) {
	o, _ := ctx.Value(optionsKey{}).(Options)
	o.ctx = ctx
	return NewWithOptions(final, o)
}

// ErrCompleted is returned (wrapped in a *CompletedError) by NewContext
// when the holder it waited for, computing the same (same Params),
// completed the output. The executables map it to exit code 0.
var ErrCompleted = errors.New("output completed by another job with the same parameters")

// CompletedError says which holder completed the output a job waited for.
type CompletedError struct {
	Final, Sentinel string
	Holder          Holder
	Waited          time.Duration
}

func (e *CompletedError) Error() string {
	return fmt.Sprintf("%s was completed by %s, which computes the same (parameters %s; sentinel %s) after a wait of %s: nothing left to do",
		e.Final, e.Holder, short(e.Holder.Params), e.Sentinel, e.Waited.Round(time.Second))
}

func (e *CompletedError) Is(target error) bool { return target == ErrCompleted }

func short(p string) string {
	if len(p) > 12 {
		return p[:12]
	}
	return p
}

// lockPath is the lock file of final: <parent>/.<name>.lock.
func lockPath(final string) string {
	return filepath.Join(filepath.Dir(final), "."+filepath.Base(final)+".lock")
}

// acquire takes the lock of final, taking over one whose holder is gone
// and waiting for a live holder with the same parameters (Options.Params,
// WaitUntil).
func acquire(final string, o Options) (string, Holder, error) {
	lg := o.Logger
	path := lockPath(final)
	me := self(o)
	tmp := fmt.Sprintf("%s.%d-%d.tmp", path, me.PID, time.Now().UnixNano())
	if err := os.WriteFile(tmp, me.encode(), 0o644); err != nil {
		return "", me, fmt.Errorf("lock %s: %w", path, err)
	}
	defer os.Remove(tmp)
	sentinel := o.Sentinel
	if sentinel == "" {
		sentinel = layout.Sentinel(final)
	}
	var waitStart, until time.Time
	untilSrc := ""
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
			return "", me, &LockedError{Final: final, Lock: path, Holder: h, Reason: "unreadable lock file: " + perr.Error(), Params: o.Params}
		}
		same := o.Params != "" && h.Params == o.Params && h.Stage == me.Stage
		alive, reason := holderAlive(h, o)
		if alive && same && o.WaitUntil != nil {
			if waitStart.IsZero() {
				waitStart = time.Now()
				until, untilSrc = o.WaitUntil()
			}
			if !time.Now().Before(until) {
				if untilSrc != "" {
					reason += "; no time left to wait for it (" + untilSrc + ")"
				}
				return "", me, &LockedError{Final: final, Lock: path, Holder: h, Reason: reason, Params: o.Params}
			}
			released, err := waitHolder(path, data, h, waitStart, until, untilSrc, o)
			if err != nil {
				if errors.Is(err, ErrLocked) {
					return "", me, &LockedError{Final: final, Lock: path, Holder: h, Params: o.Params,
						Reason: fmt.Sprintf("%s; waited %s for it, until %s (%s)", reason, time.Since(waitStart).Round(time.Second), until.Format(time.RFC3339), untilSrc)}
				}
				return "", me, fmt.Errorf("lock %s: waiting for %s: %w", path, h, err)
			}
			if released && completedBy(sentinel, h, o) {
				return "", me, &CompletedError{Final: final, Sentinel: sentinel, Holder: h, Waited: time.Since(waitStart)}
			}
			attempt = -1 // a new holder, or a take-over from a dead one
			continue
		}
		if alive {
			return "", me, &LockedError{Final: final, Lock: path, Holder: h, Reason: reason, Params: o.Params}
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
		// A dead holder computing the same may have completed the output
		// before its lock was released (killed between commit and release).
		if same && !waitStart.IsZero() && completedBy(sentinel, h, Options{}) {
			return "", me, &CompletedError{Final: final, Sentinel: sentinel, Holder: h, Waited: time.Since(waitStart)}
		}
	}
}

// waitHolder waits while the lock at path still holds data (holder h) and
// h is alive. released is true when the lock was removed (the holder
// finished or failed), false when it changed hands or h died. It returns
// an error wrapping ErrLocked at until, and one wrapping ctx's error when
// the job is cancelled. The holder is logged at the start and every
// o.LogEvery.
func waitHolder(path string, data []byte, h Holder, start, until time.Time, src string, o Options) (released bool, err error) {
	ctx := o.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	poll, every := o.Poll, o.LogEvery
	if poll <= 0 {
		poll = 2 * time.Second
	}
	if every <= 0 {
		every = time.Minute
	}
	host, _ := os.Hostname()
	o.Logger.Info("waiting for the job writing this output with the same parameters", "lock", path, "holder", h.String(),
		"params", short(h.Params), "until", until.Format(time.RFC3339), "limit", src)
	lastLog, lastAsk := time.Now(), time.Now()
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-t.C:
		}
		now, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			o.Logger.Info("the job writing this output released it", "holder", h.String(), "waited", time.Since(start).Round(time.Second).String())
			return true, nil
		}
		if err != nil {
			return false, err
		}
		if !bytes.Equal(now, data) {
			return false, nil
		}
		if h.Host == host || time.Since(lastAsk) >= 15*time.Second {
			lastAsk = time.Now()
			if alive, reason := holderAlive(h, o); !alive {
				o.Logger.Warn("the job writing this output is gone", "holder", h.String(), "why", reason)
				return false, nil
			}
		}
		if !time.Now().Before(until) {
			return false, ErrLocked
		}
		if time.Since(lastLog) >= every {
			lastLog = time.Now()
			o.Logger.Info("still waiting for the job writing this output", "holder", h.String(), "waited", time.Since(start).Round(time.Second).String(),
				"until", until.Format(time.RFC3339))
		}
	}
}

// completedBy reports whether sentinel is a completed output's sentinel
// written by h: a regular file of key=value lines, modified after h
// started (2 s of slack for file systems with coarse time stamps). A
// holder's sentinel written just after it released the lock (QC writes it
// beside its directory) is waited for up to three polls.
func completedBy(sentinel string, h Holder, o Options) bool {
	poll := o.Poll
	if poll <= 0 {
		poll = 2 * time.Second
	}
	for try := 0; ; try++ {
		if validSentinel(sentinel, h.Started) {
			return true
		}
		if try >= 3 || o.Logger == nil {
			return false
		}
		time.Sleep(poll)
	}
}

func validSentinel(path string, after time.Time) bool {
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() == 0 || fi.Size() > 1<<16 || fi.ModTime().Before(after.Add(-2*time.Second)) {
		return false
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if k, _, ok := strings.Cut(line, "="); !ok || k == "" {
			return false
		}
	}
	return true
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
		Params:  o.Params,
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
// temporary files of a lock being taken (".<name>.lock.<pid>-<ns>.tmp")
// whose process is gone. Called under the lock. A lock temporary of a live
// process is kept: it belongs to a job trying to take the lock right now
// (removing it made that job fail with "no such file" instead of exit 4).
func cleanStale(final string, lg *slog.Logger) error {
	parent, name := filepath.Dir(final), "."+filepath.Base(final)
	ents, err := os.ReadDir(parent)
	if err != nil {
		return fmt.Errorf("output directory %s: %w", parent, err)
	}
	for _, e := range ents {
		n := e.Name()
		p := filepath.Join(parent, n)
		switch {
		case strings.HasPrefix(n, name+".partial-"):
		case strings.HasPrefix(n, name+".lock.") && strings.HasSuffix(n, ".tmp"):
			if gone, why := lockTempGone(p); !gone {
				continue
			} else if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("remove stale lock file %s: %w", p, err)
			} else {
				lg.Warn("removed the lock file a killed job left", "path", p, "why", why)
			}
			continue
		default:
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("remove stale staging directory %s: %w", p, err)
		}
		lg.Warn("removed a staging directory a killed job left", "path", p)
	}
	return nil
}

// lockTempGone decides whether the lock temporary at path belongs to a
// process that is gone, from the holder it names (its content, as the
// lock's). A file that cannot be read or parsed counts as gone only when
// older than a minute: a live job writes it just before linking it.
func lockTempGone(path string) (bool, string) {
	data, err := os.ReadFile(path)
	if err == nil {
		if h, perr := parseHolder(data); perr == nil {
			alive, reason := holderAlive(h, Options{JobState: slurmJobState})
			return !alive, reason
		}
	}
	fi, serr := os.Stat(path)
	if serr != nil {
		return false, "" // removed meanwhile
	}
	if age := time.Since(fi.ModTime()); age > time.Minute {
		return true, fmt.Sprintf("unreadable and %s old", age.Round(time.Second))
	}
	return false, ""
}
