// Package qc writes the pipeline's quality-control reports, one per stage,
// on the CPU (the Snakefile's qc_stitch, qc_decon, qc_edf and qc_registration
// rules run bin/kintsugi-qc on the CPU partition, without a GPU):
//
//	qc_plots/<stage>/cycNN_metrics.json        per-cycle metrics (CycleMetrics)
//	qc_plots/<stage>/cycNN_CH{c}_overview.png  downsampled mosaic, contrast-stretched 8-bit
//	                                           (stitch, decon: maximum over z; edf: the EDF plane)
//	qc_plots/registration/cycNN_overlay.png     reference cycle (magenta) + registered cycle (green)
//	qc_plots/<stage>/*_heatmap.png             heatmaps (Summary.Heatmaps gives rows, columns, values)
//	qc_plots/<stage>/summary.json              Summary: every cycle, the heatmaps and their scales
//	qc_plots/.snakemake_complete_<stage>       the original's sentinel (key=value)
//
// <stage> is stitch, decon, edf or registration; the inputs are the stage's
// outputs in the original's layout:
//
//	stitch        data/processed/stitched/cycNN/CH{c}/{z:02d}.tif
//	decon         data/processed/deconvolved/cycNN/CH{c}/deconv_{k:03d}.tif
//	edf           data/processed/edf/cycNN/<marker>.tif          (config.EDFFileName)
//	registration  data/processed/registered/cycNN/<marker>.tif, the EDF planes and
//	              data/processed/registered/qc/cycNN_metrics.json (the stage's own scores)
//
// Statistics are of uint16 planes in detector counts (PlaneStats: mean, std,
// min, max, percentiles, zero and saturation fractions, focus); images are
// (y, x), row-major, x fastest. The stage directory is written through
// internal/staging, so a failure leaves the previous report (or none), and
// the sentinel is written last. Missing inputs are errors wrapping ErrInput
// that name the file, before anything is written.
package qc

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/atomicfile"
	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/par"
	"github.com/kintsugi-hpc/kintsugi-go/internal/planestats"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/staging"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// Stages, in pipeline order (layout.Stages).
var Stages = layout.Stages

// ErrInput marks a missing or unreadable input (exit 2 in kintsugi-qc); it
// is staging.ErrInput, shared by every stage.
var ErrInput = staging.ErrInput

// Options are the knobs of Run.
type Options struct {
	Workers     int          // planes read at once (>= 1)
	OverviewPx  int          // longest side of overview and overlay PNGs, px (0: 512)
	Logger      *slog.Logger // nil: slog.Default()
	Environment string       // recorded in the sentinel (e.g. "workers=4 (SLURM_CPUS_PER_TASK)")
}

// ChannelMetrics are one channel's planes of one cycle.
type ChannelMetrics struct {
	Channel  int          `json:"channel"`
	Marker   string       `json:"marker,omitempty"`
	Planes   []PlaneStats `json:"planes"`              // in z order; one plane for edf and registration
	Overview string       `json:"overview_png"`        // file name in the stage's QC directory
	Factor   int          `json:"overview_downsample"` // block size of the overview, px
	// FocusMap (stitch, decon: z-stacks of more than one plane) is the
	// sharpest plane per block.
	FocusMap *FocusMap `json:"focus_map,omitempty"`
}

// FocusMap is, per block of BlockPx x BlockPx px of a channel's planes
// (edge blocks smaller), the z (PlaneStats.Z) of the plane with the highest
// BlockFocus: where in the tissue which plane is sharpest. Blocks are
// row-major, NX per row; a long side has at most FocusMapBlocks blocks.
type FocusMap struct {
	BlockPx int   `json:"block_px"`
	NX      int   `json:"nx"`
	NY      int   `json:"ny"`
	BestZ   []int `json:"best_z"`
}

// FocusMapBlocks is the most blocks along a focus map's longer side.
const FocusMapBlocks = 64

