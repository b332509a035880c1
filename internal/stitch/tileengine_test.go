package stitch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/basic"
	"github.com/kintsugi-hpc/kintsugi-go/internal/blend"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// hostTileEngine is a TileEngine over the CPU engine, for the stage's own
// handling of device tiles (the uploader, the batches, the frees) without
// a GPU: its "device" tiles are copies of the host tiles, fitted and
// blended by the CPU engine. It counts the tiles live and the uploads,
// and fails upload number failAt (1-based; 0: none) or, with failFit, the
// first FitTiles once failFit planes are uploaded (the uploader has read
// ahead).
type hostTileEngine struct {
	*CPUEngine
	failAt, failFit int

	mu            sync.Mutex
	live, uploads int
}

type hostDevTiles struct {
	e     *hostTileEngine
	tiles []*raster.Gray16
}

func (d *hostDevTiles) Free() {
	d.e.mu.Lock()
	defer d.e.mu.Unlock()
	if d.tiles != nil {
		d.tiles = nil
		d.e.live--
	}
}

func (e *hostTileEngine) UploadTiles(_ context.Context, tiles []*raster.Gray16) (basic.DeviceTiles, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.uploads++
	if e.uploads == e.failAt {
		return nil, errors.New("device out of memory (planted)")
	}
	d := &hostDevTiles{e: e}
	for _, t := range tiles {
		c := raster.NewGray16(t.W, t.H)
		copy(c.Pix, t.Pix)
		d.tiles = append(d.tiles, c)
	}
	e.live++
	return d, nil
}

func (e *hostTileEngine) tilesOf(dt basic.DeviceTiles) ([]*raster.Gray16, error) {
	d, ok := dt.(*hostDevTiles)
	if !ok || d.tiles == nil {
		return nil, fmt.Errorf("tiles freed or foreign (%T)", dt)
	}
	return d.tiles, nil
}

func (e *hostTileEngine) FitTiles(ctx context.Context, planes []basic.DeviceTiles, p basic.Params) ([]basic.Profile, error) {
	if e.failFit > 0 {
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			e.mu.Lock()
			n := e.uploads
			e.mu.Unlock()
			if n >= e.failFit {
				break
			}
		}
		return nil, errors.New("device fault in the fit (planted)")
	}
	var host [][]*raster.Gray16
	for _, dt := range planes {
		t, err := e.tilesOf(dt)
		if err != nil {
			return nil, err
		}
		host = append(host, t)
	}
	return e.Fit(ctx, host, p)
}

func (e *hostTileEngine) CorrectAndBlendTiles(ctx context.Context, dt basic.DeviceTiles, prof *basic.Profile, flatMin float32, pos []raster.Point, bp blend.Params) (*raster.Gray16, error) {
	t, err := e.tilesOf(dt)
	if err != nil {
		return nil, err
	}
	return e.CorrectAndBlend(ctx, t, prof, flatMin, pos, bp)
}

func (e *hostTileEngine) CorrectAndBlendTilesDevice(context.Context, basic.DeviceTiles, *basic.Profile, float32, []raster.Point, blend.Params) (raster.DeviceGray16, error) {
	return nil, errors.New("no device mosaics here")
}

// TestStageDeviceTiles: with a TileEngine every plane's tiles go to the
// device once (uploader) and are freed once blended: the stage's files
// equal the CPU engine's byte for byte and no device tiles are left. A
// failing upload (the third: two planes of the first batch gathered) or
// fit (with every plane uploaded ahead) stops the stage with its error,
// leaves no output and frees every device tile.
func TestStageDeviceTiles(t *testing.T) {
	cfg := project(t)
	want, got := filepath.Join(t.TempDir(), "cpu"), filepath.Join(t.TempDir(), "tiles")
	runStage(t, cfg, NewCPUEngine(2), 2, 4, want)
	te := &hostTileEngine{CPUEngine: NewCPUEngine(2)}
	runStage(t, cfg, te, 2, 4, got)
	compareStage(t, cfg, want, got, exactTol)
	if te.uploads != 6 || te.live != 0 {
		t.Errorf("%d uploads (want 6, one per plane), %d device tiles left", te.uploads, te.live)
	}
	for _, c := range []struct {
		name string
		te   *hostTileEngine
		msg  string
	}{
		{"upload", &hostTileEngine{CPUEngine: NewCPUEngine(2), failAt: 3}, "CH1 Z3: tiles to the device: device out of memory (planted)"},
		{"fit", &hostTileEngine{CPUEngine: NewCPUEngine(2), failFit: 6}, "device fault in the fit (planted)"},
	} {
		_, err := Run(context.Background(), Options{Config: cfg, Cycle: 1, Engine: c.te, Workers: 2, Batch: 4, Logger: quiet()})
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Fatalf("%s failing: err %v, want one with %q", c.name, err, c.msg)
		}
		if c.te.live != 0 {
			t.Errorf("%s failing: %d device tiles left", c.name, c.te.live)
		}
		if _, err := os.Stat(OutDir(cfg.ProjectDir, 1)); !os.IsNotExist(err) {
			t.Errorf("%s failing: output left (%v)", c.name, err)
		}
	}
}
