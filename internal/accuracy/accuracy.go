// Package accuracy scores the stitch stage's outputs of a synthetic project
// (internal/synth) against its ground truth.
//
// Inputs, under the project directory:
//
//	ground_truth/truth.json and the files it names (internal/synth)
//	data/processed/stitched/cycNN/CH{c}/basic/{z:02d}_flatfield.tif   float32, tile size
//	data/processed/stitched/cycNN/CH{c}/basic/{z:02d}_darkfield.tif   float32, raw counts, tile size
//	data/processed/stitched/cycNN/tile_positions.csv                  tile,row,col,y_pos,x_pos (px)
//	data/processed/stitched/cycNN/CH{c}/{ref_z:02d}.tif               stitched plane (optional, for the NCC)
//
// Metrics (units: flatfield dimensionless, darkfield counts, positions px):
//   - Flatfield: both profiles normalised to mean 1; RMS over pixels of the
//     difference, per (channel, z); mean and max over planes. The baseline is
//     the RMS of the normalised truth minus 1 (no correction at all).
//   - Darkfield: mean of the fitted darkfield against the true mean, and the
//     RMS over pixels of fitted minus true, per plane; mean and max over planes.
//   - Positions: residuals after removing the best global translation (the
//     mean of fitted minus true); RMS and max of their length. For every grid
//     neighbour pair (right and below), the length of the error of the
//     relative translation, counted within 1 px and within 2 px.
//   - Scene NCC: Pearson correlation of the stitched reference plane with the
//     true scene at that plane, stitched pixel m compared with truth pixel
//     m + round(mean(true − fitted position)), over the common rectangle.
//
// Images are (y, x), row-major, x fastest (raster conventions).
package accuracy

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// ErrBadInput is wrapped by errors about the project's content (missing or
// inconsistent truth or outputs), as opposed to I/O failures.
var ErrBadInput = errors.New("bad input")

// Report is the accuracy of one cycle.
type Report struct {
	ProjectDir string          `json:"project_dir"`
	Cycle      int             `json:"cycle"`
	Channels   []ChannelReport `json:"channels"`
	Positions  *PositionReport `json:"positions,omitempty"`
	// Missing lists expected outputs that were not found, relative to the
	// project directory; the metrics cover what was found.
	Missing []string `json:"missing,omitempty"`
}

// ChannelReport holds one channel's profile errors.
type ChannelReport struct {
	Channel         int           `json:"channel"`
	Planes          []PlaneReport `json:"planes"`
	FlatRMSMean     float64       `json:"flat_rms_mean"`     // mean over planes of the flatfield RMS error
	FlatRMSMax      float64       `json:"flat_rms_max"`      // max over planes
	FlatRMSMaxZ     int           `json:"flat_rms_max_z"`    // plane of the max, 1-based
	FlatBaselineRMS float64       `json:"flat_baseline_rms"` // RMS of the true flatfield minus 1
	DarkTrueMean    float64       `json:"dark_true_mean"`    // counts
	DarkFitMean     float64       `json:"dark_fit_mean"`     // mean over planes of the fitted mean, counts
	DarkRMSMean     float64       `json:"dark_rms_mean"`     // mean over planes of the darkfield RMS error, counts
	DarkRMSMax      float64       `json:"dark_rms_max"`      // counts
	DarkRMSMaxZ     int           `json:"dark_rms_max_z"`
	// SceneNCC compares the stitched plane SceneZ with the true scene; absent
	// when either file is missing.
	SceneNCC *float64 `json:"scene_ncc,omitempty"`
	SceneZ   int      `json:"scene_z,omitempty"`
}

// PlaneReport holds one (channel, z) fit's errors.
type PlaneReport struct {
	Z        int     `json:"z"`         // 1-based
	FlatRMS  float64 `json:"flat_rms"`  // normalised flatfield, RMS of the difference
	DarkMean float64 `json:"dark_mean"` // mean fitted darkfield, counts
	DarkRMS  float64 `json:"dark_rms"`  // RMS of fitted minus true darkfield, counts
}

// PositionReport holds the tile-position errors, px.
type PositionReport struct {
	Tiles     int     `json:"tiles"`
	OffsetY   float64 `json:"offset_y"` // removed global translation: mean(fitted - true)
	OffsetX   float64 `json:"offset_x"`
	RMS       float64 `json:"rms"` // RMS length of the residuals
	Max       float64 `json:"max"`
	MaxTile   int     `json:"max_tile"` // tile number of the max
	Pairs     int     `json:"pairs"`    // grid neighbour pairs
	Within05  int     `json:"within_0_5px"`
	Within1   int     `json:"within_1px"`
	Within2   int     `json:"within_2px"`
	PairRMS   float64 `json:"pair_rms"` // RMS length of the relative-translation errors
	PairMax   float64 `json:"pair_max"`
	WorstPair [2]int  `json:"worst_pair"` // tile numbers (A, B) of PairMax
}

