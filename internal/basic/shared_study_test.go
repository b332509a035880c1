package basic_test

import (
	"context"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/basic"
	"github.com/kintsugi-hpc/kintsugi-go/internal/basic/basictest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// modeResult is one mode's fit of one case: flatfield RMS error (mean-1
// units), darkfield mean error relative to the truth's mean (fraction),
// darkfield RMS error (counts).
type modeResult struct {
	flat, darkRel, darkRMS float64
}

// compareModes fits one generator case under the original's darkfield
// rule, the stitch stage's compatible policy (darkest-image rule, refitted
// with the original's when it does not converge or comes back uniform) and
// ModeEnvelopeDarkfield, all at production settings on the CPU.
func compareModes(tb testing.TB, c basictest.SynthCase) (orig, stage, env modeResult) {
	tb.Helper()
	st, tr := basictest.MakeSynth(tb, tb.TempDir(), c)
	ctx := context.Background()
	cpu := basic.CPU{Workers: 2}
	res := func(pr basic.Profile) modeResult {
		e := basictest.Compare(pr, tr)
		return modeResult{flat: e.FlatRMS, darkRel: e.DarkMean / e.DarkMeanIn, darkRMS: basictest.DarkRMS(pr, tr)}
	}
	fit := func(m basic.DarkfieldMethod) basic.Profile {
		p := basic.Production()
		p.DarkfieldMethod = m
		prof, err := cpu.Fit(ctx, []*raster.Stack{st}, p)
		if err != nil {
			tb.Fatal(err)
		}
		return prof[0]
	}
	po := fit(basic.DarkfieldOriginal)
	ps := fit(basic.DarkfieldDarkest)
	if ps.Stalled || ps.Reweights >= basic.Production().MaxReweightIterations || uniform(ps.Flatfield) {
		ps = po
	}
	pe, err := basic.FitPlanes(ctx, basic.CPUPlanes{CPU: cpu}, [][]*raster.Gray16{toGray(st)}, basic.Production(), basic.ModeEnvelopeDarkfield, 2)
	if err != nil {
		tb.Fatal(err)
	}
	return res(po), res(ps), res(pe[0])
}

// toGray turns a stack in counts/65535 back into raw tiles (exact for
// stacks made from uint16 counts).
func toGray(st *raster.Stack) []*raster.Gray16 {
	out := make([]*raster.Gray16, st.N)
	for j := range st.N {
		g := raster.NewGray16(st.W, st.H)
		for i, v := range st.Plane(j) {
			g.Pix[i] = uint16(math.Round(float64(v) * 65535))
		}
		out[j] = g
	}
	return out
}

// studyCases are the generator's varied cases (basictest.SynthCase): every
// darkfield x channel x edge combination for the given seeds, unperturbed
// or perturbed (SynthCase.Perturb).
func studyCases(seeds []uint64, perturb bool) []basictest.SynthCase {
	var cs []basictest.SynthCase
	for _, s := range seeds {
		for _, d := range []string{"flat", "gradient", "vary"} {
			for _, ch := range []string{"dapi", "sparse", "dense"} {
				for _, e := range []bool{false, true} {
					cs = append(cs, basictest.SynthCase{Dark: d, Channel: ch, Edge: e, Seed: s, Perturb: perturb})
				}
			}
		}
	}
	return cs
}

// Targets of issue 19 for ModeEnvelopeDarkfield.
const (
	// targetDarkRel: |darkfield mean error| within 15 % of the truth's
	// mean, on every case.
	targetDarkRel = 0.15
	// targetFlatGain: mean flatfield RMS error over the varied cases at
	// most 0.8 of the original rule's (20 % below).
	targetFlatGain = 0.8
	// channelFlatGain bounds each channel's mean flatfield error relative
	// to the original rule's: the same 20 % (measured on the test's cases:
	// DAPI 0.56, sparse 0.13, dense marker 0.68; BenchmarkEnvelopeStudy:
	// 0.77, 0.13, 0.71).
	channelFlatGain = targetFlatGain
)

// TestEnvelopeDarkfieldTargets holds ModeEnvelopeDarkfield to the issue's
// targets on 12 of the generator's varied cases not used to choose its
// settings (seed 4 as generated: flat darkfield, a gradient with a tissue
// edge and a 300-count pattern for each channel; seed 5 perturbed
// (SynthCase.Perturb): the pattern with an edge for each channel): every
// case's darkfield mean within 15 % of the truth (measured: at most 11 %),
// and the mean flatfield error, over all cases (0.43) and per channel, at
// most 0.8 of the original rule's. BenchmarkEnvelopeStudy runs the full
// set.
func TestEnvelopeDarkfieldTargets(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: generator stacks, about 2.5 min on 2 cores")
	}
	var cases []basictest.SynthCase
	for _, ch := range []string{"dapi", "sparse", "dense"} {
		cases = append(cases,
			basictest.SynthCase{Dark: "flat", Channel: ch, Seed: 4},
			basictest.SynthCase{Dark: "gradient", Channel: ch, Edge: true, Seed: 4},
			basictest.SynthCase{Dark: "vary", Channel: ch, Seed: 4},
			basictest.SynthCase{Dark: "vary", Channel: ch, Edge: true, Seed: 5, Perturb: true})
	}
	flat := map[string][2]float64{}
	var all [2]float64
	for _, c := range cases {
		o, _, e := compareModes(t, c)
		t.Logf("%s  original flat %5.2f %% dark %+6.1f %%  envelope flat %5.2f %% dark %+6.1f %% (rms %.1f counts)",
			c, 100*o.flat, 100*o.darkRel, 100*e.flat, 100*e.darkRel, e.darkRMS)
		if math.Abs(e.darkRel) > targetDarkRel {
			t.Errorf("%s: envelope darkfield mean error %+.1f %% of the truth, target within %.0f %%", c, 100*e.darkRel, 100*targetDarkRel)
		}
		f := flat[c.Channel]
		f[0] += o.flat
		f[1] += e.flat
		flat[c.Channel] = f
		all[0] += o.flat
		all[1] += e.flat
	}
	for ch, f := range flat {
		t.Logf("channel %s: envelope flatfield error %.2f of the original rule's", ch, f[1]/f[0])
		if f[1] > channelFlatGain*f[0] {
			t.Errorf("channel %s: envelope flatfield error %.2f of the original rule's, bound %.2f", ch, f[1]/f[0], channelFlatGain)
		}
	}
	t.Logf("all: envelope flatfield error %.2f %% vs original %.2f %% (%.2f)", 100*all[1]/float64(len(cases)), 100*all[0]/float64(len(cases)), all[1]/all[0])
	if all[1] > targetFlatGain*all[0] {
		t.Errorf("envelope flatfield error %.2f of the original rule's over all cases, target at most %.2f", all[1]/all[0], targetFlatGain)
	}
}

