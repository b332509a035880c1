//go:build cuda

package gpu

import (
	"context"
	"testing"

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
