package atomicfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// noTemps fails if dir holds a leftover temp file.
func noTemps(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temp file %s left in %s", e.Name(), dir)
		}
	}
}

func TestWriteBytes(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.txt")
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	for i, content := range []string{"first", "second, longer", ""} {
		if err := WriteBytes(path, []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Fatalf("write %d: read %q, %v; want %q", i, got, err, content)
		}
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, want 0640", st.Mode().Perm())
	}
	if err := WriteBytes(filepath.Join(dir, "b.txt"), nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(filepath.Join(dir, "b.txt")); st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644 (0666 under umask 022)", st.Mode().Perm())
	}
	noTemps(t, dir)
}

func TestFillErrorKeepsOld(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.txt")
	if err := WriteBytes(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := Write(path, 0o644, func(w io.Writer) error {
		w.Write([]byte("partial new content"))
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err %v, want the fill error", err)
	}
	if got, _ := os.ReadFile(path); string(got) != "old" {
		t.Errorf("destination now %q, want the old content", got)
	}
	noTemps(t, dir)
}

// TestUnwritable covers the ways a write can fail before or at the rename;
// each must name the path and leave no temp file.
func TestUnwritable(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "plain")
	os.WriteFile(file, nil, 0o644)
	isDir := filepath.Join(dir, "isdir")
	os.Mkdir(isDir, 0o755)
	os.WriteFile(filepath.Join(isDir, "x"), nil, 0o644) // a non-empty directory cannot be renamed over
	cases := map[string]string{
		"missing directory": filepath.Join(dir, "no", "such", "a.txt"),
		"parent is a file":  filepath.Join(file, "a.txt"),
		"rename over a dir": isDir,
	}
	if ro, ok := readOnlyDir(t, dir); ok {
		cases["read-only directory"] = filepath.Join(ro, "a.txt")
	}
	for name, path := range cases {
		err := WriteBytes(path, []byte("data"), 0o644)
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		if !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %q does not name %s", name, err, path)
		}
		t.Logf("%s: %v", name, err)
	}
	noTemps(t, dir)
	noTemps(t, isDir)
}

// readOnlyDir makes a directory no one can create files in: mode 0555, and
// for root (who ignores modes) the immutable attribute, removed at cleanup.
func readOnlyDir(t *testing.T, parent string) (string, bool) {
	t.Helper()
	ro := filepath.Join(parent, "ro")
	if err := os.Mkdir(ro, 0o555); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		return ro, true
	}
	if out, err := exec.Command("chattr", "+i", ro).CombinedOutput(); err != nil {
		t.Logf("running as root and chattr +i failed (%v: %s): read-only directory case skipped", err, out)
		return "", false
	}
	t.Cleanup(func() { exec.Command("chattr", "-i", ro).Run() })
	return ro, true
}

// TestConcurrent has writers race on one path: the result must be one
// writer's complete content, never a mix.
func TestConcurrent(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.txt")
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			data := bytes.Repeat([]byte(fmt.Sprintf("writer %d;", i)), 10000)
			if err := WriteBytes(path, data, 0o644); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	got, _ := os.ReadFile(path)
	var w int
	if _, err := fmt.Sscanf(string(got), "writer %d;", &w); err != nil {
		t.Fatalf("content starts %q", got[:min(20, len(got))])
	}
	if want := bytes.Repeat([]byte(fmt.Sprintf("writer %d;", w)), 10000); !bytes.Equal(got, want) {
		t.Errorf("content of writer %d is mixed with others", w)
	}
	noTemps(t, dir)
}

// TestNonRegularDestinationRefused: a FIFO, a symlink, a directory and (as
// root) a character device like /dev/full at the destination are refused
// and left as they were, with no temp file left.
func TestNonRegularDestinationRefused(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target.txt")
	if err := os.WriteFile(target, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	dests := map[string]func(p string) error{
		"fifo":      func(p string) error { return syscall.Mkfifo(p, 0o644) },
		"symlink":   func(p string) error { return os.Symlink(target, p) },
		"directory": func(p string) error { return os.Mkdir(p, 0o755) },
	}
	if os.Geteuid() == 0 {
		dests["char device (1,7: /dev/full)"] = func(p string) error {
			return syscall.Mknod(p, syscall.S_IFCHR|0o666, 1<<8|7)
		}
	}
	for name, mk := range dests {
		p := filepath.Join(dir, strings.NewReplacer(" ", "_", "/", "_", ":", "", "(", "", ")", "", ",", "_").Replace(name))
		if err := mk(p); err != nil {
			t.Fatal(err)
		}
		before, _ := os.Lstat(p)
		err := WriteBytes(p, []byte("new"), 0o644)
		if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s at the destination: %v, want ErrNotRegular naming it", name, err)
		}
		if after, err := os.Lstat(p); err != nil || after.Mode() != before.Mode() {
			t.Errorf("%s replaced: %v", name, err)
		}
		os.Remove(p)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Errorf("symlink target changed: %q", b)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("left: %v", ents)
	}
}