// StitchDir is data/processed/stitched/cycNN (layout.Stitched).
func StitchDir(projectDir string, cycle int) string { return layout.Stitched(projectDir, cycle) }

// Evaluate scores the stitch outputs of cycle against the project's truth.
// Missing output files are listed in Report.Missing; it is an error when
// nothing at all was found, or when the truth or an output is inconsistent
// (wrong size, wrong tiles); such errors wrap ErrBadInput.
func Evaluate(projectDir string, cycle int) (Report, error) {
	rep := Report{ProjectDir: projectDir, Cycle: cycle}
	tr, err := synth.ReadTruth(synth.TruthPath(projectDir))
	if err != nil {
		return rep, fmt.Errorf("%w: %w", ErrBadInput, err)
	}
	ct, ok := tr.Cycle(cycle)
	if !ok {
		return rep, fmt.Errorf("%w: cycle %d is not in the truth", ErrBadInput, cycle)
	}
	sdir := StitchDir(projectDir, cycle)
	gt := synth.GroundTruthDir(projectDir)
	rel := func(p string) string {
		if r, err := filepath.Rel(projectDir, p); err == nil {
			return r
		}
		return p
	}
	found := 0

	// Positions first: the NCC alignment uses them.
	var offY, offX float64
	posPath := filepath.Join(sdir, layout.TilePositionsName)
	if est, err := readPositions(posPath); errors.Is(err, os.ErrNotExist) {
		rep.Missing = append(rep.Missing, rel(posPath))
	} else if err != nil {
		return rep, err
	} else {
		pr, err := comparePositions(ct, tr.Grid, est)
		if err != nil {
			return rep, fmt.Errorf("%w: %s: %w", ErrBadInput, posPath, err)
		}
		rep.Positions = &pr
		offY, offX = pr.OffsetY, pr.OffsetX
		found++
	}

	for _, chT := range tr.Channels {
		c := chT.Channel
		flatT, err := tiffio.ReadFloat32(filepath.Join(gt, chT.FlatfieldFile))
		if err != nil {
			return rep, fmt.Errorf("%w: true flatfield: %w", ErrBadInput, err)
		}
		darkT, err := tiffio.ReadFloat32(filepath.Join(gt, chT.DarkfieldFile))
		if err != nil {
			return rep, fmt.Errorf("%w: true darkfield: %w", ErrBadInput, err)
		}
		cr := ChannelReport{Channel: c, FlatBaselineRMS: rmsDiff(normalised(flatT.Pix), nil), DarkTrueMean: mean(darkT.Pix)}
		chDir := filepath.Join(sdir, layout.ChannelDir(c))
		if _, err := os.Stat(chDir); errors.Is(err, os.ErrNotExist) {
			rep.Missing = append(rep.Missing, rel(chDir))
			continue
		}
		flatTN := normalised(flatT.Pix)
		for z := 1; z <= tr.NZPlanes; z++ {
			fp := filepath.Join(chDir, layout.BaSiCDir, layout.Flatfield(z))
			dp := filepath.Join(chDir, layout.BaSiCDir, layout.Darkfield(z))
			flat, err1 := readProfile(fp, flatT)
			dark, err2 := readProfile(dp, darkT)
			for _, e := range []struct {
				p   string
				err error
			}{{fp, err1}, {dp, err2}} {
				if errors.Is(e.err, os.ErrNotExist) {
					rep.Missing = append(rep.Missing, rel(e.p))
				} else if e.err != nil {
					return rep, e.err
				}
			}
			if err1 != nil || err2 != nil {
				continue
			}
			cr.Planes = append(cr.Planes, PlaneReport{
				Z: z, FlatRMS: rmsDiff(normalised(flat.Pix), flatTN), DarkMean: mean(dark.Pix), DarkRMS: rmsDiff(toF64(dark.Pix), toF64(darkT.Pix)),
			})
		}
		if len(cr.Planes) > 0 {
			found++
			for _, p := range cr.Planes {
				n := float64(len(cr.Planes))
				cr.FlatRMSMean += p.FlatRMS / n
				cr.DarkRMSMean += p.DarkRMS / n
				cr.DarkFitMean += p.DarkMean / n
				if p.FlatRMS > cr.FlatRMSMax || cr.FlatRMSMaxZ == 0 {
					cr.FlatRMSMax, cr.FlatRMSMaxZ = p.FlatRMS, p.Z
				}
				if p.DarkRMS > cr.DarkRMSMax || cr.DarkRMSMaxZ == 0 {
					cr.DarkRMSMax, cr.DarkRMSMaxZ = p.DarkRMS, p.Z
				}
			}
		}
		for _, sc := range ct.Scenes {
			if sc.Channel != c || sc.Z != tr.RefZ {
				continue
			}
			sp := filepath.Join(chDir, layout.StitchedPlane(sc.Z))
			ncc, err := sceneNCC(sp, filepath.Join(gt, sc.File), -offY, -offX)
			if errors.Is(err, os.ErrNotExist) {
				rep.Missing = append(rep.Missing, rel(sp))
				continue
			}
			if err != nil {
				return rep, err
			}
			found++
			cr.SceneNCC, cr.SceneZ = &ncc, sc.Z
		}
		rep.Channels = append(rep.Channels, cr)
	}
	if found == 0 {
		return rep, fmt.Errorf("%w: no stitch outputs of cycle %d under %s", ErrBadInput, cycle, sdir)
	}
	return rep, nil
}