// RegScores are one cycle's registration scores.
type RegScores struct {
	ReferenceCycle int    `json:"reference_cycle"`
	Image          string `json:"image"`          // file name compared (the cycle's DAPI, as the registration stage chooses it)
	NCCEDF         Num    `json:"ncc_edf"`        // NCC with the reference cycle's image before registration (EDF planes)
	NCCRegistered  Num    `json:"ncc_registered"` // NCC with the reference cycle's image after registration
	// StageMetrics is the "metrics" object of registered/qc/cycNN_metrics.json, the registration
	// stage's own scores (ncc_before, ncc_final, rotation, translation, field statistics), as written.
	StageMetrics     map[string]any `json:"stage_metrics,omitempty"`
	StageMetricsFile string         `json:"stage_metrics_file,omitempty"`
	Overlay          string         `json:"overlay_png"`
}

// CycleMetrics is qc_plots/<stage>/cycNN_metrics.json.
type CycleMetrics struct {
	Stage           string           `json:"stage"`
	Cycle           int              `json:"cycle"`
	Dir             string           `json:"dir"` // input directory, relative to the project
	SaturationLevel int              `json:"saturation_level"`
	Channels        []ChannelMetrics `json:"channels"`
	Registration    *RegScores       `json:"registration,omitempty"`
}

// Heatmap describes one heatmap PNG: Values[row][col] drawn with Colormap
// between Min and Max.
type Heatmap struct {
	File    string   `json:"file"`
	Measure string   `json:"measure"`
	Rows    []string `json:"rows"`
	Cols    []string `json:"cols"`
	Values  [][]Num  `json:"values"`
	Min     float64  `json:"min"`
	Max     float64  `json:"max"`
}

// Floats returns Values as float64 (null as NaN).
func (h *Heatmap) Floats() [][]float64 {
	out := make([][]float64, len(h.Values))
	for i, r := range h.Values {
		out[i] = make([]float64, len(r))
		for j, v := range r {
			out[i][j] = float64(v)
		}
	}
	return out
}

// Summary is qc_plots/<stage>/summary.json.
type Summary struct {
	Stage    string         `json:"stage"`
	Cycles   []int          `json:"cycles"`
	Metrics  []string       `json:"metrics"` // per-cycle metrics files
	Heatmaps []Heatmap      `json:"heatmaps"`
	Cycle    []CycleMetrics `json:"-"`
}

// Run writes the QC report of stage for every cycle of cfg and returns its
// summary.
func Run(ctx context.Context, cfg *config.Config, stage string, opt Options) (*Summary, error) {
	lg := opt.Logger
	if lg == nil {
		lg = slog.Default()
	}
	if opt.OverviewPx <= 0 {
		opt.OverviewPx = 512
	}
	opt.Workers = max(1, opt.Workers)
	known := false
	for _, s := range Stages {
		known = known || s == stage
	}
	if !known {
		return nil, fmt.Errorf("%w: stage %q: want one of %s", ErrInput, stage, strings.Join(Stages, ", "))
	}
	t0 := time.Now()
	proj := cfg.ProjectDir
	// Find every input first: a missing file fails before anything is written.
	jobs, err := discover(cfg, stage)
	if err != nil {
		return nil, err
	}
	st, err := staging.NewContext(ctx, layout.QCStage(proj, stage))
	if err != nil {
		return nil, err
	}
	defer st.Abort()

	sum := &Summary{Stage: stage}
	var ref map[string]*raster.Gray16 // registration: reference cycle's images, "edf" / "registered"
	if stage == "registration" {
		if ref, err = referenceImages(cfg, jobs); err != nil {
			return nil, err
		}
	}
	for _, cj := range jobs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		cm, err := cycleReport(ctx, cfg, stage, cj, ref, st.Path, opt)
		if err != nil {
			return nil, err
		}
		name := layout.MetricsName(cj.cycle)
		if err := writeJSON(filepath.Join(st.Path, name), cm); err != nil {
			return nil, err
		}
		sum.Cycles = append(sum.Cycles, cj.cycle)
		sum.Metrics = append(sum.Metrics, name)
		sum.Cycle = append(sum.Cycle, *cm)
		lg.Info("cycle", "stage", stage, "cycle", cj.cycle, "channels", len(cm.Channels))
	}
	sum.Heatmaps = heatmaps(stage, sum.Cycle)
	for i := range sum.Heatmaps {
		h := &sum.Heatmaps[i]
		img, lo, hi := DrawHeatmap(h.Floats())
		h.Min, h.Max = finite(lo), finite(hi)
		if err := writePNG(filepath.Join(st.Path, h.File), img); err != nil {
			return nil, err
		}
	}
	if err := writeJSON(filepath.Join(st.Path, "summary.json"), sum); err != nil {
		return nil, err
	}
	if err := st.Commit(); err != nil {
		return nil, err
	}
	kv := [][2]string{{"stage", "qc_" + stage}, {"cycles", strconv.Itoa(len(jobs))}, {"dir", filepath.Join(layout.QCPlots, stage)},
		{"heatmaps", strconv.Itoa(len(sum.Heatmaps))}, {"seconds", fmt.Sprintf("%.1f", time.Since(t0).Seconds())},
		{"completed", time.Now().UTC().Format(time.RFC3339)}}
	if opt.Environment != "" {
		kv = append(kv, [2]string{"workers", opt.Environment})
	}
	if err := staging.WriteSentinel(layout.QCSentinel(proj, stage), kv); err != nil {
		return nil, err
	}
	lg.Info("QC report written", "stage", stage, "dir", layout.QCStage(proj, stage), "cycles", len(jobs), "seconds", fmt.Sprintf("%.1f", time.Since(t0).Seconds()))
	return sum, nil
}

