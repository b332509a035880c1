// Package regstage is the registration stage of a project: every cycle's
// EDF images are aligned to the reference cycle on DAPI (internal/register)
// and every channel is warped at full resolution, written in the
// original's layout, atomically for the whole registered/ directory
// (internal/staging).
//
//	data/processed/edf/cycNN/.snakemake_complete                     input sentinel (required, every cycle)
//	data/processed/edf/cycNN/*.tif                                   input, uint16, one per channel
//	data/processed/registered/cycNN/<same name>.tif                   output, uint16, reference size
//	data/processed/registered/registration_data/cycNN_transform.json  rigid parameters + field geometry
//	data/processed/registered/registration_data/cycNN_field_{dy,dx}.tif  float32 field nodes, px
//	data/processed/registered/qc/cycNN_metrics.json                   NCC before/rigid/non-rigid, field stats
//	data/processed/registered/qc/cycNN_overlay.png                    reference (magenta) + cycle (green)
//	data/processed/registered/registered.ome.tif                      pyramidal OME-TIFF, every cycle x channel (internal/ometiff)
//	data/processed/registered/.snakemake_complete                     sentinel (key=value, stage=registration)
//
// The reference image of a cycle is its first DAPI*.tif in name order, else
// its first *.tif (the original's rule); the reference cycle is
// registration.reference_cycle. Images of different sizes are zero-padded at
// the bottom and right to the largest height and width, as the original
// does; a size that differs from the largest by more than MaxPadPx or
// MaxPadFrac of the dimension (whichever is larger) is refused. With one
// cycle, its EDF images are copied (the original's behaviour).
//
// Memory: the reference DAPI image is read once and kept only as its
// downsampled levels; then one cycle at a time is read, registered and
// warped (all of its channels at once), and written.
//
// Bad input is an error wrapping ErrInput that names the file, cycle or
// config key: a missing EDF sentinel, directory or image; the reference
// cycle not among the cycles; sizes beyond the padding rule; a cycle whose
// registration leaves its DAPI agreeing worse with the reference than
// before (NCC after < NCC before), with its metrics. Nothing is written
// then (no silent copy of unregistered images).
package regstage

