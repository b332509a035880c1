// Package staging writes a stage's output directory all at once: files go
// into a hidden directory beside the final one (".<name>.partial-<random>"),
// which is renamed into place only when the whole output is complete, so a
// failure or a kill never leaves partial output under the final name.
//
// New also takes a lock beside the output (".<name>.lock", naming the SLURM
// job, host, pid, start time and stage), released by Commit and Abort: a
// second job for the same output fails with ErrLocked (exit code 4) naming
// the holder, and a lock whose holder is gone (process absent on its host,
// or SLURM job no longer running) is taken over, logged. Under the lock,
// staging directories a killed job left for the same output are removed.
// The lock relies on link(2) and, for take-overs, flock(2) of the parent
// directory: both atomic on local file systems and on NFSv3+ (link).
//
// The staging directory, and so the final one, gets the mode mkdir gives
// under the process's umask (0755 under umask 022, 0775 under 002). A final
// path that holds anything but a directory (a regular file, a symlink, a
// device) is refused (ErrNotReplaceable), never replaced.
//
// Every stage (stitch, decon, edf, registration) uses it for its per-cycle
// (or per-project) directory, and writes its Snakemake sentinel with
// WriteSentinel.
package staging

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kintsugi-hpc/kintsugi-go/internal/atomicfile"
	"github.com/kintsugi-hpc/kintsugi-go/internal/safefile"
)

// Dir is a staging directory for the final directory Final.
type Dir struct {
	Path  string // where to write now
	Final string // where the output appears on Commit
	Lock  string // the lock file held until Commit or Abort
	done  bool
	me    Holder
	lg    *slog.Logger
}

// New locks final and creates a staging directory beside it (its parent is
// created), with default Options.
func New(final string) (*Dir, error) {
	return NewWithOptions(final, Options{})
}

// NewWithOptions is New with a stage label, logger and SLURM query of one's
// own. The error wraps ErrLocked (as a *LockedError) when a running job holds
// the output.
func NewWithOptions(final string, o Options) (*Dir, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.JobState == nil {
		o.JobState = slurmJobState
	}
	if o.Stage == "" {
		o.Stage = filepath.Join(filepath.Base(filepath.Dir(final)), filepath.Base(final))
	}
	parent := filepath.Dir(final)
	if err := os.MkdirAll(parent, 0o777); err != nil {
		return nil, fmt.Errorf("output directory %s: %w", parent, err)
	}
	if err := replaceable(final); err != nil {
		return nil, err
	}
	lock, me, err := acquire(final, o)
	if err != nil {
		return nil, err
	}
	d := &Dir{Final: final, Lock: lock, me: me, lg: o.Logger}
	if err := cleanStale(final, o.Logger); err != nil {
		d.unlock()
		return nil, err
	}
	dir, err := mkdirStaging(parent, "."+filepath.Base(final)+".partial-")
	if err != nil {
		d.unlock()
		return nil, fmt.Errorf("output directory %s: %w", parent, err)
	}
	d.Path = dir
	return d, nil
}

// ErrNotReplaceable is wrapped by the error for a final path that holds
// something other than a directory (a regular file, a symlink, a device):
// staging never replaces it.
var ErrNotReplaceable = errors.New("not a directory this stage writes")

// replaceable refuses a final path that exists and is not a real directory
// (symlinks are not followed: a link is not replaced either). A directory is
// an earlier output of the stage (or the empty one Snakemake makes before a
// job) and is replaced on Commit.
func replaceable(final string) error {
	st, err := os.Lstat(final)
	if err != nil || st.IsDir() {
		return nil // absent (or unreadable: the rename reports it)
	}
	return fmt.Errorf("output %s is %s, %w: refusing to replace it (move it away)", final, safefile.Describe(st.Mode()), ErrNotReplaceable)
}

// mkdirStaging creates a new directory prefix<random> in parent with the
// mode mkdir gives under the process's umask (os.MkdirTemp's 0700 would
// survive the rename into place and hide the results from the group).
func mkdirStaging(parent, prefix string) (string, error) {
	var err error
	for range 100 {
		dir := filepath.Join(parent, prefix+strconv.FormatUint(rand.Uint64()>>16, 10))
		if err = os.Mkdir(dir, 0o777); err == nil {
			return dir, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", err
		}
	}
	return "", err
}

// unlock releases the lock, logging a failure (the output is already in
// place or already removed; a left lock is taken over by the next job).
func (s *Dir) unlock() {
	if s.Lock == "" {
		return
	}
	if err := release(s.Lock, s.me); err != nil {
		s.lg.Warn("could not release the output lock", "err", err.Error())
	}
	s.Lock = ""
}

// Commit moves the staging directory into place, replacing an earlier
// output (Snakemake creates the empty final directory before a job).
func (s *Dir) Commit() error {
	if err := replaceable(s.Final); err != nil {
		return err
	}
	old := ""
	if _, err := os.Lstat(s.Final); err == nil {
		old = s.Path + ".old"
		if err := os.Rename(s.Final, old); err != nil {
			return fmt.Errorf("replace %s: %w", s.Final, err)
		}
	}
	if err := os.Rename(s.Path, s.Final); err != nil {
		if old != "" {
			if rerr := os.Rename(old, s.Final); rerr != nil {
				err = fmt.Errorf("%w (and restoring the earlier output from %s: %w)", err, old, rerr)
			}
		}
		return fmt.Errorf("move %s into place: %w", s.Final, err)
	}
	s.done = true
	if old != "" {
		if err := os.RemoveAll(old); err != nil {
			s.lg.Warn("could not remove the replaced output (the next run of this output removes it)", "path", old, "err", err.Error())
		}
	}
	d, err := os.Open(filepath.Dir(s.Final))
	if err == nil {
		err = d.Sync()
		if cerr := d.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil { // the output is in place; some file systems cannot sync a directory
		s.lg.Warn("could not sync the output's directory", "path", filepath.Dir(s.Final), "err", err.Error())
	}
	s.unlock()
	return nil
}

// Abort removes the staging directory unless it was committed, and releases
// the lock. Call it (deferred) after every background write into it has
// finished.
func (s *Dir) Abort() {
	if !s.done && s.Path != "" {
		if err := os.RemoveAll(s.Path); err != nil {
			s.lg.Warn("could not remove the staging directory (the next run of this output removes it)", "path", s.Path, "err", err.Error())
		}
	}
	s.unlock()
}

// WriteSentinel writes the original's key=value sentinel (one pair per
// line, in the order given) atomically.
func WriteSentinel(path string, kv [][2]string) error {
	var b strings.Builder
	for _, p := range kv {
		b.WriteString(p[0] + "=" + p[1] + "\n")
	}
	return atomicfile.WriteBytes(path, []byte(b.String()), 0o666) // under the umask
}
