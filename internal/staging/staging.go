// Package staging writes a stage's output directory all at once: files go
// into a hidden directory beside the final one (".<name>.partial-<random>"),
// which is renamed into place only when the whole output is complete, so a
// failure or a kill never leaves partial output under the final name.
// Every stage (stitch, decon, edf, registration) uses it for its per-cycle
// (or per-project) directory, and writes its Snakemake sentinel with
// WriteSentinel.
package staging

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kintsugi-hpc/kintsugi-go/internal/atomicfile"
)

// Dir is a staging directory for the final directory Final.
type Dir struct {
	Path  string // where to write now
	Final string // where the output appears on Commit
	done  bool
}

// New creates a staging directory beside final (its parent is created).
func New(final string) (*Dir, error) {
	parent := filepath.Dir(final)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, fmt.Errorf("output directory %s: %w", parent, err)
	}
	dir, err := os.MkdirTemp(parent, "."+filepath.Base(final)+".partial-")
	if err != nil {
		return nil, fmt.Errorf("output directory %s: %w", parent, err)
	}
	return &Dir{Path: dir, Final: final}, nil
}

// Commit moves the staging directory into place, replacing an earlier
// output (Snakemake creates the empty final directory before a job).
func (s *Dir) Commit() error {
	old := ""
	if _, err := os.Stat(s.Final); err == nil {
		old = s.Path + ".old"
		if err := os.Rename(s.Final, old); err != nil {
			return fmt.Errorf("replace %s: %w", s.Final, err)
		}
	}
	if err := os.Rename(s.Path, s.Final); err != nil {
		if old != "" {
			os.Rename(old, s.Final)
		}
		return fmt.Errorf("move %s into place: %w", s.Final, err)
	}
	s.done = true
	if old != "" {
		os.RemoveAll(old)
	}
	if d, err := os.Open(filepath.Dir(s.Final)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// Abort removes the staging directory unless it was committed. Call it
// (deferred) after every background write into it has finished.
func (s *Dir) Abort() {
	if !s.done {
		os.RemoveAll(s.Path)
	}
}

// WriteSentinel writes the original's key=value sentinel (one pair per
// line, in the order given) atomically.
func WriteSentinel(path string, kv [][2]string) error {
	var b strings.Builder
	for _, p := range kv {
		b.WriteString(p[0] + "=" + p[1] + "\n")
	}
	return atomicfile.WriteBytes(path, []byte(b.String()), 0o644)
}
