// Package atomicfile writes files so that readers see either the old content
// or the complete new content, never a partial file: the data go to a temp
// file in the destination's directory (named .<base>.tmp-<random>), which is
// fsynced, closed and renamed over the destination; the directory is then
// fsynced so the rename survives a crash. On any error the temp file is
// removed and the destination is left untouched.
//
// Only a regular file (or nothing) at the destination is replaced: a
// device, FIFO, socket, directory or symlink there is refused
// (ErrNotRegular), checked before the temp file is made and again just
// before the rename, so that e.g. --out /dev/full run as root does not turn
// the device node into a file.
package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/kintsugi-hpc/kintsugi-go/internal/safefile"
)

// Write creates or replaces path with the bytes fill writes to w. perm is
// used to create the file and, like os.WriteFile, is subject to the umask.
// Errors from fill are returned unchanged; other errors name the path.
func Write(path string, perm os.FileMode, fill func(w io.Writer) error) (err error) {
	dir, base := filepath.Split(path)
	if base == "" {
		return fmt.Errorf("atomic write %s: path names a directory", path)
	}
	if dir == "" {
		dir = "."
	}
	if err := replaceable(path); err != nil {
		return err
	}
	f, tmp, err := createTemp(dir, base, perm)
	if err != nil {
		return fmt.Errorf("atomic write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close() // second close after a failed close is harmless
			os.Remove(tmp)
		}
	}()
	if err = fill(f); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("atomic write %s: sync: %w", path, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("atomic write %s: close: %w", path, err)
	}
	if err = replaceable(path); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("atomic write %s: %w", path, err)
	}
	if err := syncDir(dir); err != nil {
		// The file is in place; a failed directory sync only weakens
		// durability, but the caller should still hear about it.
		return fmt.Errorf("atomic write %s: sync directory: %w", path, err)
	}
	return nil
}

// ErrNotRegular is wrapped by the error for a destination that exists and is
// not a regular file.
var ErrNotRegular = errors.New("not a regular file")

// replaceable refuses a destination that exists and is not a regular file
// (symlinks are not followed: renaming over one would replace the link).
func replaceable(path string) error {
	st, err := os.Lstat(path)
	if err != nil || st.Mode().IsRegular() {
		return nil // absent, or unreadable (the rename reports it)
	}
	return fmt.Errorf("atomic write %s: the destination is %w (%s): refusing to replace it", path, ErrNotRegular, safefile.Describe(st.Mode()))
}

// WriteBytes is Write with a fixed content.
func WriteBytes(path string, data []byte, perm os.FileMode) error {
	return Write(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// createTemp opens a new, exclusive temp file .<base>.tmp-<random> in dir.
func createTemp(dir, base string, perm os.FileMode) (*os.File, string, error) {
	var err error
	for range 100 {
		name := filepath.Join(dir, "."+base+".tmp-"+strconv.FormatUint(rand.Uint64()>>16, 36))
		var f *os.File
		f, err = os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, perm)
		if err == nil {
			return f, name, nil
		}
		if !errors.Is(err, os.ErrExist) {
			return nil, "", err
		}
	}
	return nil, "", fmt.Errorf("create temp file in %s: %w", dir, err)
}

// syncDir fsyncs a directory; file systems that cannot sync directories
// (EINVAL, ENOTSUP) are not an error.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOTSUP) {
		return err
	}
	return nil
}
