package synth

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/atomicfile"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/par"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// RawDir is data/raw/cycNN under a project directory (layout.RawDir's cycNN
// variant, which layout.ResolveRawCycleDir finds).
func RawDir(projectDir string, cycle int) string {
	return filepath.Join(layout.RawDir(projectDir), layout.CycleName(cycle))
}

// RawName is the CODEX file name of a raw tile: 1_{tile:05d}_Z{z:03d}_CH{c}.tif
// (tile and z 1-based).
func RawName(tile, z, ch int) string {
	return fmt.Sprintf("1_%05d_Z%03d_CH%d.tif", tile, z, ch)
}

// GroundTruthDir is ground_truth under a project directory.
func GroundTruthDir(projectDir string) string { return filepath.Join(projectDir, "ground_truth") }

// Generate writes the synthetic project described by o (see the package
// comment for the layout). It validates o first; errors from bad options wrap
// ErrInvalidOptions. It honours ctx between planes.
func Generate(ctx context.Context, o Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	log := o.logger()
	t0 := time.Now()
	m := newTissueModel(o)
	log.Debug("tissue model", "cells", len(m.cells), "texels", len(m.texels), "empty_tiles", m.empty,
		"blur_px_per_plane", m.blurPer, "seconds", time.Since(t0).Seconds())

	gt := GroundTruthDir(o.OutDir)
	if err := os.MkdirAll(gt, 0o777); err != nil {
		return fmt.Errorf("create ground truth dir: %w", err)
	}
	truth := buildTruth(o, m)

	// Profiles of every channel of the experiment (small: tile size).
	flats := map[int]*raster.Float32{}
	darks := map[int]*raster.Float32{}
	for i := range truth.Channels {
		ct := &truth.Channels[i]
		c := ct.Channel
		flat, dark := o.Flatfield(c), o.Darkfield(c)
		flats[c], darks[c] = flat, dark
		if err := tiffio.WriteFloat32(filepath.Join(gt, ct.FlatfieldFile), flat); err != nil {
			return fmt.Errorf("write flatfield: %w", err)
		}
		if err := tiffio.WriteFloat32(filepath.Join(gt, ct.DarkfieldFile), dark); err != nil {
			return fmt.Errorf("write darkfield: %w", err)
		}
		ct.DarkfieldMean = meanF32(dark.Pix)
		lo, hi := minMaxF32(flat.Pix)
		ct.FlatfieldMin, ct.FlatfieldMax = lo, hi
	}
	for _, ct := range truth.Cycles {
		dir := filepath.Join(gt, layout.CycleName(ct.Cycle))
		if err := os.MkdirAll(dir, 0o777); err != nil {
			return fmt.Errorf("create ground truth dir: %w", err)
		}
		if err := atomicfile.WriteBytes(filepath.Join(gt, ct.PositionsFile), positionsCSV(ct.Tiles), 0o666); err != nil {
			return err
		}
	}

	for _, cyc := range o.cycleList() {
		if err := os.MkdirAll(RawDir(o.OutDir, cyc), 0o777); err != nil {
			return fmt.Errorf("create raw dir: %w", err)
		}
		for _, ch := range o.channelList() {
			tc := time.Now()
			g := &channelGen{o: o, m: m, cycle: cyc, ch: ch, flat: flats[ch], dark: darks[ch]}
			if err := g.tiles(ctx); err != nil {
				return err
			}
			tt := time.Since(tc)
			if err := g.scenes(ctx); err != nil {
				return err
			}
			planes := o.Rows * o.Cols * o.NZ
			log.Info("channel written", "cycle", cyc, "channel", ch, "planes", planes,
				"raw_gb", float64(planes*o.TileH*o.TileW*2)/1e9,
				"raw_seconds", round3(tt.Seconds()), "truth_seconds", round3(time.Since(tc).Seconds()-tt.Seconds()))
		}
	}
	if err := WriteTruth(TruthPath(o.OutDir), truth); err != nil {
		return err
	}
	log.Info("synthetic project written", "dir", o.OutDir, "seconds", round3(time.Since(t0).Seconds()))
	return nil
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// buildTruth fills everything in truth.json that does not need pixels.
func buildTruth(o Options, m *tissueModel) *Truth {
	t := &Truth{
		SchemaVersion: TruthSchemaVersion,
		Generator:     "kintsugi-synth",
		Seed:          o.Seed,
		Grid:          Grid{Rows: o.Rows, Cols: o.Cols, Order: "snake"},
		TileHeight:    o.TileH, TileWidth: o.TileW,
		Overlap:     o.Overlap,
		PixelSizeNM: o.PixelSizeNM, ZStepNM: o.ZStepNM,
		NA: o.NA, RefractiveIdx: o.RefractiveIndex,
		NZPlanes:  o.NZ,
		RefZ:      o.RefZ(),
		Noise:     Noise{Gain: o.Gain, ReadNoise: o.ReadNoise},
		Generated: Generated{Cycles: o.cycleList(), Channels: o.channelList()},
	}
	for _, k := range m.empty {
		t.EmptyTiles = append(t.EmptyTiles, k+1)
	}
	f := Focus{
		Model:          "zf = centre + range*(tilt + bump); plane z blurs a blob by sigma² = psf² + (blur*(z - zf))²",
		BlurPxPerPlane: m.blurPer, ZCentre: m.focus.zc + 1, Range: o.FocusRange,
		ZMin: math.Inf(1), ZMax: math.Inf(-1),
	}
	for k := range o.Rows * o.Cols {
		r, c := SnakeRowCol(k, o.Cols)
		z := m.focus.at(float64(r)*o.stepY()+float64(o.TileH)/2, float64(c)*o.stepX()+float64(o.TileW)/2) + 1
		f.ZMin, f.ZMax, f.ZMean = min(f.ZMin, z), max(f.ZMax, z), f.ZMean+z/float64(o.Rows*o.Cols)
	}
	for c := 1; c <= o.NChannels; c++ {
		f.PSFSigmaPx = append(f.PSFSigmaPx, o.psfSigma(c))
		lk := look(c)
		t.Channels = append(t.Channels, ChannelTruth{
			Channel:       c,
			Wavelengths:   []float64{lk.exNM, lk.emNM},
			FlatfieldFile: fmt.Sprintf("flatfield_CH%d.tif", c),
			DarkfieldFile: fmt.Sprintf("darkfield_CH%d.tif", c),
			// Filled in from the pixels by Generate; the formula's value until then.
			DarkfieldMean: o.DarkfieldMean(c),
			BackgroundOff: lk.offTissue, BackgroundOnTissue: lk.tissue,
		})
	}
	t.Focus = f
	gen := map[int]bool{}
	for _, c := range o.cycleList() {
		gen[c] = true
	}
	for cyc := 1; cyc <= o.NCycles; cyc++ {
		pos := o.TilePositions(cyc)
		sh := o.CycleShift(cyc)
		mh, mw := o.MosaicSize(pos)
		ct := CycleTruth{
			Cycle: cyc, Shift: Shift{DY: sh.Y, DX: sh.X}, MosaicHeight: mh, MosaicWidth: mw,
			PositionsFile: layout.CycleName(cyc) + "/" + layout.TilePositionsName,
		}
		for k, p := range pos {
			r, c := SnakeRowCol(k, o.Cols)
			zf := m.focus.at(p.Y+float64(o.TileH)/2-sh.Y, p.X+float64(o.TileW)/2-sh.X) + 1
			ct.Tiles = append(ct.Tiles, TileTruth{Tile: k + 1, Row: r, Col: c, Y: p.Y, X: p.X, ZFocus: zf})
		}
		if gen[cyc] {
			for _, ch := range o.channelList() {
				if o.WriteTruthScene {
					ct.Scenes = append(ct.Scenes, SceneFile{Channel: ch, Z: o.RefZ(), File: sceneName(cyc, ch, o.RefZ())})
				}
				if o.WriteFocusScene {
					ct.Scenes = append(ct.Scenes, SceneFile{Channel: ch, Z: 0, File: sceneName(cyc, ch, 0)})
				}
			}
		}
		t.Cycles = append(t.Cycles, ct)
	}
	return t
}

// sceneName is the truth scene file of (cycle, channel, z), relative to
// ground_truth; z = 0 names the all-in-focus scene.
func sceneName(cycle, ch, z int) string {
	if z == 0 {
		return fmt.Sprintf("%s/scene_CH%d_focus.tif", layout.CycleName(cycle), ch)
	}
	return fmt.Sprintf("%s/scene_CH%d_Z%02d.tif", layout.CycleName(cycle), ch, z)
}

// channelGen renders one (cycle, channel).
type channelGen struct {
	o          Options
	m          *tissueModel
	cycle, ch  int
	flat, dark *raster.Float32
	idx        *blobIndex
	pos        []raster.Point
	shift      raster.Point
}

func (g *channelGen) prepare() {
	if g.idx != nil {
		return
	}
	g.idx = newBlobIndex(g.m.channelBlobs(g.cycle, g.ch), g.m.ext, g.o.psfSigma(g.ch), g.m.blurPer, g.o.NZ)
	g.pos = g.o.TilePositions(g.cycle)
	g.shift = g.o.CycleShift(g.cycle)
}

// progressEvery is the interval of progress log lines.
const progressEvery = 15 * time.Second

// tileBuffers are one worker's buffers for tiles.
type tileBuffers struct {
	bg, scene []float32
	raw       *raster.Gray16
	sc        *renderScratch
}

// tiles writes every raw plane of the channel.
func (g *channelGen) tiles(ctx context.Context) error {
	g.prepare()
	o := g.o
	lk := look(g.ch)
	dir := RawDir(o.OutDir, g.cycle)
	h, w := o.TileH, o.TileW
	newBuf := func() *tileBuffers {
		return &tileBuffers{bg: make([]float32, h*w), scene: make([]float32, h*w), raw: raster.NewGray16(w, h), sc: newScratch(h, w)}
	}
	var done atomic.Int64
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tick := time.NewTicker(progressEvery)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				o.logger().Info("progress", "cycle", g.cycle, "channel", g.ch, "planes", done.Load(), "of", len(g.pos)*o.NZ)
			}
		}
	}()
	return runPool(ctx, o.workers(), len(g.pos), newBuf, func(ctx context.Context, b *tileBuffers, k int) error {
		oy, ox := g.pos[k].Y-g.shift.Y, g.pos[k].X-g.shift.X
		g.m.mask.region(b.bg, oy, ox, h, w, lk.offTissue, lk.tissue, b.sc.cj, b.sc.cw)
		for z := range o.NZ {
			if err := ctx.Err(); err != nil {
				return err
			}
			copy(b.scene, b.bg)
			g.idx.addBlobs(b.scene, oy, ox, h, w, float64(z), false, b.sc)
			g.expose(b.raw.Pix, b.scene, k, z)
			path := filepath.Join(dir, RawName(k+1, z+1, g.ch))
			if err := tiffio.WriteGray16(path, b.raw); err != nil {
				return fmt.Errorf("write raw tile: %w", err)
			}
			done.Add(1)
		}
		return nil
	})
}

