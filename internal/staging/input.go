package staging

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
)

// SentinelName is the file a stage writes last into its output directory
// (the original's Snakemake marker, key=value lines, see WriteSentinel):
// its presence means the stage completed that output (layout.SentinelName).
const SentinelName = layout.SentinelName

// ErrInput marks errors caused by a stage's input data or configuration: a
// preceding stage that has not completed, a file missing, unreadable or of
// the wrong shape, a bad config key. The message names the file or key; the
// executables map it to exit code 2. Every stage package's ErrInput is this
// one error.
var ErrInput = errors.New("bad input")

// Inputf returns an error wrapping ErrInput with the formatted message
// (format may use %w).
func Inputf(format string, args ...any) error {
	return fmt.Errorf("%w: %w", ErrInput, fmt.Errorf(format, args...))
}

// RequireSentinel returns nil when dir holds the sentinel of a completed
// stage, else an error wrapping ErrInput that names the sentinel, the cycle
// and the stage to run first (and the file system's error when the sentinel
// exists but cannot be read).
func RequireSentinel(dir string, cycle int, stage string) error {
	sent := layout.Sentinel(dir)
	_, err := os.Stat(sent)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return Inputf("cycle %d: %s missing: the %s stage has not completed (run it first)", cycle, sent, stage)
	default:
		return Inputf("cycle %d: %s: the %s stage's sentinel: %w", cycle, sent, stage, err)
	}
}
