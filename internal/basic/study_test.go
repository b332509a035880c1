package basic_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/basic"
	"github.com/kintsugi-hpc/kintsugi-go/internal/basic/basictest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// TestStallCheckKeepsConvergingFits fits generator stacks that converge
// under both darkfield rules with the early stop of stagnating fits on and
// off: the profiles, rounds and iterations must be bit-identical (the stop
// rule only ends fits that would not converge).
func TestStallCheckKeepsConvergingFits(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: generator stacks")
	}
	for _, cm := range []struct {
		c basictest.SynthCase
		m basic.DarkfieldMethod
	}{
		{basictest.SynthCase{Dark: "flat", Channel: "dense", Seed: 1}, basic.DarkfieldDarkest},     // converges at round 6
		{basictest.SynthCase{Dark: "gradient", Channel: "dapi", Seed: 1}, basic.DarkfieldOriginal}, // change first rises (0.012 -> 0.11), converges at round 19
	} {
		c, m := cm.c, cm.m
		st, _ := basictest.MakeSynth(t, t.TempDir(), c)
		{
			p := basic.Production()
			p.DarkfieldMethod = m
			var got [2]basic.Profile
			for k, off := range []bool{false, true} {
				p.NoEarlyStop = off
				prof, err := basic.CPU{}.Fit(context.Background(), []*raster.Stack{st}, p)
				if err != nil {
					t.Fatal(err)
				}
				got[k] = prof[0]
			}
			a, b := got[0], got[1]
			if !a.Converged || a.Stalled {
				t.Errorf("%v %v: not converged (%d rounds, stalled %v)", c, m, a.Reweights, a.Stalled)
			}
			if a.Reweights != b.Reweights || a.Iterations != b.Iterations ||
				!slices.Equal(a.Flatfield, b.Flatfield) || !slices.Equal(a.Darkfield, b.Darkfield) {
				t.Errorf("%v %v: stop rule changed a converging fit: %d/%d rounds/iterations vs %d/%d without",
					c, m, a.Reweights, a.Iterations, b.Reweights, b.Iterations)
			}
		}
	}
}

