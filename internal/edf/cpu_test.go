package edf_test

import (
	"context"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/edf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/edf/edftest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth"
)

func TestCPUConformance(t *testing.T) {
	edftest.Run(t, edf.CPU{Workers: 2}, edftest.Options{Wavelet: true})
}

// Strips of any height (with their halos) give exactly the whole-plane
// result: the same arithmetic per pixel.
func TestStripsEqualWholePlane(t *testing.T) {
	o := synth.DefaultEDFStack()
	st := edftest.Stack(t, o)
	g := edftest.Gate
	for _, p := range []edf.Params{edf.DefaultParams(), {RadiusX: 4, RadiusY: 6, Sigma: 3, ZSmoothSigma: 2.5, Method: edf.MethodVariance}} {
		want, err := edftest.Whole(o.H).EDF(context.Background(), st.Planes, g, p)
		if err != nil {
			t.Fatal(err)
		}
		for _, rows := range []int{1, 2, 7, 33, 1000} {
			got, err := edf.CPU{Workers: 3, StripRows: rows}.EDF(context.Background(), st.Planes, g, p)
			if err != nil {
				t.Fatal(err)
			}
			for i := range want.Index {
				if got.Index[i] != want.Index[i] || got.Out.Pix[i] != want.Out.Pix[i] {
					t.Fatalf("strips of %d rows, params %+v: pixel (y %d, x %d) differs from the whole plane", rows, p, i/o.W, i%o.W)
				}
			}
		}
	}
}
