package basic_test

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/basic"
	"github.com/kintsugi-hpc/kintsugi-go/internal/basic/basictest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

func TestParseProfileMode(t *testing.T) {
	for i, name := range basic.ProfileModeNames {
		m, err := basic.ParseProfileMode(name)
		if err != nil || int(m) != i || m.String() != name {
			t.Errorf("ParseProfileMode(%q) = %v, %v", name, m, err)
		}
	}
	if _, err := basic.ParseProfileMode("cached"); err == nil || !strings.Contains(err.Error(), "cached") {
		t.Errorf("unknown mode: error %v, want one naming it", err)
	}
}

// TestFitPlanesCompatible: the compatible mode is the engine's own fit,
// bit for bit.
func TestFitPlanesCompatible(t *testing.T) {
	sc := basictest.DefaultScene()
	sc.N, sc.H, sc.W = 12, 64, 80
	st, _ := basictest.Make(sc)
	p := basic.Production()
	p.WorkingSize = 32
	f := basic.CPUPlanes{CPU: basic.CPU{Workers: 2}}
	planes := [][]*raster.Gray16{toGray(st)}
	a, err := f.Fit(context.Background(), planes, p)
	if err != nil {
		t.Fatal(err)
	}
	b, err := basic.FitPlanes(context.Background(), f, planes, p, basic.ModeCompatible, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a[0].Flatfield, b[0].Flatfield) || !slices.Equal(a[0].Darkfield, b[0].Darkfield) {
		t.Error("compatible mode differs from the engine's fit")
	}
	if _, err := basic.FitPlanes(context.Background(), f, planes, p, basic.ProfileMode(7), 2); err == nil {
		t.Error("unknown mode: no error")
	}
	// A darkfield of another size is an error, not a panic.
	env := basic.NewDarkEnvelope(st.H, st.W, p.WorkingSize, 2)
	if _, err := env.Darkfield(); err == nil {
		t.Error("empty envelope: no error")
	}
	if err := env.Add(toGray(st)[:1]); err == nil {
		t.Error("one tile: no error")
	}
	env.AddStack(st)
	d, err := env.Darkfield()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := basic.FitWithDarkfield(context.Background(), f, planes, nil, p); err == nil {
		t.Error("no darkfield for the plane: no error")
	}
	d.W, d.H = d.H, d.W
	if _, err := basic.FitWithDarkfield(context.Background(), f, planes, []basic.Darkfield{d}, p); err == nil {
		t.Error("darkfield of the wrong size: no error")
	}
}

// TestEnvelopeDarkfieldZPlanes fits the three z-planes of one channel
// together (a dense marker with a 300-count darkfield pattern and a
// tissue edge): one darkfield for all, within 15 % of the truth, and every
// plane its own flatfield (not copied), each below the original rule's
// error on the same plane (measured 8.5-8.7 % vs 10.2-10.7 %, darkfield
// +21 of 464 counts vs -464: the 20 % target is held over many cases by
// TestEnvelopeDarkfieldTargets, not on one).
func TestEnvelopeDarkfieldZPlanes(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: generator stacks")
	}
	c := basictest.SynthCase{Dark: "vary", Channel: "dense", Edge: true, Seed: 6, NZ: 3}
	sts, tr := basictest.MakeSynthPlanes(t, t.TempDir(), c)
	planes := make([][]*raster.Gray16, len(sts))
	for z, st := range sts {
		planes[z] = toGray(st)
	}
	cpu := basic.CPU{Workers: 2}
	ctx := context.Background()
	profs, err := basic.FitPlanes(ctx, basic.CPUPlanes{CPU: cpu}, planes, basic.Production(), basic.ModeEnvelopeDarkfield, 2)
	if err != nil {
		t.Fatal(err)
	}
	p := basic.Production()
	p.DarkfieldMethod = basic.DarkfieldOriginal
	orig, err := cpu.Fit(ctx, sts, p)
	if err != nil {
		t.Fatal(err)
	}
	for z := range profs {
		e, o := basictest.Compare(profs[z], tr), basictest.Compare(orig[z], tr)
		t.Logf("z %d: envelope flat %.2f %% dark %+.1f of %.1f counts; original flat %.2f %% dark %+.1f", z+1,
			100*e.FlatRMS, e.DarkMean, e.DarkMeanIn, 100*o.FlatRMS, o.DarkMean)
		if !slices.Equal(profs[z].Darkfield, profs[0].Darkfield) {
			t.Errorf("z %d: darkfield differs from z 1's: the planes share one", z+1)
		}
		if z > 0 && slices.Equal(profs[z].Flatfield, profs[0].Flatfield) {
			t.Errorf("z %d: flatfield identical to z 1's: each plane must have its own", z+1)
		}
		if math.Abs(e.DarkMean) > targetDarkRel*e.DarkMeanIn {
			t.Errorf("z %d: darkfield mean error %+.1f counts of %.1f, target within %.0f %%", z+1, e.DarkMean, e.DarkMeanIn, 100*targetDarkRel)
		}
		if e.FlatRMS >= o.FlatRMS {
			t.Errorf("z %d: flatfield error %.2f %%, not below the original rule's %.2f %%", z+1, 100*e.FlatRMS, 100*o.FlatRMS)
		}
	}
}
