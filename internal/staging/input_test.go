package staging

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRequireSentinel(t *testing.T) {
	dir := t.TempDir()
	err := RequireSentinel(dir, 3, "decon")
	if !errors.Is(err, ErrInput) {
		t.Fatalf("no sentinel: err = %v, want ErrInput", err)
	}
	for _, want := range []string{"cycle 3", filepath.Join(dir, SentinelName), "decon stage"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("no sentinel: %q lacks %q", err, want)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, SentinelName), []byte("stage=decon\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := RequireSentinel(dir, 3, "decon"); err != nil {
		t.Errorf("sentinel present: %v", err)
	}
	if err := Inputf("key %s: %w", "x", os.ErrNotExist); !errors.Is(err, ErrInput) || !errors.Is(err, os.ErrNotExist) || err.Error() != "bad input: key x: file does not exist" {
		t.Errorf("Inputf: %v", err)
	}
}