func finite(v float64) float64 {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return 0
	}
	return v
}

// cycleJob lists one cycle's input files.
type cycleJob struct {
	cycle    int
	dir      string       // input directory (absolute)
	channels []channelJob // config order
	regEDF   []string     // registration: the cycle's EDF files, same order as channels
}

type channelJob struct {
	channel int
	marker  string
	files   []string // absolute paths, z order
	zs      []int
	// summary, when set, is the channel directory whose planes were not
	// written: its PlaneSummary stands in for them (readSummary).
	summary string
}

var (
	stitchedPlane = regexp.MustCompile(`^(\d+)\.tif$`)
	deconPlane    = regexp.MustCompile(`^deconv_(\d+)\.tif$`)
)

func discover(cfg *config.Config, stage string) ([]cycleJob, error) {
	processed := layout.ProcessedDir(cfg.ProjectDir)
	var jobs []cycleJob
	for _, c := range cfg.Cycles {
		// registration: the images in registered/cycNN, the sentinel in registered/
		cj := cycleJob{cycle: c, dir: filepath.Join(processed, layout.StageDir(stage), layout.CycleName(c))}
		if err := staging.RequireSentinel(layout.StageOut(cfg.ProjectDir, stage, c), c, stage); err != nil {
			return nil, err
		}
		for _, ch := range cfg.Channels {
			j := channelJob{channel: ch, marker: cfg.ChannelMarker(c, ch)}
			switch stage {
			case "stitch", "decon":
				re := stitchedPlane
				if stage == "decon" {
					re = deconPlane
				}
				dir := filepath.Join(cj.dir, layout.ChannelDir(ch))
				ents, err := os.ReadDir(dir)
				if err != nil {
					return nil, fmt.Errorf("%w: cycle %d channel %d: %v", ErrInput, c, ch, err)
				}
				for _, e := range ents {
					if m := re.FindStringSubmatch(e.Name()); m != nil && !e.IsDir() {
						z, _ := strconv.Atoi(m[1])
						j.files = append(j.files, filepath.Join(dir, e.Name()))
						j.zs = append(j.zs, z)
					}
				}
				if len(j.files) == 0 {
					if _, err := os.Stat(filepath.Join(dir, layout.QCPlanesName)); err == nil {
						j.summary = dir
						break
					}
					return nil, fmt.Errorf("%w: cycle %d channel %d: no planes (%s) and no %s in %s", ErrInput, c, ch, re, layout.QCPlanesName, dir)
				}
				sort.Sort(byZ{&j})
			case "edf", "registration":
				p := filepath.Join(cj.dir, cfg.EDFFileName(c, ch))
				if _, err := os.Stat(p); err != nil {
					return nil, fmt.Errorf("%w: cycle %d channel %d: %v", ErrInput, c, ch, err)
				}
				j.files = []string{p}
				if stage == "registration" {
					e := filepath.Join(layout.EDFOut(cfg.ProjectDir, c), cfg.EDFFileName(c, ch))
					if _, err := os.Stat(e); err != nil {
						return nil, fmt.Errorf("%w: cycle %d channel %d: EDF plane for the before/after scores: %v", ErrInput, c, ch, err)
					}
					cj.regEDF = append(cj.regEDF, e)
				}
			}
			cj.channels = append(cj.channels, j)
		}
		jobs = append(jobs, cj)
	}
	return jobs, nil
}

