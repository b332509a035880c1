package synth

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// tiny returns the tiny preset writing into a fresh temp dir.
func tiny(t *testing.T) Options {
	t.Helper()
	o, err := Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	o.OutDir = t.TempDir()
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	return o
}

func generate(t *testing.T, o Options) {
	t.Helper()
	if err := Generate(context.Background(), o); err != nil {
		t.Fatalf("Generate: %v", err)
	}
}

// files returns every regular file under dir, relative, sorted.
func files(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			r, _ := filepath.Rel(dir, p)
			out = append(out, r)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// TestDeterministic: the same seed gives byte-identical files whatever the
// worker count; another seed gives different tiles.
func TestDeterministic(t *testing.T) {
	a, b := tiny(t), tiny(t)
	a.Workers, b.Workers = 1, 3
	generate(t, a)
	generate(t, b)
	fa, fb := files(t, a.OutDir), files(t, b.OutDir)
	if !reflect.DeepEqual(fa, fb) {
		t.Fatalf("file lists differ:\n%v\n%v", fa, fb)
	}
	for _, f := range fa {
		x, _ := os.ReadFile(filepath.Join(a.OutDir, f))
		y, _ := os.ReadFile(filepath.Join(b.OutDir, f))
		if !bytes.Equal(x, y) {
			t.Errorf("%s differs between runs with the same seed", f)
		}
	}
	c := tiny(t)
	c.Seed = 2
	c.Cycles, c.Channels = []int{1}, []int{1}
	generate(t, c)
	name := filepath.Join("data", "raw", "cyc01", RawName(3, 1, 1))
	x, _ := os.ReadFile(filepath.Join(a.OutDir, name))
	y, _ := os.ReadFile(filepath.Join(c.OutDir, name))
	if bytes.Equal(x, y) {
		t.Errorf("%s is the same for seeds 1 and 2", name)
	}
}

// TestLayout checks names and counts, and that a subset run writes exactly
// the subset with the same bytes as the full run.
func TestLayout(t *testing.T) {
	full := tiny(t)
	generate(t, full)
	var want []string
	for cyc := 1; cyc <= full.NCycles; cyc++ {
		for tile := 1; tile <= full.Rows*full.Cols; tile++ {
			for z := 1; z <= full.NZ; z++ {
				for ch := 1; ch <= full.NChannels; ch++ {
					want = append(want, filepath.Join("data", "raw", fmt.Sprintf("cyc%02d", cyc), fmt.Sprintf("1_%05d_Z%03d_CH%d.tif", tile, z, ch)))
				}
			}
		}
	}
	sort.Strings(want)
	var raw []string
	for _, f := range files(t, full.OutDir) {
		if strings.HasPrefix(f, "data") {
			raw = append(raw, f)
		}
	}
	if !reflect.DeepEqual(raw, want) {
		t.Fatalf("raw files: got %d, want %d\nfirst got %v\nfirst want %v", len(raw), len(want), raw[:min(4, len(raw))], want[:4])
	}
	info, err := tiffio.ReadInfo(filepath.Join(full.OutDir, want[0]))
	if err != nil {
		t.Fatal(err)
	}
	if info.Width != full.TileW || info.Height != full.TileH || info.BitsPerSample != 16 || info.Pages != 1 {
		t.Errorf("raw tile info %+v, want %dx%d uint16, 1 page", info, full.TileW, full.TileH)
	}
	for _, f := range []string{"truth.json", "flatfield_CH1.tif", "darkfield_CH2.tif", "cyc03/tile_positions.csv", "cyc02/scene_CH2_Z02.tif"} {
		if _, err := os.Stat(filepath.Join(full.OutDir, "ground_truth", f)); err != nil {
			t.Errorf("ground truth file: %v", err)
		}
	}

	sub := tiny(t)
	sub.Channels, sub.Cycles = []int{2}, []int{3}
	generate(t, sub)
	n := 0
	for _, f := range files(t, sub.OutDir) {
		if !strings.HasPrefix(f, "data") {
			continue
		}
		n++
		if !strings.Contains(f, "cyc03") || !strings.HasSuffix(f, "_CH2.tif") {
			t.Errorf("subset run wrote %s", f)
		}
		x, _ := os.ReadFile(filepath.Join(full.OutDir, f))
		y, _ := os.ReadFile(filepath.Join(sub.OutDir, f))
		if !bytes.Equal(x, y) {
			t.Errorf("%s differs between the full and the subset run", f)
		}
	}
	if want := sub.Rows * sub.Cols * sub.NZ; n != want {
		t.Errorf("subset run wrote %d raw files, want %d", n, want)
	}
}

// TestTruthRoundTrip: truth.json reads back equal to what was built, and its
// positions, shifts and positions CSV agree with the Options methods.
func TestTruthRoundTrip(t *testing.T) {
	o := tiny(t)
	o.Cycles = []int{2}
	o.Channels = []int{1}
	generate(t, o)
	got, err := ReadTruth(TruthPath(o.OutDir))
	if err != nil {
		t.Fatal(err)
	}
	want := buildTruth(o, newTissueModel(o))
	for i := range want.Channels {
		// Generate fills these from the pixels.
		c := &want.Channels[i]
		c.DarkfieldMean = got.Channels[i].DarkfieldMean
		c.FlatfieldMin, c.FlatfieldMax = got.Channels[i].FlatfieldMin, got.Channels[i].FlatfieldMax
	}
	if !reflect.DeepEqual(got, want) {
		gj, _ := jsonString(got)
		wj, _ := jsonString(want)
		t.Fatalf("truth round trip differs:\n got %s\nwant %s", gj, wj)
	}
	if err := WriteTruth(filepath.Join(t.TempDir(), "t.json"), got); err != nil {
		t.Fatal(err)
	}
	if len(got.Cycles) != o.NCycles || got.Generated.Cycles[0] != 2 || len(got.Cycles[1].Scenes) != 1 || len(got.Cycles[0].Scenes) != 0 {
		t.Errorf("cycles %d, generated %v, scenes of cycle 2: %v", len(got.Cycles), got.Generated, got.Cycles[1].Scenes)
	}
	for _, ct := range got.Cycles {
		pos := o.TilePositions(ct.Cycle)
		sh := o.CycleShift(ct.Cycle)
		if ct.Shift.DY != sh.Y || ct.Shift.DX != sh.X {
			t.Errorf("cycle %d shift %+v, want %+v", ct.Cycle, ct.Shift, sh)
		}
		if ct.Cycle == 1 && (sh != raster.Point{}) {
			t.Errorf("cycle 1 shift %+v, want 0", sh)
		}
		if ct.Cycle > 1 && (math.Abs(sh.Y) > o.CycleShiftPx || math.Abs(sh.X) > o.CycleShiftPx || sh == raster.Point{}) {
			t.Errorf("cycle %d shift %+v outside (0, %g]", ct.Cycle, sh, o.CycleShiftPx)
		}
		minY, minX := math.Inf(1), math.Inf(1)
		for k, tl := range ct.Tiles {
			r, c := SnakeRowCol(k, o.Cols)
			if tl.Y != pos[k].Y || tl.X != pos[k].X || tl.Row != r || tl.Col != c {
				t.Errorf("cycle %d tile %d: %+v, want row %d col %d pos %+v", ct.Cycle, k+1, tl, r, c, pos[k])
			}
			// Within 3 sigma of jitter of the nominal grid (after the min shift, 6 sigma).
			ny, nx := float64(r)*o.stepY(), float64(c)*o.stepX()
			if math.Abs(tl.Y-ny) > 6*o.StageJitterPx || math.Abs(tl.X-nx) > 6*o.StageJitterPx {
				t.Errorf("cycle %d tile %d at (%g, %g), nominal (%g, %g)", ct.Cycle, k+1, tl.Y, tl.X, ny, nx)
			}
			minY, minX = min(minY, tl.Y), min(minX, tl.X)
		}
		if minY != 0 || minX != 0 {
			t.Errorf("cycle %d: minimum position (%g, %g), want 0", ct.Cycle, minY, minX)
		}
		csv, err := os.ReadFile(filepath.Join(GroundTruthDir(o.OutDir), ct.PositionsFile))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(csv, positionsCSV(ct.Tiles)) || !strings.HasPrefix(string(csv), "tile,row,col,y_pos,x_pos\n") {
			t.Errorf("cycle %d positions CSV:\n%s", ct.Cycle, csv)
		}
	}
	// Snake order: tile k+1 of row 1 runs right to left.
	if r, c := SnakeRowCol(3, 3); r != 1 || c != 2 {
		t.Errorf("SnakeRowCol(3, 3) = %d, %d, want 1, 2", r, c)
	}
}

// TestProfiles: flatfields have mean 1 and a 20-40 % corner falloff,
// darkfields have the documented mean; the files hold the same values.
func TestProfiles(t *testing.T) {
	o := tiny(t)
	o.Cycles, o.Channels = []int{1}, []int{1}
	o.NChannels = 4
	generate(t, o)
	tr, err := ReadTruth(TruthPath(o.OutDir))
	if err != nil {
		t.Fatal(err)
	}
	// Tolerances: the mean is computed in float64 over float32 values
	// normalised in float64, so it is 1 to float32 precision.
	const meanTol = 1e-6
	for c := 1; c <= o.NChannels; c++ {
		flat, err := tiffio.ReadFloat32(filepath.Join(GroundTruthDir(o.OutDir), fmt.Sprintf("flatfield_CH%d.tif", c)))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(flat, o.Flatfield(c)) {
			t.Errorf("channel %d: flatfield file differs from Flatfield()", c)
		}
		if m := meanF32(flat.Pix); math.Abs(m-1) > meanTol {
			t.Errorf("channel %d: flatfield mean %.9f, want 1", c, m)
		}
		lo, hi := minMaxF32(flat.Pix)
		// Corner loss 20-40 % of the centred profile; the offset centre
		// and the anisotropy move the darkest corner to 0.5-0.85 of the peak.
		if r := lo / hi; r < 0.5 || r > 0.85 {
			t.Errorf("channel %d: flatfield min/max %.3f, want 0.5..0.85", c, r)
		}
		dark, err := tiffio.ReadFloat32(filepath.Join(GroundTruthDir(o.OutDir), fmt.Sprintf("darkfield_CH%d.tif", c)))
		if err != nil {
			t.Fatal(err)
		}
		// float32 storage of ~460 counts: 3e-5 counts per value, averaged.
		if m := meanF32(dark.Pix); math.Abs(m-o.DarkfieldMean(c)) > 1e-3 || math.Abs(m-tr.Channels[c-1].DarkfieldMean) > 1e-9 {
			t.Errorf("channel %d: darkfield mean %.6f, want %g (truth.json %g)", c, m, o.DarkfieldMean(c), tr.Channels[c-1].DarkfieldMean)
		}
		dlo, dhi := minMaxF32(dark.Pix)
		if dhi-dlo < 0.5*o.DarkfieldGradient || dhi-dlo > o.DarkfieldGradient+6 {
			t.Errorf("channel %d: darkfield range %.2f counts, want about %g", c, dhi-dlo, o.DarkfieldGradient)
		}
	}
	if reflect.DeepEqual(o.Flatfield(1), o.Flatfield(2)) {
		t.Error("channels 1 and 2 have the same flatfield")
	}
}

// corrected reads a raw tile and returns (raw - dark) / flat.
func corrected(t *testing.T, o Options, cycle, tile, z, ch int) *raster.Float32 {
	t.Helper()
	g, err := tiffio.ReadGray16(filepath.Join(RawDir(o.OutDir, cycle), RawName(tile, z, ch)))
	if err != nil {
		t.Fatal(err)
	}
	flat, dark := o.Flatfield(ch), o.Darkfield(ch)
	f := raster.NewFloat32(g.W, g.H)
	for p, v := range g.Pix {
		f.Pix[p] = (float32(v) - dark.Pix[p]) / flat.Pix[p]
	}
	return f
}

// bilinear samples img at (y, x); ok is false outside.
func bilinear(img *raster.Float32, y, x float64) (float64, bool) {
	i, j := int(math.Floor(y)), int(math.Floor(x))
	if i < 0 || j < 0 || i+1 >= img.H || j+1 >= img.W {
		return 0, false
	}
	fy, fx := y-float64(i), x-float64(j)
	p := img.Pix[i*img.W+j:]
	q := img.Pix[(i+1)*img.W+j:]
	return float64(p[0])*(1-fy)*(1-fx) + float64(p[1])*(1-fy)*fx + float64(q[0])*fy*(1-fx) + float64(q[1])*fy*fx, true
}

// mismatch compares image a at mosaic position pa with image b at pb over
// their overlap (b resampled bilinearly), returning the RMS difference, the
// RMS of a about its mean there, and the worst pixel.
func mismatch(a *raster.Float32, pa raster.Point, b *raster.Float32, pb raster.Point) (rms, sig, worst float64, at [2]int) {
	var n, s, s2, d2 float64
	for i := range a.H {
		for j := range a.W {
			v, ok := bilinear(b, pa.Y+float64(i)-pb.Y, pa.X+float64(j)-pb.X)
			if !ok {
				continue
			}
			u := float64(a.Pix[i*a.W+j])
			d := u - v
			n, s, s2, d2 = n+1, s+u, s2+u*u, d2+d*d
			if math.Abs(d) > worst {
				worst, at = math.Abs(d), [2]int{i, j}
			}
		}
	}
	if n == 0 {
		return math.NaN(), 0, 0, at
	}
	return math.Sqrt(d2 / n), math.Sqrt(max(0, s2/n-(s/n)*(s/n))), worst, at
}

// Noise-free tiles agree with each other and with the truth scene.
const (
	// Relative RMS mismatch allowed with the true positions: bilinear
	// resampling of blobs with sigma >= 2 px errs by about 1/(8 sigma²)
	// of their peak, plus ±0.5 count quantisation.
	consistTol = 0.03
	// With positions off by 1 px the mismatch must be at least this many
	// times larger, or the check could not see position errors.
	consistGain = 5.0
)

// TestOverlapConsistency: with noise off, neighbouring raw tiles agree in
// their overlap after removing flat and dark, at the true sub-pixel
// positions, and each tile agrees with the truth scene of its cycle at the
// reference z (which checks the cycle-shift convention).
func TestOverlapConsistency(t *testing.T) {
	o := tiny(t)
	o.Gain, o.ReadNoise = 0, 0
	o.Cycles = []int{2}
	generate(t, o)
	tr, err := ReadTruth(TruthPath(o.OutDir))
	if err != nil {
		t.Fatal(err)
	}
	ct, _ := tr.Cycle(2)
	if ct.Shift == (Shift{}) {
		t.Fatal("cycle 2 has no shift; the test needs one")
	}
	pos := ct.Positions()
	for _, ch := range []int{1, 2} {
		for _, z := range []int{1, tr.RefZ} {
			tiles := make([]*raster.Float32, len(pos))
			for k := range tiles {
				tiles[k] = corrected(t, o, 2, k+1, z, ch)
			}
			for a := range tiles {
				ra, ca := SnakeRowCol(a, o.Cols)
				for b := range tiles {
					rb, cb := SnakeRowCol(b, o.Cols)
					if !(rb == ra && cb == ca+1) && !(rb == ra+1 && cb == ca) {
						continue
					}
					rms, sig, worst, at := mismatch(tiles[a], pos[a], tiles[b], pos[b])
					off := pos[b]
					off.X += 1
					bad, _, _, _ := mismatch(tiles[a], pos[a], tiles[b], off)
					if sig < 20 {
						t.Logf("ch %d z %d tiles %d-%d: overlap nearly empty (sd %.1f), skipped", ch, z, a+1, b+1, sig)
						continue
					}
					t.Logf("ch %d z %d tiles %d-%d: rms %.2f sd %.1f worst %.1f; off by 1 px %.2f", ch, z, a+1, b+1, rms, sig, worst, bad)
					if rms > consistTol*sig || bad < consistGain*rms {
						t.Errorf("ch %d z %d tiles %d-%d: rms mismatch %.2f (signal sd %.1f, tol %.2f), worst %.1f at %v; off by 1 px: %.2f",
							ch, z, a+1, b+1, rms, sig, consistTol*sig, worst, at, bad)
					}
				}
			}
			if z != tr.RefZ {
				continue
			}
			var sc SceneFile
			for _, s := range ct.Scenes {
				if s.Channel == ch && s.Z == z {
					sc = s
				}
			}
			scene, err := tiffio.ReadFloat32(filepath.Join(GroundTruthDir(o.OutDir), sc.File))
			if err != nil {
				t.Fatal(err)
			}
			if scene.H != ct.MosaicHeight || scene.W != ct.MosaicWidth {
				t.Errorf("scene %s is %dx%d, want %dx%d", sc.File, scene.H, scene.W, ct.MosaicHeight, ct.MosaicWidth)
			}
			for k := range tiles {
				rms, sig, worst, at := mismatch(tiles[k], pos[k], scene, raster.Point{})
				wrong := pos[k]
				wrong.Y -= ct.Shift.DY // the opposite shift convention
				wrong.X -= ct.Shift.DX
				bad, _, _, _ := mismatch(tiles[k], wrong, scene, raster.Point{})
				if sig < 20 {
					continue
				}
				t.Logf("ch %d tile %d vs truth scene: rms %.2f sd %.1f worst %.1f; shift twice %.2f", ch, k+1, rms, sig, worst, bad)
				if rms > consistTol*sig || bad < consistGain*rms {
					t.Errorf("ch %d tile %d vs truth scene: rms %.2f (sd %.1f), worst %.1f at %v; with the shift applied twice: %.2f",
						ch, k+1, rms, sig, worst, at, bad)
				}
			}
		}
	}
}

// TestNoiseModel: expose gives mean scene·flat + dark and variance
// gain·scene·flat + read², clipped to uint16.
func TestNoiseModel(t *testing.T) {
	o := tiny(t)
	o.TileH, o.TileW = 200, 200
	o.Gain, o.ReadNoise = 2, 5
	g := &channelGen{o: o, cycle: 1, ch: 1, flat: raster.NewFloat32(200, 200), dark: raster.NewFloat32(200, 200)}
	for p := range g.flat.Pix {
		g.flat.Pix[p], g.dark.Pix[p] = 1.25, 460
	}
	scene := make([]float32, 200*200)
	for p := range scene {
		scene[p] = 1000
	}
	raw := make([]uint16, len(scene))
	g.expose(raw, scene, 0, 0)
	var s, s2 float64
	for _, v := range raw {
		s += float64(v)
		s2 += float64(v) * float64(v)
	}
	n := float64(len(raw))
	mean, vr := s/n, s2/n-(s/n)*(s/n)
	wantMean, wantVar := 1000*1.25+460.0, 2*1000*1.25+25+1.0/12 // + rounding
	// Standard errors: mean sd/sqrt(n) ≈ 0.25 counts; variance var·sqrt(2/n) ≈ 0.7 %.
	if math.Abs(mean-wantMean) > 1.5 || math.Abs(vr/wantVar-1) > 0.04 {
		t.Errorf("mean %.2f (want %.2f), variance %.1f (want %.1f)", mean, wantMean, vr, wantVar)
	}
	scene[0], scene[1] = 80000, -50
	g.expose(raw, scene, 0, 1)
	if raw[0] != 65535 || raw[1] > 460+40 {
		t.Errorf("clipping: %d %d", raw[0], raw[1])
	}
}

// TestWriteConfig: the config passes the project's config validation and
// carries the options; extra keys override.
func TestWriteConfig(t *testing.T) {
	o := tiny(t)
	o.Channels = []int{1}
	path := filepath.Join(o.OutDir, "config.yaml")
	if err := WriteConfig(path, o, map[string]any{"device": "cpu", "blend_sigma": 10.0}); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		b, _ := os.ReadFile(path)
		t.Fatalf("config.Load: %v\n%s", err, b)
	}
	abs, _ := filepath.Abs(o.OutDir)
	if cfg.ProjectDir != abs || cfg.TileRows != o.Rows || cfg.TileCols != o.Cols || cfg.TileOverlap != o.Overlap ||
		cfg.NZPlanes != o.NZ || !reflect.DeepEqual(cfg.Cycles, []int{1, 2, 3}) || !reflect.DeepEqual(cfg.Channels, []int{1}) ||
		cfg.Device != "cpu" || cfg.BlendSigma != 10 || cfg.XYPixelSize != o.PixelSizeNM || len(cfg.Resources.Accounts) != 1 {
		t.Errorf("config does not carry the options: %+v", cfg)
	}
	if got := cfg.ChannelNames["2"]; !reflect.DeepEqual(got, []string{"DAPI-02"}) {
		t.Errorf("channel_names[2] = %v", got)
	}
	o.Overlap = 0.7
	if err := WriteConfig(path, o, nil); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("bad options: %v, want ErrInvalidOptions", err)
	}
}

