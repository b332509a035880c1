package safefile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("12345"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(p, 5); err != nil || string(b) != "12345" {
		t.Errorf("5 bytes under a 5-byte cap: %q %v", b, err)
	}
	if _, err := ReadFile(p, 4); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "4-byte") {
		t.Errorf("5 bytes under a 4-byte cap: %v", err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{fifo: "FIFO", "/dev/zero": "device", dir: "directory"} {
		done := make(chan error, 1)
		go func() { _, err := ReadFile(p, 1<<20); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %v, want ErrNotRegular saying %q", p, err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: blocked", p)
		}
	}
	if _, err := ReadFile(filepath.Join(dir, "none"), 10); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
}

// TestSwappedAfterStat: a FIFO put in place between the stat and the open
// neither blocks the open (O_NONBLOCK) nor is read (fstat again).
func TestSwappedAfterStat(t *testing.T) {
	dir := t.TempDir()
	reg := filepath.Join(dir, "regular")
	fifo := filepath.Join(dir, "fifo")
	if err := os.WriteFile(reg, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	statReg := func(string) (os.FileInfo, error) { return os.Stat(reg) } // the check saw a regular file
	done := make(chan error, 1)
	go func() {
		f, _, err := open(fifo, statReg)
		if err == nil {
			f.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNotRegular) {
			t.Errorf("FIFO swapped in after the stat: %v, want ErrNotRegular", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("open of a FIFO swapped in after the stat blocked")
	}
}