// readProfile reads a fitted profile and checks its size against the truth.
func readProfile(path string, truth *raster.Float32) (*raster.Float32, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, err
	}
	f, err := tiffio.ReadFloat32(path)
	if err != nil {
		return nil, err
	}
	if f.W != truth.W || f.H != truth.H {
		return nil, fmt.Errorf("%w: %s is %dx%d, the true profile %dx%d (W x H)", ErrBadInput, path, f.W, f.H, truth.W, truth.H)
	}
	return f, nil
}

func toF64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

func mean(v []float32) float64 {
	var s float64
	for _, x := range v {
		s += float64(x)
	}
	return s / float64(len(v))
}

// normalised returns v / mean(v) in float64.
func normalised(v []float32) []float64 {
	m := mean(v)
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x) / m
	}
	return out
}

// rmsDiff is sqrt(mean((a-b)²)); b nil means all ones.
func rmsDiff(a, b []float64) float64 {
	var s float64
	for i, x := range a {
		y := 1.0
		if b != nil {
			y = b[i]
		}
		s += (x - y) * (x - y)
	}
	return math.Sqrt(s / float64(len(a)))
}

// estPosition is one row of tile_positions.csv.
type estPosition struct {
	tile, row, col int
	pos            raster.Point
}

// readPositions reads tile_positions.csv (columns found by header name).
func readPositions(path string) ([]estPosition, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := csv.NewReader(f)
	head, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: header: %w", ErrBadInput, path, err)
	}
	col := map[string]int{}
	for i, h := range head {
		col[strings.TrimSpace(h)] = i
	}
	for _, k := range []string{"tile", "row", "col", "y_pos", "x_pos"} {
		if _, ok := col[k]; !ok {
			return nil, fmt.Errorf("%w: %s: no column %q in header %v", ErrBadInput, path, k, head)
		}
	}
	var out []estPosition
	for line := 2; ; line++ {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrBadInput, path, err)
		}
		var e estPosition
		var perr error
		num := func(k string) float64 {
			v, err := strconv.ParseFloat(strings.TrimSpace(rec[col[k]]), 64)
			if err != nil && perr == nil {
				perr = fmt.Errorf("%w: %s line %d: column %s: %q is not a number", ErrBadInput, path, line, k, rec[col[k]])
			}
			return v
		}
		e.tile, e.row, e.col = int(num("tile")), int(num("row")), int(num("col"))
		e.pos = raster.Point{Y: num("y_pos"), X: num("x_pos")}
		if perr != nil {
			return nil, perr
		}
		out = append(out, e)
	}
	return out, nil
}

