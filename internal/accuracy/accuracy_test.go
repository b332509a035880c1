package accuracy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// Tolerance for figures that are exact in real arithmetic: float64 sums of
// a few exactly representable float32 values.
const exactTol = 1e-12

func near(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol || math.IsNaN(got) {
		t.Errorf("%s = %.15g, want %.15g (|diff| %.3g > %.3g)", what, got, want, math.Abs(got-want), tol)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func writeF32(t *testing.T, path string, w, h int, pix []float32) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Dir(path), 0o755))
	must(t, tiffio.WriteFloat32(path, &raster.Float32{W: w, H: h, Pix: pix}))
}

// Fixture: 2 x 3 tiles (snake order) of 4 x 2 px (W x H), 2 planes, 2
// channels, one cycle; only channel 1 has outputs.
const (
	fxW, fxH = 4, 2
	fxMosH   = 12 // mosaic of the truth scene, px
	fxMosW   = 30
)

var (
	// Two zero-mean patterns with mean square 1.
	patC = []float32{1, -1, 1, -1, -1, 1, -1, 1}
	patD = []float32{1, 1, -1, -1, -1, -1, 1, 1}
	// Position errors beyond the global translation (3, -2), per tile
	// (index tile-1); chosen exactly representable and away from the 1 px
	// and 2 px limits.
	fxDelta = []raster.Point{{}, {}, {Y: -1.5, X: 1}, {}, {Y: 0.75, X: 0.5}, {Y: 0, X: 2.5}}
	fxShift = raster.Point{Y: 3, X: -2}
)

// fixture writes the truth and the fake outputs into a temp project.
func fixture(t *testing.T) (dir string, truth *synth.Truth) {
	t.Helper()
	dir = t.TempDir()
	gt := synth.GroundTruthDir(dir)
	tr := &synth.Truth{
		SchemaVersion: synth.TruthSchemaVersion, Generator: "test",
		Grid:       synth.Grid{Rows: 2, Cols: 3, Order: "snake"},
		TileHeight: fxH, TileWidth: fxW, Overlap: 0.3, NZPlanes: 2, RefZ: 1,
	}
	ct := synth.CycleTruth{Cycle: 1, MosaicHeight: fxMosH, MosaicWidth: fxMosW, PositionsFile: "cyc01/tile_positions.csv",
		Scenes: []synth.SceneFile{{Channel: 1, Z: 1, File: "cyc01/scene_CH1_Z01.tif"}}}
	for k := range 6 {
		r, c := synth.SnakeRowCol(k, 3)
		ct.Tiles = append(ct.Tiles, synth.TileTruth{Tile: k + 1, Row: r, Col: c, Y: float64(r)*1.5 + 0.25*float64(k), X: float64(c)*3 - 0.125*float64(k)})
	}
	tr.Cycles = []synth.CycleTruth{ct}
	// True flatfield 1 - 0.25c (mean 1, baseline RMS 0.25); darkfield 460 + 2c.
	flat, dark := make([]float32, 8), make([]float32, 8)
	for i, c := range patC {
		flat[i], dark[i] = 1-0.25*c, 460+2*c
	}
	for ch := 1; ch <= 2; ch++ {
		tr.Channels = append(tr.Channels, synth.ChannelTruth{Channel: ch,
			FlatfieldFile: fmt.Sprintf("flatfield_CH%d.tif", ch), DarkfieldFile: fmt.Sprintf("darkfield_CH%d.tif", ch), DarkfieldMean: 460})
		writeF32(t, filepath.Join(gt, tr.Channels[ch-1].FlatfieldFile), fxW, fxH, flat)
		writeF32(t, filepath.Join(gt, tr.Channels[ch-1].DarkfieldFile), fxW, fxH, dark)
	}
	must(t, synth.WriteTruth(synth.TruthPath(dir), tr))

	basic := filepath.Join(StitchDir(dir, 1), "CH1", "basic")
	// z=1: fitted flat 2(T + 0.0625c) (RMS 0.0625 after normalising),
	//      dark D + 5 + 3d (mean 465, RMS sqrt(25+9));
	// z=2: fitted flat 3(T + 0.125d) (RMS 0.125), dark D - 4 (mean 456, RMS 4).
	f1, d1, f2, d2 := make([]float32, 8), make([]float32, 8), make([]float32, 8), make([]float32, 8)
	for i := range f1 {
		f1[i] = 2 * (flat[i] + 0.0625*patC[i])
		d1[i] = dark[i] + 5 + 3*patD[i]
		f2[i] = 3 * (flat[i] + 0.125*patD[i])
		d2[i] = dark[i] - 4
	}
	writeF32(t, filepath.Join(basic, "01_flatfield.tif"), fxW, fxH, f1)
	writeF32(t, filepath.Join(basic, "01_darkfield.tif"), fxW, fxH, d1)
	writeF32(t, filepath.Join(basic, "02_flatfield.tif"), fxW, fxH, f2)
	writeF32(t, filepath.Join(basic, "02_darkfield.tif"), fxW, fxH, d2)

	var csv strings.Builder
	csv.WriteString("tile,row,col,y_pos,x_pos\n")
	for k, tl := range ct.Tiles {
		fmt.Fprintf(&csv, "%d,%d,%d,%g,%g\n", tl.Tile, tl.Row, tl.Col, tl.Y+fxShift.Y+fxDelta[k].Y, tl.X+fxShift.X+fxDelta[k].X)
	}
	must(t, os.WriteFile(filepath.Join(StitchDir(dir, 1), "tile_positions.csv"), []byte(csv.String()), 0o644))

	// Truth scene: seeded integers; the stitched plane is 3·scene + 100
	// moved so that stitched pixel m shows truth pixel m + (-3, 1), the
	// rounded mean of true minus fitted positions (-2.875, 1.333).
	rng := rand.New(rand.NewPCG(1, 1))
	scene := make([]float32, fxMosH*fxMosW)
	for i := range scene {
		scene[i] = float32(rng.IntN(1000))
	}
	writeF32(t, filepath.Join(gt, "cyc01", "scene_CH1_Z01.tif"), fxMosW, fxMosH, scene)
	st := raster.NewGray16(fxMosW, fxMosH)
	for i := range fxMosH {
		for j := range fxMosW {
			ti, tj := i-3, j+1
			v := uint16(rng.IntN(4000)) // outside the common rectangle: unrelated
			if ti >= 0 && tj < fxMosW {
				v = uint16(3*scene[ti*fxMosW+tj] + 100)
			}
			st.Pix[i*fxMosW+j] = v
		}
	}
	must(t, tiffio.WriteGray16(filepath.Join(StitchDir(dir, 1), "CH1", "01.tif"), st))
	return dir, tr
}

