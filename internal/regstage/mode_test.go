package regstage

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/register"
)

// TestOutputModesFollowUmask: under a lab's group-writable umask (002) every
// file the stage writes (TIFFs, the OME-TIFF, markers.csv, transforms and
// metrics JSON, overlay PNGs, the sentinel) has the mode creat(2) gives,
// 0664, and every directory the mode mkdir(2) gives, 0775: the other members
// of the group can read and replace the results.
func TestOutputModesFollowUmask(t *testing.T) {
	cfg, _ := project(t, 2)
	old := syscall.Umask(0o002)
	_, err := run(cfg, register.CPU{Workers: 2})
	syscall.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	out := OutDir(cfg.ProjectDir)
	files := 0
	err = filepath.WalkDir(out, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		want := os.FileMode(0o664)
		if d.IsDir() {
			want = 0o775
		} else {
			files++
		}
		if got := st.Mode().Perm(); got != want {
			t.Errorf("%s: mode %v, want %v under umask 002", p, got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 5 {
		t.Fatalf("only %d files under %s", files, out)
	}
}