// expose turns a scene plane into raw counts: round(scene·flat + dark + noise),
// clipped to [0, 65535]; noise is Gaussian with variance gain·signal + read².
func (g *channelGen) expose(dst []uint16, scene []float32, k, z int) {
	o := g.o
	rng := stream(o.Seed, tagNoise, uint64(g.cycle), uint64(g.ch), uint64(k), uint64(z))
	read2 := o.ReadNoise * o.ReadNoise
	flat, dark := g.flat.Pix, g.dark.Pix
	for p, s := range scene {
		v := float64(max(s, 0)) * float64(flat[p])
		sd := math.Sqrt(o.Gain*v + read2)
		c := math.Floor(v + float64(dark[p]) + sd*normal(rng) + 0.5)
		switch {
		case c <= 0:
			dst[p] = 0
		case c >= 65535:
			dst[p] = 65535
		default:
			dst[p] = uint16(c)
		}
	}
}

// sceneBand is the number of mosaic rows per truth-scene task.
const sceneBand = 32

// scenes writes the truth scenes of the channel.
func (g *channelGen) scenes(ctx context.Context) error {
	o := g.o
	if !o.WriteTruthScene && !o.WriteFocusScene {
		return nil
	}
	g.prepare()
	mh, mw := o.MosaicSize(g.pos)
	mosaic := raster.NewFloat32(mw, mh)
	gt := GroundTruthDir(o.OutDir)
	for _, z := range []int{o.RefZ(), 0} {
		if (z == 0 && !o.WriteFocusScene) || (z != 0 && !o.WriteTruthScene) {
			continue
		}
		if err := g.renderMosaic(ctx, mosaic, z); err != nil {
			return err
		}
		if err := tiffio.WriteFloat32(filepath.Join(gt, sceneName(g.cycle, g.ch, z)), mosaic); err != nil {
			return fmt.Errorf("write truth scene: %w", err)
		}
	}
	return nil
}

