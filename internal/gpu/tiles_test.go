//go:build cuda

package gpu

import (
	"context"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/basic"
	"github.com/kintsugi-hpc/kintsugi-go/internal/blend"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// TestTilesOnDeviceMatchHostForms: the tiles sent once (UploadTiles) give
// FitTiles the profiles Fit gives from the host tiles and
// CorrectAndBlendTiles the mosaic CorrectAndBlend gives, bit for bit; freed
// or foreign tiles are refused.
func TestTilesOnDeviceMatchHostForms(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(4, 9))
	p := basic.Production()
	bp := blend.Params{Sigma: 15, OverlapY: 0.3, OverlapX: 0.3}
	var planes [][]*raster.Gray16
	var dts []basic.DeviceTiles
	var pos []raster.Point
	for range 3 {
		tiles, ps, _ := randomMosaic(rng, 3, 4, 90, 120, 0.3)
		planes, pos = append(planes, tiles), ps
		dt, err := testEngine.UploadTiles(ctx, tiles)
		if err != nil {
			t.Fatal(err)
		}
		defer dt.Free()
		dts = append(dts, dt)
	}
	want, err := testEngine.Fit(ctx, planes, p)
	if err != nil {
		t.Fatal(err)
	}
	got, err := testEngine.FitTiles(ctx, dts, p)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatal("FitTiles' profiles differ from Fit's")
	}
	for i := range planes {
		m1, err := testEngine.CorrectAndBlend(ctx, planes[i], &want[i], 0.1, pos, bp)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := testEngine.CorrectAndBlendTiles(ctx, dts[i], &want[i], 0.1, pos, bp)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(m1, m2) {
			t.Fatalf("plane %d: CorrectAndBlendTiles' mosaic differs from CorrectAndBlend's", i)
		}
	}
	dts[0].Free()
	if _, err := testEngine.CorrectAndBlendTiles(ctx, dts[0], &want[0], 0.1, pos, bp); err == nil {
		t.Error("freed tiles blended")
	}
	if _, err := testEngine.FitTiles(ctx, dts[:1], p); err == nil {
		t.Error("freed tiles fitted")
	}
}

// TestTilesUploadedBehind: tiles in the engine's page-locked planes are
// uploaded on the up stream without a wait (UploadTiles returns with the
// copy in flight), and FitTiles and CorrectAndBlendTiles called at once
// after it still see every byte: the same profiles and mosaics, bit for
// bit, as Fit and CorrectAndBlend from the host (tiles large enough that
// the copy outlasts a kernel launch by milliseconds).
func TestTilesUploadedBehind(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(8, 1))
	p := basic.Production()
	bp := blend.Params{Sigma: 15, OverlapY: 0.3, OverlapX: 0.3}
	const rows, cols, h, w = 5, 6, 1024, 1280
	var planes, pinned [][]*raster.Gray16
	var pos []raster.Point
	for range 3 {
		tiles, ps, _ := randomMosaic(rng, rows, cols, h, w, 0.3)
		planes, pos = append(planes, tiles), ps
		var pl []*raster.Gray16
		for _, tl := range tiles {
			g, err := testEngine.NewPlane(ctx, w, h)
			if err != nil {
				t.Fatal(err)
			}
			copy(g.Pix, tl.Pix)
			pl = append(pl, g)
		}
		pinned = append(pinned, pl)
		defer raster.FreePlanes(testEngine, pl)
	}
	want, err := testEngine.Fit(ctx, planes, p)
	if err != nil {
		t.Fatal(err)
	}
	upload := func(tiles []*raster.Gray16) basic.DeviceTiles {
		dt, err := testEngine.UploadTiles(ctx, tiles)
		if err != nil {
			t.Fatal(err)
		}
		if dt.(*DevTiles).ready == 0 {
			t.Fatal("page-locked tiles were uploaded with a wait")
		}
		return dt
	}
	// Blended straight after the upload.
	dt := upload(pinned[0])
	got0, err := testEngine.CorrectAndBlendTiles(ctx, dt, &want[0], 0.1, pos, bp)
	dt.Free()
	if err != nil {
		t.Fatal(err)
	}
	want0, err := testEngine.CorrectAndBlend(ctx, planes[0], &want[0], 0.1, pos, bp)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got0.Pix, want0.Pix) {
		t.Error("a mosaic blended straight after its upload differs from CorrectAndBlend's")
	}
	testEngine.FreePlane(got0)
	// Fitted straight after the upload.
	dts := []basic.DeviceTiles{upload(pinned[1]), upload(pinned[2])}
	got, err := testEngine.FitTiles(ctx, dts, p)
	for _, d := range dts {
		d.Free()
		d.Free() // a second Free does nothing
	}
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want[1:]) {
		t.Error("profiles fitted straight after the upload differ from Fit's")
	}
}

