package stitch

import (
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/blend"
	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/dataset"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth/synthtest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// stageTol are the bounds within which a whole stage run (stitch.Run) on
// another engine must agree with the CPU engine's run on the same project.
type stageTol struct {
	Pos  float64 // |Δ| of every tile position component, px
	Flat float64 // worst |Δ flatfield|, mean-1 units
	Dark float64 // worst |Δ darkfield|, counts
	// Self: the mosaic against the CPU correction and blend of the raw tiles
	// with the run's own written profile and positions, worst |Δ|, counts
	// (the profile files hold the darkfield in counts as float32).
	Self int
	// Abs + Rel·value: the mosaic against the CPU run's mosaic, per pixel,
	// counts, where both runs rounded the tile positions alike.
	Abs, Rel float64
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// exactTol: two CPU runs (any worker count) agree bit for bit.
var exactTol = stageTol{}

// runStage runs the stage on eng and moves its output to dst.
func runStage(t *testing.T, cfg *config.Config, eng Engine, workers, batch int, dst string) {
	t.Helper()
	if _, err := Run(context.Background(), Options{Config: cfg, Cycle: 1, Engine: eng, Workers: workers, Batch: batch, Logger: quiet()}); err != nil {
		t.Fatalf("%s: %v", eng.Name(), err)
	}
	if err := os.Rename(OutDir(cfg.ProjectDir, 1), dst); err != nil {
		t.Fatal(err)
	}
}

func readPositions(t *testing.T, dir string) []raster.Point {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "tile_positions.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var pos []raster.Point
	for _, r := range rows[1:] { // tile,row,col,y_pos,x_pos
		y, err1 := strconv.ParseFloat(r[3], 64)
		x, err2 := strconv.ParseFloat(r[4], 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("tile_positions.csv row %v", r)
		}
		pos = append(pos, raster.Point{Y: y, X: x})
	}
	return pos
}

// compareStage checks the run in got against the CPU run in want, plane by
// plane, within tol, logging the worst differences.
func compareStage(t *testing.T, cfg *config.Config, want, got string, tol stageTol) {
	t.Helper()
	pw, pg := readPositions(t, want), readPositions(t, got)
	if len(pw) != len(pg) {
		t.Fatalf("%d positions, CPU %d", len(pg), len(pw))
	}
	worstPos, sameRounding := 0.0, true
	for i := range pw {
		worstPos = max(worstPos, math.Abs(pg[i].Y-pw[i].Y), math.Abs(pg[i].X-pw[i].X))
		if math.Round(pg[i].Y) != math.Round(pw[i].Y) || math.Round(pg[i].X) != math.Round(pw[i].X) {
			sameRounding = false
		}
	}
	// tile_positions.csv holds 3 decimals: a position within 0.001 px of a
	// half pixel may round otherwise than the run's own, so the mosaic is
	// then not checked against the rule with the file's positions.
	csvExact := true
	for _, p := range pg {
		for _, v := range []float64{p.Y, p.X} {
			if f := v - math.Floor(v); math.Abs(f-0.5) < 0.001 {
				csvExact = false
			}
		}
	}
	t.Logf("tile positions: worst difference %.3g px (bound %g); rounded alike: %v; csv rounds as the run: %v", worstPos, tol.Pos, sameRounding, csvExact)
	if worstPos > tol.Pos {
		t.Errorf("tile positions differ from the CPU run's by %.3g px (bound %g)", worstPos, tol.Pos)
	}
	cyc, err := dataset.Discover(context.Background(), cfg.ProjectDir, 1, dataset.Options{
		Rows: cfg.TileRows, Cols: cfg.TileCols, Channels: cfg.Channels, NZPlanes: cfg.NZPlanes, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	bp := blend.Params{Sigma: cfg.BlendSigma, OverlapY: cfg.TileOverlap, OverlapX: cfg.TileOverlap}
	for _, ch := range cyc.Channels {
		for _, z := range cyc.Z {
			name := fmt.Sprintf("CH%d Z%d", ch, z)
			pfx := filepath.Join(fmt.Sprintf("CH%d", ch), "basic", fmt.Sprintf("%02d", z))
			profW, err := LoadProfile(filepath.Join(want, pfx), cyc.W, cyc.H)
			if err != nil {
				t.Fatal(err)
			}
			profG, err := LoadProfile(filepath.Join(got, pfx), cyc.W, cyc.H)
			if err != nil {
				t.Fatal(err)
			}
			var fd, dd float64
			for i := range profW.Flatfield {
				fd = max(fd, math.Abs(float64(profG.Flatfield[i])-float64(profW.Flatfield[i])))
				dd = max(dd, 65535*math.Abs(float64(profG.Darkfield[i])-float64(profW.Darkfield[i])))
			}
			mpath := filepath.Join(fmt.Sprintf("CH%d", ch), fmt.Sprintf("%02d.tif", z))
			mw, err := tiffio.ReadGray16(filepath.Join(want, mpath))
			if err != nil {
				t.Fatal(err)
			}
			mg, err := tiffio.ReadGray16(filepath.Join(got, mpath))
			if err != nil {
				t.Fatal(err)
			}
			if mw.W != mg.W || mw.H != mg.H {
				t.Errorf("%s: mosaic %dx%d, CPU %dx%d", name, mg.W, mg.H, mw.W, mw.H)
				continue
			}
			// The mosaic is the rule applied with the run's own profile and
			// positions.
			raw, err := cyc.ReadPlane(context.Background(), z, ch, 2)
			if err != nil {
				t.Fatal(err)
			}
			self, err := NewCPUEngine(2).CorrectAndBlend(context.Background(), raw, profG, float32(cfg.BasicFlatfieldMin), pg, bp)
			if err != nil {
				t.Fatal(err)
			}
			worstSelf := 0
			for i := range self.Pix {
				worstSelf = max(worstSelf, abs(int(mg.Pix[i])-int(self.Pix[i])))
			}
			worstCPU, over, sum := 0, 0, 0.0
			for i := range mw.Pix {
				d := abs(int(mg.Pix[i]) - int(mw.Pix[i]))
				worstCPU = max(worstCPU, d)
				sum += float64(d)
				if float64(d) > tol.Abs+tol.Rel*float64(mw.Pix[i]) {
					over++
				}
			}
			t.Logf("%s: flatfield %.3g (bound %g), darkfield %.3g counts (bound %g); mosaic vs own profile %d counts (bound %d), vs CPU mosaic worst %d, mean %.3g counts, %d px over %g + %g·value",
				name, fd, tol.Flat, dd, tol.Dark, worstSelf, tol.Self, worstCPU, sum/float64(len(mw.Pix)), over, tol.Abs, tol.Rel)
			if fd > tol.Flat || dd > tol.Dark {
				t.Errorf("%s: profile differs from the CPU run's: flatfield %.3g (bound %g), darkfield %.3g counts (bound %g)", name, fd, tol.Flat, dd, tol.Dark)
			}
			if csvExact && worstSelf > tol.Self {
				t.Errorf("%s: mosaic differs from the rule applied with its own profile and positions by %d counts (bound %d)", name, worstSelf, tol.Self)
			}
			if sameRounding && over > 0 {
				t.Errorf("%s: %d mosaic pixels differ from the CPU run's by more than %g + %g·value counts (worst %d)", name, over, tol.Abs, tol.Rel, worstCPU)
			}
		}
	}
}

// TestStageIndependentOfWorkers: the whole stage on the CPU engine gives the
// same files with 1 worker (batch 1) as with 3 (batch 2), through the same
// comparison the CUDA stage test uses.
func TestStageIndependentOfWorkers(t *testing.T) {
	if testing.Short() {
		t.Skip("two stage runs")
	}
	o := synthtest.Tiny(t)
	o.OutDir, o.NCycles, o.NZ = t.TempDir(), 1, 1
	cfg := synthProject(t, o)
	a, b := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	runStage(t, cfg, NewCPUEngine(1), 1, 1, a)
	runStage(t, cfg, NewCPUEngine(3), 3, 2, b)
	compareStage(t, cfg, a, b, exactTol)
}
