package tiffio

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// TestWriteOver4GiB writes a 23-plane stack of stitched-plane size (4.36
// GB) so the writer must switch to BigTIFF, then reads the last page back
// (with this package and, when present, tifffile). It needs ~5 GB of disk
// and ~1 minute, so it runs only with TIFFIO_TEST_4GIB=1.
func TestWriteOver4GiB(t *testing.T) {
	if os.Getenv("TIFFIO_TEST_4GIB") != "1" {
		t.Skip("skipping: set TIFFIO_TEST_4GIB=1 to write a 4.4 GB BigTIFF stack")
	}
	const n, w, h = 23, 7479, 12662
	base := raster.NewGray16(w, h)
	for i := range base.Pix {
		base.Pix[i] = uint16(i * 7)
	}
	last := raster.NewGray16(w, h)
	for i := range last.Pix {
		last.Pix[i] = uint16(i*13 + 5)
	}
	pages := make([]*raster.Gray16, n)
	for i := range pages {
		pages[i] = base
	}
	pages[n-1] = last
	dir := os.Getenv("TIFFIO_BENCH_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	path := filepath.Join(dir, "stack4g.tif")
	defer os.Remove(path)
	if err := WriteGray16Pages(path, pages); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	info, err := ReadInfo(path)
	if err != nil {
		t.Fatal(err)
	}
	if !info.BigTIFF || info.Pages != n || st.Size() <= 1<<32 {
		t.Fatalf("info %+v, size %d: want a BigTIFF of %d pages over 4 GiB", info, st.Size(), n)
	}
	// Decode only the last page.
	fh, f, err := open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	var got *raster.Gray16
	err = f.walk(func(index int, off int64) (bool, error) {
		if index < n-1 {
			return true, nil
		}
		p, err := f.pageAt(off, index)
		if err != nil {
			return false, err
		}
		got = raster.NewGray16(p.width, p.height)
		return false, f.decodePage(p, func(y, x int, row []byte) {
			toUint16(got.Pix[y*w+x:y*w+x+len(row)/2], row, f.bo)
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	sameGray16(t, "last page", got, last)
	if exec.Command(python, "-c", "import tifffile").Run() != nil {
		t.Log("tifffile absent: cross-check skipped")
		return
	}
	script := `
import sys, numpy as np, tifffile
w, h = 7479, 12662
with tifffile.TiffFile(sys.argv[1]) as f:
    a = f.pages[-1].asarray()
    b = f.pages[0].asarray()
i = np.arange(w * h, dtype=np.uint64)
print(len(f.pages), f.is_bigtiff, (a.ravel() == ((i * 13 + 5) % 65536).astype(np.uint16)).all(), (b.ravel() == ((i * 7) % 65536).astype(np.uint16)).all())
`
	out, err := exec.Command(python, "-c", script, path).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != strconv.Itoa(n)+" True True True" {
		t.Errorf("tifffile: %v: %s", err, out)
	}
}
