package synth

import (
	"errors"
	"math"
	"testing"
)

// TestVarietyOptions checks the variety options against what they state:
// the darkfield pattern's peak to peak and unchanged mean, the tissue edge's
// cover fraction, the marker fraction override, and validation.
func TestVarietyOptions(t *testing.T) {
	o, err := Preset("example")
	if err != nil {
		t.Fatal(err)
	}
	o.DarkfieldGradient = 0
	base := o.Darkfield(1)
	o.DarkfieldVary = 300
	d := o.Darkfield(1)
	lo, hi, mean := math.Inf(1), math.Inf(-1), 0.0
	for _, v := range d.Pix {
		lo, hi = min(lo, float64(v)), max(hi, float64(v))
		mean += float64(v)
	}
	mean /= float64(len(d.Pix))
	// The pattern spans 300 counts; the 3-count bump adds at most 3.
	if p2p := hi - lo; p2p < 297 || p2p > 303 {
		t.Errorf("darkfield peak to peak %.1f counts, want 300 ± 3", p2p)
	}
	if math.Abs(mean-o.DarkfieldMean(1)) > 0.05 {
		t.Errorf("darkfield mean %.3f, want %.1f", mean, o.DarkfieldMean(1))
	}
	same := true
	for i := range d.Pix {
		same = same && d.Pix[i] == base.Pix[i]
	}
	if same {
		t.Error("DarkfieldVary did not change the darkfield")
	}

	for _, cover := range []float64{0.5, 0.75, 0.9} {
		o.TissueCover = cover
		e := newTissueEdge(o)
		h, w := o.nominalSize()
		var in, n int
		for y := 0.5; y < h; y += 4 {
			for x := 0.5; x < w; x += 4 {
				n++
				if e.at(y, x) > 0.5 {
					in++
				}
			}
		}
		if f := float64(in) / float64(n); math.Abs(f-cover) > 0.02 {
			t.Errorf("tissue cover %.2f: measured %.3f on the mosaic", cover, f)
		}
	}
	if newTissueEdge(Options{}).at(1, 1) != 1 {
		t.Error("no TissueCover: the edge factor must be 1")
	}

	if o.MarkerFraction = 0; o.markerFraction(0.2) != 0.2 {
		t.Error("MarkerFraction 0 must keep the drawn fraction")
	}
	if o.MarkerFraction = 0.9; o.markerFraction(0.2) != 0.9 {
		t.Error("MarkerFraction must override the drawn fraction")
	}

	for _, bad := range []func(*Options){
		func(o *Options) { o.DarkfieldVary = -1 },
		func(o *Options) { o.MarkerFraction = 1.5 },
		func(o *Options) { o.TissueCover = -0.1 },
		func(o *Options) { o.TissueCover = math.NaN() },
	} {
		p, _ := Preset("tiny")
		bad(&p)
		if err := p.Validate(); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("Validate accepted bad variety options: %v", err)
		}
	}
}
