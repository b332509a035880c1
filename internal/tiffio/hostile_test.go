package tiffio

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio/tiffiotest"
)

// TestSharedPayloadRefused: strips sharing one payload are refused before
// the image is allocated (every reader), whatever the decode limit.
func TestSharedPayloadRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bomb.tif")
	b := tiffiotest.SharedStrips(4096, 4096) // ~50 KB claiming 32 MiB
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, read := range map[string]func(string) error{
		"ReadGray16":       func(p string) error { _, err := ReadGray16(p); return err },
		"ReadFloat32":      func(p string) error { _, err := ReadFloat32(p); return err },
		"ReadGray16Pages":  func(p string) error { _, err := ReadGray16Pages(p); return err },
		"ReadFloat32Pages": func(p string) error { _, err := ReadFloat32Pages(p); return err },
	} {
		err := read(path)
		if err == nil || !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "overlap") || !strings.Contains(err.Error(), path) {
			t.Errorf("%s of a %d-byte file whose strips share one payload: %v, want a format error naming the file and the overlap", name, len(b), err)
		}
	}
}

// TestDecodeLimit: a page larger than the process's decode limit is refused
// before allocating; the limit restores.
func TestDecodeLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.tif")
	if err := WriteGray16(path, raster.NewGray16(100, 50)); err != nil {
		t.Fatal(err)
	}
	restore := SetDecodeLimit(100*50*2 - 1)
	_, err := ReadGray16(path)
	restore()
	if err == nil || !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "limit of 9999 bytes") {
		t.Fatalf("10000-byte page under a 9999-byte limit: %v", err)
	}
	if _, err := ReadGray16(path); err != nil {
		t.Fatalf("after restore: %v", err)
	}
	// Pages add up: two pages of 10000 bytes under a 15000-byte limit.
	two := filepath.Join(t.TempDir(), "two.tif")
	if err := WriteGray16Pages(two, []*raster.Gray16{raster.NewGray16(100, 50), raster.NewGray16(100, 50)}); err != nil {
		t.Fatal(err)
	}
	restore = SetDecodeLimit(15000)
	_, err = ReadGray16Pages(two)
	restore()
	if err == nil || !strings.Contains(err.Error(), "page 1") {
		t.Fatalf("two 10000-byte pages under a 15000-byte limit: %v", err)
	}
}

// TestMultiPageRefusedAsPlane: the one-plane readers name the page count.
func TestMultiPageRefusedAsPlane(t *testing.T) {
	path := filepath.Join(t.TempDir(), "three.tif")
	if err := WriteGray16Pages(path, []*raster.Gray16{raster.NewGray16(4, 3), raster.NewGray16(4, 3), raster.NewGray16(4, 3)}); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{func() error { _, e := ReadGray16(path); return e }(), func() error { _, e := ReadFloat32(path); return e }()} {
		if err == nil || !strings.Contains(err.Error(), "3 pages, one plane expected") {
			t.Errorf("3-page file read as one plane: %v", err)
		}
	}
}

// TestNonRegularRefused: a FIFO (which would block open), a device and a
// directory are refused without blocking, by every entry point.
func TestNonRegularRefused(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.tif")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.tif")
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, link, os.DevNull, dir} {
		done := make(chan error, 5)
		go func() {
			_, err := ReadInfo(p)
			done <- err
			_, err = ReadGray16(p)
			done <- err
			_, err = ReadFloat32Pages(p)
			done <- err
			_, err = ReadGray16SubIFDs(p, 0)
			done <- err
		}()
		for range 4 {
			select {
			case err := <-done:
				if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), p) {
					t.Errorf("%s: %v, want ErrNotRegular naming the path", p, err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("%s: read blocked", p)
			}
		}
	}
}

// TestOversizedTilesRefused: a tile far larger than its image (which would
// make a tiny image claim a large decode buffer) is refused; a 256 x 256
// tile of a 100 x 100 image, as tiled writers make, is read.
func TestOversizedTilesRefused(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 1))
	dir := t.TempDir()
	for _, tc := range []struct {
		tw, th int
		want   string // "" = read
	}{{256, 256, ""}, {8192, 16, "tile width 8192"}, {16, 8192, "tile length 8192"}} {
		p := filepath.Join(dir, fmt.Sprintf("t%dx%d.tif", tc.tw, tc.th))
		b := buildTIFF(u16Pages(rng, 1, 100, 100), buildOpts{bps: 16, sf: 1, comp: compDeflate, tileW: tc.tw, tileH: tc.th})
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := ReadGray16(p)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%dx%d tiles of a 100x100 image: %v", tc.tw, tc.th, err)
		case tc.want != "" && (err == nil || !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%dx%d tiles of a 100x100 image: %v, want %q", tc.tw, tc.th, err, tc.want)
		}
	}
}
