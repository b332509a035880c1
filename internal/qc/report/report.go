// Package report writes the project's QC report, one self-contained HTML
// page a scientist opens from a shared drive (figures embedded as PNG data
// URIs, no script, no network), and the original's PDF summaries drawn from
// the same figures:
//
//	qc_plots/report.html                        summary + one section per stage
//	qc_plots/stitched_summary_heatmaps.pdf      stitch heatmaps, z-profiles, overviews, BaSiC profiles
//	qc_plots/deconvolved_summary_heatmaps.pdf   decon heatmaps and z-profiles
//	qc_plots/edf_summary_heatmaps.pdf           EDF heatmaps and overviews
//	qc_plots/registration_qc_overlay_grid.pdf   NCC per cycle, overlays, displacement and Jacobian maps
//
// Inputs are what the stages and the per-stage QC rules wrote (every one
// optional: a missing or unreadable input becomes a note in the report, it
// never fails the report):
//
//	qc_plots/<stage>/cycNN_metrics.json          per-plane statistics (internal/qc)
//	qc_plots/<stage>/cycNN_CH{c}_overview.png    overviews (downsampled by overview_downsample)
//	slurm/logs/snakemake/*.log                   stage logs: wall time, peak host memory, warnings
//	data/processed/stitched/cycNN/tile_positions.csv, .../CH{c}/basic/{z}_{flat,dark}field.tif
//	data/raw/<cycle dir>/ tiles                  per-seam NCC (alignment channel and plane)
//	data/processed/registered/qc/cycNN_metrics.json, registration_data/cycNN_transform.json + fields
//	data/processed/{edf,registered}/cycNN/<marker>.tif   overlay crops
//
// Scores and their definitions (one definition each; the page says which
// one every number is):
//
//   - seam NCC: align.NCC (Pearson correlation) of two neighbouring raw
//     tiles over their overlap at the stitched positions, after the
//     stitch's own BaSiC correction of that plane; 1 = identical overlap.
//   - registration "stage NCC": register.LevelNCC as the registration stage
//     computes it (its working level, float samples, only pixels that map
//     inside the moving image), read from registered/qc/cycNN_metrics.json.
//   - registration "file NCC": qc.NCC of the written uint16 files, full
//     resolution, over the whole common frame (zero borders included).
//   - focus: qc.Focus, the variance of the 4-neighbour Laplacian, counts².
//   - Jacobian: det(I + ∇D) of the displacement field per grid cell
//     (register.JacobianMin of the cell), 1 = no local area change.
package report

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot/vg"

	"github.com/kintsugi-hpc/kintsugi-go/internal/atomicfile"
	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/qc"
	"github.com/kintsugi-hpc/kintsugi-go/internal/qc/plot"
)

// File names under qc_plots/.
const (
	HTMLName = "report.html"
)

// PDFNames are the original's PDF summaries, by section id.
var PDFNames = map[string]string{
	"stitch":       "stitched_summary_heatmaps.pdf",
	"decon":        "deconvolved_summary_heatmaps.pdf",
	"edf":          "edf_summary_heatmaps.pdf",
	"registration": "registration_qc_overlay_grid.pdf",
}

// Table is a captioned table of text cells.
type Table struct {
	Caption string
	Head    []string
	Rows    [][]string
}

// Section is one stage's part of the report.
type Section struct {
	ID, Title string
	Intro     string
	Notes     []string // missing inputs and what was done instead
	Tables    []Table
	Figures   []*plot.Figure
}

// Report is the whole page.
type Report struct {
	Project   string
	Generated time.Time
	Cycles    []int
	Channels  []int
	Summary   []Table
	Warnings  []Table
	Notes     []string
	Sections  []*Section
	Metrics   map[string][]qc.CycleMetrics // per stage, as read
	opt       Options
}

// Options are Build's knobs.
type Options struct {
	CropPx int // side of the registration overlay crop, full-resolution px (0: 512)
}

