package qc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/planestats"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// Test project: 2 cycles x 2 channels of 96 x 80 px planes, 3 z-planes in stitched/ and
// deconvolved/, one EDF and one registered plane per channel. Built here from seeded random
// scenes; every expected value below is computed from those arrays independently of Stats.
const (
	W, H   = 96, 80
	NZ     = 3
	shiftY = 5 // cycle 2's EDF DAPI is the reference scene moved by (shiftY, shiftX) px;
	shiftX = 7 // its registered DAPI is the scene itself (a perfect registration)
)

type project struct {
	dir    string
	cfg    *config.Config
	planes map[string]*raster.Gray16 // relative path -> pixels written
}

// scene is a random field of smooth blobs plus white texture, 100..~20000 counts.
func scene(rng *rand.Rand) *raster.Gray16 {
	g := raster.NewGray16(W, H)
	type blob struct{ y, x, r, a float64 }
	var bs []blob
	for i := 0; i < 25; i++ {
		bs = append(bs, blob{rng.Float64() * H, rng.Float64() * W, 3 + 6*rng.Float64(), 2000 + 15000*rng.Float64()})
	}
	for y := 0; y < H; y++ {
		for x := 0; x < W; x++ {
			v := 100 + 1000*rng.Float64() // white texture: what defocus removes
			for _, b := range bs {
				d2 := (float64(y)-b.y)*(float64(y)-b.y) + (float64(x)-b.x)*(float64(x)-b.x)
				v += b.a * math.Exp(-d2/(2*b.r*b.r))
			}
			g.Pix[y*W+x] = uint16(min(v, 65535))
		}
	}
	return g
}

// blur is a 5x5 box blur (edges clamped): the same scene, out of focus.
func blur(g *raster.Gray16) *raster.Gray16 {
	o := raster.NewGray16(g.W, g.H)
	for y := 0; y < g.H; y++ {
		for x := 0; x < g.W; x++ {
			s := 0
			for dy := -2; dy <= 2; dy++ {
				for dx := -2; dx <= 2; dx++ {
					yy, xx := min(max(y+dy, 0), g.H-1), min(max(x+dx, 0), g.W-1)
					s += int(g.Pix[yy*g.W+xx])
				}
			}
			o.Pix[y*g.W+x] = uint16(s / 25)
		}
	}
	return o
}

func shift(g *raster.Gray16, dy, dx int) *raster.Gray16 {
	o := raster.NewGray16(g.W, g.H)
	for y := 0; y < g.H; y++ {
		for x := 0; x < g.W; x++ {
			sy, sx := y-dy, x-dx
			if sy >= 0 && sy < g.H && sx >= 0 && sx < g.W {
				o.Pix[y*g.W+x] = g.Pix[sy*g.W+sx]
			}
		}
	}
	return o
}

