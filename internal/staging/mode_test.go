package staging

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestFinalModeFollowsUmask: the committed directory has the mode mkdir
// gives under the umask (group members can read results), for two umasks.
func TestFinalModeFollowsUmask(t *testing.T) {
	for _, mask := range []int{0o022, 0o002} {
		old := syscall.Umask(mask)
		final := filepath.Join(t.TempDir(), "stitched", "cyc01")
		d, err := New(final)
		if err == nil {
			err = d.Commit()
		}
		syscall.Umask(old)
		if err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(final)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := st.Mode().Perm(), os.FileMode(0o777&^mask); got != want {
			t.Errorf("umask %03o: final directory mode %v, want %v", mask, got, want)
		}
	}
}

// TestNonDirectoryFinalRefused: a regular file, a symlink (to a directory
// or a file) or a device node at the final path is refused by New and by
// Commit (when it appears during the run), and left as it was.
func TestNonDirectoryFinalRefused(t *testing.T) {
	root := t.TempDir()
	elsewhere := filepath.Join(root, "elsewhere")
	if err := os.Mkdir(elsewhere, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, make := range map[string]func(p string) error{
		"regular file":         func(p string) error { return os.WriteFile(p, []byte("user data"), 0o644) },
		"symlink to a dir":     func(p string) error { return os.Symlink(elsewhere, p) },
		"symlink to /dev/null": func(p string) error { return os.Symlink(os.DevNull, p) },
	} {
		final := filepath.Join(root, strings.ReplaceAll(name, " ", "_"), "cyc01")
		os.MkdirAll(filepath.Dir(final), 0o755)
		if err := make(final); err != nil {
			t.Fatal(err)
		}
		before, _ := os.Lstat(final)
		if _, err := New(final); !errors.Is(err, ErrNotReplaceable) || !strings.Contains(err.Error(), final) {
			t.Errorf("%s at the final path: New: %v, want ErrNotReplaceable naming it", name, err)
		}
		after, err := os.Lstat(final)
		if err != nil || after.Mode() != before.Mode() || after.Size() != before.Size() {
			t.Errorf("%s: changed: %v", name, err)
		}
		ents, _ := os.ReadDir(filepath.Dir(final))
		if len(ents) != 1 {
			t.Errorf("%s: New left %v", name, ents)
		}
		// Appearing while the stage runs.
		os.Remove(final)
		d, err := New(final)
		if err != nil {
			t.Fatal(err)
		}
		if err := make(final); err != nil {
			t.Fatal(err)
		}
		if err := d.Commit(); !errors.Is(err, ErrNotReplaceable) {
			t.Errorf("%s appearing during the run: Commit: %v", name, err)
		}
		d.Abort()
		if st, err := os.Lstat(final); err != nil || st.Mode() != before.Mode() {
			t.Errorf("%s: replaced by Commit: %v", name, err)
		}
	}
}