// comparePositions scores fitted positions against the truth of one cycle.
func comparePositions(ct *synth.CycleTruth, g synth.Grid, est []estPosition) (PositionReport, error) {
	n := len(ct.Tiles)
	fit := make([]raster.Point, n)
	seen := make([]bool, n)
	for _, e := range est {
		if e.tile < 1 || e.tile > n {
			return PositionReport{}, fmt.Errorf("tile %d outside 1..%d", e.tile, n)
		}
		tt := ct.Tiles[e.tile-1]
		if seen[e.tile-1] {
			return PositionReport{}, fmt.Errorf("tile %d listed twice", e.tile)
		}
		if e.row != tt.Row || e.col != tt.Col {
			return PositionReport{}, fmt.Errorf("tile %d at row %d col %d, the truth has row %d col %d (acquisition order is snake)", e.tile, e.row, e.col, tt.Row, tt.Col)
		}
		seen[e.tile-1] = true
		fit[e.tile-1] = e.pos
	}
	for k, s := range seen {
		if !s {
			return PositionReport{}, fmt.Errorf("tile %d missing", k+1)
		}
	}
	pr := PositionReport{Tiles: n}
	for k, t := range ct.Tiles {
		pr.OffsetY += (fit[k].Y - t.Y) / float64(n)
		pr.OffsetX += (fit[k].X - t.X) / float64(n)
	}
	var s2 float64
	for k, t := range ct.Tiles {
		d := math.Hypot(fit[k].Y-t.Y-pr.OffsetY, fit[k].X-t.X-pr.OffsetX)
		s2 += d * d
		if d > pr.Max || pr.MaxTile == 0 {
			pr.Max, pr.MaxTile = d, k+1
		}
	}
	pr.RMS = math.Sqrt(s2 / float64(n))

	at := map[[2]int]int{}
	for k, t := range ct.Tiles {
		at[[2]int{t.Row, t.Col}] = k
	}
	var p2 float64
	for a, t := range ct.Tiles {
		for _, nb := range [][2]int{{t.Row, t.Col + 1}, {t.Row + 1, t.Col}} {
			b, ok := at[nb]
			if !ok {
				continue
			}
			tb := ct.Tiles[b]
			ey := (fit[b].Y - fit[a].Y) - (tb.Y - t.Y)
			ex := (fit[b].X - fit[a].X) - (tb.X - t.X)
			d := math.Hypot(ey, ex)
			pr.Pairs++
			p2 += d * d
			if d <= 0.5 {
				pr.Within05++
			}
			if d <= 1 {
				pr.Within1++
			}
			if d <= 2 {
				pr.Within2++
			}
			if d > pr.PairMax || pr.WorstPair == [2]int{} {
				pr.PairMax, pr.WorstPair = d, [2]int{a + 1, b + 1}
			}
		}
	}
	if want := g.Rows*(g.Cols-1) + (g.Rows-1)*g.Cols; pr.Pairs != want {
		return pr, fmt.Errorf("the truth's rows and columns give %d neighbour pairs, want %d for a %dx%d grid", pr.Pairs, want, g.Rows, g.Cols)
	}
	if pr.Pairs > 0 {
		pr.PairRMS = math.Sqrt(p2 / float64(pr.Pairs))
	}
	return pr, nil
}

// sceneNCC correlates the stitched plane with the true scene, stitched pixel
// m against truth pixel m + round(dy, dx), over the common rectangle.
func sceneNCC(stitchedPath, truthPath string, dy, dx float64) (float64, error) {
	if _, err := os.Stat(stitchedPath); err != nil {
		return 0, err
	}
	a, err := tiffio.ReadFloat32(stitchedPath)
	if err != nil {
		return 0, err
	}
	b, err := tiffio.ReadFloat32(truthPath)
	if err != nil {
		return 0, fmt.Errorf("%w: truth scene: %v", ErrBadInput, err) // %v: not "missing output"
	}
	oy, ox := int(math.Round(dy)), int(math.Round(dx))
	// Rows i of a with 0 <= i+oy < b.H, likewise columns.
	i0, i1 := max(0, -oy), min(a.H, b.H-oy)
	j0, j1 := max(0, -ox), min(a.W, b.W-ox)
	if i1-i0 < 2 || j1-j0 < 2 {
		return 0, fmt.Errorf("%w: stitched plane %s (%dx%d) and truth scene (%dx%d) do not overlap at offset (%d, %d)",
			ErrBadInput, stitchedPath, a.W, a.H, b.W, b.H, oy, ox)
	}
	var n, sa, sb float64
	for i := i0; i < i1; i++ {
		ra := a.Pix[i*a.W+j0 : i*a.W+j1]
		rb := b.Pix[(i+oy)*b.W+j0+ox : (i+oy)*b.W+j1+ox]
		for j := range ra {
			sa += float64(ra[j])
			sb += float64(rb[j])
		}
		n += float64(len(ra))
	}
	ma, mb := sa/n, sb/n
	var sab, saa, sbb float64
	for i := i0; i < i1; i++ {
		ra := a.Pix[i*a.W+j0 : i*a.W+j1]
		rb := b.Pix[(i+oy)*b.W+j0+ox : (i+oy)*b.W+j1+ox]
		for j := range ra {
			u, v := float64(ra[j])-ma, float64(rb[j])-mb
			sab += u * v
			saa += u * u
			sbb += v * v
		}
	}
	if saa == 0 || sbb == 0 {
		return 0, nil
	}
	return sab / math.Sqrt(saa*sbb), nil
}
