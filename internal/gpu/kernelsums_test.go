package gpu

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// The PTX and fatbins in kernels/ are generated on a machine with nvcc and committed;
// kernels/SOURCES.sha256 records the sources they were built from (make ptx / make
// fatbin write it). A .cu or .cuh edited without regenerating them would make the
// CUDA build run stale kernels, so this test (no GPU, no cuda tag: it runs in CI)
// compares every source with its recorded digest and requires every module to have
// both images.
func TestKernelImagesUpToDate(t *testing.T) {
	dir := "kernels"
	f, err := os.Open(filepath.Join(dir, "SOURCES.sha256"))
	if err != nil {
		t.Fatalf("%v (run make ptx fatbin on a machine with nvcc)", err)
	}
	defer f.Close()
	recorded := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 2 {
			t.Fatalf("SOURCES.sha256: malformed line %q", sc.Text())
		}
		recorded[fields[1]] = fields[0]
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	var sources []string
	for _, pat := range []string{"*.cu", "*.cuh"} {
		m, err := filepath.Glob(filepath.Join(dir, pat))
		if err != nil {
			t.Fatal(err)
		}
		sources = append(sources, m...)
	}
	sort.Strings(sources)
	if len(sources) == 0 {
		t.Fatalf("no kernel sources under %s", dir)
	}
	for _, src := range sources {
		name := filepath.Base(src)
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		want, ok := recorded[name]
		switch {
		case !ok:
			t.Errorf("%s is not in SOURCES.sha256: run make ptx fatbin on a machine with nvcc and commit the images", name)
		case want != hex.EncodeToString(sum[:]):
			t.Errorf("%s changed since its PTX/fatbin were built: run make ptx fatbin on a machine with nvcc and commit the images", name)
		}
		delete(recorded, name)
		if strings.HasSuffix(name, ".cu") {
			base := strings.TrimSuffix(src, ".cu")
			for _, ext := range []string{".ptx", ".fatbin"} {
				if _, err := os.Stat(base + ext); err != nil {
					t.Errorf("module %s: %v", name, err)
				}
			}
		}
	}
	for name := range recorded {
		t.Errorf("SOURCES.sha256 lists %s, which no longer exists", name)
	}
}
