// Package exitcode maps errors to the process exit codes every executable
// of the project shares (and that the tests which run a stage in a child
// process read back): 0 success, 1 processing failure, 2 bad input or
// usage, 3 interrupted, 4 output locked by another job. It holds no flag or
// command-line code; package cliutil, where the executables' CLI code
// lives, re-exports it.
package exitcode

import (
	"context"
	"errors"
	"fmt"

	"github.com/kintsugi-hpc/kintsugi-go/internal/membudget"
	"github.com/kintsugi-hpc/kintsugi-go/internal/staging"
)

// The exit codes; Help lists them for help texts.
const (
	OK      = 0 // success
	Failure = 1 // processing failed (I/O, numerical, GPU error)
	Usage   = 2 // bad flags, bad config or bad input data
	Signal  = 3 // interrupted by SIGINT/SIGTERM (SLURM time limit)
	Locked  = 4 // another job holds the output's lock (staging.ErrLocked)
)

// Help is appended to every command's description.
const Help = `EXIT CODES:
   0  success
   1  processing failed (I/O, numerical or GPU error)
   2  bad flags, bad configuration or bad input data (the message names the key or file)
   3  interrupted by SIGINT/SIGTERM (e.g. SLURM time limit); no partial output is left
   4  another job is writing the same output (its lock file names the SLURM job, host and pid) with other
      parameters, or with the same ones beyond this job's wait (SLURM: its end time; KINTSUGI_LOCK_WAIT); nothing was done
      (a job that waited for a run with the same parameters which completed the output exits 0)`

// UsageError marks an error caused by the user's input (flags, config, data);
// it maps to Usage.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef returns a UsageError with a formatted message.
func Usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// AsUsage wraps err as a UsageError (nil stays nil).
func AsUsage(err error) error {
	if err == nil {
		return nil
	}
	return &UsageError{Err: err}
}

// Of maps an error to the process exit code.
func Of(err error) int {
	var ue *UsageError
	switch {
	case err == nil:
		return OK
	case errors.Is(err, staging.ErrCompleted):
		// Another job with the same parameters completed the output
		// while this one waited for it: nothing is left to do.
		return OK
	case errors.Is(err, context.Canceled):
		return Signal
	case errors.Is(err, staging.ErrLocked):
		return Locked
	case errors.As(err, &ue):
		return Usage
	case errors.Is(err, membudget.ErrTooSmall), errors.As(err, new(*membudget.UsageError)):
		// A budget below a stage's smallest working set, or a malformed
		// budget: the fix is in the job's resources, as for bad input.
		return Usage
	default:
		return Failure
	}
}
