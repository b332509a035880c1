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
