//go:build cuda

package gpu

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/register"
)

// TestHostPlanes: planes in the engine's page-locked memory go to the card
// and back without the staging buffers (direct DMA) and give the same
// downsampled levels and warps, bit for bit, as planes in Go memory (the
// staged path) and as the CPU; given-back planes are handed out again, a
// plane given back twice panics, and Go planes are ignored.
func TestHostPlanes(t *testing.T) {
	ctx := context.Background()
	be := testEngine.Registrar()
	hp := be.(raster.HostPlanes)
	const w, h = 1531, 1017 // odd sizes: segments not a multiple of the staging pieces
	r := rand.New(rand.NewPCG(4, 4))
	goImg := raster.NewGray16(w, h)
	for i := range goImg.Pix {
		goImg.Pix[i] = uint16(r.IntN(65536))
	}
	pin, err := hp.NewPlane(ctx, w, h)
	if err != nil {
		t.Fatal(err)
	}
	copy(pin.Pix, goImg.Pix)
	if !testEngine.host.pinned(unsafe.Pointer(&pin.Pix[0]), int64(len(pin.Pix))*2) || testEngine.host.pinned(unsafe.Pointer(&goImg.Pix[0]), 2) {
		t.Fatal("hostMem.pinned does not tell the page-locked plane from the Go one")
	}
	ks := []int{2, 4}
	lg, err := be.Downsample(ctx, goImg, ks)
	if err != nil {
		t.Fatal(err)
	}
	lp, err := be.Downsample(ctx, pin, ks)
	if err != nil {
		t.Fatal(err)
	}
	lc, _ := register.CPU{}.Downsample(ctx, goImg, ks)
	for i := range ks {
		if !slices.Equal(lg[i].Pix, lp[i].Pix) || !slices.Equal(lg[i].Pix, lc[i].Pix) {
			t.Errorf("level %d: the page-locked plane's downsample differs", ks[i])
		}
	}
	m := register.Mapping{Rigid: register.Identity(h, w)}
	m.Rigid.Theta, m.Rigid.TY, m.Rigid.TX = 0.02, 3.25, -7.5
	wg, err := be.Warp(ctx, []*raster.Gray16{goImg}, &m, h, w)
	if err != nil {
		t.Fatal(err)
	}
	wp, err := be.Warp(ctx, []*raster.Gray16{pin}, &m, h, w)
	if err != nil {
		t.Fatal(err)
	}
	wc, _ := register.CPU{}.Warp(ctx, []*raster.Gray16{goImg}, &m, h, w)
	if !slices.Equal(wg[0].Pix, wc[0].Pix) || !slices.Equal(wp[0].Pix, wc[0].Pix) {
		t.Fatal("warps of the page-locked and the Go plane differ from the CPU's")
	}
	if !testEngine.host.pinned(unsafe.Pointer(&wp[0].Pix[0]), int64(len(wp[0].Pix))*2) {
		t.Fatal("Warp's result is not a page-locked plane")
	}
	before := testEngine.host.allocated()
	addr := &wp[0].Pix[0]
	hp.FreePlane(wp[0])
	again, err := hp.NewPlane(ctx, w, h)
	if err != nil {
		t.Fatal(err)
	}
	if &again.Pix[0] != addr || testEngine.host.allocated() != before {
		t.Error("a given-back plane was not handed out again")
	}
	hp.FreePlane(goImg) // ignored
	hp.FreePlane(again)
	func() {
		defer func() {
			if recover() == nil {
				t.Error("a plane given back twice did not panic")
			}
		}()
		hp.FreePlane(again)
	}()
	hp.FreePlane(pin)
	hp.FreePlane(wg[0])
}

// TestNewPlaneBesideEngine: a new page-locked plane is made while the
// engine goroutine is busy (a reader is not queued behind a long GPU
// call), is page-locked, and the engine's Busy figures count the busy call
// but no allocation.
func TestNewPlaneBesideEngine(t *testing.T) {
	ctx := context.Background()
	release := make(chan struct{})
	blocked := make(chan struct{})
	go func() {
		_ = testEngine.do(ctx, "test hold", func() error {
			close(blocked)
			<-release
			return nil
		})
	}()
	<-blocked
	const w, h = 977, 613 // a size no other test uses: a new buffer
	got := make(chan error, 1)
	var g *raster.Gray16
	go func() {
		var err error
		g, err = testEngine.NewPlane(ctx, w, h)
		got <- err
	}()
	select {
	case err := <-got:
		close(release)
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("NewPlane waited for the engine goroutine")
	}
	if !testEngine.host.pinned(unsafe.Pointer(&g.Pix[0]), int64(len(g.Pix))*2) {
		t.Fatal("the new plane is not in page-locked memory")
	}
	testEngine.FreePlane(g)
	if _, err := testEngine.Busy(); err != nil { // a Busy call before: not counted
		t.Fatal(err)
	}
	ops, err := testEngine.Busy()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(ops, func(o OpTime) bool { return o.Op == "test hold" })
	if i < 0 || ops[i].Calls != 1 {
		t.Fatalf("Busy has no single %q call: %+v", "test hold", ops)
	}
	if j := slices.IndexFunc(ops, func(o OpTime) bool { return o.Op == "busy" }); j >= 0 {
		t.Errorf("Busy counts its own call: %+v", ops[j])
	}
}
