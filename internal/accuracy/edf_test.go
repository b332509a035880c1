package accuracy

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/edf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth"
)

// The EDF report ranks the methods as the suite holds them: the wavelet
// method closest to the sharp truth, both EDF methods ahead of the max
// projection, depth errors present for the EDF methods only.
func TestEvaluateEDF(t *testing.T) {
	g := edf.Gate{MaxZeroFrac: 0.1, MaxSatFrac: 0.05, MinValid: 3}
	r, err := EvaluateEDF(context.Background(), synth.DefaultEDFStack(), []uint64{1, 2}, edf.DefaultParams(), g, 2)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteEDFTable(&b, r); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
	v, w, mp := r.Methods[0], r.Methods[1], r.Methods[2]
	if !(w.RMSE < v.RMSE && v.RMSE < mp.RMSE) || !(w.NCC > mp.NCC) {
		t.Errorf("ranking: wavelet %.1f, variance %.1f, max projection %.1f counts RMSE", w.RMSE, v.RMSE, mp.RMSE)
	}
	if v.DepthMedian == nil || w.DepthMedian == nil || mp.DepthMedian != nil || *v.DepthMedian > 0.5 || *w.DepthMedian > 0.5 {
		t.Errorf("depth errors: variance %v, wavelet %v, max projection %v", v.DepthMedian, w.DepthMedian, mp.DepthMedian)
	}
	if !strings.Contains(b.String(), "max projection") {
		t.Error("table lacks the max projection row")
	}
}
