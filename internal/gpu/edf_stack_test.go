//go:build cuda

package gpu

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"unsafe"

	"github.com/kintsugi-hpc/kintsugi-go/internal/edf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/edf/edftest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth"
)

// edfStackFuser is the streamed form (EDFStack: planes put one at a time,
// in reverse order to show the order does not matter) as an edf.Fuser.
type edfStackFuser struct{ e *Engine }

func (f edfStackFuser) Name() string { return "gpu EDFStack" }

func (f edfStackFuser) EDF(ctx context.Context, planes []*raster.Gray16, g edf.Gate, p edf.Params) (*edf.Result, error) {
	if err := edf.CheckPlanes(planes); err != nil {
		return nil, err
	}
	s, err := f.e.NewEDFStack(ctx, len(planes), planes[0].H, planes[0].W)
	if err != nil {
		return nil, err
	}
	defer s.Free()
	for z := len(planes) - 1; z >= 0; z-- {
		if err := s.Put(ctx, z, planes[z]); err != nil {
			return nil, err
		}
	}
	return s.Fuse(ctx, g, p)
}

// The streamed form passes the suite EDF passes.
func TestEDFStackConformance(t *testing.T) {
	edftest.Run(t, edfStackFuser{testEngine}, edftest.Options{Wavelet: true})
}

// The streamed form's results are bit-identical to EDF's on the same planes
// (output, index map, gate counts, slices used), for both methods.
func TestEDFStackEqualsEDF(t *testing.T) {
	o := synth.DefaultEDFStack()
	st := edftest.Stack(t, o)
	g := edftest.Gate
	for _, m := range []string{edf.MethodVariance, edf.MethodWavelet} {
		p := edf.DefaultParams()
		p.Method = m
		want, err := testEngine.EDF(context.Background(), st.Planes, g, p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := edfStackFuser{testEngine}.EDF(context.Background(), st.Planes, g, p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(u16bytes(got.Out.Pix), u16bytes(want.Out.Pix)) || !bytes.Equal(u16bytes(got.Index), u16bytes(want.Index)) ||
			fmt.Sprint(got.Stats, got.Used) != fmt.Sprint(want.Stats, want.Used) {
			t.Errorf("%s: the streamed form differs from EDF", m)
		}
	}
}

func u16bytes(v []uint16) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 2*len(v))
}
