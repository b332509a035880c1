package regstage

import (
	"bytes"
	"context"
	"errors"
	"image/png"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/accuracy"
	"github.com/kintsugi-hpc/kintsugi-go/internal/align"
	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/ometiff"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/register"
	"github.com/kintsugi-hpc/kintsugi-go/internal/regstage/regtest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

const testH, testW = 384, 512

// regConfig are the registration keys of the test projects: working levels
// of 256 px (factor 2).
var regConfig = map[string]any{"reference_cycle": 1, "max_image_dim": 256, "rigid_only": false,
	"non_rigid": map[string]any{"max_dim": 256, "sigma_ratio": 0.01}}

// project writes a config and the EDF images of n cycles x 2 channels
// (synthetic cycles with known warps, synth.RegScene) with their sentinels.
func project(t *testing.T, n int) (*config.Config, *synth.RegScene) {
	t.Helper()
	return regtest.WriteProject(t, t.TempDir(), n, regConfig,
		synth.RegOptions{H: testH, W: testW, Seed: 5, MaxShift: 30, MaxRotDeg: 1, WarpPx: 3, Workers: 2})
}

func run(cfg *config.Config, be register.Backend) (*Result, error) {
	return Run(context.Background(), Options{Config: cfg, Engine: be, Workers: 2})
}

func TestRun(t *testing.T) {
	cfg, sc := project(t, 3)
	res, err := run(cfg, register.CPU{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	out := OutDir(cfg.ProjectDir)
	ref, err := tiffio.ReadGray16(filepath.Join(out, "cyc01", cfg.EDFFileName(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	refIn, _ := tiffio.ReadGray16(filepath.Join(EDFDir(cfg.ProjectDir, 1), cfg.EDFFileName(1, 1)))
	if !equal(ref, refIn) {
		t.Error("the reference cycle's DAPI is not copied unchanged")
	}
	if len(res.Cycles) != 3 {
		t.Fatalf("%d cycles in the result", len(res.Cycles))
	}
	for _, c := range []int{2, 3} {
		name := layout.CycleName(c)
		for ch := 1; ch <= 2; ch++ {
			g, err := tiffio.ReadGray16(filepath.Join(out, name, cfg.EDFFileName(c, ch)))
			if err != nil {
				t.Fatal(err)
			}
			if g.W != testW || g.H != testH {
				t.Errorf("cycle %d channel %d: %dx%d", c, ch, g.W, g.H)
			}
		}
		// DAPI agrees better with the reference than the input did.
		in, _ := tiffio.ReadGray16(filepath.Join(EDFDir(cfg.ProjectDir, c), cfg.EDFFileName(c, 1)))
		reg, _ := tiffio.ReadGray16(filepath.Join(out, name, cfg.EDFFileName(c, 1)))
		before, after := ncc(ref, in), ncc(ref, reg)
		t.Logf("cycle %d: full-resolution DAPI NCC %.3f before, %.3f after", c, before, after)
		if !(after > before+0.2) || !(after > 0.9) {
			t.Errorf("cycle %d: NCC %.3f before, %.3f after", c, before, after)
		}
		// The saved transform is the truth within the bound.
		m, h, w, err := ReadTransform(filepath.Join(out, "registration_data", name+"_transform.json"))
		if err != nil {
			t.Fatal(err)
		}
		if h != testH || w != testW || m.Field == nil {
			t.Errorf("cycle %d: transform frame %dx%d, field %v", c, w, h, m.Field != nil)
		}
		tr := sc.Truth(c)
		e := accuracy.ScoreMapping(testH, testW, 8, 16, sc.TissueAt, tr.Map, m.Apply)
		t.Logf("cycle %d: mapping RMS %.3f px over tissue (before %.1f)", c, e.RMSAfter, e.RMSBefore)
		if !(e.RMSAfter <= 0.5) {
			t.Errorf("cycle %d: mapping RMS %.3f px", c, e.RMSAfter)
		}
		// apply reproduces the stage's output exactly.
		ap := filepath.Join(t.TempDir(), "a.tif")
		if _, err := Apply(context.Background(), register.CPU{Workers: 2}, filepath.Join(out, "registration_data", name+"_transform.json"),
			filepath.Join(EDFDir(cfg.ProjectDir, c), cfg.EDFFileName(c, 2)), ap); err != nil {
			t.Fatal(err)
		}
		a, _ := tiffio.ReadGray16(ap)
		s, _ := tiffio.ReadGray16(filepath.Join(out, name, cfg.EDFFileName(c, 2)))
		if !equal(a, s) {
			t.Errorf("cycle %d: apply differs from the stage's output", c)
		}
		if b, err := os.ReadFile(filepath.Join(out, "qc", name+"_metrics.json")); err != nil || !strings.Contains(string(b), "ncc_after_non_rigid") {
			t.Errorf("cycle %d: metrics %v %s", c, err, b)
		}
		f, err := os.Open(filepath.Join(out, "qc", name+"_overlay.png"))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil || img.Bounds().Dx() != testW || img.Bounds().Dy() != testH {
			t.Errorf("cycle %d: overlay %v", c, err)
		}
	}
	if info, err := tiffio.ReadInfo(filepath.Join(out, OMEName)); err != nil || info.Pages != 6 || info.Width != testW || info.Height != testH {
		t.Errorf("OME-TIFF: %v %+v, want 6 channels of %dx%d", err, info, testW, testH)
	}
	b, err := os.ReadFile(layout.Sentinel(out))
	if err != nil || !strings.Contains(string(b), "stage=registration") || !strings.Contains(string(b), "cycles=1,2,3") {
		t.Errorf("sentinel: %v %q", err, b)
	}
	leftovers(t, cfg)
}

func equal(a, b *raster.Gray16) bool {
	if a.W != b.W || a.H != b.H {
		return false
	}
	for i := range a.Pix {
		if a.Pix[i] != b.Pix[i] {
			return false
		}
	}
	return true
}

func ncc(a, b *raster.Gray16) float64 {
	fa, fb := raster.NewFloat32(a.W, a.H), raster.NewFloat32(b.W, b.H)
	raster.Normalize16(fa.Pix, a.Pix)
	raster.Normalize16(fb.Pix, b.Pix)
	return align.NCC(fa, fb, 0, 0)
}

// leftovers fails if a staging directory remains.
func leftovers(t *testing.T, cfg *config.Config) {
	t.Helper()
	ents, _ := os.ReadDir(filepath.Dir(OutDir(cfg.ProjectDir)))
	for _, e := range ents {
		if strings.Contains(e.Name(), ".partial-") {
			t.Errorf("staging directory left behind: %s", e.Name())
		}
	}
}

// noOutput fails if registered/ exists.
func noOutput(t *testing.T, cfg *config.Config) {
	t.Helper()
	if _, err := os.Stat(OutDir(cfg.ProjectDir)); err == nil {
		t.Error("registered/ written despite the error")
	}
	leftovers(t, cfg)
}

func wantInput(t *testing.T, err error, words ...string) {
	t.Helper()
	if !errors.Is(err, ErrInput) {
		t.Fatalf("error %v, want ErrInput", err)
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not name %q", err, w)
		}
	}
}

func TestBadInput(t *testing.T) {
	be := register.CPU{Workers: 2}
	t.Run("missing sentinel", func(t *testing.T) {
		cfg, _ := project(t, 2)
		p := layout.Sentinel(EDFDir(cfg.ProjectDir, 2))
		os.Remove(p)
		_, err := run(cfg, be)
		wantInput(t, err, p)
		noOutput(t, cfg)
	})
	t.Run("reference cycle", func(t *testing.T) {
		cfg, _ := project(t, 2)
		cfg.Registration.ReferenceCycle = 7
		_, err := run(cfg, be)
		wantInput(t, err, "registration.reference_cycle", "7")
		noOutput(t, cfg)
	})
	t.Run("no images", func(t *testing.T) {
		cfg, _ := project(t, 2)
		d := EDFDir(cfg.ProjectDir, 2)
		for ch := 1; ch <= 2; ch++ {
			os.Remove(filepath.Join(d, cfg.EDFFileName(2, ch)))
		}
		_, err := run(cfg, be)
		wantInput(t, err, d)
		noOutput(t, cfg)
	})
	t.Run("missing channel image", func(t *testing.T) {
		cfg, _ := project(t, 2)
		os.Remove(filepath.Join(EDFDir(cfg.ProjectDir, 2), cfg.EDFFileName(2, 2)))
		_, err := run(cfg, be)
		wantInput(t, err, "cycle 2", cfg.EDFFileName(2, 2), "missing")
		noOutput(t, cfg)
	})
	t.Run("size beyond padding", func(t *testing.T) {
		cfg, _ := project(t, 2)
		p := filepath.Join(EDFDir(cfg.ProjectDir, 2), cfg.EDFFileName(2, 2))
		tiffio.WriteGray16(p, raster.NewGray16(testW-100, testH))
		_, err := run(cfg, be)
		wantInput(t, err, p, "padding")
		noOutput(t, cfg)
	})
	t.Run("too small", func(t *testing.T) {
		cfg, _ := project(t, 2)
		p := filepath.Join(EDFDir(cfg.ProjectDir, 1), cfg.EDFFileName(1, 2))
		tiffio.WriteGray16(p, raster.NewGray16(testW, 20))
		_, err := run(cfg, be)
		wantInput(t, err, p, "at least")
		noOutput(t, cfg)
	})
	t.Run("worse than before", func(t *testing.T) {
		// Cycle 2 = cycle 1 (aligned from the start); the broken backend
		// moves it away.
		cfg, _ := project(t, 2)
		for ch := 1; ch <= 2; ch++ {
			g, _ := tiffio.ReadGray16(filepath.Join(EDFDir(cfg.ProjectDir, 1), cfg.EDFFileName(1, ch)))
			tiffio.WriteGray16(filepath.Join(EDFDir(cfg.ProjectDir, 2), cfg.EDFFileName(2, ch)), g)
		}
		_, err := run(cfg, wrongShifts{register.CPU{Workers: 2}})
		wantInput(t, err, "cycle 2", "agree worse", "NCC")
		noOutput(t, cfg)
	})
}

// wrongShifts is a broken backend whose block shifts point 3 px away from
// the truth, so registration moves the images apart.
type wrongShifts struct{ register.CPU }

func (w wrongShifts) BlockShifts(ctx context.Context, f, m *raster.Float32, k int, maps []*register.Mapping, b []register.Block, bh, bw int) ([]register.Shift, error) {
	s, err := w.CPU.BlockShifts(ctx, f, m, k, maps, b, bh, bw)
	for i := range s {
		s[i].DY += 3
		s[i].DX -= 2
	}
	return s, err
}

// Sizes within the rule are padded at the bottom and right.
func TestPadding(t *testing.T) {
	cfg, _ := project(t, 2)
	p := filepath.Join(EDFDir(cfg.ProjectDir, 2), cfg.EDFFileName(2, 2))
	g, _ := tiffio.ReadGray16(p)
	small := raster.NewGray16(g.W-5, g.H-3)
	for y := 0; y < small.H; y++ {
		copy(small.Pix[y*small.W:(y+1)*small.W], g.Pix[y*g.W:])
	}
	tiffio.WriteGray16(p, small)
	if _, err := run(cfg, register.CPU{Workers: 2}); err != nil {
		t.Fatal(err)
	}
	out, err := tiffio.ReadGray16(filepath.Join(OutDir(cfg.ProjectDir), "cyc02", cfg.EDFFileName(2, 2)))
	if err != nil {
		t.Fatal(err)
	}
	if out.W != testW || out.H != testH {
		t.Errorf("padded output %dx%d, want %dx%d", out.W, out.H, testW, testH)
	}
}

// One cycle is copied, as the original does.
func TestSingleCycle(t *testing.T) {
	cfg, _ := project(t, 1)
	if _, err := run(cfg, register.CPU{Workers: 2}); err != nil {
		t.Fatal(err)
	}
	for ch := 1; ch <= 2; ch++ {
		a, _ := tiffio.ReadGray16(filepath.Join(EDFDir(cfg.ProjectDir, 1), cfg.EDFFileName(1, ch)))
		b, err := tiffio.ReadGray16(filepath.Join(OutDir(cfg.ProjectDir), "cyc01", cfg.EDFFileName(1, ch)))
		if err != nil || !equal(a, b) {
			t.Errorf("channel %d not copied: %v", ch, err)
		}
	}
	b, _ := os.ReadFile(layout.Sentinel(OutDir(cfg.ProjectDir)))
	if !strings.Contains(string(b), "method=copy_single_cycle") {
		t.Errorf("sentinel %q", b)
	}
}

// pair writes the warped image, transform, metrics and overlay.
func TestPair(t *testing.T) {
	cfg, _ := project(t, 2)
	out := t.TempDir()
	p := Params(cfg.Registration)
	fixed := filepath.Join(EDFDir(cfg.ProjectDir, 1), cfg.EDFFileName(1, 1))
	moving := filepath.Join(EDFDir(cfg.ProjectDir, 2), cfg.EDFFileName(2, 1))
	r, err := Pair(context.Background(), register.CPU{Workers: 2}, p, fixed, moving, out)
	if err != nil {
		t.Fatal(err)
	}
	if !(r.Metrics.NCCFinal > r.Metrics.NCCBefore) {
		t.Errorf("metrics %+v", r.Metrics)
	}
	for _, f := range []string{filepath.Base(moving), "transform.json", "field_dy.tif", "field_dx.tif", "metrics.json", "overlay.png"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("pair output: %v", err)
		}
	}
}

// registration.reference_channel picks the channel registration aligns
// on: here every cycle's DAPI image is moved to channel 2 and channel 1
// holds independent noise, so only registration on channel 2 can find the
// scene's known warps.
func TestReferenceChannel(t *testing.T) {
	cfg, sc := project(t, 3)
	for _, c := range cfg.Cycles {
		d := EDFDir(cfg.ProjectDir, c)
		dapi, err := tiffio.ReadGray16(filepath.Join(d, cfg.EDFFileName(c, 1)))
		if err != nil {
			t.Fatal(err)
		}
		if err := tiffio.WriteGray16(filepath.Join(d, cfg.EDFFileName(c, 2)), dapi); err != nil {
			t.Fatal(err)
		}
		noise := raster.NewGray16(dapi.W, dapi.H)
		rng := rand.New(rand.NewPCG(uint64(c), 7))
		for i := range noise.Pix {
			noise.Pix[i] = uint16(rng.IntN(4000))
		}
		if err := tiffio.WriteGray16(filepath.Join(d, cfg.EDFFileName(c, 1)), noise); err != nil {
			t.Fatal(err)
		}
	}
	rms := func(c int) float64 {
		m, _, _, err := ReadTransform(filepath.Join(OutDir(cfg.ProjectDir), "registration_data", layout.CycleName(c)+"_transform.json"))
		if err != nil {
			t.Fatal(err)
		}
		return accuracy.ScoreMapping(testH, testW, 8, 16, sc.TissueAt, sc.Truth(c).Map, m.Apply).RMSAfter
	}
	// Channel 1 (the default): noise, so registration is refused or wrong.
	if _, err := run(cfg, register.CPU{Workers: 2}); err == nil {
		if e := rms(2); e < 2 {
			t.Errorf("registered on channel 1 (noise), cycle 2 maps within %.2f px of the truth: the reference channel is not what registration uses", e)
		}
		os.RemoveAll(OutDir(cfg.ProjectDir))
	}
	cfg.Registration.ReferenceChannel = 2
	if _, err := run(cfg, register.CPU{Workers: 2}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []int{2, 3} {
		e := rms(c)
		t.Logf("reference_channel 2: cycle %d mapping RMS %.3f px over tissue", c, e)
		if !(e <= 0.5) {
			t.Errorf("reference_channel 2: cycle %d mapping RMS %.3f px, want <= 0.5", c, e)
		}
		b, err := os.ReadFile(filepath.Join(OutDir(cfg.ProjectDir), "qc", layout.CycleName(c)+"_metrics.json"))
		if err != nil || !strings.Contains(string(b), `"dapi": "`+cfg.EDFFileName(c, 2)+`"`) {
			t.Errorf("cycle %d metrics do not name the registration image %s: %v %s", c, cfg.EDFFileName(c, 2), err, b)
		}
	}
	// A channel that is not configured, or whose image is missing.
	cfg.Registration.ReferenceChannel = 9
	_, err := run(cfg, register.CPU{Workers: 2})
	wantInput(t, err, "registration.reference_channel", "9")
	cfg.Registration.ReferenceChannel = 2
	p := filepath.Join(EDFDir(cfg.ProjectDir, 3), cfg.EDFFileName(3, 2))
	os.Remove(p)
	_, err = run(cfg, register.CPU{Workers: 2})
	wantInput(t, err, "registration.reference_channel", cfg.EDFFileName(3, 2), "cycle 3")
}

// codingBackend is a backend that also codes the OME-TIFF's tiles
// (ometiff.Coder), as the GPU's Registrar does: here with CPUCoder, the
// GPU coder's reference.
type codingBackend struct {
	register.CPU
	ometiff.CPUCoder
}

// TestOMEThroughBackendCoder: with a backend that codes the OME-TIFF's
// tiles and fewer workers than coderMaxWorkers, the OME-TIFF is coded
// through it (its bytes differ from the writer's own encoder's), and every
// channel's full-resolution page is the registered image, in markers
// order, as without it; with more workers the writer's own encoder is
// used.
func TestOMEThroughBackendCoder(t *testing.T) {
	cfg, _ := project(t, 2)
	out := OutDir(cfg.ProjectDir)
	if _, err := run(cfg, register.CPU{Workers: 2}); err != nil {
		t.Fatal(err)
	}
	own, err := os.ReadFile(filepath.Join(out, OMEName))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(out); err != nil {
		t.Fatal(err)
	}
	if _, err := run(cfg, codingBackend{register.CPU{Workers: 2}, ometiff.CPUCoder{Workers: 2}}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(out, OMEName)
	coded, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(coded, own) {
		t.Errorf("the OME-TIFF is the writer's own encoding: the backend's coder was not used")
	}
	if omeCoder(codingBackend{}, coderMaxWorkers) != nil || omeCoder(register.CPU{}, 1) != nil || omeCoder(codingBackend{}, 2) == nil {
		t.Errorf("omeCoder: the backend's coder below %d workers only, and only a backend that codes", coderMaxWorkers)
	}
	pages, err := tiffio.ReadGray16Pages(path)
	if err != nil {
		t.Fatal(err)
	}
	files := map[int][]string{}
	for c := 1; c <= 2; c++ {
		for _, ch := range cfg.Channels {
			files[c] = append(files[c], cfg.EDFFileName(c, ch))
		}
	}
	list := Markers(cfg, files)
	if len(pages) != len(list) {
		t.Fatalf("%d pages, %d markers", len(pages), len(list))
	}
	for i, m := range list {
		g, err := tiffio.ReadGray16(filepath.Join(out, layout.CycleName(m.Cycle), m.File))
		if err != nil {
			t.Fatal(err)
		}
		if !equal(pages[i], g) {
			t.Errorf("page %d (%s) is not the registered %s", i, m.Name, m.File)
		}
	}
}