// TestValidate covers the usage errors.
func TestValidate(t *testing.T) {
	for _, name := range PresetNames {
		o, err := Preset(name)
		if err != nil || o.Validate() != nil {
			t.Errorf("preset %s: %v %v", name, err, o.Validate())
		}
	}
	if _, err := Preset("huge"); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("unknown preset: %v", err)
	}
	base, _ := Preset("tiny")
	for _, tc := range []struct {
		name string
		mod  func(*Options)
	}{
		{"one tile", func(o *Options) { o.Rows, o.Cols = 1, 1 }},
		{"overlap", func(o *Options) { o.Overlap = 0.5 }},
		{"channel subset", func(o *Options) { o.Channels = []int{3} }},
		{"cycle subset", func(o *Options) { o.Cycles = []int{0} }},
		{"jitter", func(o *Options) { o.StageJitterPx = 30 }},
		{"optics", func(o *Options) { o.NA = 1.5 }},
	} {
		o := base
		tc.mod(&o)
		if err := o.Validate(); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("%s: %v, want ErrInvalidOptions", tc.name, err)
		}
	}
	for in, want := range map[string][]int{"": nil, "1": {1}, "3,1-2": {1, 2, 3}, " 2 - 4 , 4": {2, 3, 4}} {
		got, err := ParseIntList(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("ParseIntList(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"a", "3-1", "1,,2"} {
		if _, err := ParseIntList(in); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("ParseIntList(%q): %v, want ErrInvalidOptions", in, err)
		}
	}
	if got := base.RefZ(); got != 2 {
		t.Errorf("RefZ of 5 planes = %d, want 2", got)
	}
}

// TestCancel: a cancelled context stops Generate with context.Canceled.
func TestCancel(t *testing.T) {
	o := tiny(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Generate(ctx, o); !errors.Is(err, context.Canceled) {
		t.Errorf("Generate with a cancelled context: %v", err)
	}
}

func jsonString(v any) (string, error) {
	var b bytes.Buffer
	err := writeJSON(&b, v)
	return b.String(), err
}

func writeJSON(w *bytes.Buffer, v any) error {
	enc := json.NewEncoder(w)
	return enc.Encode(v)
}