// renderMosaic fills dst with scene(m - shift) at plane z (1-based; 0: every
// blob in focus).
func (g *channelGen) renderMosaic(ctx context.Context, dst *raster.Float32, z int) error {
	lk := look(g.ch)
	w := dst.W
	nb := (dst.H + sceneBand - 1) / sceneBand
	newBuf := func() *renderScratch { return newScratch(sceneBand, w) }
	return runPool(ctx, g.o.workers(), nb, newBuf, func(ctx context.Context, sc *renderScratch, b int) error {
		r0 := b * sceneBand
		h := min(sceneBand, dst.H-r0)
		buf := dst.Pix[r0*w : (r0+h)*w]
		oy, ox := float64(r0)-g.shift.Y, -g.shift.X
		g.m.mask.region(buf, oy, ox, h, w, lk.offTissue, lk.tissue, sc.cj, sc.cw)
		g.idx.addBlobs(buf, oy, ox, h, w, float64(z-1), z == 0, sc)
		for i, v := range buf {
			buf[i] = max(v, 0)
		}
		return nil
	})
}

// runPool runs fn(ctx, state, i) for i in [0, n) on up to workers goroutines
// (par.ForEach); each running call has a state of its own, made by newState
// at most once per worker and reused. The first error cancels the rest.
func runPool[S any](ctx context.Context, workers, n int, newState func() S, fn func(context.Context, S, int) error) error {
	free := make(chan S, max(1, workers))
	return par.ForEach(ctx, n, workers, func(i int) error {
		var s S
		select {
		case s = <-free:
		default:
			s = newState()
		}
		defer func() { free <- s }()
		return fn(ctx, s, i)
	})
}

func meanF32(v []float32) float64 {
	var s float64
	for _, x := range v {
		s += float64(x)
	}
	return s / float64(len(v))
}

func minMaxF32(v []float32) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, x := range v {
		lo, hi = min(lo, float64(x)), max(hi, float64(x))
	}
	return lo, hi
}