// BenchmarkDarkfieldStudy compares the darkfield rules on the generator's
// varied data (basictest.SynthCase): darkfield flat / 200-count gradient /
// 300-count pattern (mean 460 counts), dense DAPI / sparse marker / dense
// marker, with and without a tissue edge, 3 seeds; production settings,
// each stack fitted under each rule. It prints one line per (case, rule)
// and a summary per rule. Run with
//
//	go test -run '^$' -bench DarkfieldStudy -benchtime 1x ./internal/basic/
//
// (KINTSUGI_STUDY_SEEDS=1 for one seed; KINTSUGI_STUDY_TRACE=1 prints every
// round's change/iterations).
func BenchmarkDarkfieldStudy(b *testing.B) {
	seeds := []uint64{1, 2, 3}
	if os.Getenv("KINTSUGI_STUDY_SEEDS") == "1" {
		seeds = seeds[:1]
	}
	trace := os.Getenv("KINTSUGI_STUDY_TRACE") == "1"
	var cases []basictest.SynthCase
	for _, s := range seeds {
		for _, d := range []string{"flat", "gradient", "vary"} {
			for _, ch := range []string{"dapi", "sparse", "dense"} {
				for _, e := range []bool{false, true} {
					cases = append(cases, basictest.SynthCase{Dark: d, Channel: ch, Edge: e, Seed: s})
				}
			}
		}
	}
	rules := []basic.DarkfieldMethod{basic.DarkfieldOriginal, basic.DarkfieldDarkest}
	type sum struct {
		n, conv, stall                int
		flat, darkAbs, darkRMS, iters float64
		secs                          float64
	}
	sums := make(map[string]*sum)
	add := func(key string, pr basic.Profile, f, dm, dr, secs float64) {
		s := sums[key]
		if s == nil {
			s = &sum{}
			sums[key] = s
		}
		s.n++
		if pr.Converged {
			s.conv++
		}
		if pr.Stalled {
			s.stall++
		}
		s.flat += f
		s.darkAbs += math.Abs(dm)
		s.darkRMS += dr
		s.iters += float64(pr.Iterations)
		s.secs += secs
	}
	for range b.N {
		for _, c := range cases {
			st, tr := basictest.MakeSynth(b, b.TempDir(), c)
			var res [2]basic.Profile
			var took [2]float64
			for ri, r := range rules {
				p := basic.Production()
				p.DarkfieldMethod = r
				t0 := time.Now()
				prof, err := basic.CPU{Workers: 2}.Fit(context.Background(), []*raster.Stack{st}, p)
				secs := time.Since(t0).Seconds()
				if err != nil {
					b.Fatal(err)
				}
				pr := prof[0]
				var tb strings.Builder
				for i, r := range pr.Rounds {
					fmt.Fprintf(&tb, " %d:%.3g/%d", i+1, r.Change, r.Iterations)
				}
				res[ri], took[ri] = pr, secs
				e := basictest.Compare(pr, tr)
				dr := basictest.DarkRMS(pr, tr)
				status := "conv"
				switch {
				case pr.Stalled:
					status = "STALL"
				case !pr.Converged:
					status = "NOCONV"
				}
				fmt.Printf("%s  %-8v flat %5.2f %%  dark %+7.1f of %5.1f (rms %6.1f)  %-6s %2d rounds %5d it %5.1f s\n",
					c, r, 100*e.FlatRMS, e.DarkMean, e.DarkMeanIn, dr, status, pr.Reweights, pr.Iterations, secs)
				if trace {
					fmt.Printf("    %s\n", tb.String())
				}
				add(fmt.Sprintf("%-8v all", r), pr, e.FlatRMS, e.DarkMean, dr, secs)
				add(fmt.Sprintf("%-8v dark=%s", r, c.Dark), pr, e.FlatRMS, e.DarkMean, dr, secs)
				add(fmt.Sprintf("%-8v ch=%s", r, c.Channel), pr, e.FlatRMS, e.DarkMean, dr, secs)
				add(fmt.Sprintf("%-8v edge=%v", r, c.Edge), pr, e.FlatRMS, e.DarkMean, dr, secs)
			}
			// The stitch stage's policy (production): the darkest-image fit,
			// refitted with the original rule when it stalled, used all
			// rounds, or came back uniform (stitch.refitUniform).
			pr, secs := res[1], took[1]
			if pr.Stalled || pr.Reweights >= basic.Production().MaxReweightIterations || uniform(pr.Flatfield) {
				pr, secs = res[0], took[0]+took[1]
				pr.Iterations += res[1].Iterations
			}
			e := basictest.Compare(pr, tr)
			dr := basictest.DarkRMS(pr, tr)
			fmt.Printf("%s  %-8s flat %5.2f %%  dark %+7.1f of %5.1f (rms %6.1f)  %d it\n", c, "stage", 100*e.FlatRMS, e.DarkMean, e.DarkMeanIn, dr, pr.Iterations)
			add(fmt.Sprintf("%-8s all", "stage"), pr, e.FlatRMS, e.DarkMean, dr, secs)
			add(fmt.Sprintf("%-8s dark=%s", "stage", c.Dark), pr, e.FlatRMS, e.DarkMean, dr, secs)
			add(fmt.Sprintf("%-8s ch=%s", "stage", c.Channel), pr, e.FlatRMS, e.DarkMean, dr, secs)
			add(fmt.Sprintf("%-8s edge=%v", "stage", c.Edge), pr, e.FlatRMS, e.DarkMean, dr, secs)
		}
	}
	keys := make([]string, 0, len(sums))
	for k := range sums {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	fmt.Println("| rule, cases | fits | converged | stalled | flatfield RMS % | abs dark mean error | dark RMS error | iterations | s |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	for _, k := range keys {
		s := sums[k]
		n := float64(s.n)
		fmt.Printf("| %s | %d | %d | %d | %.2f | %.1f | %.1f | %.0f | %.1f |\n",
			k, s.n, s.conv, s.stall, 100*s.flat/n, s.darkAbs/n, s.darkRMS/n, s.iters/n, s.secs/n)
	}
}

func uniform(f []float32) bool {
	for _, v := range f {
		if v != 1 {
			return false
		}
	}
	return true
}
