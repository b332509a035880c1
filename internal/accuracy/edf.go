package accuracy

import (
	"context"
	"fmt"
	"io"
	"math"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/edf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth"
)

// EDFReport scores EDF methods on synthetic z-stacks with a known smooth
// in-focus depth map (synth.MakeEDFStack): every blob is sharp at the
// depth map's value; the truth is the all-in-focus image.
type EDFReport struct {
	Stack   synth.EDFStackOptions `json:"stack"`
	Seeds   []uint64              `json:"seeds"`
	Methods []EDFMethodReport     `json:"methods"`
}

// EDFMethodReport is one method's error, averaged over the seeds.
type EDFMethodReport struct {
	Method string  `json:"method"`
	RMSE   float64 `json:"rmse_counts"` // vs the sharp truth, counts
	NRMSE  float64 `json:"nrmse"`       // RMSE / standard deviation of the truth
	NCC    float64 `json:"ncc"`         // with the sharp truth
	// Depth map error |index - true depth| in planes (median, 90th
	// percentile); absent for the max projection.
	DepthMedian *float64 `json:"depth_error_median_planes,omitempty"`
	DepthP90    *float64 `json:"depth_error_p90_planes,omitempty"`
	Seconds     float64  `json:"seconds"`
}

// EvaluateEDF renders one stack per seed and scores the variance method
// (the original's parameters p with Method variance), the wavelet method,
// a plain maximum projection and the best single slice, all on the slices
// the quality gate g selects.
func EvaluateEDF(ctx context.Context, so synth.EDFStackOptions, seeds []uint64, p edf.Params, g edf.Gate, workers int) (EDFReport, error) {
	rep := EDFReport{Stack: so, Seeds: seeds}
	names := []string{"variance (original)", "wavelet", "max projection", "best single slice"}
	acc := make([]struct {
		rmse, nrmse, ncc, med, p90, secs float64
		depth                            bool
	}, len(names))
	for _, seed := range seeds {
		so.Seed = seed
		st, err := synth.MakeEDFStack(so)
		if err != nil {
			return rep, err
		}
		sd := stdDev(st.Sharp.Pix)
		for mi, name := range names {
			t := time.Now()
			var out *raster.Gray16
			var index []uint16
			switch mi {
			case 0, 1:
				q := p
				q.Method = edf.MethodVariance
				if mi == 1 {
					q.Method = edf.MethodWavelet
				}
				r, err := edf.CPU{Workers: workers}.EDF(ctx, st.Planes, g, q)
				if err != nil {
					return rep, fmt.Errorf("%s: %w", name, err)
				}
				out, index = r.Out, r.Index
			case 2, 3:
				stats := make([]edf.SliceStats, len(st.Planes))
				for i, pl := range st.Planes {
					stats[i] = edf.StatsOf(pl.Pix)
				}
				used, err := edf.Select(stats, g)
				if err != nil {
					return rep, err
				}
				if mi == 2 {
					out = raster.NewGray16(so.W, so.H)
					for _, k := range used {
						for i, v := range st.Planes[k].Pix {
							out.Pix[i] = max(out.Pix[i], v)
						}
					}
				} else {
					best := math.Inf(1)
					for _, k := range used {
						if e := RMSE16(st.Planes[k], st.Sharp); e < best {
							best, out = e, st.Planes[k]
						}
					}
				}
			}
			a := &acc[mi]
			a.secs += time.Since(t).Seconds()
			e := RMSE16(out, st.Sharp)
			a.rmse += e
			a.nrmse += e / sd
			a.ncc += ncc16(out, st.Sharp)
			if index != nil {
				med, p90 := DepthError(index, st.Depth)
				a.med += med
				a.p90 += p90
				a.depth = true
			}
		}
	}
	n := float64(len(seeds))
	for mi, name := range names {
		a := acc[mi]
		m := EDFMethodReport{Method: name, RMSE: a.rmse / n, NRMSE: a.nrmse / n, NCC: a.ncc / n, Seconds: a.secs / n}
		if a.depth {
			med, p90 := a.med/n, a.p90/n
			m.DepthMedian, m.DepthP90 = &med, &p90
		}
		rep.Methods = append(rep.Methods, m)
	}
	return rep, nil
}

// WriteEDFTable writes the EDF report as an aligned table.
func WriteEDFTable(w io.Writer, r EDFReport) error {
	s := r.Stack
	fmt.Fprintf(w, "EDF accuracy on synthetic stacks: %d x %d px, %d slices, true depth %.1f..%.1f (0-based slices, smooth), defocus blur %.1f px per slice, %d seeds\n",
		s.W, s.H, s.NZ, s.DepthLo, s.DepthHi, s.Blur, len(r.Seeds))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "method\tRMSE vs sharp (counts)\tNRMSE\tNCC\tdepth err median (slices)\tdepth err p90\tCPU s\t")
	for _, m := range r.Methods {
		dm, dp := "-", "-"
		if m.DepthMedian != nil {
			dm, dp = fmt.Sprintf("%.2f", *m.DepthMedian), fmt.Sprintf("%.2f", *m.DepthP90)
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%.3f\t%.4f\t%s\t%s\t%.2f\t\n", m.Method, m.RMSE, m.NRMSE, m.NCC, dm, dp, m.Seconds)
	}
	return tw.Flush()
}

// RMSE16 is the root-mean-square difference of a plane from a truth of
// the same size, counts.
func RMSE16(g *raster.Gray16, truth *raster.Float32) float64 {
	var s float64
	for i, v := range g.Pix {
		d := float64(v) - float64(truth.Pix[i])
		s += d * d
	}
	return math.Sqrt(s / float64(len(g.Pix)))
}

func ncc16(g *raster.Gray16, truth *raster.Float32) float64 {
	var ma, mb float64
	for i, v := range g.Pix {
		ma += float64(v)
		mb += float64(truth.Pix[i])
	}
	n := float64(len(g.Pix))
	ma, mb = ma/n, mb/n
	var sab, saa, sbb float64
	for i, v := range g.Pix {
		a, b := float64(v)-ma, float64(truth.Pix[i])-mb
		sab += a * b
		saa += a * a
		sbb += b * b
	}
	return sab / math.Sqrt(saa*sbb)
}

func stdDev(v []float32) float64 {
	var m float64
	for _, x := range v {
		m += float64(x)
	}
	m /= float64(len(v))
	var s float64
	for _, x := range v {
		d := float64(x) - m
		s += d * d
	}
	return math.Sqrt(s / float64(len(v)))
}

// DepthError returns the median and the 90th percentile over all pixels of
// |index - depth|: an EDF index map (edf.Result.Index, the plane used per
// pixel) against the true in-focus depth (synth.EDFStack.Depth), planes.
func DepthError(index []uint16, depth []float64) (med, p90 float64) {
	e := make([]float64, len(index))
	for i, k := range index {
		e[i] = math.Abs(float64(k) - depth[i])
	}
	sort.Float64s(e)
	return e[len(e)/2], e[len(e)*9/10]
}
