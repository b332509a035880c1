package report

import (
	"context"
	"fmt"
	"math"
	"path/filepath"

	"gonum.org/v1/plot/vg"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/qc"
	"github.com/kintsugi-hpc/kintsugi-go/internal/qc/plot"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/register"
	"github.com/kintsugi-hpc/kintsugi-go/internal/regstage"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// ---- registration --------------------------------------------------------------------------------------

func (r *Report) registrationSection(ctx context.Context, cfg *config.Config, _ []StageLog) *Section {
	s, ms := r.section(cfg, "registration", "Registration",
		"Every cycle's DAPI is registered to the reference cycle's DAPI (rigid, then a smooth non-rigid field); every channel is warped with the cycle's transform.")
	if t, ok := regTable(cfg, ms); ok {
		s.Tables = append(s.Tables, t)
	}
	var cats []string
	var sb, sa, fb, fa []float64
	for _, m := range ms {
		rs := m.Registration
		if rs == nil || m.Cycle == rs.ReferenceCycle {
			continue
		}
		cats = append(cats, layout.CycleName(m.Cycle))
		sb = append(sb, stageNum(rs.StageMetrics, "ncc_before"))
		sa = append(sa, stageNum(rs.StageMetrics, "ncc_final"))
		fb = append(fb, float64(rs.NCCEDF))
		fa = append(fa, float64(rs.NCCRegistered))
	}
	if len(cats) > 0 {
		s.Figures = append(s.Figures, plot.Bars("registration_ncc", "NCC with the reference cycle's DAPI, before and after registration",
			"Stage NCC: the registration stage's measure (its working level, pixels inside the moved image). File NCC: the written uint16 files, full resolution, whole frame. 1 = identical up to gain and offset.",
			"cycle", "NCC", cats, []plot.BarGroup{{Label: "stage NCC before", Values: sb}, {Label: "stage NCC final", Values: sa},
				{Label: "file NCC before (EDF)", Values: fb}, {Label: "file NCC after (registered)", Values: fa}}, &plot.Range{Min: min(0, minFinite(sb, fb)), Max: 1.05}))
	}
	refCycle := cfg.Registration.ReferenceCycle
	var refMetrics *qc.CycleMetrics
	for i := range ms {
		if ms[i].Cycle == refCycle {
			refMetrics = &ms[i]
		}
	}
	if refMetrics == nil || refMetrics.Registration == nil {
		if len(ms) > 0 {
			s.Notes = append(s.Notes, fmt.Sprintf("no QC metrics of the reference cycle %d: overlays not drawn", refCycle))
		}
		return s
	}
	proc := layout.ProcessedDir(cfg.ProjectDir)
	refImg := refMetrics.Registration.Image
	refReg, err := tiffio.ReadGray16(filepath.Join(proc, layout.RegisteredDir, layout.CycleName(refCycle), refImg))
	if err != nil {
		s.Notes = append(s.Notes, fmt.Sprintf("reference image: %v: overlays not drawn", err))
		return s
	}
	refEDF, errE := tiffio.ReadGray16(filepath.Join(proc, layout.EDFDir, layout.CycleName(refCycle), refImg))
	cy, cx := bestCrop(refReg, r.opt.CropPx)
	side := min(r.opt.CropPx, refReg.W, refReg.H)
	for _, m := range ms {
		if ctx.Err() != nil {
			break
		}
		rs := m.Registration
		if rs == nil || m.Cycle == refCycle {
			continue
		}
		name := layout.CycleName(m.Cycle)
		reg, err := tiffio.ReadGray16(filepath.Join(proc, layout.RegisteredDir, name, rs.Image))
		if err != nil {
			s.Notes = append(s.Notes, fmt.Sprintf("%s: %v", name, err))
			continue
		}
		var panels []plot.ImagePanel
		if errE == nil {
			if edf, err := tiffio.ReadGray16(filepath.Join(proc, layout.EDFDir, name, rs.Image)); err == nil {
				panels = append(panels, plot.ImagePanel{Title: fmt.Sprintf("before: %s EDF vs reference (file NCC %s)", name, f4(float64(rs.NCCEDF))),
					X0: float64(cx), Y0: float64(cy), W: float64(side), H: float64(side), RGB: qc.Overlay(crop(refEDF, cy, cx, side), crop(edf, cy, cx, side), side)})
			}
		}
		panels = append(panels, plot.ImagePanel{Title: fmt.Sprintf("after: %s registered vs reference (file NCC %s)", name, f4(float64(rs.NCCRegistered))),
			X0: float64(cx), Y0: float64(cy), W: float64(side), H: float64(side), RGB: qc.Overlay(crop(refReg, cy, cx, side), crop(reg, cy, cx, side), side)})
		f := plot.Images("registration_"+name+"_overlay", fmt.Sprintf("Overlay of %s on the reference cycle %d at full resolution", name, refCycle),
			fmt.Sprintf("A %d × %d px crop (the most textured of a 4 × 4 grid of candidates) of the reference DAPI (magenta) and the cycle's DAPI %s (green): aligned nuclei are white, misaligned ones show magenta and green fringes.", side, side, rs.Image),
			panels, 2, vg.Points(330))
		f.Data = map[string]any{"cycle": m.Cycle, "crop": []int{cy, cx, side}, "ncc_edf": float64(rs.NCCEDF), "ncc_registered": float64(rs.NCCRegistered)}
		s.Figures = append(s.Figures, f)
		if fig, note := fieldFigure(proc, name); fig != nil {
			s.Figures = append(s.Figures, fig)
		} else if note != "" {
			s.Notes = append(s.Notes, note)
		}
	}
	return s
}

func minFinite(vs ...[]float64) float64 {
	m := math.Inf(1)
	for _, v := range vs {
		for _, x := range v {
			if !math.IsNaN(x) {
				m = min(m, x)
			}
		}
	}
	if math.IsInf(m, 1) {
		return 0
	}
	return m
}

func crop(g *raster.Gray16, y0, x0, side int) *raster.Gray16 {
	c := raster.NewGray16(side, side)
	for y := 0; y < side; y++ {
		if y0+y >= g.H {
			break
		}
		n := min(side, g.W-x0)
		if n > 0 {
			copy(c.Pix[y*side:y*side+n], g.Pix[(y0+y)*g.W+x0:(y0+y)*g.W+x0+n])
		}
	}
	return c
}

// bestCrop returns the top-left corner of the side x side window, among a
// 4 x 4 grid of candidates, with the largest intensity standard deviation.
func bestCrop(g *raster.Gray16, side int) (int, int) {
	side = min(side, g.W, g.H)
	best, by, bx := -1.0, 0, 0
	for i := 0; i < 4; i++ {
		for j := 0; j < 4; j++ {
			y0 := (g.H - side) * (2*i + 1) / 8
			x0 := (g.W - side) * (2*j + 1) / 8
			var s, s2 float64
			for y := y0; y < y0+side; y += 2 {
				for x := x0; x < x0+side; x += 2 {
					v := float64(g.Pix[y*g.W+x])
					s += v
					s2 += v * v
				}
			}
			n := float64(((side + 1) / 2) * ((side + 1) / 2))
			if sd := s2/n - (s/n)*(s/n); sd > best {
				best, by, bx = sd, y0, x0
			}
		}
	}
	return by, bx
}

// FieldMaps are a cycle's displacement magnitude per node and Jacobian
// determinant per grid cell.
type FieldMaps struct {
	NY, NX       int
	Step, Y0, X0 float64
	Mag          []float64 // NY x NX, px
	Jac          []float64 // (NY-1) x (NX-1): register.JacobianMin of each cell
	JacMin       float64
	JacMax       float64
}

// ReadField reads registration_data/<cycle>_transform.json and its field
// (nil, nil for a rigid-only transform).
func ReadField(proc, name string) (*FieldMaps, error) {
	m, _, _, err := regstage.ReadTransform(filepath.Join(proc, layout.RegisteredDir, layout.RegistrationDataDir, name+"_transform.json"))
	if err != nil {
		return nil, err
	}
	f := m.Field
	if f == nil {
		return nil, nil
	}
	fm := &FieldMaps{NY: f.NY, NX: f.NX, Step: f.Step, Y0: f.Y0, X0: f.X0, Mag: make([]float64, f.NY*f.NX), JacMin: math.Inf(1), JacMax: math.Inf(-1)}
	for i := range f.DY {
		fm.Mag[i] = math.Hypot(float64(f.DY[i]), float64(f.DX[i]))
	}
	for i := 0; i+1 < f.NY; i++ {
		for j := 0; j+1 < f.NX; j++ {
			cell := register.NewField(2, 2, 0, 0, f.Step)
			for a := 0; a < 2; a++ {
				for b := 0; b < 2; b++ {
					cell.DY[a*2+b] = f.DY[(i+a)*f.NX+j+b]
					cell.DX[a*2+b] = f.DX[(i+a)*f.NX+j+b]
				}
			}
			jv := register.JacobianMin(cell)
			fm.Jac = append(fm.Jac, jv)
			fm.JacMin, fm.JacMax = min(fm.JacMin, jv), max(fm.JacMax, jv)
		}
	}
	return fm, nil
}

func fieldFigure(proc, name string) (*plot.Figure, string) {
	fm, err := ReadField(proc, name)
	if err != nil {
		return nil, fmt.Sprintf("%s: displacement field: %v", name, err)
	}
	if fm == nil {
		return nil, fmt.Sprintf("%s: rigid transform only (no displacement field)", name)
	}
	w, h := float64(fm.NX)*fm.Step, float64(fm.NY)*fm.Step
	mr, _ := rangeOf(fm.Mag)
	panels := []plot.ImagePanel{{Title: fmt.Sprintf("%s |D| %.2f–%.2f px", name, mr.Min, mr.Max), X0: fm.X0 - fm.Step/2, Y0: fm.Y0 - fm.Step/2, W: w, H: h,
		Values: fm.Mag, VW: fm.NX, VH: fm.NY, Unit: "displacement, px", Range: mr}}
	if len(fm.Jac) > 0 {
		panels = append(panels, plot.ImagePanel{Title: fmt.Sprintf("%s Jacobian %.3f–%.3f", name, fm.JacMin, fm.JacMax), X0: fm.X0, Y0: fm.Y0,
			W: float64(fm.NX-1) * fm.Step, H: float64(fm.NY-1) * fm.Step, Values: fm.Jac, VW: fm.NX - 1, VH: fm.NY - 1, Unit: "det(I + ∇D)",
			Range: plot.Range{Min: fm.JacMin, Max: fm.JacMax}})
	}
	f := plot.Images("registration_"+name+"_field", fmt.Sprintf("Non-rigid displacement of %s", name),
		fmt.Sprintf("Left: displacement magnitude |D| at the field's nodes (every %.0f px), px. Right: Jacobian determinant det(I + ∇D) per grid cell (1: no local area change; < 1 compression, > 1 stretching; ≤ 0 would fold). Axes in reference px.", fm.Step),
		panels, 2, vg.Points(330))
	f.Data = map[string]any{"displacement_max_px": mr.Max, "jacobian_min": fm.JacMin, "jacobian_max": fm.JacMax}
	return f, ""
}

func rangeOf(v []float64) (plot.Range, bool) {
	r := plot.Range{Min: math.Inf(1), Max: math.Inf(-1)}
	ok := false
	for _, x := range v {
		if !math.IsNaN(x) {
			r.Min, r.Max, ok = min(r.Min, x), max(r.Max, x), true
		}
	}
	if !ok {
		return plot.Range{}, false
	}
	return r, true
}
