package tiffio

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// readOnlyDir makes a directory no one can create files in: mode 0555, and
// for root (who ignores modes) the immutable attribute, removed at cleanup.
func readOnlyDir(t *testing.T, parent string) string {
	t.Helper()
	ro := filepath.Join(parent, "ro")
	if err := os.Mkdir(ro, 0o555); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if out, err := exec.Command("chattr", "+i", ro).CombinedOutput(); err != nil {
			t.Skipf("skipping: running as root and chattr +i failed (%v: %s)", err, out)
		}
		t.Cleanup(func() { exec.Command("chattr", "-i", ro).Run() })
	}
	return ro
}

func TestWriteUnwritableDir(t *testing.T) {
	dir := t.TempDir()
	ro := readOnlyDir(t, dir)
	path := filepath.Join(ro, "plane.tif")
	err := WriteGray16(path, raster.NewGray16(4, 3))
	if err == nil {
		t.Fatal("no error writing into a read-only directory")
	}
	if !strings.HasPrefix(err.Error(), "tiff "+path+": ") {
		t.Errorf("%q does not start with tiff %s", err, path)
	}
	t.Log(err)
	ents, _ := os.ReadDir(ro)
	if len(ents) != 0 {
		t.Errorf("%d files left in the directory", len(ents))
	}
}

// TestWriteReplacesAtomically checks that a failed write leaves the previous
// file intact: the destination is a directory-free path whose rename fails
// because a non-empty directory is in the way.
func TestWriteFailedRenameLeavesNoTemp(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "plane.tif")
	os.Mkdir(path, 0o755)
	os.WriteFile(filepath.Join(path, "x"), nil, 0o644)
	if err := WriteFloat32(path, raster.NewFloat32(5, 5)); err == nil || !strings.HasPrefix(err.Error(), "tiff "+path+": ") {
		t.Fatalf("err %v", err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("directory holds %d entries after a failed write, want 1", len(ents))
	}
}

func TestBigTIFFThreshold(t *testing.T) {
	// A 7479x12662 uint16 plane is ~189 MB: classic. 23 of them in one
	// stack pass 4 GiB: the layout must then be BigTIFF, sized above 2^32.
	const w, h = 7479, 12662
	p := outPage{w: w, h: h, bps: 16, sf: sampleUint}
	pages := make([]outPage, 23)
	for i := range pages {
		pages[i] = p
	}
	_, one := layout(pages[:1], false)
	if one > classicLimit {
		t.Errorf("one plane (%d bytes) over the classic limit", one)
	}
	_, classic := layout(pages, false)
	lay, big := layout(pages, true)
	if classic <= classicLimit {
		t.Fatalf("23 planes = %d bytes, expected over %d", classic, classicLimit)
	}
	l := lay[22]
	lastOff := l.dataOff + int64(l.nStrips-1)*l.rowBytes*int64(l.rowsPerStrip)
	if big <= 1<<32 || lastOff <= 1<<32 {
		t.Fatalf("bigtiff layout ends at %d, last strip at %d: not past 4 GiB", big, lastOff)
	}
	// The IFD of the last page must encode offsets above 4 GiB exactly:
	// its arrays end with nStrips offsets then nStrips counts, 8 bytes each.
	b := encodeIFD(p, l, 0, true)
	if got := int64(leUint64(b[len(b)-8*l.nStrips-8:])); got != lastOff {
		t.Errorf("last strip offset encoded as %d, want %d", got, lastOff)
	}
}

func leUint64(b []byte) uint64 {
	var v uint64
	for i := 7; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}
