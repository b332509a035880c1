package basic

import (
	"math"
	"testing"
)

// TestRoundStop feeds change sequences to the stop rule: converging ones
// (measured traces of converging fits, including a slow one whose change
// first rises and one that falls by only 7 % a round) must run to the
// tolerance; a NaN and period-1/2/3 limit cycles must stop early, flagged
// Stalled and not Converged.
func TestRoundStop(t *testing.T) {
	inf := math.Inf(1)
	cases := []struct {
		name      string
		changes   []float64
		rounds    int // where it must stop
		converged bool
		stalled   bool
	}{
		{"converges", []float64{inf, 0.089, 0.0039, 0.0024, 0.0019, 0.0011, 0.00069}, 7, true, false},
		{"rises-then-converges", []float64{inf, 0.012, 0.082, 0.11, 0.11, 0.09, 0.07, 0.053, 0.038, 0.028, 0.019,
			0.013, 0.0087, 0.0061, 0.0043, 0.003, 0.0023, 0.0014, 0.00091}, 19, true, false},
		{"slow", []float64{inf, 0.14, 0.0053, 0.0092, 0.0072, 0.0052, 0.0041, 0.0035, 0.0031, 0.0029, 0.0025,
			0.0023, 0.0021, 0.0016, 0.0012, 0.00077}, 16, true, false},
		{"nan", append([]float64{inf}, rep(math.NaN(), 24)...), 2, false, true},
		{"nan-first-round", rep(math.NaN(), 25), 1, false, true},
		{"period-2", append([]float64{inf, 0.6, 91, 0.076, 0.037, 0.0077, 4.2}, cycle(18, 0.75, 3)...), 13, false, true},
		{"period-1", append([]float64{inf, 0.5, 0.2}, rep(0.05, 22)...), 6, false, true},
		{"period-3", append([]float64{inf, 0.5}, cycle(23, 0.1, 0.2, 0.3)...), 11, false, true},
		{"no-convergence", append([]float64{inf}, ramp(24, 0.5, 0.9)...), 25, false, false},
	}
	p := Production()
	for _, c := range cases {
		r := NewRoundStop(p)
		n := 0
		for _, ch := range c.changes {
			n++
			if r.Round(ch, 36) {
				break
			}
		}
		if n != c.rounds || r.Converged != c.converged || r.Stalled != c.stalled {
			t.Errorf("%s: stopped after %d rounds (converged %v, stalled %v), want %d (%v, %v)",
				c.name, n, r.Converged, r.Stalled, c.rounds, c.converged, c.stalled)
		}
		if h := r.History(); len(h) != n || h[n-1].Iterations != 36 || !(h[n-1].Change == c.changes[n-1] || math.IsNaN(h[n-1].Change)) {
			t.Errorf("%s: history %v does not record the %d rounds", c.name, h, n)
		}
		// With NoEarlyStop a stalled fit runs every round; the others stop as before.
		q := p
		q.NoEarlyStop = true
		r = NewRoundStop(q)
		n = 0
		for _, ch := range c.changes {
			n++
			if r.Round(ch, 36) {
				break
			}
		}
		want := c.rounds
		if c.stalled {
			want = len(c.changes)
		}
		if n != want || r.Stalled {
			t.Errorf("%s, NoEarlyStop: stopped after %d rounds (stalled %v), want %d", c.name, n, r.Stalled, want)
		}
	}
}

func rep(v float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func cycle(n int, vs ...float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = vs[i%len(vs)]
	}
	return out
}

// ramp is a slowly changing non-converging sequence: v0, v0·f, v0·f², ...
func ramp(n int, v0, f float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v0
		v0 = math.Max(v0*f, 0.002) + 0.001*float64(i%2)
	}
	return out
}

// TestRoundChange: a NaN flatfield change is not hidden by the first
// round's +Inf darkfield change.
func TestRoundChange(t *testing.T) {
	inf := math.Inf(1)
	if c := RoundChange(math.NaN(), inf); !math.IsNaN(c) {
		t.Errorf("RoundChange(NaN, +Inf) = %g, want NaN", c)
	}
	if c := RoundChange(0.5, inf); c != inf {
		t.Errorf("RoundChange(0.5, +Inf) = %g, want +Inf", c)
	}
	if c := RoundChange(0.002, 0.003); c != 0.003 {
		t.Errorf("RoundChange(0.002, 0.003) = %g", c)
	}
}
