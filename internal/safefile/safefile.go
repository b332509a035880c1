// Package safefile opens and reads input files that may be hostile or
// mistaken: only regular files are opened (a FIFO, device, socket or
// directory is refused before the open, and the open itself does not block:
// O_NONBLOCK, then fstat again in case the path was swapped in between), and
// whole-file reads are capped.
package safefile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// ErrNotRegular is wrapped by the error for a path that is not a regular
// file (after symlinks).
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is wrapped by ReadFile's error for a file over its cap.
var ErrTooLarge = errors.New("file too large")

// Open opens path for reading if it is a regular file (symlinks followed)
// and returns it with its fstat. Errors are *fs.PathError or wrap
// ErrNotRegular naming what the path is; they do not name the path.
func Open(path string) (*os.File, fs.FileInfo, error) { return open(path, os.Stat) }

// open is Open with the check's stat given (os.Stat; a test passes one that
// stands for a path replaced between the stat and the open).
func open(path string, stat func(string) (fs.FileInfo, error)) (*os.File, fs.FileInfo, error) {
	st, err := stat(path)
	if err != nil {
		return nil, nil, err
	}
	if err := Regular(st); err != nil {
		return nil, nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	if st, err = f.Stat(); err == nil {
		err = Regular(st)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, st, nil
}

// Regular is nil for a regular file, else an error wrapping ErrNotRegular
// that says what st is ("a named pipe (FIFO)", "a device", ...).
func Regular(st fs.FileInfo) error {
	if st.Mode().IsRegular() {
		return nil
	}
	return fmt.Errorf("%w (%s)", ErrNotRegular, Describe(st.Mode()))
}

// Describe names the kind of file m is: "a regular file", "a directory",
// "a symbolic link", "a named pipe (FIFO)", "a socket", "a character
// device", "a block device" or "a special file".
func Describe(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	}
	return "a special file"
}

// ReadFile reads a regular file of at most max bytes; a larger one is an
// error wrapping ErrTooLarge that names the cap. Errors do not name the path.
func ReadFile(path string, max int64) ([]byte, error) {
	f, _, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%w: more than the %d-byte limit", ErrTooLarge, max)
	}
	return b, nil
}
