package stitch

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/accuracy"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// TestExamplePresetAccuracy runs the stage (CPU engine, the config's BaSiC
// settings) on the "example" preset, the one `make example` and the
// end-to-end test use: 5 x 6 tiles of 360 x 480 px, the production
// acquisition seen through 4 x 4 camera binning. There BaSiC identifies the
// profiles, and this test holds every channel to the ground truth: the
// corrected flatfield must be clearly closer to the truth than no correction,
// the darkfield within a stated number of counts, and the stitched planes
// free of the shading that an unapplied flatfield leaves (outputShading).
//
// Two cycles (cycle 1: DAPI and a blank, autofluorescence only; cycle 2: DAPI
// and a marker) at one z-plane each (the preset has 3; one keeps the test
// near 20 s on 2 cores, and every plane is fitted alike). The end-to-end
// test asserts the same on 7 cycles of 3 planes (tests/e2e/run.sh), where
// the measured ranges are the same: DAPI 0.47-0.48 of uncorrected, CH2
// 0.32-0.84 (the marker of cycle 2 the worst), darkfield within 21 counts.
func TestExamplePresetAccuracy(t *testing.T) {
	o, err := synth.Preset("example")
	if err != nil {
		t.Fatal(err)
	}
	o.OutDir = t.TempDir()
	o.NZ, o.Cycles = 1, []int{1, 2}
	cfg := synthProject(t, o)
	// Bounds: the measured figures of this data (seed 1, 2026-11-30) with a
	// small margin; the README quotes them. Flatfield: RMS of the
	// difference of the mean-1 profiles, as a fraction of the uncorrected
	// error (the true flatfield's RMS deviation from 1: 0.101 for CH1, 0.056
	// for CH2). Darkfield: |fitted mean - true mean|, counts (true 460 and
	// 464), and the RMS of fitted minus true darkfield. Shading left in the
	// stitched plane (outputShading), measured 0.036-0.037 for DAPI, 0.0065
	// for the blank, 0.035 for the marker; with a correction that ignores the
	// flatfield 0.065-0.066, 0.031 and 0.040 (the marker's content hides
	// most of it; its bound only catches gross shading).
	type bound struct {
		flatRel       float64 // max flatfield RMS error / uncorrected
		darkErr       float64 // counts
		darkRMS       float64 // counts
		shading       float64 // max outputShading of the stitched plane
		measuredFlat  string  // for the failure message
		measuredDark  string
		whatIsChannel string
	}
	bounds := map[[2]int]bound{
		{1, 1}: {0.52, 8, 8, 0.045, "0.0475/0.1013 = 0.47", "455.9 (-4.1), rms 4.4", "DAPI"},
		{1, 2}: {0.60, 25, 25, 0.012, "0.0304/0.0559 = 0.54", "443.0 (-21.0), rms 21.5", "blank (autofluorescence)"},
		{2, 1}: {0.53, 8, 8, 0.045, "0.0490/0.1013 = 0.48", "456.5 (-3.5), rms 3.9", "DAPI"},
		{2, 2}: {0.88, 12, 12, 0.042, "0.0452/0.0559 = 0.81", "471.2 (+7.2), rms 7.3", "marker"},
	}
	for _, cyc := range o.Cycles {
		t0 := time.Now()
		if _, err := Run(context.Background(), Options{Config: cfg, Cycle: cyc, Engine: NewCPUEngine(2), Workers: 2}); err != nil {
			t.Fatal(err)
		}
		t.Logf("cycle %d: stage %.1f s", cyc, time.Since(t0).Seconds())
		rep, err := accuracy.Evaluate(cfg.ProjectDir, cyc)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Missing) > 0 || len(rep.Channels) != o.NChannels {
			t.Fatalf("cycle %d: %d channels scored, missing %v", cyc, len(rep.Channels), rep.Missing)
		}
		for _, ch := range rep.Channels {
			b, ok := bounds[[2]int{cyc, ch.Channel}]
			if !ok {
				t.Fatalf("cycle %d CH%d: no bound", cyc, ch.Channel)
			}
			rel := ch.FlatRMSMax / ch.FlatBaselineRMS
			dErr := ch.DarkFitMean - ch.DarkTrueMean
			t.Logf("cycle %d CH%d (%s): flatfield RMS error %.4f, uncorrected %.4f (%.2f); darkfield %.1f for %.1f (%+.1f), rms %.1f; scene NCC %.4f",
				cyc, ch.Channel, b.whatIsChannel, ch.FlatRMSMax, ch.FlatBaselineRMS, rel, ch.DarkFitMean, ch.DarkTrueMean, dErr, ch.DarkRMSMax, deref(ch.SceneNCC))
			if !(rel <= b.flatRel) {
				t.Errorf("cycle %d CH%d: flatfield RMS error %.4f is %.2f of uncorrected %.4f, want <= %.2f (measured %s)",
					cyc, ch.Channel, ch.FlatRMSMax, rel, ch.FlatBaselineRMS, b.flatRel, b.measuredFlat)
			}
			if !(math.Abs(dErr) <= b.darkErr) || !(ch.DarkRMSMax <= b.darkRMS) {
				t.Errorf("cycle %d CH%d: darkfield mean %.1f counts for %.1f true (%+.1f), rms %.1f; want within %.0f, rms <= %.0f (measured %s)",
					cyc, ch.Channel, ch.DarkFitMean, ch.DarkTrueMean, dErr, ch.DarkRMSMax, b.darkErr, b.darkRMS, b.measuredDark)
			}
		}
		p := rep.Positions
		if p == nil || p.Max > 0.5 {
			t.Fatalf("cycle %d: tile positions %+v: want every tile within 0.5 px (measured 0.05)", cyc, p)
		}
		for _, ch := range rep.Channels {
			sh := outputShading(t, cfg.ProjectDir, cyc, ch.Channel, ch.SceneZ, p.OffsetY, p.OffsetX)
			t.Logf("cycle %d CH%d: shading left in the stitched plane %.4f", cyc, ch.Channel, sh)
			if b := bounds[[2]int{cyc, ch.Channel}]; !(sh <= b.shading) {
				t.Errorf("cycle %d CH%d: shading left in the stitched plane %.4f > %.3f: the correction does not apply the flatfield",
					cyc, ch.Channel, sh, b.shading)
			}
		}
	}
}