func TestEvaluateFixture(t *testing.T) {
	dir, _ := fixture(t)
	r, err := Evaluate(dir, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Channels) != 1 || r.Channels[0].Channel != 1 {
		t.Fatalf("channels %+v, want only CH1 (CH2 has no outputs)", r.Channels)
	}
	want := filepath.Join("data", "processed", "stitched", "cyc01", "CH2")
	if len(r.Missing) != 1 || r.Missing[0] != want {
		t.Errorf("missing %v, want [%s]", r.Missing, want)
	}
	c := r.Channels[0]
	if len(c.Planes) != 2 {
		t.Fatalf("planes %+v", c.Planes)
	}
	near(t, "flat rms z1", c.Planes[0].FlatRMS, 0.0625, exactTol)
	near(t, "flat rms z2", c.Planes[1].FlatRMS, 0.125, exactTol)
	near(t, "flat rms mean", c.FlatRMSMean, 0.09375, exactTol)
	near(t, "flat rms max", c.FlatRMSMax, 0.125, exactTol)
	near(t, "flat baseline", c.FlatBaselineRMS, 0.25, exactTol)
	near(t, "dark true mean", c.DarkTrueMean, 460, exactTol)
	near(t, "dark mean z1", c.Planes[0].DarkMean, 465, exactTol)
	near(t, "dark mean z2", c.Planes[1].DarkMean, 456, exactTol)
	near(t, "dark fit mean", c.DarkFitMean, 460.5, exactTol)
	near(t, "dark rms z1", c.Planes[0].DarkRMS, math.Sqrt(34), exactTol)
	near(t, "dark rms z2", c.Planes[1].DarkRMS, 4, exactTol)
	near(t, "dark rms mean", c.DarkRMSMean, (math.Sqrt(34)+4)/2, exactTol)
	near(t, "dark rms max", c.DarkRMSMax, math.Sqrt(34), exactTol)
	if c.FlatRMSMaxZ != 2 || c.DarkRMSMaxZ != 1 {
		t.Errorf("max planes: flat %d (want 2), dark %d (want 1)", c.FlatRMSMaxZ, c.DarkRMSMaxZ)
	}
	// The scene matches up to gain and offset at the right alignment.
	if c.SceneNCC == nil || c.SceneZ != 1 {
		t.Fatalf("scene NCC missing: %+v", c)
	}
	near(t, "scene ncc", *c.SceneNCC, 1, 1e-9)

	p := r.Positions
	if p == nil {
		t.Fatal("no position report")
	}
	// Expected from the deltas: offset = shift + mean(delta); residual
	// r = delta - mean(delta); pair error |delta_B - delta_A|.
	var my, mx float64
	for _, d := range fxDelta {
		my, mx = my+d.Y/6, mx+d.X/6
	}
	near(t, "offset y", p.OffsetY, fxShift.Y+my, exactTol)
	near(t, "offset x", p.OffsetX, fxShift.X+mx, exactTol)
	var s2, worst float64
	worstTile := 0
	for k, d := range fxDelta {
		l := math.Hypot(d.Y-my, d.X-mx)
		s2 += l * l / 6
		if l > worst {
			worst, worstTile = l, k+1
		}
	}
	near(t, "position rms", p.RMS, math.Sqrt(s2), exactTol)
	near(t, "position max", p.Max, worst, exactTol)
	if p.MaxTile != 6 || worstTile != 6 {
		t.Errorf("max tile %d, want 6", p.MaxTile)
	}
	// Pairs (A-B): 1-2: 0; 2-3: |d3| = 1.80; 6-5: |d5-d6| = 2.14; 5-4: |d5| = 0.90;
	// 1-6: |d6| = 2.5; 2-5: 0.90; 3-4: 1.80.
	if p.Pairs != 7 || p.Within05 != 1 || p.Within1 != 3 || p.Within2 != 5 {
		t.Errorf("pairs %d within 0.5 px %d within 1 px %d within 2 px %d, want 7, 1, 3, 5", p.Pairs, p.Within05, p.Within1, p.Within2)
	}
	near(t, "pair max", p.PairMax, 2.5, exactTol)
	if p.WorstPair != [2]int{1, 6} {
		t.Errorf("worst pair %v, want [1 6]", p.WorstPair)
	}
	pr := math.Sqrt((0 + 3.25 + (0.5625 + 4) + 0.8125 + 6.25 + 0.8125 + 3.25) / 7)
	near(t, "pair rms", p.PairRMS, pr, exactTol)

	var tb, js bytes.Buffer
	must(t, WriteTable(&tb, r, true))
	for _, s := range []string{"CH1", "0.0938", "0.1250 (2)", "0.2500", "460.5", "465.0", "<= 2 px", "1-6", "missing (1)"} {
		if !strings.Contains(tb.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, tb.String())
		}
	}
	must(t, WriteJSON(&js, r))
	var back Report
	must(t, json.Unmarshal(js.Bytes(), &back))
	if back.Positions.Within2 != 5 || *back.Channels[0].SceneNCC != *c.SceneNCC {
		t.Errorf("JSON round trip: %s", js.String())
	}
}

