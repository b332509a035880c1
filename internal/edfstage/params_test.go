package edfstage

import (
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/edf"
)

// TestParamsDefaults: the config's defaults map to the algorithm's (the two
// are written down once each; this holds them together).
func TestParamsDefaults(t *testing.T) {
	if got, want := Params(config.DefaultEDF()), edf.DefaultParams(); got != want {
		t.Errorf("Params(config.DefaultEDF()) = %+v, want edf.DefaultParams() %+v", got, want)
	}
}

func TestParamsKeys(t *testing.T) {
	c := config.EDF{RadiusX: 3, RadiusY: 4, Sigma: 2.5, ZSmoothSigma: 0.5, Method: edf.MethodWavelet, WaveletLevels: 5}
	want := edf.Params{RadiusX: 3, RadiusY: 4, Sigma: 2.5, ZSmoothSigma: 0.5, Method: edf.MethodWavelet, WaveletLevels: 5}
	if got := Params(c); got != want {
		t.Errorf("Params(%+v) = %+v, want %+v", c, got, want)
	}
	if got := Params(config.EDF{}).Method; got != edf.MethodVariance {
		t.Errorf("empty method -> %q, want %q", got, edf.MethodVariance)
	}
	q := config.QualityGate{MaxZeroPct: 0.2, MaxSatPct: 0.01, MinValidSlices: 4}
	if got := Gate(q); got != (edf.Gate{MaxZeroFrac: 0.2, MaxSatFrac: 0.01, MinValid: 4}) {
		t.Errorf("Gate(%+v) = %+v", q, got)
	}
}