func newProject(t *testing.T) *project {
	t.Helper()
	dir := t.TempDir()
	text := fmt.Sprintf(`project_dir: %s
cycles: [1, 2]
channels: [1, 2]
channel_names: {1: [DAPI-01, Blank], 2: [DAPI-02, CD3 / x]}
tile_rows: 2
tile_cols: 2
tile_overlap: 0.3
ncc_threshold: 0.078
pou: 0.5
resources: {accounts: [{name: a, gpu_slots: 1}]}
`, dir)
	cfg, err := config.Parse("qc.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	p := &project{dir: dir, cfg: cfg, planes: map[string]*raster.Gray16{}}
	rng := rand.New(rand.NewPCG(7, 7))
	ref := scene(rng)
	put := func(rel string, g *raster.Gray16) {
		path := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := tiffio.WriteGray16(path, g); err != nil {
			t.Fatal(err)
		}
		p.planes[rel] = g
	}
	sentinel := func(rel string) {
		if err := os.WriteFile(filepath.Join(dir, rel), []byte("stage=x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cfg.Cycles {
		cyc := layout.CycleName(c)
		for _, ch := range cfg.Channels {
			sc := ref
			if ch == 2 || c == 2 {
				sc = scene(rng)
			}
			if c == 2 && ch == 1 {
				sc = ref // the registered DAPI of cycle 2 is the reference scene
			}
			for z := 1; z <= NZ; z++ {
				g := sc
				if z != 2 { // z 2 in focus, 1 and 3 blurred
					g = blur(sc)
				}
				if c == 1 && ch == 2 && z == 1 {
					// Zeros and saturated pixels in known corners: 10 x 8 zeros, 6 x 5 at 64000 (and 6 at 63999).
					g = clone(g)
					for y := 0; y < 8; y++ {
						for x := 0; x < 10; x++ {
							g.Pix[y*W+x] = 0
						}
					}
					for y := 70; y < 76; y++ {
						for x := 80; x < 86; x++ {
							g.Pix[y*W+x] = 64000 // exactly the saturation level: counts
							if y == 75 {
								g.Pix[y*W+x] = 63999 // one below: does not count
							}
						}
					}
				}
				put(fmt.Sprintf("data/processed/stitched/%s/CH%d/%02d.tif", cyc, ch, z), g)
				put(fmt.Sprintf("data/processed/deconvolved/%s/CH%d/deconv_%03d.tif", cyc, ch, z), g)
			}
			edf := sc
			if c == 2 && ch == 1 {
				edf = shift(sc, shiftY, shiftX)
			}
			name := cfg.EDFFileName(c, ch)
			put(fmt.Sprintf("data/processed/edf/%s/%s", cyc, name), edf)
			put(fmt.Sprintf("data/processed/registered/%s/%s", cyc, name), sc)
		}
		for _, s := range []string{"stitched", "deconvolved", "edf"} {
			sentinel(fmt.Sprintf("data/processed/%s/%s/.snakemake_complete", s, cyc))
		}
	}
	sentinel("data/processed/registered/.snakemake_complete")
	if err := os.MkdirAll(filepath.Join(dir, "data/processed/registered/qc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data/processed/registered/qc/cyc02_metrics.json"),
		[]byte(`{"cycle": 2, "reference_cycle": 1, "dapi": "DAPI-02.tif", "metrics": {"ncc_before": 0.31, "ncc_final": 0.97, "translation_y_px": 5}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func clone(g *raster.Gray16) *raster.Gray16 {
	o := raster.NewGray16(g.W, g.H)
	copy(o.Pix, g.Pix)
	return o
}

// reference statistics by sorting, independent of Stats' histogram.
func refStats(g *raster.Gray16) (mean, std float64, mn, mx, p01, p50, p99 int, zero, sat float64) {
	v := make([]int, len(g.Pix))
	var s, s2 float64
	for i, p := range g.Pix {
		v[i] = int(p)
		s += float64(p)
		if p == 0 {
			zero++
		}
		if p >= 64000 {
			sat++
		}
	}
	sort.Ints(v)
	n := float64(len(v))
	mean = s / n
	for _, p := range g.Pix {
		s2 += (float64(p) - mean) * (float64(p) - mean)
	}
	q := func(p float64) int { return v[int(math.Ceil(p*n))-1] }
	return mean, math.Sqrt(s2 / n), v[0], v[len(v)-1], q(0.01), q(0.5), q(0.99), zero / n, sat / n
}

func decodePNG(t *testing.T, path string) image.Image {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return img
}

func readMetrics(t *testing.T, path string) CycleMetrics {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cm CycleMetrics
	if err := json.Unmarshal(b, &cm); err != nil {
		t.Fatal(err)
	}
	return cm
}

const tol = 1e-9 // relative; the statistics are exact sums of at most 7680 integers

func near(a, b float64) bool { return math.Abs(a-b) <= tol*max(1, math.Abs(b)) }

// Every stage's outputs exist, PNGs decode with the right sizes, and the metrics match the data.
func TestStages(t *testing.T) {
	p := newProject(t)
	for _, stage := range Stages {
		t.Run(stage, func(t *testing.T) {
			sum, err := Run(context.Background(), p.cfg, stage, Options{Workers: 2, OverviewPx: 40})
			if err != nil {
				t.Fatal(err)
			}
			out := layout.QCStage(p.dir, stage)
			kv, err := os.ReadFile(layout.QCSentinel(p.dir, stage))
			if err != nil || !strings.Contains(string(kv), "stage=qc_"+stage+"\n") || !strings.Contains(string(kv), "cycles=2\n") {
				t.Errorf("sentinel: %q %v", kv, err)
			}
			if fmt.Sprint(sum.Cycles) != "[1 2]" {
				t.Errorf("cycles %v", sum.Cycles)
			}
			for _, c := range p.cfg.Cycles {
				cm := readMetrics(t, filepath.Join(out, layout.CycleName(c)+"_metrics.json"))
				if cm.Stage != stage || cm.Cycle != c || len(cm.Channels) != 2 {
					t.Fatalf("cycle %d metrics: stage %q cycle %d, %d channels", c, cm.Stage, cm.Cycle, len(cm.Channels))
				}
				for _, ch := range cm.Channels {
					wantPlanes := 1
					if stage == "stitch" || stage == "decon" {
						wantPlanes = NZ
					}
					if len(ch.Planes) != wantPlanes {
						t.Fatalf("cycle %d CH%d: %d planes, want %d", c, ch.Channel, len(ch.Planes), wantPlanes)
					}
					// Focus map: z 2 is the sharp plane of every stack (the corners of
					// cycle 1 CH2 z 1 hold zeros and saturated pixels, whose edges are sharper).
					switch fm := ch.FocusMap; {
					case wantPlanes == 1 && fm != nil:
						t.Errorf("cycle %d CH%d: a focus map for a single plane", c, ch.Channel)
					case wantPlanes > 1 && (fm == nil || fm.BlockPx != 8 || fm.NX != 12 || fm.NY != 10 || len(fm.BestZ) != 120):
						t.Errorf("cycle %d CH%d: focus map %+v, want 12 x 10 blocks of 8 px", c, ch.Channel, fm)
					case wantPlanes > 1 && !(c == 1 && ch.Channel == 2):
						for b, z := range fm.BestZ {
							if z != 2 {
								t.Errorf("cycle %d CH%d block %d: sharpest plane %d, want 2", c, ch.Channel, b, z)
								break
							}
						}
					}
					if ch.Marker != p.cfg.ChannelMarker(c, ch.Channel) {
						t.Errorf("marker %q", ch.Marker)
					}
					var proj *raster.Gray16
					for i, ps := range ch.Planes {
						g, ok := p.planes[ps.File]
						if !ok {
							t.Fatalf("metrics name %s, which the test did not write", ps.File)
						}
						if wantPlanes > 1 && ps.Z != i+1 {
							t.Errorf("%s: z %d, want %d", ps.File, ps.Z, i+1)
						}
						mean, std, mn, mx, p01, p50, p99, zero, sat := refStats(g)
						if !near(ps.Mean, mean) || !near(ps.Std, std) || ps.Min != mn || ps.Max != mx || ps.P01 != p01 || ps.P50 != p50 || ps.P99 != p99 ||
							!near(ps.ZeroFraction, zero) || !near(ps.SaturatedFraction, sat) || ps.Width != W || ps.Height != H {
							t.Errorf("%s: stats %+v, want mean %.4f std %.4f min %d max %d p %d/%d/%d zero %.5f sat %.5f", ps.File, ps, mean, std, mn, mx, p01, p50, p99, zero, sat)
						}
						if proj == nil {
							proj = clone(g)
						} else {
							planestats.MaxInto(proj, g)
						}
					}
					// The corner of zeros and saturated pixels (80 and 30 of 7680 px) of cycle 1 CH2 z1.
					if (stage == "stitch" || stage == "decon") && c == 1 && ch.Channel == 2 {
						if z := ch.Planes[0]; !near(z.ZeroFraction, 80.0/(W*H)) || !near(z.SaturatedFraction, 30.0/(W*H)) {
							t.Errorf("zero/saturated fractions %v/%v, want %v/%v", z.ZeroFraction, z.SaturatedFraction, 80.0/(W*H), 30.0/(W*H))
						}
					}
					// Focus: the in-focus plane (z 2) is sharper than the blurred ones (not on the plane
					// with the zero and saturated corner, whose edges dominate).
					if wantPlanes == NZ && !(c == 1 && ch.Channel == 2) && !(ch.Planes[1].Focus > 4*ch.Planes[0].Focus && ch.Planes[1].Focus > 4*ch.Planes[2].Focus) {
						t.Errorf("cycle %d CH%d focus by z %.0f %.0f %.0f: the sharp z 2 should stand out", c, ch.Channel, ch.Planes[0].Focus, ch.Planes[1].Focus, ch.Planes[2].Focus)
					}
					// Overview: 40 px longest side (factor 3: 32 x 27), the maximum over z, downsampled and stretched.
					img := decodePNG(t, filepath.Join(out, ch.Overview))
					if b := img.Bounds(); b.Dx() != 32 || b.Dy() != 27 || ch.Factor != 3 {
						t.Errorf("%s: %dx%d factor %d, want 32x27 factor 3", ch.Overview, b.Dx(), b.Dy(), ch.Factor)
					}
					checkOverview(t, img.(*image.Gray), proj, 3, ch.Overview)
				}
				if stage == "registration" {
					checkRegistration(t, p, out, cm)
				}
			}
			for _, h := range sum.Heatmaps {
				checkHeatmap(t, filepath.Join(out, h.File), h)
			}
			// summary.json lists the same heatmaps.
			b, err := os.ReadFile(filepath.Join(out, "summary.json"))
			if err != nil {
				t.Fatal(err)
			}
			var s Summary
			if err := json.Unmarshal(b, &s); err != nil || len(s.Heatmaps) != len(sum.Heatmaps) || len(s.Metrics) != 2 {
				t.Errorf("summary.json: %v %+v", err, s)
			}
		})
	}
}

// checkOverview: the brightest and darkest block means of the projection map to the brightest
// and darkest PNG pixels (the stretch is monotonic).
func checkOverview(t *testing.T, img *image.Gray, proj *raster.Gray16, f int, name string) {
	t.Helper()
	b := img.Bounds()
	hiV, loV := -1.0, math.Inf(1)
	var hiP, loP image.Point
	for y := 0; y < b.Dy(); y++ {
		for x := 0; x < b.Dx(); x++ {
			s, n := 0.0, 0
			for yy := y * f; yy < min((y+1)*f, proj.H); yy++ {
				for xx := x * f; xx < min((x+1)*f, proj.W); xx++ {
					s += float64(proj.Pix[yy*proj.W+xx])
					n++
				}
			}
			if m := s / float64(n); m > hiV {
				hiV, hiP = m, image.Pt(x, y)
			} else if m < loV {
				loV, loP = m, image.Pt(x, y)
			}
		}
	}
	if img.GrayAt(hiP.X, hiP.Y).Y != 255 || img.GrayAt(loP.X, loP.Y).Y != 0 {
		t.Errorf("%s: brightest block at %v shows %d, darkest at %v shows %d; want 255 and 0", name, hiP, img.GrayAt(hiP.X, hiP.Y).Y, loP, img.GrayAt(loP.X, loP.Y).Y)
	}
}

func checkHeatmap(t *testing.T, path string, h Heatmap) {
	t.Helper()
	img := decodePNG(t, path)
	if b := img.Bounds(); b.Dx() != len(h.Cols)*HeatmapCell || b.Dy() != len(h.Rows)*HeatmapCell || len(h.Values) != len(h.Rows) {
		t.Fatalf("%s: %dx%d for %d rows x %d cols", path, b.Dx(), b.Dy(), len(h.Rows), len(h.Cols))
	}
	for r, row := range h.Values {
		for c, v := range row {
			want := Colormap(0.5)
			switch {
			case math.IsNaN(float64(v)):
				want = Colormap(math.NaN())
			case h.Max > h.Min:
				want = Colormap((float64(v) - h.Min) / (h.Max - h.Min))
			}
			got := img.At(c*HeatmapCell+HeatmapCell/2, r*HeatmapCell+HeatmapCell/2)
			gr, gg, gb, _ := got.RGBA()
			if uint8(gr>>8) != want.R || uint8(gg>>8) != want.G || uint8(gb>>8) != want.B {
				t.Errorf("%s cell %s/%s (%v): colour %v, want %v", filepath.Base(path), h.Rows[r], h.Cols[c], v, got, want)
			}
		}
	}
}

func checkRegistration(t *testing.T, p *project, out string, cm CycleMetrics) {
	t.Helper()
	rs := cm.Registration
	if rs == nil {
		t.Fatal("no registration scores")
	}
	if rs.Image != "DAPI-0"+fmt.Sprint(cm.Cycle)+".tif" || rs.ReferenceCycle != 1 {
		t.Errorf("image %s reference %d", rs.Image, rs.ReferenceCycle)
	}
	if cm.Cycle == 1 {
		if !near(float64(rs.NCCEDF), 1) || !near(float64(rs.NCCRegistered), 1) {
			t.Errorf("reference cycle NCC %v/%v, want 1/1", rs.NCCEDF, rs.NCCRegistered)
		}
	} else {
		// Independent NCC of the shifted EDF with the reference scene (np.corrcoef-style).
		ref := p.planes["data/processed/registered/cyc01/DAPI-01.tif"]
		mov := p.planes["data/processed/edf/cyc02/DAPI-02.tif"]
		a, b := make([]float64, len(ref.Pix)), make([]float64, len(ref.Pix))
		for i := range a {
			a[i], b[i] = float64(ref.Pix[i]), float64(mov.Pix[i])
		}
		if want := corr(a, b); math.Abs(float64(rs.NCCEDF)-want) > 1e-9 || want > 0.8 {
			t.Errorf("ncc_edf %v, want %v (< 0.8: shifted by %d,%d px)", rs.NCCEDF, want, shiftY, shiftX)
		}
		if !near(float64(rs.NCCRegistered), 1) {
			t.Errorf("ncc_registered %v, want 1 (registered = reference scene)", rs.NCCRegistered)
		}
		if rs.StageMetrics["ncc_final"] != 0.97 || !strings.HasSuffix(rs.StageMetricsFile, "cyc02_metrics.json") {
			t.Errorf("stage metrics %v from %q", rs.StageMetrics, rs.StageMetricsFile)
		}
	}
	img := decodePNG(t, filepath.Join(out, rs.Overlay))
	if b := img.Bounds(); b.Dx() != 32 || b.Dy() != 27 {
		t.Errorf("overlay %dx%d", b.Dx(), b.Dy())
	}
	// Registered images equal the reference: red (reference) and green (cycle) agree everywhere.
	rgba := img.(*image.RGBA)
	for i := 0; i < len(rgba.Pix); i += 4 {
		if rgba.Pix[i] != rgba.Pix[i+1] || rgba.Pix[i] != rgba.Pix[i+2] {
			t.Fatalf("overlay of a perfect registration is not grey at byte %d: %v", i, rgba.Pix[i:i+4])
		}
	}
}

func corr(a, b []float64) float64 {
	n := float64(len(a))
	var ma, mb float64
	for i := range a {
		ma += a[i] / n
		mb += b[i] / n
	}
	var c, va, vb float64
	for i := range a {
		c += (a[i] - ma) * (b[i] - mb)
		va += (a[i] - ma) * (a[i] - ma)
		vb += (b[i] - mb) * (b[i] - mb)
	}
	return c / math.Sqrt(va*vb)
}

// A missing input fails before anything is written, and names the file.
func TestMissingInput(t *testing.T) {
	p := newProject(t)
	victim := filepath.Join(p.dir, "data/processed/edf/cyc02", p.cfg.EDFFileName(2, 2))
	if err := os.Remove(victim); err != nil {
		t.Fatal(err)
	}
	for _, stage := range []string{"edf", "registration"} {
		_, err := Run(context.Background(), p.cfg, stage, Options{Workers: 1})
		if !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), "CD3_/_x.tif") && !strings.Contains(err.Error(), p.cfg.EDFFileName(2, 2)) {
			t.Errorf("%s: err = %v, want ErrInput naming %s", stage, err, victim)
		}
		if _, err := os.Stat(layout.QCStage(p.dir, stage)); !os.IsNotExist(err) {
			t.Errorf("%s: qc_plots/%s exists after a failure", stage, stage)
		}
		if _, err := os.Stat(layout.QCSentinel(p.dir, stage)); !os.IsNotExist(err) {
			t.Errorf("%s: sentinel written after a failure", stage)
		}
	}
	if err := os.Remove(filepath.Join(p.dir, "data/processed/stitched/cyc01/.snakemake_complete")); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), p.cfg, "stitch", Options{}); !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), "stitched/cyc01/.snakemake_complete") {
		t.Errorf("stitch without sentinel: err = %v", err)
	}
	if _, err := Run(context.Background(), p.cfg, "nope", Options{}); !errors.Is(err, ErrInput) {
		t.Errorf("unknown stage: err = %v", err)
	}
}

// TestBlockFocus: the left half of the scene is sharp in plane 1, the right
// half in plane 3; one block covering the image is Focus itself.
func TestBlockFocus(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	sc := scene(rng)
	bl := blur(sc)
	half := func(left, right *raster.Gray16) *raster.Gray16 {
		o := clone(right)
		for y := 0; y < H; y++ {
			copy(o.Pix[y*W:y*W+W/2], left.Pix[y*W:y*W+W/2])
		}
		return o
	}
	planes := []*raster.Gray16{half(sc, bl), bl, half(bl, sc)}
	var bf [][]float64
	var ps []PlaneStats
	nx := 0
	for i, g := range planes {
		var f []float64
		nx, _, f = BlockFocus(g, 16)
		bf = append(bf, f)
		ps = append(ps, PlaneStats{Z: i + 1})
		if _, _, one := BlockFocus(g, 1000); one[0] != Focus(g) {
			t.Errorf("plane %d: one block %v, Focus %v", i+1, one[0], Focus(g))
		}
	}
	fm := bestPlanes(bf, ps, 16, nx)
	if fm.NX != 6 || fm.NY != 5 {
		t.Fatalf("%d x %d blocks, want 6 x 5", fm.NX, fm.NY)
	}
	for b, z := range fm.BestZ {
		want := 1
		if b%fm.NX >= 3 {
			want = 3
		}
		if z != want {
			t.Errorf("block (%d, %d): plane %d, want %d", b/fm.NX, b%fm.NX, z, want)
		}
	}
}

func TestNCCAndFocusDefinitions(t *testing.T) {
	g := raster.NewGray16(4, 3)
	for i := range g.Pix {
		g.Pix[i] = uint16(10 * i)
	}
	// A linear ramp has a zero Laplacian everywhere inside: focus 0.
	if f := Focus(g); f != 0 {
		t.Errorf("focus of a ramp %v, want 0", f)
	}
	h := clone(g)
	h.Pix[5] += 100 // one interior pixel: Laplacian 400 at it, -100 at its 1 interior neighbour (6)
	// interior pixels (1,1) and (1,2): L = 400 and -100: mean 150, variance 250^2.
	if f := Focus(h); math.Abs(f-62500) > 1e-9 {
		t.Errorf("focus %v, want 62500", f)
	}
	lin := clone(g)
	for i := range lin.Pix {
		lin.Pix[i] = 3*g.Pix[i] + 7
	}
	if n := NCC(g, lin); math.Abs(n-1) > 1e-12 {
		t.Errorf("NCC under gain and offset %v, want 1", n)
	}
	if n := NCC(g, raster.NewGray16(4, 3)); !math.IsNaN(n) {
		t.Errorf("NCC with a constant image %v, want NaN", n)
	}
	b, _ := json.Marshal(struct{ X Num }{Num(math.NaN())})
	if string(b) != `{"X":null}` {
		t.Errorf("NaN encodes as %s", b)
	}
}
