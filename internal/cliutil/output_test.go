package cliutil

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestCheckOutput(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.tif")
	stack := filepath.Join(dir, "stack")
	for _, err := range []error{os.WriteFile(in, []byte("x"), 0o644), os.Mkdir(stack, 0o755),
		os.Symlink(in, filepath.Join(dir, "link.tif")), os.Link(in, filepath.Join(dir, "hard.tif")),
		syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644), os.Symlink(dir, filepath.Join(dir, "dirlink"))} {
		if err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		out  string
		ins  []string
		want string // "" = accepted
	}{
		{in, []string{in}, "is the input"},
		{filepath.Join(dir, "dirlink", "in.tif"), []string{in}, "is the input"}, // through a directory symlink
		{filepath.Join(dir, "hard.tif"), []string{in}, "is the input"},          // a hard link
		{in, []string{filepath.Join(dir, "link.tif")}, "is the input"},          // the input given as a symlink
		{filepath.Join(dir, "link.tif"), []string{"/nonexistent"}, "not a regular file"},
		{filepath.Join(dir, "fifo"), nil, "not a regular file"},
		{os.DevNull, nil, "not a regular file"},
		{stack, nil, "not a regular file"},
		{filepath.Join(stack, "01.tif"), []string{stack}, "inside the input directory"},
		{filepath.Join(dir, "dirlink", "stack", "new.tif"), []string{stack}, "inside the input directory"},
		{filepath.Join(dir, "out.tif"), []string{in, stack, ""}, ""},
		{in, []string{filepath.Join(dir, "other.tif")}, ""}, // replacing an earlier output is fine
	}
	for _, tc := range cases {
		err := CheckOutput("--out", tc.out, tc.ins...)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("--out %s (inputs %v): %v, want accepted", tc.out, tc.ins, err)
		case tc.want != "" && (err == nil || ExitCode(err) != ExitUsage || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "--out "+tc.out)):
			t.Errorf("--out %s (inputs %v): %v, want a usage error %q naming the flag", tc.out, tc.ins, err, tc.want)
		}
	}
}