// outputShading measures the shading left in the stitched plane z of a
// channel: the stitched plane and the true scene (counts, before flatfield
// and darkfield) are compared over blocks of 30 x 30 px, aligned by the
// fitted mosaic offset (offY, offX: mean of fitted minus true position); the
// ratio of their sums over the brighter half of the blocks, divided by its
// median, has this RMS deviation from 1. Uncorrected vignetting leaves a
// tile-periodic pattern in it; a correction that ignored the fitted
// flatfield would leave the whole vignetting.
func outputShading(t *testing.T, project string, cycle, ch, z int, offY, offX float64) float64 {
	t.Helper()
	tr, err := synth.ReadTruth(synth.TruthPath(project))
	if err != nil {
		t.Fatal(err)
	}
	ct, _ := tr.Cycle(cycle)
	var scene string
	for _, sc := range ct.Scenes {
		if sc.Channel == ch && sc.Z == z {
			scene = filepath.Join(synth.GroundTruthDir(project), sc.File)
		}
	}
	if scene == "" {
		t.Fatalf("cycle %d CH%d: no truth scene at z %d", cycle, ch, z)
	}
	a, err := tiffio.ReadFloat32(filepath.Join(accuracy.StitchDir(project, cycle), fmt.Sprintf("CH%d", ch), fmt.Sprintf("%02d.tif", z)))
	if err != nil {
		t.Fatal(err)
	}
	b, err := tiffio.ReadFloat32(scene)
	if err != nil {
		t.Fatal(err)
	}
	oy, ox := int(math.Round(-offY)), int(math.Round(-offX))
	const bs = 30
	type blk struct{ sa, sb float64 }
	var blocks []blk
	for i0 := max(0, -oy); i0+bs <= min(a.H, b.H-oy); i0 += bs {
		for j0 := max(0, -ox); j0+bs <= min(a.W, b.W-ox); j0 += bs {
			var k blk
			for i := i0; i < i0+bs; i++ {
				for j := j0; j < j0+bs; j++ {
					k.sa += float64(a.Pix[i*a.W+j])
					k.sb += float64(b.Pix[(i+oy)*b.W+j+ox])
				}
			}
			blocks = append(blocks, k)
		}
	}
	slices.SortFunc(blocks, func(p, q blk) int { return cmpFloat(p.sb, q.sb) })
	blocks = blocks[len(blocks)/2:]
	r := make([]float64, len(blocks))
	for i, k := range blocks {
		r[i] = k.sa / k.sb
	}
	med := slices.Clone(r)
	slices.Sort(med)
	m := med[len(med)/2]
	var ss float64
	for _, v := range r {
		ss += (v/m - 1) * (v/m - 1)
	}
	return math.Sqrt(ss / float64(len(r)))
}

func cmpFloat(p, q float64) int {
	switch {
	case p < q:
		return -1
	case p > q:
		return 1
	}
	return 0
}