// Build reads the project's outputs and lays out the report. Only a
// cancelled context is an error: missing inputs are notes.
func Build(ctx context.Context, cfg *config.Config, opt Options) (*Report, error) {
	if opt.CropPx <= 0 {
		opt.CropPx = 512
	}
	r := &Report{Project: cfg.ProjectDir, Generated: time.Now().UTC(), Cycles: cfg.Cycles, Channels: cfg.Channels,
		Metrics: map[string][]qc.CycleMetrics{}, opt: opt}
	logs, err := ReadLogs(layout.Logs(cfg.ProjectDir))
	if err != nil {
		r.Notes = append(r.Notes, fmt.Sprintf("stage logs: %v", err))
	}
	if len(logs) == 0 {
		r.Notes = append(r.Notes, "no stage logs under slurm/logs/snakemake/: timings, peak memory and warnings are not shown")
	}
	for _, st := range qc.Stages {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		r.Metrics[st] = readMetrics(cfg, st)
	}
	r.summary(cfg, logs)
	for _, f := range []func(context.Context, *config.Config, []StageLog) *Section{r.stitchSection, r.deconSection, r.edfSection, r.registrationSection} {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		r.Sections = append(r.Sections, f(ctx, cfg, logs))
	}
	return r, nil
}

// readMetrics reads qc_plots/<stage>/cycNN_metrics.json of every cycle
// that has one.
func readMetrics(cfg *config.Config, stage string) []qc.CycleMetrics {
	var out []qc.CycleMetrics
	for _, c := range cfg.Cycles {
		b, err := os.ReadFile(filepath.Join(layout.QCStage(cfg.ProjectDir, stage), layout.MetricsName(c)))
		if err != nil {
			continue
		}
		var m qc.CycleMetrics
		if json.Unmarshal(b, &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// missingNote says which cycles have no metrics for a stage.
func missingNote(cfg *config.Config, stage string, ms []qc.CycleMetrics) string {
	have := map[int]bool{}
	for _, m := range ms {
		have[m.Cycle] = true
	}
	var miss []string
	for _, c := range cfg.Cycles {
		if !have[c] {
			miss = append(miss, strconv.Itoa(c))
		}
	}
	if len(miss) == 0 {
		return ""
	}
	return fmt.Sprintf("no QC metrics for cycle(s) %s (qc_plots/%s/cycNN_metrics.json missing: has `kintsugi-qc run --stage %s` run?)", strings.Join(miss, ", "), stage, stage)
}

func (r *Report) summary(cfg *config.Config, logs []StageLog) {
	// Cycles and markers.
	t := Table{Caption: "Cycles and markers (config channel_names; EDF file names in brackets)", Head: []string{"cycle"}}
	for _, ch := range cfg.Channels {
		t.Head = append(t.Head, fmt.Sprintf("CH%d", ch))
	}
	for _, c := range cfg.Cycles {
		row := []string{layout.CycleName(c)}
		for _, ch := range cfg.Channels {
			m := cfg.ChannelMarker(c, ch)
			if m == "" {
				m = "—"
			}
			row = append(row, fmt.Sprintf("%s [%s]", m, cfg.EDFFileName(c, ch)))
		}
		t.Rows = append(t.Rows, row)
	}
	r.Summary = append(r.Summary, t)

	// Timings and memory.
	if len(logs) > 0 {
		tt := Table{Caption: "Stage runs (from slurm/logs/snakemake/*.log: wall time = last minus first log line; peak = the process's peak resident memory as logged, VmHWM)",
			Head: []string{"log", "rule", "cycle", "wall time", "peak host memory", "warnings", "errors"}}
		for _, l := range logs {
			cyc, peak := "—", "not logged"
			if l.Cycle > 0 {
				cyc = strconv.Itoa(l.Cycle)
			}
			if l.PeakMiB > 0 {
				peak = fmt.Sprintf("%.0f MiB", l.PeakMiB)
			}
			tt.Rows = append(tt.Rows, []string{l.File, l.Rule, cyc, duration(l.Seconds), peak, strconv.Itoa(len(l.Warnings)), strconv.Itoa(len(l.Errors))})
		}
		r.Summary = append(r.Summary, tt)
	}

	// Warnings, grouped by message.
	type group struct {
		msg, level string
		where      []string
		example    map[string]string
	}
	var groups []*group
	idx := map[string]*group{}
	for _, l := range logs {
		for _, w := range append(append([]LogLine(nil), l.Errors...), l.Warnings...) {
			g := idx[w.Level+w.Msg]
			if g == nil {
				g = &group{msg: w.Msg, level: w.Level, example: w.Attrs}
				idx[w.Level+w.Msg] = g
				groups = append(groups, g)
			}
			g.where = append(g.where, l.File+attrBrief(w.Attrs))
		}
	}
	if len(groups) > 0 {
		wt := Table{Caption: "Warnings and errors in the stage logs, grouped by message", Head: []string{"level", "message", "count", "where (log, channel/z)", "first occurrence's details"}}
		for _, g := range groups {
			where := g.where
			if len(where) > 12 {
				where = append(append([]string(nil), where[:12]...), fmt.Sprintf("… %d more", len(g.where)-12))
			}
			wt.Rows = append(wt.Rows, []string{g.level, g.msg, strconv.Itoa(len(g.where)), strings.Join(where, "; "), attrText(g.example)})
		}
		r.Warnings = append(r.Warnings, wt)
	}
	// BaSiC refits and quality-gate drops per cycle.
	qt := Table{Caption: "Per cycle: BaSiC refits (stitch log: fits that did not converge with the darkest-image darkfield rule and were refitted with the original rule), uniform-flatfield fallbacks, EDF quality-gate drops (planes excluded from the fusion)",
		Head: []string{"cycle", "BaSiC refits", "uniform flatfield", "EDF planes used / read per channel", "planes dropped"}}
	for _, c := range cfg.Cycles {
		refits, uniform := "—", "—"
		edfText, dropped := "—", "—"
		for i := range logs {
			l := &logs[i]
			if l.Cycle != c {
				continue
			}
			switch l.Rule {
			case "stitch":
				n, u := 0, 0
				for _, w := range l.Warnings {
					if strings.Contains(w.Msg, "refitted") {
						n++
					}
					if strings.Contains(w.Msg, "fell back to uniform") {
						u++
					}
				}
				refits, uniform = strconv.Itoa(n), strconv.Itoa(u)
			case "edf":
				var parts []string
				drop := 0
				for _, ln := range l.Lines {
					if ln.Msg != "channel done" {
						continue
					}
					planes, _ := strconv.Atoi(ln.Attrs["planes"])
					used, ok := sliceCount(ln.Attrs["used"])
					if !ok {
						continue
					}
					drop += planes - used
					parts = append(parts, fmt.Sprintf("CH%s %d/%d (z %s)", ln.Attrs["channel"], used, planes, ln.Attrs["used"]))
				}
				if len(parts) > 0 {
					edfText, dropped = strings.Join(parts, ", "), strconv.Itoa(drop)
				}
			}
		}
		qt.Rows = append(qt.Rows, []string{layout.CycleName(c), refits, uniform, edfText, dropped})
	}
	r.Summary = append(r.Summary, qt)
	// Registration scores.
	if rt, ok := regTable(cfg, r.Metrics["registration"]); ok {
		r.Summary = append(r.Summary, rt)
	}
}

func attrBrief(a map[string]string) string {
	var s []string
	for _, k := range []string{"channel", "z"} {
		if v, ok := a[k]; ok {
			s = append(s, k+" "+v)
		}
	}
	if len(s) == 0 {
		return ""
	}
	return " (" + strings.Join(s, ", ") + ")"
}

func attrText(a map[string]string) string {
	keys := make([]string, 0, len(a))
	for k := range a {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var s []string
	for _, k := range keys {
		s = append(s, k+"="+a[k])
	}
	return strings.Join(s, " ")
}

func duration(s float64) string {
	switch {
	case s <= 0:
		return "—"
	case s < 120:
		return fmt.Sprintf("%.0f s", s)
	case s < 7200:
		return fmt.Sprintf("%.1f min", s/60)
	}
	return fmt.Sprintf("%.2f h", s/3600)
}

// stageNum reads a number from the registration stage's metrics object.
func stageNum(m map[string]any, key string) float64 {
	if v, ok := m[key].(float64); ok {
		return v
	}
	return math.NaN()
}

// fixed formats v with d decimals, without a negative zero.
func fixed(v float64, d int) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "—"
	}
	s := strconv.FormatFloat(v, 'f', d, 64)
	if strings.Trim(s, "-0.") == "" {
		return strings.TrimPrefix(s, "-")
	}
	return s
}

func f4(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "—"
	}
	return fmt.Sprintf("%.4f", v)
}

// regTable is the registration scores per cycle, both measures labelled.
func regTable(cfg *config.Config, ms []qc.CycleMetrics) (Table, bool) {
	t := Table{Caption: "Registration scores per cycle (DAPI vs the reference cycle's DAPI). Stage NCC: the registration stage's own measure " +
		"(register.LevelNCC at its working level, float samples, only pixels that map inside the moved image; registered/qc/cycNN_metrics.json). " +
		"File NCC: the QC's measure of the written uint16 files at full resolution over the whole common frame, zero borders included " +
		"(qc_plots/registration/cycNN_metrics.json); it is a little lower where the moved image leaves a zero border.",
		Head: []string{"cycle", "image", "stage NCC before", "stage NCC rigid", "stage NCC final", "file NCC before (EDF)", "file NCC after (registered)",
			"rotation °", "translation y, x px", "|D| mean / p95 / max px", "Jacobian min", "non-rigid dropped"}}
	for _, m := range ms {
		rs := m.Registration
		if rs == nil {
			continue
		}
		sm := rs.StageMetrics
		row := []string{layout.CycleName(m.Cycle), rs.Image}
		if m.Cycle == rs.ReferenceCycle {
			row = append(row, "reference", "", "", f4(float64(rs.NCCEDF)), f4(float64(rs.NCCRegistered)), "", "", "", "", "")
		} else if sm == nil {
			row = append(row, "no stage metrics", "", "", f4(float64(rs.NCCEDF)), f4(float64(rs.NCCRegistered)), "", "", "", "", "")
		} else {
			row = append(row, f4(stageNum(sm, "ncc_before")), f4(stageNum(sm, "ncc_after_rigid")), f4(stageNum(sm, "ncc_final")),
				f4(float64(rs.NCCEDF)), f4(float64(rs.NCCRegistered)),
				fixed(stageNum(sm, "rotation_deg"), 3),
				fixed(stageNum(sm, "translation_y_px"), 2)+", "+fixed(stageNum(sm, "translation_x_px"), 2),
				fmt.Sprintf("%.2f / %.2f / %.2f", stageNum(sm, "displacement_mean_px"), stageNum(sm, "displacement_p95_px"), stageNum(sm, "displacement_max_px")),
				fmt.Sprintf("%.3f", stageNum(sm, "jacobian_min")), fmt.Sprint(sm["non_rigid_dropped"]))
		}
		t.Rows = append(t.Rows, row)
	}
	return t, len(t.Rows) > 0
}

// ---- per-plane heatmaps and z-profiles ---------------------------------------------------------------

// measure is one per-plane statistic.
type measure struct {
	key, title, unit string
	get              func(qc.PlaneStats) float64
}

var (
	mMean  = measure{"mean", "mean intensity", "mean, counts", func(p qc.PlaneStats) float64 { return p.Mean }}
	mFocus = measure{"focus", "focus (variance of the Laplacian)", "focus, counts²", func(p qc.PlaneStats) float64 { return p.Focus }}
	mSat   = measure{"saturation", fmt.Sprintf("saturated fraction (pixels ≥ %d)", qc.SaturationLevel), "fraction of pixels", func(p qc.PlaneStats) float64 { return p.SaturatedFraction }}
)

func rowLabel(cfg *config.Config, cycle, ch int) string {
	if m := cfg.ChannelMarker(cycle, ch); m != "" {
		return layout.CycleName(cycle) + " " + m
	}
	return layout.CycleName(cycle)
}

// heatPanels builds one panel per channel: rows cycles, columns z (one
// "EDF" column for single-plane stages).
func heatPanels(cfg *config.Config, ms []qc.CycleMetrics, m measure, single string) []plot.HeatPanel {
	var out []plot.HeatPanel
	for _, ch := range cfg.Channels {
		zs := qc.PlaneZs(ms, ch)
		hp := plot.HeatPanel{Title: fmt.Sprintf("CH%d: %s", ch, m.title), Unit: m.unit, XLabel: "z-plane", YLabel: ""}
		for _, z := range zs {
			if single != "" && z == 0 {
				hp.Cols = append(hp.Cols, single)
				hp.XLabel = ""
			} else {
				hp.Cols = append(hp.Cols, fmt.Sprintf("z%02d", z))
			}
		}
		for _, cm := range ms {
			for _, c := range cm.Channels {
				if c.Channel != ch {
					continue
				}
				row := make([]float64, len(zs))
				for i := range row {
					row[i] = math.NaN()
				}
				for _, p := range c.Planes {
					row[sort.SearchInts(zs, p.Z)] = m.get(p)
				}
				hp.Rows = append(hp.Rows, rowLabel(cfg, cm.Cycle, ch))
				hp.Values = append(hp.Values, row)
			}
		}
		out = append(out, hp)
	}
	return out
}

func zProfiles(cfg *config.Config, ms []qc.CycleMetrics, m measure) []plot.LinePanel {
	var out []plot.LinePanel
	for _, ch := range cfg.Channels {
		lp := plot.LinePanel{Title: fmt.Sprintf("CH%d", ch), XLabel: "z-plane", YLabel: m.unit}
		for _, cm := range ms {
			for _, c := range cm.Channels {
				if c.Channel != ch {
					continue
				}
				s := plot.Series{Label: rowLabel(cfg, cm.Cycle, ch)}
				for _, p := range c.Planes {
					s.X = append(s.X, float64(p.Z))
					s.Y = append(s.Y, m.get(p))
				}
				lp.Series = append(lp.Series, s)
			}
		}
		out = append(out, lp)
	}
	return out
}

func anyNonZero(ms []qc.CycleMetrics, m measure) bool {
	for _, cm := range ms {
		for _, c := range cm.Channels {
			for _, p := range c.Planes {
				if m.get(p) != 0 {
					return true
				}
			}
		}
	}
	return false
}

// planeFigures are a z-stack stage's heatmaps and z-profiles.
func planeFigures(cfg *config.Config, s *Section, ms []qc.CycleMetrics) {
	per := len(cfg.Channels)
	for _, m := range []measure{mMean, mFocus} {
		s.Figures = append(s.Figures, plot.Heatmaps(s.ID+"_"+m.key+"_heatmap", fmt.Sprintf("%s per cycle × channel × z", capital(m.title)),
			fmt.Sprintf("Each channel on its own colour scale (%s); grey: no plane. Rows: cycle and marker; columns: z-plane (1-based).", m.unit),
			heatPanels(cfg, ms, m, ""), min(per, 4)))
	}
	if anyNonZero(ms, mSat) {
		s.Figures = append(s.Figures, plot.Heatmaps(s.ID+"_saturation_heatmap", capital(mSat.title)+" per cycle × channel × z",
			"Fraction of each plane's pixels at or above the saturation level.", heatPanels(cfg, ms, mSat, ""), min(per, 4)))
	} else if len(ms) > 0 {
		s.Notes = append(s.Notes, fmt.Sprintf("No saturated pixels (≥ %d counts) in any plane of this stage (the saturation heatmap is all zero and not drawn).", qc.SaturationLevel))
	}
	for _, m := range []measure{mMean, mFocus} {
		s.Figures = append(s.Figures, plot.Lines(s.ID+"_"+m.key+"_zprofile", fmt.Sprintf("Z-profile of %s", m.title),
			fmt.Sprintf("%s of every plane against its z-plane, one line per cycle.", capital(m.unit)), zProfiles(cfg, ms, m), min(per, 4)))
	}
}

func capital(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// ---- sections ---------------------------------------------------------------------------------------

func (r *Report) stitchSection(ctx context.Context, cfg *config.Config, logs []StageLog) *Section {
	s, ms := r.section(cfg, "stitch", "Stitch (BaSiC correction, tile alignment, blending)",
		"Statistics of the stitched planes data/processed/stitched/cycNN/CH{c}/{z}.tif (qc_plots/stitch/).")
	if len(ms) > 0 {
		planeFigures(cfg, s, ms)
	}
	seamRows := Table{Caption: "Worst seams per cycle: NCC of the two raw tiles' overlap at the stitched positions (alignment channel and plane, after the stitch's BaSiC correction); lower is worse",
		Head: []string{"cycle", "channel, z", "seams", "median NCC", "worst seams (tile a | tile b: NCC)"}}
	for _, c := range cfg.Cycles {
		if ctx.Err() != nil {
			break
		}
		fig, row, note := stitchOverview(ctx, cfg, c, ms, logs)
		if note != "" {
			s.Notes = append(s.Notes, note)
		}
		if fig != nil {
			s.Figures = append(s.Figures, fig)
		}
		if row != nil {
			seamRows.Rows = append(seamRows.Rows, row)
		}
	}
	if len(seamRows.Rows) > 0 {
		s.Tables = append(s.Tables, seamRows)
	}
	bt, figs, notes := basicFigures(cfg)
	s.Notes = append(s.Notes, notes...)
	if len(bt.Rows) > 0 {
		s.Tables = append(s.Tables, bt)
	}
	s.Figures = append(s.Figures, figs...)
	return s
}

// section starts a stage's section with its metrics and a note naming the
// cycles that have none.
func (r *Report) section(cfg *config.Config, id, title, intro string) (*Section, []qc.CycleMetrics) {
	s := &Section{ID: id, Title: title, Intro: intro}
	ms := r.Metrics[id]
	if n := missingNote(cfg, id, ms); n != "" {
		s.Notes = append(s.Notes, n)
	}
	return s, ms
}

func (r *Report) deconSection(_ context.Context, cfg *config.Config, _ []StageLog) *Section {
	s, ms := r.section(cfg, "decon", "Deconvolution", "Statistics of the deconvolved planes data/processed/deconvolved/cycNN/CH{c}/deconv_{k}.tif (qc_plots/decon/).")
	if len(ms) > 0 {
		planeFigures(cfg, s, ms)
	}
	return s
}

func (r *Report) edfSection(_ context.Context, cfg *config.Config, _ []StageLog) *Section {
	s, ms := r.section(cfg, "edf", "Extended depth of field (EDF)", "Statistics of the EDF images data/processed/edf/cycNN/<marker>.tif (qc_plots/edf/).")
	s.Notes = append(s.Notes, "The EDF stage does not write its index map (the z-plane each output pixel comes from). Shown instead, per cycle: "+
		"the sharpest deconvolved plane per block (qc_plots/decon/cycNN_metrics.json focus_map: the plane with the highest variance of the Laplacian in each block), "+
		"which the EDF's per-pixel choice follows where the tissue has texture; the summary lists the planes the quality gate let into the fusion.")
	for _, cm := range r.Metrics["decon"] {
		if f := focusMapFigure(cfg, cm); f != nil {
			s.Figures = append(s.Figures, f)
		}
	}
	if len(ms) == 0 {
		return s
	}
	per := min(len(cfg.Channels), 4)
	for _, m := range []measure{mMean, mFocus} {
		s.Figures = append(s.Figures, plot.Heatmaps("edf_"+m.key+"_heatmap", capital(m.title)+" of the EDF images per cycle × channel",
			fmt.Sprintf("Each channel on its own colour scale (%s). Rows: cycle and marker.", m.unit), heatPanels(cfg, ms, m, "EDF"), per))
	}
	if anyNonZero(ms, mSat) {
		s.Figures = append(s.Figures, plot.Heatmaps("edf_saturation_heatmap", capital(mSat.title)+" of the EDF images", "", heatPanels(cfg, ms, mSat, "EDF"), per))
	}
	for _, cm := range ms {
		if f := overviewFigure(cfg, "edf", cm, fmt.Sprintf("EDF images of %s", layout.CycleName(cm.Cycle))); f != nil {
			s.Figures = append(s.Figures, f)
		}
	}
	return s
}

// focusMapFigure shows a cycle's decon focus maps, one panel per channel.
func focusMapFigure(cfg *config.Config, cm qc.CycleMetrics) *plot.Figure {
	var panels []plot.ImagePanel
	for _, ch := range cm.Channels {
		fm := ch.FocusMap
		if fm == nil || len(ch.Planes) == 0 || len(fm.BestZ) != fm.NX*fm.NY {
			continue
		}
		v := make([]float64, len(fm.BestZ))
		for i, z := range fm.BestZ {
			v[i] = float64(z)
		}
		zs := qc.PlaneZs([]qc.CycleMetrics{cm}, ch.Channel)
		panels = append(panels, plot.ImagePanel{Title: fmt.Sprintf("CH%d %s: sharpest plane per %d px block", ch.Channel, ch.Marker, fm.BlockPx),
			W: float64(ch.Planes[0].Width), H: float64(ch.Planes[0].Height), Values: v, VW: fm.NX, VH: fm.NY, Unit: "z-plane",
			Range: plot.Range{Min: float64(zs[0]), Max: float64(zs[len(zs)-1])}})
	}
	if len(panels) == 0 {
		return nil
	}
	f := plot.Images("edf_"+layout.CycleName(cm.Cycle)+"_focusmap", fmt.Sprintf("Sharpest deconvolved plane of %s per block", layout.CycleName(cm.Cycle)),
		"Per block, the z-plane (1-based) whose variance of the Laplacian is highest; a uniform map means one plane is in focus everywhere, a gradient a tilted section. Axes in full-resolution px.",
		panels, min(len(panels), 2), vg.Points(330))
	f.Data = panels
	return f
}

// readPNG decodes a PNG file.
func readPNG(path string) (image.Image, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return png.Decode(bytes.NewReader(b))
}

// overviewFigure shows a cycle's overview PNGs with axes in full-resolution px.
func overviewFigure(cfg *config.Config, stage string, cm qc.CycleMetrics, title string) *plot.Figure {
	var panels []plot.ImagePanel
	for _, ch := range cm.Channels {
		img, err := readPNG(filepath.Join(layout.QCStage(cfg.ProjectDir, stage), ch.Overview))
		if err != nil || len(ch.Planes) == 0 {
			continue
		}
		p := ch.Planes[0]
		panels = append(panels, plot.ImagePanel{Title: fmt.Sprintf("CH%d %s (%d × %d px)", ch.Channel, ch.Marker, p.Width, p.Height),
			W: float64(p.Width), H: float64(p.Height), RGB: img})
	}
	if len(panels) == 0 {
		return nil
	}
	return plot.Images(stage+"_"+layout.CycleName(cm.Cycle)+"_overview", title,
		"Downsampled overview, contrast-stretched between the 0.5 and 99.5 % percentiles of each image; axes in full-resolution px.", panels, min(len(panels), 2), vg.Points(330))
}

// Write renders the report into dir (qc_plots/): report.html and the PDFs,
// each atomically. It returns the HTML's path and size in bytes.
func Write(r *Report, dir string) (string, int, error) {
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return "", 0, fmt.Errorf("report directory %s: %w", dir, err)
	}
	html, err := r.HTML()
	if err != nil {
		return "", 0, err
	}
	for _, s := range r.Sections {
		var b bytes.Buffer
		if err := plot.WritePDF(&b, s.Figures); err != nil {
			return "", 0, fmt.Errorf("%s: %w", PDFNames[s.ID], err)
		}
		if err := atomicfile.WriteBytes(filepath.Join(dir, PDFNames[s.ID]), b.Bytes(), 0o666); err != nil {
			return "", 0, err
		}
	}
	p := filepath.Join(dir, HTMLName)
	if err := atomicfile.WriteBytes(p, html, 0o666); err != nil {
		return "", 0, err
	}
	return p, len(html), nil
}
