package cliutil

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/kintsugi-hpc/kintsugi-go/internal/safefile"
)

// CheckOutput is a usage error naming the flag when the output file out
// (given as flag, e.g. "--out") would harm data: when it exists and is not
// a regular file (a device such as /dev/full, a FIFO, a directory, a
// symlink: the atomic write would replace it), when it is the same file as
// one of inputs after symlinks and hard links (os.SameFile), or when it
// lies inside an input that is a directory (a stack of planes). Inputs that
// do not exist are ignored (their reader reports them). Call it before any
// work, so a bad --out costs nothing.
func CheckOutput(flag, out string, inputs ...string) error {
	lst, err := os.Lstat(out)
	exists := err == nil
	if exists && !lst.Mode().IsRegular() {
		return Usagef("%s %s: exists and is not a regular file (%s): refusing to replace it", flag, out, safefile.Describe(lst.Mode()))
	}
	outDir := resolvedDir(out)
	for _, in := range inputs {
		ist, err := os.Stat(in)
		if err != nil {
			continue
		}
		if exists && os.SameFile(lst, ist) {
			return Usagef("%s %s: is the input %s: refusing to overwrite an input", flag, out, in)
		}
		if ist.IsDir() && outDir != "" {
			if d := resolved(in); d != "" && (outDir == d || strings.HasPrefix(outDir, d+string(filepath.Separator))) {
				return Usagef("%s %s: lies inside the input directory %s: write it elsewhere", flag, out, in)
			}
		}
	}
	return nil
}

// resolvedDir is the directory of path with symlinks resolved ("" when it
// does not exist yet).
func resolvedDir(path string) string { return resolved(filepath.Dir(path)) }

// resolved is path absolute with symlinks resolved ("" when it does not exist).
func resolved(path string) string {
	d, err := filepath.EvalSymlinks(path)
	if err != nil {
		return ""
	}
	abs, err := filepath.Abs(d)
	if err != nil {
		return ""
	}
	return abs
}