// BenchmarkEnvelopeStudy compares ModeEnvelopeDarkfield with the
// original's darkfield rule and the stage's compatible policy on the
// generator's varied cases: darkfield flat / gradient / 300-count pattern,
// DAPI / sparse / dense marker, with and without a tissue edge; seeds 1-2
// as generated and seed 3 perturbed (SynthCase.Perturb). It prints one line
// per case and a table per channel and darkfield. Run with
//
//	go test -run '^$' -bench EnvelopeStudy -benchtime 1x -timeout 40m ./internal/basic/
//
// (about 8 min on 2 cores; KINTSUGI_STUDY_SEEDS=1: seed 1 only).
func BenchmarkEnvelopeStudy(b *testing.B) {
	cases := append(studyCases([]uint64{1, 2}, false), studyCases([]uint64{3}, true)...)
	if os.Getenv("KINTSUGI_STUDY_SEEDS") == "1" {
		cases = studyCases([]uint64{1}, false)
	}
	type sum struct {
		n                 int
		flat, dark, worst [3]float64
	}
	sums := map[string]*sum{}
	add := func(k string, r [3]modeResult) {
		s := sums[k]
		if s == nil {
			s = &sum{}
			sums[k] = s
		}
		s.n++
		for i, m := range r {
			s.flat[i] += m.flat
			s.dark[i] += math.Abs(m.darkRel)
			s.worst[i] = max(s.worst[i], math.Abs(m.darkRel))
		}
	}
	for range b.N {
		for _, c := range cases {
			o, s, e := compareModes(b, c)
			r := [3]modeResult{o, s, e}
			fmt.Printf("%s  original flat %5.2f %% dark %+6.1f %%  stage flat %5.2f %% dark %+6.1f %%  envelope flat %5.2f %% dark %+6.1f %% (rms %.1f)\n",
				c, 100*o.flat, 100*o.darkRel, 100*s.flat, 100*s.darkRel, 100*e.flat, 100*e.darkRel, e.darkRMS)
			add("all", r)
			add("ch="+c.Channel, r)
			add("dark="+c.Dark, r)
			if c.Perturb {
				add("perturbed", r)
			}
		}
	}
	keys := slices.Sorted(maps.Keys(sums))
	fmt.Println("| cases | fits | flatfield RMS %: original / stage / envelope | envelope / original | abs. darkfield mean error %: original / stage / envelope | worst: original / stage / envelope |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, k := range keys {
		s := sums[k]
		n := float64(s.n)
		fmt.Printf("| %s | %d | %.2f / %.2f / %.2f | %.2f | %.1f / %.1f / %.1f | %.1f / %.1f / %.1f |\n", k, s.n,
			100*s.flat[0]/n, 100*s.flat[1]/n, 100*s.flat[2]/n, s.flat[2]/s.flat[0],
			100*s.dark[0]/n, 100*s.dark[1]/n, 100*s.dark[2]/n, 100*s.worst[0], 100*s.worst[1], 100*s.worst[2])
	}
}
