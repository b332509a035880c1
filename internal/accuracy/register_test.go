package accuracy

import (
	"context"
	"os"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/register"
)

// RegMaxRMS is the bound on the RMS error of the recovered mapping
// over tissue, px.
const RegMaxRMS = 0.5

// The registration report on its default workload (translations up to
// 100 px, rotations up to 1 degree, warps up to 5 px): every cycle within
// RegMaxRMS, far from where it started.
func TestRegistrationAccuracy(t *testing.T) {
	o := DefaultRegOptions()
	if testing.Short() {
		o.Cycles = 2
	}
	o.Workers = 2
	rep, err := EvaluateRegistration(context.Background(), register.CPU{Workers: 2}, o)
	if err != nil {
		t.Fatal(err)
	}
	WriteRegTable(os.Stdout, rep)
	for _, c := range rep.Cycles {
		if !(c.Final.RMSAfter <= RegMaxRMS) {
			t.Errorf("cycle %d: RMS error %.3f px > %.2f (before %.1f px)", c.Cycle, c.Final.RMSAfter, RegMaxRMS, c.Final.RMSBefore)
		}
		if !(c.Final.RMSBefore > 10) {
			t.Errorf("cycle %d: the truth moved only %.1f px RMS: weak test", c.Cycle, c.Final.RMSBefore)
		}
		if c.Final.Points < 1000 {
			t.Errorf("cycle %d: %d tissue points", c.Cycle, c.Final.Points)
		}
		if !(c.Metrics.NCCFinal > c.Metrics.NCCBefore) || !(c.Metrics.JacobianMin > 0) {
			t.Errorf("cycle %d: metrics %+v", c.Cycle, c.Metrics)
		}
	}
}