// TestDeviceMosaicIntoStack: CorrectAndBlendTilesDevice's mosaic, put into
// a decon device stack on the device (PutPlaneFromDevice), gives the
// float32 plane and the measure that the host mosaic uploaded gives
// (UploadPlaneGray16Measured), bit for bit; a plane of another size or a
// freed one is refused.
func TestDeviceMosaicIntoStack(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(6, 2))
	p := basic.Production()
	bp := blend.Params{Sigma: 15, OverlapY: 0.3, OverlapX: 0.3}
	tiles, pos, _ := randomMosaic(rng, 3, 3, 70, 110, 0.3)
	prof, err := testEngine.Fit(ctx, [][]*raster.Gray16{tiles}, p)
	if err != nil {
		t.Fatal(err)
	}
	dt, err := testEngine.UploadTiles(ctx, tiles)
	if err != nil {
		t.Fatal(err)
	}
	defer dt.Free()
	host, err := testEngine.CorrectAndBlend(ctx, tiles, &prof[0], 0.1, pos, bp)
	if err != nil {
		t.Fatal(err)
	}
	dm, err := testEngine.CorrectAndBlendTilesDevice(ctx, dt, &prof[0], 0.1, pos, bp)
	if err != nil {
		t.Fatal(err)
	}
	defer dm.Free()
	if w, h := dm.Size(); w != host.W || h != host.H {
		t.Fatalf("device mosaic %dx%d, host %dx%d", w, h, host.W, host.H)
	}
	const block = 16
	stacks := make([]*DevStack, 2)
	meas := make([]any, 2)
	for k := range stacks {
		d, err := testEngine.AllocStack(ctx, 2, host.H, host.W)
		if err != nil {
			t.Fatal(err)
		}
		defer testEngine.FreeStack(d)
		m, err := testEngine.NewPlaneMeter(ctx, host.H, host.W, block)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Free()
		if k == 0 {
			meas[k], err = testEngine.UploadPlaneGray16Measured(ctx, d, 1, host, m)
		} else {
			meas[k], err = testEngine.PutPlaneFromDevice(ctx, d, 1, dm.(*DevGray16), m)
		}
		if err != nil {
			t.Fatal(err)
		}
		stacks[k] = d
	}
	if !reflect.DeepEqual(meas[0], meas[1]) {
		t.Error("the device mosaic's measure differs from the host mosaic's")
	}
	a, err := testEngine.DownloadStack(ctx, stacks[0])
	if err != nil {
		t.Fatal(err)
	}
	b, err := testEngine.DownloadStack(ctx, stacks[1])
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a.Plane(1), b.Plane(1)) {
		t.Error("the device mosaic's float32 plane differs from the host mosaic's")
	}
	back := raster.NewGray16(host.W, host.H)
	if err := dm.Download(ctx, back); err != nil || !reflect.DeepEqual(back.Pix, host.Pix) {
		t.Errorf("device mosaic downloaded differs from the host mosaic (err %v)", err)
	}
	small, err := testEngine.AllocStack(ctx, 1, host.H-1, host.W)
	if err != nil {
		t.Fatal(err)
	}
	defer testEngine.FreeStack(small)
	if _, err := testEngine.PutPlaneFromDevice(ctx, small, 0, dm.(*DevGray16), nil); err == nil {
		t.Error("a mosaic put into a stack of another plane size")
	}
	dm.Free()
	if _, err := testEngine.PutPlaneFromDevice(ctx, stacks[1], 0, dm.(*DevGray16), nil); err == nil {
		t.Error("a freed mosaic put into a stack")
	}
	if err := dm.Download(ctx, back); err == nil {
		t.Error("a freed mosaic downloaded")
	}
}
