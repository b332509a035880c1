package stitch

import (
	"os"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/accuracy"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth/synthtest"
)

// TestRefitUniformFlatfield: on a dense DAPI stack of 30 small tiles the
// darkest-image darkfield rule does not converge (its level is undefined:
// the fit goes NaN and the stall rule stops it after its first round; before
// that rule it ran 25 rounds x 500 iterations) and gives no usable flatfield. The
// stage must refit such planes with the original rule (8 rounds here) and
// keep a real flatfield, better than no correction. (The planes where the
// darkest rule converged score about the uncorrected error here: the limit
// of BaSiC on 30 small tiles, noted in the README.)
func TestRefitUniformFlatfield(t *testing.T) {
	if testing.Short() {
		t.Skip("a non-converging BaSiC fit takes tens of seconds: skipped with -short")
	}
	o := synthtest.Tiny(t)
	o.OutDir = t.TempDir()
	o.Rows, o.Cols, o.NZ, o.NCycles, o.Channels = 5, 6, 3, 1, []int{1}
	o.CellSpacingPx, o.NucleusSigmaPx, o.EmptyTiles = 7, 1.75, 1
	cfg := synthProject(t, o)
	if _, err := run(cfg); err != nil {
		t.Fatal(err)
	}
	sent, _ := os.ReadFile(layout.Sentinel(OutDir(cfg.ProjectDir, 1)))
	if strings.Contains(string(sent), "basic_refits=0\n") || !strings.Contains(string(sent), "basic_uniform_fallbacks=0\n") {
		t.Fatalf("want at least one refit and no uniform flatfield; sentinel:\n%s", sent)
	}
	rep, err := accuracy.Evaluate(cfg.ProjectDir, 1)
	if err != nil {
		t.Fatal(err)
	}
	ch := rep.Channels[0]
	// Z2 is the plane whose darkest-rule fit did not converge (uniform
	// flatfield). Its refit measured 0.067 with the original rule; a uniform
	// flatfield scores the uncorrected 0.101.
	for _, pl := range ch.Planes {
		t.Logf("z%d: flatfield RMS %.4f (uncorrected %.4f), darkfield mean %.1f (true %.1f)", pl.Z, pl.FlatRMS, ch.FlatBaselineRMS, pl.DarkMean, ch.DarkTrueMean)
		if pl.Z == 2 && pl.FlatRMS > 0.085 {
			t.Errorf("z2: flatfield RMS error %.4f, want < 0.085 (uncorrected %.4f)", pl.FlatRMS, ch.FlatBaselineRMS)
		}
	}
}
