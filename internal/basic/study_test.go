package basic_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/basic"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// studyCase is one stack of the darkfield study: the generator's example
// acquisition (5 x 6 tiles, 4x4-binned production optics) at a smaller tile
// size, one plane, with a darkfield pattern, a channel and a tissue layout.
type studyCase struct {
	dark    string // "flat", "gradient" (200 counts), "vary" (300-count pattern)
	channel string // "dapi" (dense nuclei), "sparse" (10 % of cells), "dense" (90 % of cells, membrane/cytoplasm/nuclear)
	edge    bool   // tissue edge, 75 % cover
	seed    uint64
}

func (c studyCase) String() string {
	e := "-"
	if c.edge {
		e = "edge"
	}
	return fmt.Sprintf("%-8s %-6s %-4s s%d", c.dark, c.channel, e, c.seed)
}

// studyStack generates c into dir and returns the (n, y, x) stack in
// counts/65535 with the true flatfield (mean 1) and darkfield (counts).
func studyStack(tb testing.TB, dir string, c studyCase) (*raster.Stack, []float64, []float64) {
	o, err := synth.Preset("example")
	if err != nil {
		tb.Fatal(err)
	}
	o.OutDir = dir
	o.Seed = c.seed
	o.TileH, o.TileW = 240, 320
	o.NZ, o.NCycles = 1, 1
	o.NChannels = 2
	o.BlankFirstCycle = false
	o.WriteTruthScene = false
	o.StageJitterPx = 1
	o.Workers = 2
	switch c.dark {
	case "flat":
		o.DarkfieldGradient = 0
	case "gradient":
		o.DarkfieldGradient = 200
	case "vary":
		o.DarkfieldVary = 300
	}
	ch := 1
	switch c.channel {
	case "sparse":
		ch, o.MarkerFraction = 2, 0.1
	case "dense":
		ch, o.MarkerFraction = 2, 0.9
	}
	o.Channels = []int{ch}
	if c.edge {
		o.TissueCover = 0.75
	}
	if err := synth.Generate(context.Background(), o); err != nil {
		tb.Fatal(err)
	}
	n := o.Rows * o.Cols
	st := raster.NewStack(n, o.TileH, o.TileW)
	for k := range n {
		g, err := tiffio.ReadGray16(filepath.Join(synth.RawDir(dir, 1), synth.RawName(k+1, 1, ch)))
		if err != nil {
			tb.Fatal(err)
		}
		pl := st.Plane(k)
		for i, v := range g.Pix {
			pl[i] = float32(v) / 65535
		}
	}
	flat, dark := o.Flatfield(ch), o.Darkfield(ch)
	tf := make([]float64, len(flat.Pix))
	td := make([]float64, len(dark.Pix))
	for i := range tf {
		tf[i], td[i] = float64(flat.Pix[i]), float64(dark.Pix[i])
	}
	return st, tf, td
}

// studyScore compares a profile with the truth: flatfield RMS (relative),
// darkfield mean error and RMS error (counts).
func studyScore(pr basic.Profile, tf, td []float64) (flatRMS, darkMean, darkRMS float64) {
	var mf float64
	for _, v := range pr.Flatfield {
		mf += float64(v)
	}
	mf /= float64(len(tf))
	var ss, ds, dss float64
	for i := range tf {
		d := float64(pr.Flatfield[i])/mf - tf[i]
		ss += d * d
		e := float64(pr.Darkfield[i])*65535 - td[i]
		ds += e
		dss += e * e
	}
	n := float64(len(tf))
	return math.Sqrt(ss / n), ds / n, math.Sqrt(dss / n)
}

// BenchmarkDarkfieldStudy compares the darkfield rules on the generator's
// varied data: darkfield flat / 200-count gradient / 300-count pattern (mean
// 460 counts), dense DAPI / sparse / dense marker, with and without a tissue
// edge, 3 seeds; production settings, each stack fitted under each rule. It
// prints one line per (case, rule) and a summary per rule. Run with
//
//	go test -run '^$' -bench DarkfieldStudy -benchtime 1x ./internal/basic/
//
// (KINTSUGI_STUDY_SEEDS=1 for a quick look; KINTSUGI_STUDY_TRACE=1 prints the
// change of every round).
func BenchmarkDarkfieldStudy(b *testing.B) {
	seeds := []uint64{1, 2, 3}
	if os.Getenv("KINTSUGI_STUDY_SEEDS") == "1" {
		seeds = seeds[:1]
	}
	trace := os.Getenv("KINTSUGI_STUDY_TRACE") == "1"
	var cases []studyCase
	for _, s := range seeds {
		for _, d := range []string{"flat", "gradient", "vary"} {
			for _, ch := range []string{"dapi", "sparse", "dense"} {
				for _, e := range []bool{false, true} {
					cases = append(cases, studyCase{d, ch, e, s})
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
	sums := make([]sum, len(rules))
	for range b.N {
		for ci, c := range cases {
			dir := b.TempDir()
			st, tf, td := studyStack(b, filepath.Join(dir, fmt.Sprint(ci)), c)
			var trueMean float64
			for _, v := range td {
				trueMean += v
			}
			trueMean /= float64(len(td))
			for ri, r := range rules {
				p := basic.Production()
				p.DarkfieldMethod = r
				var tr strings.Builder
				basic.SetRoundHook(func(round int, change float64, iters int) {
					fmt.Fprintf(&tr, " %d:%.2g/%d", round, change, iters)
				})
				t0 := time.Now()
				prof, err := basic.CPU{Workers: 2}.Fit(context.Background(), []*raster.Stack{st}, p)
				secs := time.Since(t0).Seconds()
				basic.SetRoundHook(nil)
				if err != nil {
					b.Fatal(err)
				}
				pr := prof[0]
				f, dm, dr := studyScore(pr, tf, td)
				status := "conv"
				switch {
				case pr.Stalled:
					status = "STALL"
				case !pr.Converged:
					status = "NOCONV"
				}
				fmt.Printf("%s  %-8v flat %5.2f %%  dark %+7.1f of %5.1f (rms %6.1f)  %-6s %2d rounds %5d it %5.1f s\n",
					c, r, 100*f, dm, trueMean, dr, status, pr.Reweights, pr.Iterations, secs)
				if trace {
					fmt.Printf("    %s\n", tr.String())
				}
				s := &sums[ri]
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
		}
	}
	for ri, r := range rules {
		s := sums[ri]
		n := float64(s.n)
		fmt.Printf("summary %-8v %d fits: converged %d, stalled %d; mean flatfield RMS %.2f %%, mean |dark error| %.1f counts, mean dark RMS %.1f counts, mean %.0f iterations, %.1f s\n",
			r, s.n, s.conv, s.stall, 100*s.flat/n, s.darkAbs/n, s.darkRMS/n, s.iters/n, s.secs/n)
	}
}