// Misalignment must show in the NCC: the stitched plane compared at the
// wrong offset correlates poorly.
func TestSceneNCCAlignment(t *testing.T) {
	dir, _ := fixture(t)
	st := filepath.Join(StitchDir(dir, 1), "CH1", "01.tif")
	sc := filepath.Join(synth.GroundTruthDir(dir), "cyc01", "scene_CH1_Z01.tif")
	good, err := sceneNCC(st, sc, -2.875, 1.3333)
	must(t, err)
	bad, err := sceneNCC(st, sc, -2, 1)
	must(t, err)
	near(t, "aligned ncc", good, 1, 1e-9)
	if bad > 0.5 {
		t.Errorf("ncc one pixel off = %.3f, want < 0.5", bad)
	}
}

func TestEvaluateErrors(t *testing.T) {
	t.Run("no truth", func(t *testing.T) {
		if _, err := Evaluate(t.TempDir(), 1); !errors.Is(err, ErrBadInput) {
			t.Errorf("%v, want ErrBadInput", err)
		}
	})
	t.Run("unknown cycle", func(t *testing.T) {
		dir, _ := fixture(t)
		if _, err := Evaluate(dir, 2); !errors.Is(err, ErrBadInput) {
			t.Errorf("%v, want ErrBadInput", err)
		}
	})
	t.Run("no outputs", func(t *testing.T) {
		dir, _ := fixture(t)
		must(t, os.RemoveAll(filepath.Join(dir, "data")))
		if _, err := Evaluate(dir, 1); !errors.Is(err, ErrBadInput) {
			t.Errorf("%v, want ErrBadInput", err)
		}
	})
	t.Run("raster order", func(t *testing.T) {
		dir, tr := fixture(t)
		var csv strings.Builder
		csv.WriteString("tile,row,col,y_pos,x_pos\n")
		for k, tl := range tr.Cycles[0].Tiles {
			fmt.Fprintf(&csv, "%d,%d,%d,%g,%g\n", tl.Tile, k/3, k%3, tl.Y, tl.X)
		}
		must(t, os.WriteFile(filepath.Join(StitchDir(dir, 1), "tile_positions.csv"), []byte(csv.String()), 0o644))
		if _, err := Evaluate(dir, 1); !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "tile 4") {
			t.Errorf("%v, want ErrBadInput naming tile 4", err)
		}
	})
	t.Run("profile size", func(t *testing.T) {
		dir, _ := fixture(t)
		writeF32(t, filepath.Join(StitchDir(dir, 1), "CH1", "basic", "02_darkfield.tif"), 2, 2, make([]float32, 4))
		if _, err := Evaluate(dir, 1); !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "02_darkfield") {
			t.Errorf("%v, want ErrBadInput naming 02_darkfield", err)
		}
	})
	t.Run("missing plane", func(t *testing.T) {
		dir, _ := fixture(t)
		must(t, os.Remove(filepath.Join(StitchDir(dir, 1), "CH1", "basic", "02_flatfield.tif")))
		r, err := Evaluate(dir, 1)
		must(t, err)
		if len(r.Channels[0].Planes) != 1 || len(r.Missing) != 2 {
			t.Errorf("planes %+v, missing %v", r.Channels[0].Planes, r.Missing)
		}
		near(t, "flat rms mean of z1 only", r.Channels[0].FlatRMSMean, 0.0625, exactTol)
	})
}

