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
	"encoding/csv"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot/vg"

	"github.com/kintsugi-hpc/kintsugi-go/internal/align"
	"github.com/kintsugi-hpc/kintsugi-go/internal/atomicfile"
	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/dataset"
	"github.com/kintsugi-hpc/kintsugi-go/internal/qc"
	"github.com/kintsugi-hpc/kintsugi-go/internal/qc/plot"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/register"
	"github.com/kintsugi-hpc/kintsugi-go/internal/regstage"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
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
	logs, err := ReadLogs(filepath.Join(cfg.ProjectDir, "slurm", "logs", "snakemake"))
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
		b, err := os.ReadFile(filepath.Join(cfg.ProjectDir, "qc_plots", stage, config.CycleName(c)+"_metrics.json"))
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

func stageDir(stage string) string {
	return map[string]string{"stitch": "stitched", "decon": "deconvolved", "edf": "edf", "registration": "registered"}[stage]
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
		row := []string{config.CycleName(c)}
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
		qt.Rows = append(qt.Rows, []string{config.CycleName(c), refits, uniform, edfText, dropped})
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
		row := []string{config.CycleName(m.Cycle), rs.Image}
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
		return config.CycleName(cycle) + " " + m
	}
	return config.CycleName(cycle)
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
		if f := overviewFigure(cfg, "edf", cm, fmt.Sprintf("EDF images of %s", config.CycleName(cm.Cycle))); f != nil {
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
	f := plot.Images("edf_"+config.CycleName(cm.Cycle)+"_focusmap", fmt.Sprintf("Sharpest deconvolved plane of %s per block", config.CycleName(cm.Cycle)),
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
		img, err := readPNG(filepath.Join(cfg.ProjectDir, "qc_plots", stage, ch.Overview))
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
	return plot.Images(stage+"_"+config.CycleName(cm.Cycle)+"_overview", title,
		"Downsampled overview, contrast-stretched between the 0.5 and 99.5 % percentiles of each image; axes in full-resolution px.", panels, min(len(panels), 2), vg.Points(330))
}

// ---- stitch: tile grid and seams -------------------------------------------------------------------

type tilePos struct {
	tile, row, col int
	y, x           float64
}

func readPositions(path string) ([]tilePos, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(recs) < 2 || strings.Join(recs[0], ",") != "tile,row,col,y_pos,x_pos" {
		return nil, fmt.Errorf("%s: want the header tile,row,col,y_pos,x_pos", path)
	}
	var out []tilePos
	for i, r := range recs[1:] {
		var t tilePos
		var e [5]error
		t.tile, e[0] = strconv.Atoi(r[0])
		t.row, e[1] = strconv.Atoi(r[1])
		t.col, e[2] = strconv.Atoi(r[2])
		t.y, e[3] = strconv.ParseFloat(r[3], 64)
		t.x, e[4] = strconv.ParseFloat(r[4], 64)
		for _, err := range e {
			if err != nil {
				return nil, fmt.Errorf("%s line %d: %w", path, i+2, err)
			}
		}
		out = append(out, t)
	}
	return out, nil
}

// Seam is one pair of neighbouring tiles and the NCC of their overlap.
type Seam struct {
	A, B int     // tiles, 1-based acquisition order
	NCC  float64 // align.NCC of the overlap; NaN when a tile could not be read
	Dir  string  // "left" (B right of A) or "top" (B below A)
}

// alignPlane is the channel and z the stitch aligned on (its log), else the
// first channel at the middle plane.
func alignPlane(cfg *config.Config, cycle int, logs []StageLog, zs []int) (int, int) {
	for i := range logs {
		if logs[i].Rule == "stitch" && logs[i].Cycle == cycle {
			if l := logs[i].find("tiles aligned"); l != nil {
				ch, e1 := strconv.Atoi(l.Attrs["ref_channel"])
				z, e2 := strconv.Atoi(l.Attrs["ref_z"])
				if e1 == nil && e2 == nil {
					return ch, z
				}
			}
		}
	}
	z := 1
	if len(zs) > 0 {
		z = zs[(len(zs)-1)/2]
	}
	return cfg.Channels[0], z
}

// Seams scores every grid-neighbour pair of a cycle's tiles.
func Seams(ctx context.Context, cfg *config.Config, cycle, ch, z int, pos []tilePos) ([]Seam, error) {
	cyc, err := dataset.Discover(ctx, cfg.ProjectDir, cycle, dataset.Options{Rows: cfg.TileRows, Cols: cfg.TileCols, Channels: []int{ch}, Workers: 2})
	if err != nil {
		return nil, err
	}
	basic := filepath.Join(cfg.ProjectDir, "data", "processed", "stitched", config.CycleName(cycle), fmt.Sprintf("CH%d", ch), "basic")
	flat, errF := tiffio.ReadFloat32(filepath.Join(basic, fmt.Sprintf("%02d_flatfield.tif", z)))
	dark, errD := tiffio.ReadFloat32(filepath.Join(basic, fmt.Sprintf("%02d_darkfield.tif", z)))
	tiles := map[int]*raster.Float32{}
	get := func(k int) *raster.Float32 {
		if t, ok := tiles[k]; ok {
			return t
		}
		g, err := tiffio.ReadGray16(cyc.Path(k, z, ch))
		if err != nil {
			tiles[k] = nil
			return nil
		}
		f := raster.NewFloat32(g.W, g.H)
		for i, v := range g.Pix {
			x := float32(v)
			if errD == nil && dark.W == g.W && dark.H == g.H {
				x -= dark.Pix[i]
			}
			if errF == nil && flat.W == g.W && flat.H == g.H {
				x /= max(flat.Pix[i], float32(cfg.BasicFlatfieldMin), 1e-3)
			}
			f.Pix[i] = x
		}
		tiles[k] = f
		return f
	}
	at := map[[2]int]tilePos{}
	for _, p := range pos {
		at[[2]int{p.row, p.col}] = p
	}
	var out []Seam
	for _, a := range pos {
		for _, d := range []struct {
			dr, dc int
			name   string
		}{{0, 1, "left"}, {1, 0, "top"}} {
			b, ok := at[[2]int{a.row + d.dr, a.col + d.dc}]
			if !ok {
				continue
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			s := Seam{A: a.tile, B: b.tile, Dir: d.name, NCC: math.NaN()}
			ta, tb := get(a.tile), get(b.tile)
			if ta != nil && tb != nil && ta.W == tb.W && ta.H == tb.H {
				s.NCC = align.NCC(ta, tb, int(math.Round(b.y-a.y)), int(math.Round(b.x-a.x)))
			}
			out = append(out, s)
		}
	}
	return out, nil
}

func stitchOverview(ctx context.Context, cfg *config.Config, c int, ms []qc.CycleMetrics, logs []StageLog) (*plot.Figure, []string, string) {
	name := config.CycleName(c)
	pos, err := readPositions(filepath.Join(cfg.ProjectDir, "data", "processed", "stitched", name, "tile_positions.csv"))
	if err != nil {
		return nil, nil, fmt.Sprintf("%s: no tile grid or seams (%v)", name, err)
	}
	var cm *qc.CycleMetrics
	for i := range ms {
		if ms[i].Cycle == c {
			cm = &ms[i]
		}
	}
	var zs []int
	if cm != nil && len(cm.Channels) > 0 {
		for _, p := range cm.Channels[0].Planes {
			zs = append(zs, p.Z)
		}
	}
	ch, z := alignPlane(cfg, c, logs, zs)
	seams, serr := Seams(ctx, cfg, c, ch, z, pos)
	var note string
	if serr != nil {
		note = fmt.Sprintf("%s: seams not scored (raw tiles: %v)", name, serr)
	}
	// Worst seams.
	sorted := append([]Seam(nil), seams...)
	sort.SliceStable(sorted, func(i, k int) bool { return nanLast(sorted[i].NCC) < nanLast(sorted[k].NCC) })
	nWorst := min(5, len(sorted))
	worst := map[[2]int]bool{}
	var worstText []string
	for _, s := range sorted[:nWorst] {
		worst[[2]int{s.A, s.B}] = true
		worstText = append(worstText, fmt.Sprintf("%d | %d: %s", s.A, s.B, f4(s.NCC)))
	}
	var row []string
	if len(seams) > 0 {
		vals := make([]float64, 0, len(seams))
		for _, s := range seams {
			if !math.IsNaN(s.NCC) {
				vals = append(vals, s.NCC)
			}
		}
		sort.Float64s(vals)
		med := math.NaN()
		if len(vals) > 0 {
			med = vals[len(vals)/2]
		}
		row = []string{name, fmt.Sprintf("CH%d, z%02d", ch, z), strconv.Itoa(len(seams)), f4(med), strings.Join(worstText, "; ")}
	}
	// Overview image of the alignment channel.
	if cm == nil {
		return nil, row, joinNotes(note, fmt.Sprintf("%s: no stitch QC overview (qc_plots/stitch/%s_metrics.json missing)", name, name))
	}
	var chm *qc.ChannelMetrics
	for i := range cm.Channels {
		if cm.Channels[i].Channel == ch {
			chm = &cm.Channels[i]
		}
	}
	if chm == nil || len(chm.Planes) == 0 {
		return nil, row, note
	}
	img, err := readPNG(filepath.Join(cfg.ProjectDir, "qc_plots", "stitch", chm.Overview))
	if err != nil {
		return nil, row, joinNotes(note, fmt.Sprintf("%s: overview: %v", name, err))
	}
	tw, th := float64(chm.Planes[0].Width), float64(chm.Planes[0].Height)
	ip := plot.ImagePanel{Title: fmt.Sprintf("%s CH%d, maximum over z, %d tiles", name, ch, len(pos)), W: tw, H: th, RGB: toRGBA(img)}
	// Tile size from the raw data isn't needed: a tile spans to its right/bottom neighbour plus the overlap.
	tileW, tileH := tileSize(pos, cfg)
	for _, p := range pos {
		ip.Rects = append(ip.Rects, plot.Rect{X0: p.x, Y0: p.y, X1: p.x + tileW, Y1: p.y + tileH, Colour: color.RGBA{0, 200, 255, 160}, Width: 0.6})
		ip.Labels = append(ip.Labels, plot.Label{X: p.x + tileW*0.15, Y: p.y + tileH*0.15, Text: strconv.Itoa(p.tile), Colour: color.RGBA{0, 220, 255, 255}})
	}
	pa := map[int]tilePos{}
	for _, p := range pos {
		pa[p.tile] = p
	}
	for _, s := range seams {
		a, b := pa[s.A], pa[s.B]
		// Seam centre: middle of the overlap.
		var cx, cy float64
		if s.Dir == "left" {
			cx, cy = (b.x+a.x+tileW)/2, (max(a.y, b.y)+min(a.y, b.y)+tileH)/2
		} else {
			cx, cy = (max(a.x, b.x)+min(a.x, b.x)+tileW)/2, (b.y+a.y+tileH)/2
		}
		col := color.RGBA{255, 255, 0, 255}
		if worst[[2]int{s.A, s.B}] {
			col = color.RGBA{255, 60, 60, 255}
		}
		ip.Labels = append(ip.Labels, plot.Label{X: cx, Y: cy, Text: fmt.Sprintf("%.2f", s.NCC), Colour: col})
	}
	f := plot.Images("stitch_"+name+"_grid", fmt.Sprintf("Stitched overview of %s with the tile grid and per-seam NCC", name),
		fmt.Sprintf("Tile outlines (blue, tile numbers in acquisition order) at their stitched positions; at each seam the NCC of the two raw tiles' overlap (CH%d, z%02d; yellow, the %d worst in red). Axes in mosaic px.", ch, z, nWorst),
		[]plot.ImagePanel{ip}, 1, vg.Points(640))
	f.Data = map[string]any{"seams": seams, "tiles": len(pos)}
	return f, row, note
}

func joinNotes(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

func nanLast(v float64) float64 {
	if math.IsNaN(v) {
		return math.Inf(1)
	}
	return v
}

// tileSize estimates the tile size in px from the grid spacing and the
// configured overlap (the positions file does not carry it).
func tileSize(pos []tilePos, cfg *config.Config) (w, h float64) {
	var dx, dy []float64
	at := map[[2]int]tilePos{}
	for _, p := range pos {
		at[[2]int{p.row, p.col}] = p
	}
	for _, p := range pos {
		if q, ok := at[[2]int{p.row, p.col + 1}]; ok {
			dx = append(dx, q.x-p.x)
		}
		if q, ok := at[[2]int{p.row + 1, p.col}]; ok {
			dy = append(dy, q.y-p.y)
		}
	}
	med := func(v []float64) float64 {
		if len(v) == 0 {
			return math.NaN()
		}
		sort.Float64s(v)
		return v[len(v)/2]
	}
	ov := cfg.TileOverlap
	if !(ov > 0 && ov < 1) {
		ov = 0
	}
	w, h = med(dx)/(1-ov), med(dy)/(1-ov)
	if math.IsNaN(w) {
		w = h
	}
	if math.IsNaN(h) {
		h = w
	}
	return w, h
}

func toRGBA(img image.Image) *image.RGBA {
	b := img.Bounds()
	out := image.NewRGBA(image.Rect(0, 0, b.Dx(), b.Dy()))
	for y := 0; y < b.Dy(); y++ {
		for x := 0; x < b.Dx(); x++ {
			out.Set(x, y, img.At(b.Min.X+x, b.Min.Y+y))
		}
	}
	return out
}

// ---- BaSiC profiles --------------------------------------------------------------------------------

// blockMean downsamples a float32 image to at most maxSide px (block means).
func blockMean(f *raster.Float32, maxSide int) ([]float64, int, int) {
	k := max(1, (max(f.W, f.H)+maxSide-1)/maxSide)
	w, h := (f.W+k-1)/k, (f.H+k-1)/k
	sum := make([]float64, w*h)
	n := make([]float64, w*h)
	for y := 0; y < f.H; y++ {
		for x := 0; x < f.W; x++ {
			i := (y/k)*w + x/k
			sum[i] += float64(f.Pix[y*f.W+x])
			n[i]++
		}
	}
	for i := range sum {
		sum[i] /= n[i]
	}
	return sum, w, h
}

func f32Range(f *raster.Float32) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, v := range f.Pix {
		lo, hi = min(lo, float64(v)), max(hi, float64(v))
	}
	return
}

// basicFigures shows each cycle's flatfield and darkfield per channel at the
// middle z-plane and tabulates every plane's ranges.
func basicFigures(cfg *config.Config) (Table, []*plot.Figure, []string) {
	t := Table{Caption: "BaSiC profiles of every plane (data/processed/stitched/cycNN/CH{c}/basic/): flatfield range (gain, mean 1) and darkfield range (counts)",
		Head: []string{"cycle", "channel", "z", "flatfield min – max", "darkfield min – max, counts"}}
	var figs []*plot.Figure
	var notes []string
	for _, c := range cfg.Cycles {
		var panels []plot.ImagePanel
		var flats, darks []plot.ImagePanel
		missing := 0
		for _, ch := range cfg.Channels {
			dir := filepath.Join(cfg.ProjectDir, "data", "processed", "stitched", config.CycleName(c), fmt.Sprintf("CH%d", ch), "basic")
			ents, _ := filepath.Glob(filepath.Join(dir, "*_flatfield.tif"))
			sort.Strings(ents)
			if len(ents) == 0 {
				missing++
				continue
			}
			for i, fp := range ents {
				zs := strings.TrimSuffix(filepath.Base(fp), "_flatfield.tif")
				flat, err1 := tiffio.ReadFloat32(fp)
				dark, err2 := tiffio.ReadFloat32(filepath.Join(dir, zs+"_darkfield.tif"))
				if err1 != nil || err2 != nil {
					t.Rows = append(t.Rows, []string{config.CycleName(c), fmt.Sprintf("CH%d", ch), zs, "unreadable", "unreadable"})
					continue
				}
				fl, fh := f32Range(flat)
				dl, dh := f32Range(dark)
				t.Rows = append(t.Rows, []string{config.CycleName(c), fmt.Sprintf("CH%d", ch), zs, fmt.Sprintf("%.3f – %.3f", fl, fh), fmt.Sprintf("%.1f – %.1f", dl, dh)})
				if i == (len(ents)-1)/2 {
					v, w, h := blockMean(flat, 96)
					flats = append(flats, plot.ImagePanel{Title: fmt.Sprintf("CH%d z%s flatfield %.3f–%.3f", ch, zs, fl, fh), W: float64(flat.W), H: float64(flat.H),
						Values: v, VW: w, VH: h, Unit: "gain (mean 1)", Range: plot.Range{Min: fl, Max: fh}, XLabel: "tile x, px", YLabel: "tile y, px"})
					v, w, h = blockMean(dark, 96)
					darks = append(darks, plot.ImagePanel{Title: fmt.Sprintf("CH%d z%s darkfield %.1f–%.1f", ch, zs, dl, dh), W: float64(dark.W), H: float64(dark.H),
						Values: v, VW: w, VH: h, Unit: "counts", Range: plot.Range{Min: dl, Max: dh}, XLabel: "tile x, px", YLabel: "tile y, px"})
				}
			}
		}
		if missing > 0 {
			notes = append(notes, fmt.Sprintf("%s: no BaSiC profiles for %d channel(s) (stitched/%s/CH{c}/basic/ missing)", config.CycleName(c), missing, config.CycleName(c)))
		}
		panels = append(flats, darks...)
		if len(panels) > 0 {
			figs = append(figs, plot.Images("basic_"+config.CycleName(c), fmt.Sprintf("BaSiC flatfield and darkfield of %s (middle plane)", config.CycleName(c)),
				"Top: flatfield (gain, normalised to mean 1; the tiles are divided by it). Bottom: darkfield (counts; subtracted). Each image on its own scale; axes in tile px.",
				panels, len(flats), vg.Points(230)))
		}
	}
	return t, figs, notes
}

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
		cats = append(cats, config.CycleName(m.Cycle))
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
	proc := filepath.Join(cfg.ProjectDir, "data", "processed")
	refImg := refMetrics.Registration.Image
	refReg, err := tiffio.ReadGray16(filepath.Join(proc, "registered", config.CycleName(refCycle), refImg))
	if err != nil {
		s.Notes = append(s.Notes, fmt.Sprintf("reference image: %v: overlays not drawn", err))
		return s
	}
	refEDF, errE := tiffio.ReadGray16(filepath.Join(proc, "edf", config.CycleName(refCycle), refImg))
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
		name := config.CycleName(m.Cycle)
		reg, err := tiffio.ReadGray16(filepath.Join(proc, "registered", name, rs.Image))
		if err != nil {
			s.Notes = append(s.Notes, fmt.Sprintf("%s: %v", name, err))
			continue
		}
		var panels []plot.ImagePanel
		if errE == nil {
			if edf, err := tiffio.ReadGray16(filepath.Join(proc, "edf", name, rs.Image)); err == nil {
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
	m, _, _, err := regstage.ReadTransform(filepath.Join(proc, "registered", "registration_data", name+"_transform.json"))
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

// Write renders the report into dir (qc_plots/): report.html and the PDFs,
// each atomically. It returns the HTML's path and size in bytes.
func Write(r *Report, dir string) (string, int, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
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
		if err := atomicfile.WriteBytes(filepath.Join(dir, PDFNames[s.ID]), b.Bytes(), 0o644); err != nil {
			return "", 0, err
		}
	}
	p := filepath.Join(dir, HTMLName)
	if err := atomicfile.WriteBytes(p, html, 0o644); err != nil {
		return "", 0, err
	}
	return p, len(html), nil
}
