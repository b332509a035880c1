package report

import (
	"context"
	"encoding/csv"
	"fmt"
	"image"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"gonum.org/v1/plot/vg"

	"github.com/kintsugi-hpc/kintsugi-go/internal/align"
	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/dataset"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/qc"
	"github.com/kintsugi-hpc/kintsugi-go/internal/qc/plot"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

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
	basic := filepath.Join(layout.Stitched(cfg.ProjectDir, cycle), layout.ChannelDir(ch), layout.BaSiCDir)
	flat, errF := tiffio.ReadFloat32(filepath.Join(basic, layout.Flatfield(z)))
	dark, errD := tiffio.ReadFloat32(filepath.Join(basic, layout.Darkfield(z)))
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
	name := layout.CycleName(c)
	pos, err := readPositions(filepath.Join(layout.Stitched(cfg.ProjectDir, c), layout.TilePositionsName))
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
	img, err := readPNG(filepath.Join(layout.QCStage(cfg.ProjectDir, layout.Stitch), chm.Overview))
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
			dir := filepath.Join(layout.Stitched(cfg.ProjectDir, c), layout.ChannelDir(ch), layout.BaSiCDir)
			ents, _ := filepath.Glob(filepath.Join(dir, "*"+layout.FlatfieldSuffix))
			sort.Strings(ents)
			if len(ents) == 0 {
				missing++
				continue
			}
			for i, fp := range ents {
				zs := strings.TrimSuffix(filepath.Base(fp), layout.FlatfieldSuffix)
				flat, err1 := tiffio.ReadFloat32(fp)
				dark, err2 := tiffio.ReadFloat32(filepath.Join(dir, zs+layout.DarkfieldSuffix))
				if err1 != nil || err2 != nil {
					t.Rows = append(t.Rows, []string{layout.CycleName(c), fmt.Sprintf("CH%d", ch), zs, "unreadable", "unreadable"})
					continue
				}
				fl, fh := f32Range(flat)
				dl, dh := f32Range(dark)
				t.Rows = append(t.Rows, []string{layout.CycleName(c), fmt.Sprintf("CH%d", ch), zs, fmt.Sprintf("%.3f – %.3f", fl, fh), fmt.Sprintf("%.1f – %.1f", dl, dh)})
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
			notes = append(notes, fmt.Sprintf("%s: no BaSiC profiles for %d channel(s) (stitched/%s/CH{c}/basic/ missing)", layout.CycleName(c), missing, layout.CycleName(c)))
		}
		panels = append(flats, darks...)
		if len(panels) > 0 {
			figs = append(figs, plot.Images("basic_"+layout.CycleName(c), fmt.Sprintf("BaSiC flatfield and darkfield of %s (middle plane)", layout.CycleName(c)),
				"Top: flatfield (gain, normalised to mean 1; the tiles are divided by it). Bottom: darkfield (counts; subtracted). Each image on its own scale; axes in tile px.",
				panels, len(flats), vg.Points(230)))
		}
	}
	return t, figs, notes
}