import (
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/atomicfile"
	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/par"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/register"
	"github.com/kintsugi-hpc/kintsugi-go/internal/staging"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// ErrInput marks errors caused by the input data or configuration; it is
// staging.ErrInput, shared by every stage.
var ErrInput = staging.ErrInput

// The padding rule: an image may be smaller than the largest by at most
// max(MaxPadPx, MaxPadFrac x the largest) px in each dimension (the
// original's example pads 7472 x 12662 and 7479 x 12660 to one size).
const (
	MaxPadPx   = 64
	MaxPadFrac = 0.02
)

// MinSidePx is the smallest image side registration accepts.
const MinSidePx = 64

// NCCTolerance is how much lower than before a cycle's final DAPI NCC may
// be before the cycle is refused (rounding only: any real loss fails).
const NCCTolerance = 1e-4

// EDFDir is edf/cycNN of a project.
func EDFDir(project string, cycle int) string {
	return filepath.Join(project, "data", "processed", "edf", config.CycleName(cycle))
}

// OutDir is the registered/ directory of a project.
func OutDir(project string) string {
	return filepath.Join(project, "data", "processed", "registered")
}

// Options configure Run.
type Options struct {
	Config  *config.Config
	Backend register.Backend
	Workers int
	Logger  *slog.Logger
	// Device names the device for the sentinel and logs ("gpu" or "cpu").
	Device string
}

// CycleResult is one cycle's outcome.
type CycleResult struct {
	Cycle   int
	Files   []string
	Metrics *register.Metrics // nil for the reference and a copied single cycle
	Seconds float64
}

// Result is the stage's outcome.
type Result struct {
	OutDir    string
	Reference int
	H, W      int
	Cycles    []CycleResult
	Seconds   float64
}

// cycleInput is one cycle's EDF files.
type cycleInput struct {
	cycle int
	dir   string
	files []string // base names, sorted
	dapi  string   // base name of the registration image
}

// Discover lists every cycle's EDF images and checks the sentinel and the
// reference cycle.
func discover(cfg *config.Config) ([]cycleInput, error) {
	ref := cfg.Registration.ReferenceCycle
	found := false
	for _, c := range cfg.Cycles {
		found = found || c == ref
	}
	if !found {
		return nil, staging.Inputf("config %s: key registration.reference_cycle: %d is not among the cycles %v", cfg.Path, ref, cfg.Cycles)
	}
	var out []cycleInput
	for _, c := range cfg.Cycles {
		dir := EDFDir(cfg.ProjectDir, c)
		if err := staging.RequireSentinel(dir, c, "edf"); err != nil {
			return nil, err
		}
		paths, err := filepath.Glob(filepath.Join(dir, "*.tif"))
		if err != nil {
			return nil, err
		}
		if len(paths) == 0 {
			return nil, staging.Inputf("cycle %d: no *.tif EDF images in %s", c, dir)
		}
		ci := cycleInput{cycle: c, dir: dir}
		for _, p := range paths {
			ci.files = append(ci.files, filepath.Base(p))
		}
		sort.Strings(ci.files)
		ci.dapi = ci.files[0]
		for _, f := range ci.files {
			if strings.HasPrefix(f, "DAPI") {
				ci.dapi = f
				break
			}
		}
		out = append(out, ci)
	}
	return out, nil
}

// checkSizes reads every image's size and returns the padded size.
func checkSizes(cycles []cycleInput) (h, w int, err error) {
	type sz struct {
		path string
		h, w int
	}
	var all []sz
	for _, ci := range cycles {
		for _, f := range ci.files {
			p := filepath.Join(ci.dir, f)
			info, err := tiffio.ReadInfo(p)
			if err != nil {
				return 0, 0, staging.Inputf("%w", err)
			}
			if info.BitsPerSample != 16 || info.SampleFormat == 3 || info.SamplesPerPixel != 1 {
				return 0, 0, staging.Inputf("%s: %d-bit, sample format %d, %d samples per pixel: want single-channel uint16", p, info.BitsPerSample, info.SampleFormat, info.SamplesPerPixel)
			}
			if info.Height < MinSidePx || info.Width < MinSidePx {
				return 0, 0, staging.Inputf("%s is %d x %d (w x h): registration needs at least %d px per side", p, info.Width, info.Height, MinSidePx)
			}
			all = append(all, sz{p, info.Height, info.Width})
			h, w = max(h, info.Height), max(w, info.Width)
		}
	}
	limH := max(MaxPadPx, int(MaxPadFrac*float64(h)))
	limW := max(MaxPadPx, int(MaxPadFrac*float64(w)))
	for _, s := range all {
		if h-s.h > limH || w-s.w > limW {
			return 0, 0, staging.Inputf("%s is %d x %d (w x h), the largest image is %d x %d: more than the %d x %d px padding allowed (max(%d px, %g of the size))",
				s.path, s.w, s.h, w, h, limW, limH, MaxPadPx, MaxPadFrac)
		}
	}
	return h, w, nil
}

// Pad returns g zero-padded at the bottom and right to h x w (g itself
// when it already has that size).
func Pad(g *raster.Gray16, h, w int) *raster.Gray16 {
	if g.H == h && g.W == w {
		return g
	}
	o := raster.NewGray16(w, h)
	for y := 0; y < min(g.H, h); y++ {
		copy(o.Pix[y*w:y*w+min(g.W, w)], g.Pix[y*g.W:])
	}
	return o
}

func readPadded(path string, h, w int) (*raster.Gray16, error) {
	g, err := tiffio.ReadGray16(path)
	if err != nil {
		return nil, staging.Inputf("%w", err)
	}
	return Pad(g, h, w), nil
}

// Run registers every cycle of the project.
func Run(ctx context.Context, o Options) (*Result, error) {
	t0 := time.Now()
	cfg := o.Config
	lg := o.Logger
	if lg == nil {
		lg = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	workers := max(1, o.Workers)
	p := register.ParamsFromConfig(cfg.Registration)
	p.Workers = workers
	if err := p.Check(); err != nil {
		return nil, staging.Inputf("config %s: registration: %w", cfg.Path, err)
	}
	cycles, err := discover(cfg)
	if err != nil {
		return nil, err
	}
	h, w, err := checkSizes(cycles)
	if err != nil {
		return nil, err
	}
	final := OutDir(cfg.ProjectDir)
	d, err := staging.New(final)
	if err != nil {
		return nil, err
	}
	defer d.Abort()
	res := &Result{OutDir: final, Reference: cfg.Registration.ReferenceCycle, H: h, W: w}
	method := "rigid+non-rigid"
	if p.RigidOnly {
		method = "rigid"
	}
	lg.Info("registration", "cycles", len(cycles), "reference", res.Reference, "size", fmt.Sprintf("%dx%d", w, h),
		"backend", o.Backend.Name(), "method", method, "workers", workers)

	if len(cycles) == 1 {
		method = "copy_single_cycle"
		ci := cycles[0]
		for _, f := range ci.files {
			if err := copyFile(filepath.Join(ci.dir, f), filepath.Join(d.Path, config.CycleName(ci.cycle), f)); err != nil {
				return nil, err
			}
		}
		res.Cycles = append(res.Cycles, CycleResult{Cycle: ci.cycle, Files: ci.files})
		lg.Info("single cycle: EDF images copied", "cycle", ci.cycle)
	} else {
		if err := registerAll(ctx, o, p, cycles, h, w, d.Path, res); err != nil {
			return nil, err
		}
	}
	var names []string
	for _, c := range res.Cycles {
		names = append(names, strconv.Itoa(c.Cycle))
	}
	if err := writeOME(ctx, cfg, d.Path, res, workers, lg); err != nil {
		return nil, err
	}
	res.Seconds = time.Since(t0).Seconds()
	if err := staging.WriteSentinel(filepath.Join(d.Path, ".snakemake_complete"), [][2]string{
		{"stage", "registration"}, {"cycles", strings.Join(names, ",")}, {"reference_cycle", strconv.Itoa(res.Reference)},
		{"method", method}, {"device", o.Device}, {"backend", o.Backend.Name()}, {"size", fmt.Sprintf("%dx%d", w, h)},
		{"seconds", fmt.Sprintf("%.1f", res.Seconds)},
	}); err != nil {
		return nil, err
	}
	if err := d.Commit(); err != nil {
		return nil, err
	}
	lg.Info("registration done", "out", final, "seconds", fmt.Sprintf("%.1f", res.Seconds))
	return res, nil
}

func registerAll(ctx context.Context, o Options, p register.Params, cycles []cycleInput, h, w int, out string, res *Result) error {
	lg := o.Logger
	if lg == nil {
		lg = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	var refIn cycleInput
	for _, ci := range cycles {
		if ci.cycle == res.Reference {
			refIn = ci
		}
	}
	t0 := time.Now()
	refImg, err := readPadded(filepath.Join(refIn.dir, refIn.dapi), h, w)
	if err != nil {
		return err
	}
	ref, err := register.NewReference(ctx, o.Backend, refImg, p)
	if err != nil {
		return err
	}
	_, _, kn := p.Levels(h, w)
	refOverlay := overlayLevel(refImg, w, h)
	refImg = nil
	// The reference cycle: its padded images, unchanged.
	err = par.ForEach(ctx, len(refIn.files), o.Workers, func(i int) error {
		g, err := readPadded(filepath.Join(refIn.dir, refIn.files[i]), h, w)
		if err != nil {
			return err
		}
		return writeGray16(filepath.Join(out, config.CycleName(refIn.cycle), refIn.files[i]), g)
	})
	if err != nil {
		return err
	}
	res.Cycles = append(res.Cycles, CycleResult{Cycle: refIn.cycle, Files: refIn.files, Seconds: time.Since(t0).Seconds()})
	lg.Info("reference cycle", "cycle", refIn.cycle, "dapi", refIn.dapi, "levels_nonrigid", kn, "seconds", fmt.Sprintf("%.1f", time.Since(t0).Seconds()))

	for _, ci := range cycles {
		if ci.cycle == res.Reference {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		t1 := time.Now()
		dapi, err := readPadded(filepath.Join(ci.dir, ci.dapi), h, w)
		if err != nil {
			return err
		}
		r, err := register.Register(ctx, o.Backend, ref, dapi, p)
		if err != nil {
			return fmt.Errorf("cycle %d: %w", ci.cycle, err)
		}
		m := r.Metrics
		lg.Info("registered", "cycle", ci.cycle, "rotation_deg", fmt.Sprintf("%.4f", m.RotationDeg),
			"translation", fmt.Sprintf("(%.2f, %.2f)", m.TranslationY, m.TranslationX),
			"ncc", fmt.Sprintf("%.4f -> %.4f -> %.4f", m.NCCBefore, m.NCCRigid, m.NCCNonRigid),
			"field_max_px", fmt.Sprintf("%.2f", m.DispMaxPx), "jacobian_min", fmt.Sprintf("%.3f", m.JacobianMin), "non_rigid_dropped", m.NonRigidDropped)
		if m.NCCFinal < m.NCCBefore-NCCTolerance {
			return staging.Inputf("cycle %d: registration makes DAPI (%s) agree worse with the reference cycle %d: NCC %.4f before, %.4f after rigid, %.4f after non-rigid (rotation %.3f°, translation (%.1f, %.1f) px); nothing written",
				ci.cycle, filepath.Join(ci.dir, ci.dapi), res.Reference, m.NCCBefore, m.NCCRigid, m.NCCNonRigid, m.RotationDeg, m.TranslationY, m.TranslationX)
		}
		// Every channel of the cycle, warped at once.
		imgs := make([]*raster.Gray16, len(ci.files))
		err = par.ForEach(ctx, len(ci.files), o.Workers, func(i int) error {
			if ci.files[i] == ci.dapi {
				imgs[i] = dapi
				return nil
			}
			g, err := readPadded(filepath.Join(ci.dir, ci.files[i]), h, w)
			imgs[i] = g
			return err
		})
		if err != nil {
			return err
		}
		warped, err := o.Backend.Warp(ctx, imgs, &r.Mapping, h, w)
		if err != nil {
			return fmt.Errorf("cycle %d: warp: %w", ci.cycle, err)
		}
		imgs, dapi = nil, nil
		name := config.CycleName(ci.cycle)
		err = par.ForEach(ctx, len(warped), o.Workers, func(i int) error {
			return writeGray16(filepath.Join(out, name, ci.files[i]), warped[i])
		})
		if err != nil {
			return err
		}
		var dapiW *raster.Gray16
		for i, f := range ci.files {
			if f == ci.dapi {
				dapiW = warped[i]
			}
		}
		if err := WriteTransform(filepath.Join(out, "registration_data"), name, r, h, w); err != nil {
			return err
		}
		if err := writeJSON(filepath.Join(out, "qc", name+"_metrics.json"), cycleMetrics{Cycle: ci.cycle, Reference: res.Reference, DAPI: ci.dapi, Metrics: m}); err != nil {
			return err
		}
		if err := writeOverlay(filepath.Join(out, "qc", name+"_overlay.png"), refOverlay, overlayLevel(dapiW, w, h)); err != nil {
			return err
		}
		mm := m
		res.Cycles = append(res.Cycles, CycleResult{Cycle: ci.cycle, Files: ci.files, Metrics: &mm, Seconds: time.Since(t1).Seconds()})
		lg.Info("cycle written", "cycle", ci.cycle, "channels", len(ci.files), "seconds", fmt.Sprintf("%.1f", time.Since(t1).Seconds()))
	}
	sort.Slice(res.Cycles, func(a, b int) bool { return res.Cycles[a].Cycle < res.Cycles[b].Cycle })
	return nil
}

type cycleMetrics struct {
	Cycle     int              `json:"cycle"`
	Reference int              `json:"reference_cycle"`
	DAPI      string           `json:"dapi"`
	Metrics   register.Metrics `json:"metrics"`
}

func writeGray16(path string, g *raster.Gray16) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return tiffio.WriteGray16(path, g)
}

func writeJSON(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteBytes(path, append(b, '\n'), 0o644)
}

func copyFile(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return staging.Inputf("%w", err)
	}
	defer in.Close()
	return atomicfile.Write(dst, 0o644, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	})
}

// overlayMax is the long side of the overlay pictures, px.
const overlayMax = 1024

// overlayLevel box-downsamples g to at most overlayMax px.
func overlayLevel(g *raster.Gray16, w, h int) *raster.Float32 {
	k := max(1, (max(w, h)+overlayMax-1)/overlayMax)
	lv, err := register.CPU{}.Downsample(context.Background(), g, []int{k})
	if err != nil {
		return raster.NewFloat32(1, 1)
	}
	return lv[0]
}

// writeOverlay writes an RGB PNG: the reference in magenta (red + blue),
// the registered cycle in green, each scaled to its 99.5th percentile;
// aligned tissue appears white.
func writeOverlay(path string, ref, cyc *raster.Float32) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	w, h := min(ref.W, cyc.W), min(ref.H, cyc.H)
	sr, sc := scaleOf(ref), scaleOf(cyc)
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			a := to8(float64(ref.Pix[y*ref.W+x]) * sr)
			b := to8(float64(cyc.Pix[y*cyc.W+x]) * sc)
			img.SetRGBA(x, y, color.RGBA{R: a, G: b, B: a, A: 255})
		}
	}
	return atomicfile.Write(path, 0o644, func(wr io.Writer) error { return png.Encode(wr, img) })
}

func scaleOf(f *raster.Float32) float64 {
	v := make([]float64, 0, len(f.Pix)/7+1)
	for i := 0; i < len(f.Pix); i += 7 {
		v = append(v, float64(f.Pix[i]))
	}
	sort.Float64s(v)
	hi := v[int(0.995*float64(len(v)-1))]
	if !(hi > 0) {
		return 0
	}
	return 255 / hi
}

func to8(v float64) uint8 {
	return uint8(math.Max(0, math.Min(255, math.Round(v))))
}