type byZ struct{ j *channelJob }

func (b byZ) Len() int           { return len(b.j.zs) }
func (b byZ) Less(i, k int) bool { return b.j.zs[i] < b.j.zs[k] }
func (b byZ) Swap(i, k int) {
	b.j.zs[i], b.j.zs[k] = b.j.zs[k], b.j.zs[i]
	b.j.files[i], b.j.files[k] = b.j.files[k], b.j.files[i]
}

func read(path string) (*raster.Gray16, error) {
	g, err := tiffio.ReadGray16(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInput, err)
	}
	return g, nil
}

// cycleReport computes one cycle's metrics and writes its PNGs into dir.
func cycleReport(ctx context.Context, cfg *config.Config, stage string, cj cycleJob, ref map[string]*raster.Gray16, dir string, opt Options) (*CycleMetrics, error) {
	rel := func(p string) string {
		if r, err := filepath.Rel(cfg.ProjectDir, p); err == nil {
			return r
		}
		return p
	}
	cm := &CycleMetrics{Stage: stage, Cycle: cj.cycle, Dir: rel(cj.dir), SaturationLevel: SaturationLevel}
	for _, chj := range cj.channels {
		if chj.summary != "" {
			chm, err := summaryMetrics(cj.cycle, chj, dir, opt)
			if err != nil {
				return nil, err
			}
			cm.Channels = append(cm.Channels, *chm)
			continue
		}
		chm := ChannelMetrics{Channel: chj.channel, Marker: chj.marker, Planes: make([]PlaneStats, len(chj.files))}
		var (
			mu    sync.Mutex
			proj  *raster.Gray16 // maximum over z (a single plane for edf/registration)
			block int            // focus map block, px (0: no map)
			bf    = make([][]float64, len(chj.files))
			bnx   int
		)
		if len(chj.files) > 1 {
			info, err := tiffio.ReadInfo(chj.files[0])
			if err != nil {
				return nil, fmt.Errorf("%w: %v", ErrInput, err)
			}
			block = Block(info.Width, info.Height)
		}
		err := par.ForEach(ctx, len(chj.files), opt.Workers, func(i int) error {
			g, err := read(chj.files[i])
			if err != nil {
				return err
			}
			m := planestats.Of(g, Block(g.W, g.H))
			var nx int
			if block > 0 {
				nx, bf[i] = m.NX, m.BlockFocus()
			}
			s := StatsOf(m)
			s.File = rel(chj.files[i])
			if len(chj.zs) > 0 {
				s.Z = chj.zs[i]
			}
			mu.Lock()
			defer mu.Unlock()
			chm.Planes[i] = s
			bnx = nx
			if proj == nil {
				proj = g
			} else {
				if g.W != proj.W || g.H != proj.H {
					return fmt.Errorf("%w: %s is %dx%d, other planes of the channel %dx%d", ErrInput, chj.files[i], g.W, g.H, proj.W, proj.H)
				}
				planestats.MaxInto(proj, g)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		if block > 0 {
			chm.FocusMap = bestPlanes(bf, chm.Planes, block, bnx)
		}
		if err := writeOverview(&chm, cj.cycle, proj, dir, opt); err != nil {
			return nil, err
		}
		cm.Channels = append(cm.Channels, chm)
	}
	if stage == "registration" {
		rs, err := regScores(cfg, cj, ref, dir, opt)
		if err != nil {
			return nil, err
		}
		cm.Registration = rs
	}
	return cm, nil
}

// summaryMetrics is a channel's metrics from its PlaneSummary (planes not
// written), equal to those from its planes, and its overview PNG.
func summaryMetrics(cycle int, chj channelJob, dir string, opt Options) (*ChannelMetrics, error) {
	sum, proj, err := readSummary(chj.summary)
	if err != nil {
		return nil, err
	}
	chm := &ChannelMetrics{Channel: chj.channel, Marker: chj.marker, Planes: sum.Planes}
	if sum.BlockPx > 0 {
		chm.FocusMap = bestPlanes(sum.Focus, chm.Planes, sum.BlockPx, sum.NX)
	}
	if err := writeOverview(chm, cycle, proj, dir, opt); err != nil {
		return nil, err
	}
	return chm, nil
}

// writeOverview writes the overview PNG of channel chm of a cycle from
// proj (its maximum over z) into dir and records its name and downsampling.
func writeOverview(chm *ChannelMetrics, cycle int, proj *raster.Gray16, dir string, opt Options) error {
	img, f := Overview(proj, opt.OverviewPx)
	chm.Overview = fmt.Sprintf("%s_CH%d_overview.png", layout.CycleName(cycle), chm.Channel)
	chm.Factor = f
	return writePNG(filepath.Join(dir, chm.Overview), img)
}

// bestPlanes is the focus map from every plane's BlockFocus (same block
// grid, planes in z order): per block the Z of the highest value, the first
// on a tie.
func bestPlanes(bf [][]float64, planes []PlaneStats, block, nx int) *FocusMap {
	fm := &FocusMap{BlockPx: block, NX: nx, NY: len(bf[0]) / nx, BestZ: make([]int, len(bf[0]))}
	for b := range fm.BestZ {
		best := 0
		for i := range bf {
			if bf[i][b] > bf[best][b] {
				best = i
			}
		}
		fm.BestZ[b] = planes[best].Z
	}
	return fm
}

// dapiIndex picks the cycle's registration image as the registration stage
// does: the first DAPI*.tif in name order, else the first *.tif.
func dapiIndex(files []string) int {
	best, bestDAPI := -1, -1
	for i, f := range files {
		b := filepath.Base(f)
		if strings.HasPrefix(b, "DAPI") && (bestDAPI < 0 || b < filepath.Base(files[bestDAPI])) {
			bestDAPI = i
		}
		if best < 0 || b < filepath.Base(files[best]) {
			best = i
		}
	}
	if bestDAPI >= 0 {
		return bestDAPI
	}
	return best
}

func referenceImages(cfg *config.Config, jobs []cycleJob) (map[string]*raster.Gray16, error) {
	refCycle := cfg.Registration.ReferenceCycle
	for _, cj := range jobs {
		if cj.cycle != refCycle {
			continue
		}
		_, reg, edf, err := dapiPair(cj)
		if err != nil {
			return nil, err
		}
		return map[string]*raster.Gray16{"registered": reg, "edf": edf}, nil
	}
	return nil, fmt.Errorf("%w: config key registration.reference_cycle: cycle %d is not among the cycles %v", ErrInput, refCycle, cfg.Cycles)
}

// dapiPair reads a registered cycle's DAPI image (dapiIndex of the
// channels' files) and the same channel's EDF image (before registration).
func dapiPair(cj cycleJob) (file string, reg, edf *raster.Gray16, err error) {
	files := make([]string, len(cj.channels))
	for i, ch := range cj.channels {
		files[i] = ch.files[0]
	}
	k := dapiIndex(files)
	if reg, err = read(files[k]); err != nil {
		return "", nil, nil, err
	}
	if edf, err = read(cj.regEDF[k]); err != nil {
		return "", nil, nil, err
	}
	return files[k], reg, edf, nil
}

func regScores(cfg *config.Config, cj cycleJob, ref map[string]*raster.Gray16, dir string, opt Options) (*RegScores, error) {
	file, reg, edf, err := dapiPair(cj)
	if err != nil {
		return nil, err
	}
	rs := &RegScores{ReferenceCycle: cfg.Registration.ReferenceCycle, Image: filepath.Base(file),
		NCCEDF: Num(NCC(ref["edf"], edf)), NCCRegistered: Num(NCC(ref["registered"], reg))}
	mf := filepath.Join(layout.Registered(cfg.ProjectDir), layout.RegisteredQCDir, layout.MetricsName(cj.cycle))
	if b, err := os.ReadFile(mf); err == nil {
		var doc struct {
			Metrics map[string]any `json:"metrics"`
		}
		if err := json.Unmarshal(b, &doc); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrInput, mf, err)
		}
		rs.StageMetrics = doc.Metrics
		rs.StageMetricsFile = filepath.Join(layout.Data, layout.Processed, layout.RegisteredDir, layout.RegisteredQCDir, filepath.Base(mf))
	}
	rs.Overlay = layout.CycleName(cj.cycle) + "_overlay.png"
	if err := writePNG(filepath.Join(dir, rs.Overlay), Overlay(ref["registered"], reg, opt.OverviewPx)); err != nil {
		return nil, err
	}
	return rs, nil
}

// PlaneZs returns the z-plane numbers (PlaneStats.Z) of every plane of
// channel ch (0: every channel) in cms, ascending, each once.
func PlaneZs(cms []CycleMetrics, ch int) []int {
	zset := map[int]bool{}
	for _, cm := range cms {
		for _, c := range cm.Channels {
			if ch == 0 || c.Channel == ch {
				for _, p := range c.Planes {
					zset[p.Z] = true
				}
			}
		}
	}
	zs := make([]int, 0, len(zset))
	for z := range zset {
		zs = append(zs, z)
	}
	sort.Ints(zs)
	return zs
}

// heatmaps lays out the stage's heatmaps from the per-cycle metrics.
func heatmaps(stage string, cms []CycleMetrics) []Heatmap {
	switch stage {
	case "stitch", "decon":
		// Rows: cycle x channel; columns: z.
		mk := func(file, measure string, get func(PlaneStats) float64) Heatmap {
			h := Heatmap{File: file, Measure: measure}
			zs := PlaneZs(cms, 0)
			for _, z := range zs {
				h.Cols = append(h.Cols, fmt.Sprintf("z%02d", z))
			}
			for _, cm := range cms {
				for _, ch := range cm.Channels {
					h.Rows = append(h.Rows, fmt.Sprintf("%s CH%d", layout.CycleName(cm.Cycle), ch.Channel))
					row := make([]Num, len(zs))
					for i := range row {
						row[i] = Num(math.NaN())
					}
					for _, p := range ch.Planes {
						row[sort.SearchInts(zs, p.Z)] = Num(get(p))
					}
					h.Values = append(h.Values, row)
				}
			}
			return h
		}
		return []Heatmap{
			mk("mean_heatmap.png", "mean intensity, counts", func(p PlaneStats) float64 { return p.Mean }),
			mk("focus_heatmap.png", "focus (variance of the Laplacian), counts^2", func(p PlaneStats) float64 { return p.Focus }),
			mk("saturation_heatmap.png", fmt.Sprintf("fraction of pixels >= %d", SaturationLevel), func(p PlaneStats) float64 { return p.SaturatedFraction }),
		}
	case "edf":
		// Rows: cycles; columns: channels.
		mk := func(file, measure string, get func(PlaneStats) float64) Heatmap {
			h := Heatmap{File: file, Measure: measure}
			for i, cm := range cms {
				h.Rows = append(h.Rows, layout.CycleName(cm.Cycle))
				row := make([]Num, len(cm.Channels))
				for j, ch := range cm.Channels {
					if i == 0 {
						h.Cols = append(h.Cols, fmt.Sprintf("CH%d", ch.Channel))
					}
					row[j] = Num(get(ch.Planes[0]))
				}
				h.Values = append(h.Values, row)
			}
			return h
		}
		return []Heatmap{
			mk("focus_heatmap.png", "focus (variance of the Laplacian), counts^2", func(p PlaneStats) float64 { return p.Focus }),
			mk("mean_heatmap.png", "mean intensity, counts", func(p PlaneStats) float64 { return p.Mean }),
		}
	default: // registration: rows cycles; columns NCC before and after.
		h := Heatmap{File: "ncc_heatmap.png", Measure: "NCC with the reference cycle's DAPI", Cols: []string{"ncc_edf", "ncc_registered"}}
		for _, cm := range cms {
			h.Rows = append(h.Rows, layout.CycleName(cm.Cycle))
			h.Values = append(h.Values, []Num{cm.Registration.NCCEDF, cm.Registration.NCCRegistered})
		}
		return []Heatmap{h}
	}
}

// Num is a float64 that encodes NaN and infinities as JSON null (a constant
// image has no NCC; a heatmap cell without a plane has no value).
type Num float64

// MarshalJSON implements json.Marshaler.
func (n Num) MarshalJSON() ([]byte, error) {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return json.Marshal(f)
}

// UnmarshalJSON implements json.Unmarshaler (null is NaN).
func (n *Num) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*n = Num(math.NaN())
		return nil
	}
	var f float64
	err := json.Unmarshal(b, &f)
	*n = Num(f)
	return err
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		return err
	}
	return atomicfile.WriteBytes(path, append(b, '\n'), 0o666)
}
