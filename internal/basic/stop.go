package basic

import "math"

// RoundStop is the stop rule of the reweighting loop, shared by every
// Fitter so that the engines stop on the same round: after each round the
// engine passes the round's relative change of the profiles (the maximum of
// the flatfield's and the darkfield's mean absolute change, as the
// original computes it) and the inner ALM iterations the round used.
//
// A fit stops when the change is at most Params.ReweightTol (converged, as
// in the original), when Params.MaxReweightIterations rounds have run (not
// converged), or early when it is stagnating (not converged): see Stalled.
// A fit that converges within the rounds never meets the stagnation test
// before it converges on the data measured (see the package tests), so its
// result is bit-identical to a run without it.
type RoundStop struct {
	p      Params
	rounds int
	change []float64 // per round; +Inf for the first (no previous darkfield)
	iters  []int     // inner iterations per round
	// Converged reports whether the last round met ReweightTol; Stalled
	// whether the fit was stopped early as stagnating.
	Converged, Stalled bool
}

// NewRoundStop returns the stop rule for p.
func NewRoundStop(p Params) *RoundStop { return &RoundStop{p: p} }

// Round records one finished reweighting round and reports whether the fit
// stops now.
func (r *RoundStop) Round(change float64, iters int) bool {
	r.rounds++
	r.change = append(r.change, change)
	r.iters = append(r.iters, iters)
	if change <= r.p.ReweightTol {
		r.Converged = true
		return true
	}
	if r.rounds >= r.p.MaxReweightIterations {
		return true
	}
	if !r.p.NoEarlyStop && r.stalled() {
		r.Stalled = true
		return true
	}
	return false
}

// History returns the rounds recorded so far, in order.
func (r *RoundStop) History() []Round {
	h := make([]Round, len(r.change))
	for i := range h {
		h[i] = Round{Change: r.change[i], Iterations: r.iters[i]}
	}
	return h
}

// RoundChange is a round's change as every engine computes it: the larger
// of the flatfield's and the darkfield's relative mean absolute change
// (madDark is +Inf in the first round), NaN when either is NaN (math.Max
// would let the first round's +Inf hide a NaN flatfield).
func RoundChange(madFlat, madDark float64) float64 {
	if math.IsNaN(madFlat) || math.IsNaN(madDark) {
		return math.NaN()
	}
	return math.Max(madFlat, madDark)
}

// Stagnation test constants (see stalled).
const (
	// cycleRelTol: two changes are "the same" when they differ by at most
	// this fraction of the larger. A converging fit's change falls by
	// 10-50 % a round (measured: see the package tests), three orders of
	// magnitude more.
	cycleRelTol = 1e-3
	// maxCyclePeriod is the longest period of a limit cycle looked for.
	maxCyclePeriod = 3
)

// stalled is the stagnation test, true when the fit certainly will not
// converge:
//
//   - diverged: the change is NaN (any round: see RoundChange) or, after
//     the first round, ±Inf. A NaN profile feeds NaN weights to every
//     later round, so the fit can never meet the tolerance (it used to run
//     all 25 rounds of 500 iterations: the darkest-image rule on dense
//     nuclear stacks, see darkStep); it now stops after its first round.
//   - limit cycle: the last 3·p changes repeat with a period p of 1 to 3
//     rounds (each within cycleRelTol of the one p rounds earlier), all
//     above ReweightTol. A reweighting round is a deterministic map of the
//     previous round's weights, so a fit that has come back to the same
//     change pattern for two whole periods is circling (measured: a
//     period-2 cycle 0.75 / 3 from round 8 to 25, stopped at round 17) instead of settling,
//     where the change keeps falling.
//
// The first round's change is +Inf by definition (no previous darkfield)
// and is never part of a test.
func (r *RoundStop) stalled() bool {
	c := r.change
	k := len(c)
	if math.IsNaN(c[k-1]) || (k >= 2 && math.IsInf(c[k-1], 0)) {
		return true
	}
	for p := 1; p <= maxCyclePeriod; p++ {
		if k-1 < 3*p { // rounds 2..k hold k-1 usable changes
			break
		}
		cyc := true
		for i := k - 2*p; i < k; i++ {
			if !same(c[i], c[i-p]) {
				cyc = false
				break
			}
		}
		if cyc {
			return true
		}
	}
	return false
}

// same reports whether a and b agree within cycleRelTol (relative).
func same(a, b float64) bool {
	return math.Abs(a-b) <= cycleRelTol*math.Max(math.Abs(a), math.Abs(b))
}
