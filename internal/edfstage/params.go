package edfstage

import (
	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/edf"
)

// Params maps the config's edf section to the algorithm's parameters: the
// one place where edf keys become edf.Params (an empty method is the
// original's variance method). Params(config.DefaultEDF()) is
// edf.DefaultParams().
func Params(c config.EDF) edf.Params {
	m := c.Method
	if m == "" {
		m = edf.MethodVariance
	}
	return edf.Params{RadiusX: c.RadiusX, RadiusY: c.RadiusY, Sigma: c.Sigma, ZSmoothSigma: c.ZSmoothSigma,
		Method: m, WaveletLevels: c.WaveletLevels}
}

// Gate maps the config's quality_gate section to the slice gate
// (max_zero_pct and max_sat_pct are fractions, min_valid_slices a count).
func Gate(q config.QualityGate) edf.Gate {
	return edf.Gate{MaxZeroFrac: q.MaxZeroPct, MaxSatFrac: q.MaxSatPct, MinValid: q.MinValidSlices}
}
