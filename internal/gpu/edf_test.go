//go:build cuda

package gpu

import (
	"bytes"
	"context"
	"testing"

	"github.com/mumax/3/cuda/cu"

	"github.com/kintsugi-hpc/kintsugi-go/internal/edf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/edf/edftest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth"
)

// The device-buffer forms on a float32 stack give the uint16 host form's
// index map (counts are exact in float32).
func TestEDFDeviceFloat32(t *testing.T) {
	o := synth.DefaultEDFStack()
	st := edftest.Stack(t, o)
	g := edftest.Gate
	want, err := testEngine.EDF(context.Background(), st.Planes, g, edf.DefaultParams())
	if err != nil {
		t.Fatal(err)
	}
	e := testEngine
	n, plane := len(st.Planes), int64(o.W*o.H)
	got := &edf.Result{Out: raster.NewGray16(o.W, o.H), Index: make([]uint16, plane)}
	err = e.do(context.Background(), "edf f32", func() error {
		stack := e.alloc(int64(n) * plane * 4)
		out := e.alloc(plane * 4)
		idx := e.alloc(plane * 2)
		defer e.release(stack, out, idx)
		host := make([]float32, int64(n)*plane)
		for i, p := range st.Planes {
			for j, v := range p.Pix {
				host[int64(i)*plane+int64(j)] = float32(v)
			}
		}
		put(e, stack, host)
		got.Stats = e.edfGateDev(stack, true, n, o.H, o.W)
		used, err := edf.Select(got.Stats, g)
		if err != nil {
			return err
		}
		got.Used = used
		if err := e.edfFuseDev(context.Background(), stack, true, o.H, o.W, used, edf.DefaultParams(), out, idx); err != nil {
			return err
		}
		fo := make([]float32, plane)
		get(e, fo, out)
		get(e, got.Index, idx)
		for i, v := range fo {
			got.Out.Pix[i] = uint16(v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	edftest.CompareResults(t, "float32 device stack", got, want)
}

// The tiled passes (edfTiles) give the untiled passes' results bit for bit:
// plane sizes off the tiles' multiples and below them, filters from none
// to wider than the y tile's shared memory (sigma 16: the y pass falls back
// to the untiled form while the x pass stays tiled), windows of several
// shapes.
func TestEDFTilesEqualUntiled(t *testing.T) {
	defer func() { edfTiles = true }()
	cases := []struct {
		name string
		w, h int
		p    func(*edf.Params)
	}{
		{"default 700x333", 700, 333, nil},
		{"sigma 16, radius 4x1, 300x517", 300, 517, func(p *edf.Params) { p.Sigma, p.RadiusX, p.RadiusY = 16, 4, 1 }},
		{"sigma 0, radius 0x3, no z smoothing, 257x65", 257, 65, func(p *edf.Params) { p.Sigma, p.RadiusX, p.RadiusY, p.ZSmoothSigma = 0, 0, 3, 0 }},
		{"radius 40x40, 97x71", 97, 71, func(p *edf.Params) { p.RadiusX, p.RadiusY = 40, 40 }},
		{"tiny 9x6", 9, 6, nil},
	}
	for _, c := range cases {
		o := synth.DefaultEDFStack()
		o.W, o.H, o.Density = c.w, c.h, 0.02
		st := edftest.Stack(t, o)
		p := edf.DefaultParams()
		if c.p != nil {
			c.p(&p)
		}
		var res [2]*edf.Result
		for i, tiles := range []bool{false, true} {
			edfTiles = tiles
			r, err := testEngine.EDF(context.Background(), st.Planes, edftest.Gate, p)
			if err != nil {
				t.Fatalf("%s (tiles %t): %v", c.name, tiles, err)
			}
			res[i] = r
		}
		if !bytes.Equal(u16bytes(res[1].Index), u16bytes(res[0].Index)) || !bytes.Equal(u16bytes(res[1].Out.Pix), u16bytes(res[0].Out.Pix)) {
			n := 0
			for i := range res[0].Index {
				if res[0].Index[i] != res[1].Index[i] {
					n++
				}
			}
			t.Errorf("%s: tiled passes differ from the untiled (%d of %d index pixels)", c.name, n, len(res[0].Index))
		}
	}
}

// BenchmarkEDFFuseProduction times the variance method's fuse of one
// production channel on the device (20 planes of 12662 x 7479 px, uint16,
// already on the card; filters, argmax, z smoothing and gather), with the
// tiled and the untiled passes:
//
//	go test -tags cuda -run '^$' -bench EDFFuseProduction -benchtime 5x ./internal/gpu/
func BenchmarkEDFFuseProduction(b *testing.B) {
	defer func() { edfTiles = true }()
	const n, h, w = 20, 7479, 12662
	plane := int64(h) * int64(w)
	o := synth.DefaultEDFStack()
	st := edftest.Stack(b, o)
	e := testEngine
	var stack, out, idx cu.DevicePtr
	err := e.do(context.Background(), "edf bench alloc", func() error {
		stack, out, idx = e.alloc(n*plane*2), e.alloc(plane*2), e.alloc(plane*2)
		host := make([]uint16, plane)
		for z := range n { // each slice tiled with one of the synthetic planes
			src := st.Planes[z%len(st.Planes)]
			for y := range h {
				for x := range w {
					host[y*w+x] = src.Pix[(y%src.H)*src.W+x%src.W]
				}
			}
			put(e, stack+cu.DevicePtr(int64(z)*plane*2), host)
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = e.do(context.Background(), "edf bench free", func() error { e.release(stack, out, idx); return nil })
	}()
	used := make([]int, n)
	for i := range used {
		used[i] = i
	}
	for _, tiles := range []bool{true, false} {
		b.Run(map[bool]string{true: "tiled", false: "untiled"}[tiles], func(b *testing.B) {
			edfTiles = tiles
			for b.Loop() {
				err := e.do(context.Background(), "edf bench", func() error {
					if err := e.edfFuseDev(context.Background(), stack, false, h, w, used, edf.DefaultParams(), out, idx); err != nil {
						return err
					}
					e.sync()
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/channel")
		})
	}
}
