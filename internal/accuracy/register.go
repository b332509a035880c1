package accuracy

import (
	"context"
	"fmt"
	"io"
	"math"
	"text/tabwriter"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/register"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth"
)

// Registration accuracy: synthetic cycles (synth.RegScene) with known rigid
// and non-rigid geometry are registered to cycle 1, and the recovered
// mapping is compared with the truth at the points of a grid (step px) that
// lie on tissue (synth tissue indicator >= 0.5, at least Margin px inside
// the image): RMS and max of |estimated(p) − true(p)| in px, beside the RMS
// of |p − true(p)| (the error before registration).

// MappingError is the error of one cycle's mapping over tissue, px.
type MappingError struct {
	RMSBefore float64 `json:"rms_before_px"`
	RMSAfter  float64 `json:"rms_after_px"`
	MaxAfter  float64 `json:"max_after_px"`
	Points    int     `json:"points"`
}

// ScoreMapping compares est with truth over the tissue points of an h x w
// image on a grid of step px, margin px inside the border.
func ScoreMapping(h, w, step, margin int, tissue func(y, x float64) float64, truth, est func(y, x float64) (float64, float64)) MappingError {
	var e MappingError
	var sb, sa float64
	for y := margin; y < h-margin; y += step {
		for x := margin; x < w-margin; x += step {
			fy, fx := float64(y), float64(x)
			if tissue(fy, fx) < 0.5 {
				continue
			}
			ty, tx := truth(fy, fx)
			ey, ex := est(fy, fx)
			d := math.Hypot(ey-ty, ex-tx)
			sb += (ty-fy)*(ty-fy) + (tx-fx)*(tx-fx)
			sa += d * d
			e.MaxAfter = math.Max(e.MaxAfter, d)
			e.Points++
		}
	}
	if e.Points > 0 {
		e.RMSBefore = math.Sqrt(sb / float64(e.Points))
		e.RMSAfter = math.Sqrt(sa / float64(e.Points))
	}
	return e
}

// RegOptions configure EvaluateRegistration.
type RegOptions struct {
	Scene   synth.RegOptions
	Cycles  int             // cycles including the reference (cycle 1)
	Params  register.Params // registration settings
	Step    int             // scoring grid step, px (0: 16)
	Workers int
}

// DefaultRegOptions is the report's default workload: 4 cycles of
// 1024 x 1280 px with translations up to 100 px, rotations up to 1 degree
// and non-rigid warps up to 5 px, registered with the default parameters
// at working levels of at most 640 px.
func DefaultRegOptions() RegOptions {
	p := register.DefaultParams()
	p.MaxImageDim, p.NonRigidMaxDim, p.CoarseDim = 640, 640, 320
	return RegOptions{
		Scene:  synth.RegOptions{H: 1024, W: 1280, Channels: 1, Seed: 1, MaxShift: 100, MaxRotDeg: 1, WarpPx: 5},
		Cycles: 4, Params: p, Step: 16,
	}
}

// RegCycleReport is one cycle's registration accuracy.
type RegCycleReport struct {
	Cycle       int     `json:"cycle"`
	TrueRotDeg  float64 `json:"true_rotation_deg"`
	TrueTY      float64 `json:"true_translation_y_px"`
	TrueTX      float64 `json:"true_translation_x_px"`
	EstRotDeg   float64 `json:"rotation_deg"`
	RigidOnly   MappingError
	Final       MappingError
	Metrics     register.Metrics `json:"metrics"`
	ElapsedSecs float64          `json:"seconds"`
}

// RegReport is the registration accuracy report.
type RegReport struct {
	Backend string           `json:"backend"`
	H, W    int              `json:"-"`
	Cycles  []RegCycleReport `json:"cycles"`
}

// EvaluateRegistration generates the cycles, registers each to cycle 1
// with be and scores the mappings.
func EvaluateRegistration(ctx context.Context, be register.Backend, o RegOptions) (*RegReport, error) {
	if o.Step <= 0 {
		o.Step = 16
	}
	o.Scene.Workers = max(o.Scene.Workers, o.Workers)
	if o.Params.Workers <= 0 {
		o.Params.Workers = o.Workers
	}
	sc, err := synth.NewRegScene(o.Scene)
	if err != nil {
		return nil, err
	}
	ref, _, err := sc.RenderCycle(ctx, 1)
	if err != nil {
		return nil, err
	}
	R, err := register.NewReference(ctx, be, ref[0], o.Params)
	if err != nil {
		return nil, err
	}
	rep := &RegReport{Backend: be.Name(), H: o.Scene.H, W: o.Scene.W}
	for c := 2; c <= o.Cycles; c++ {
		imgs, tr, err := sc.RenderCycle(ctx, c)
		if err != nil {
			return nil, err
		}
		t0 := time.Now()
		res, err := register.Register(ctx, be, R, imgs[0], o.Params)
		if err != nil {
			return nil, fmt.Errorf("cycle %d: %w", c, err)
		}
		rc := RegCycleReport{Cycle: c, TrueRotDeg: tr.ThetaDeg, TrueTY: tr.TY, TrueTX: tr.TX,
			EstRotDeg: res.Metrics.RotationDeg, Metrics: res.Metrics, ElapsedSecs: time.Since(t0).Seconds()}
		rc.RigidOnly, rc.Final = ScoreRegistration(sc, tr, res)
		rep.Cycles = append(rep.Cycles, rc)
	}
	return rep, nil
}

// ScoreRegistration scores a registration result of a synthetic cycle:
// the rigid part alone and the final mapping.
func ScoreRegistration(sc *synth.RegScene, tr *synth.RegCycleTruth, res *register.Result) (rigid, final MappingError) {
	o := sc.Options()
	rm := register.Mapping{Rigid: res.Rigid}
	margin := 16
	rigid = ScoreMapping(o.H, o.W, 16, margin, sc.TissueAt, tr.Map, rm.Apply)
	final = ScoreMapping(o.H, o.W, 16, margin, sc.TissueAt, tr.Map, res.Mapping.Apply)
	return
}

// WriteRegTable prints the report as a table.
func WriteRegTable(w io.Writer, r *RegReport) error {
	fmt.Fprintf(w, "registration accuracy (%s), %d x %d px, error of the mapping over tissue, px\n", r.Backend, r.W, r.H)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "cycle\ttrue rot °\test rot °\ttrue t (y, x)\tRMS before\tRMS rigid\tRMS final\tmax final\tNCC before\tNCC rigid\tNCC final\tjac min\tpoints\ts\t")
	for _, c := range r.Cycles {
		fmt.Fprintf(tw, "%d\t%.3f\t%.3f\t(%.1f, %.1f)\t%.2f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%d\t%.1f\t\n",
			c.Cycle, c.TrueRotDeg, c.EstRotDeg, c.TrueTY, c.TrueTX, c.Final.RMSBefore, c.RigidOnly.RMSAfter, c.Final.RMSAfter, c.Final.MaxAfter,
			c.Metrics.NCCBefore, c.Metrics.NCCRigid, c.Metrics.NCCFinal, c.Metrics.JacobianMin, c.Final.Points, c.ElapsedSecs)
	}
	return tw.Flush()
}