// TestPerfectOutputs: outputs equal to the truth of a synthetic project
// score zero errors and NCC 1, whatever integer translation the fitted
// positions carry.
func TestPerfectOutputs(t *testing.T) {
	o, err := synth.Preset("tiny")
	must(t, err)
	o.OutDir = t.TempDir()
	o.Cycles, o.Channels = []int{2}, []int{1}
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	must(t, synth.Generate(context.Background(), o))
	tr, err := synth.ReadTruth(synth.TruthPath(o.OutDir))
	must(t, err)
	ct, _ := tr.Cycle(2)
	sd := StitchDir(o.OutDir, 2)
	gt := synth.GroundTruthDir(o.OutDir)
	for z := 1; z <= o.NZ; z++ {
		for _, kind := range []string{"flatfield", "darkfield"} {
			b, err := os.ReadFile(filepath.Join(gt, fmt.Sprintf("%s_CH1.tif", kind)))
			must(t, err)
			p := filepath.Join(sd, "CH1", "basic", fmt.Sprintf("%02d_%s.tif", z, kind))
			must(t, os.MkdirAll(filepath.Dir(p), 0o755))
			must(t, os.WriteFile(p, b, 0o644))
		}
	}
	var csv strings.Builder
	csv.WriteString("tile,row,col,y_pos,x_pos\n")
	for _, tl := range ct.Tiles {
		fmt.Fprintf(&csv, "%d,%d,%d,%.17g,%.17g\n", tl.Tile, tl.Row, tl.Col, tl.Y+7, tl.X-4)
	}
	must(t, os.WriteFile(filepath.Join(sd, "tile_positions.csv"), []byte(csv.String()), 0o644))
	// The stitched plane: the truth scene moved by (7, -4), quantised.
	scene, err := tiffio.ReadFloat32(filepath.Join(gt, ct.Scenes[0].File))
	must(t, err)
	st := raster.NewGray16(scene.W, scene.H+7)
	for i := range scene.H {
		for j := 4; j < scene.W; j++ {
			st.Pix[(i+7)*st.W+j-4] = uint16(math.Round(float64(scene.Pix[i*scene.W+j])))
		}
	}
	must(t, tiffio.WriteGray16(filepath.Join(sd, "CH1", fmt.Sprintf("%02d.tif", tr.RefZ)), st))

	r, err := Evaluate(o.OutDir, 2)
	must(t, err)
	c := r.Channels[0]
	near(t, "flat rms", c.FlatRMSMax, 0, 1e-7) // float32 mean-1 normalisation
	near(t, "dark rms", c.DarkRMSMax, 0, 0)
	near(t, "dark mean", c.DarkFitMean, c.DarkTrueMean, 1e-9)
	near(t, "position rms", r.Positions.RMS, 0, 1e-9)
	near(t, "offset y", r.Positions.OffsetY, 7, 1e-9)
	if r.Positions.Within1 != r.Positions.Pairs || r.Positions.Pairs != 7 {
		t.Errorf("pairs %+v", r.Positions)
	}
	// Quantisation to whole counts leaves NCC just below 1.
	if c.SceneNCC == nil || *c.SceneNCC < 0.99999 {
		t.Errorf("scene NCC %v, want > 0.99999", c.SceneNCC)
	}
	if c.FlatBaselineRMS < 0.05 {
		t.Errorf("flat baseline %.4f: the synthetic flatfield should be far from flat", c.FlatBaselineRMS)
	}
}
