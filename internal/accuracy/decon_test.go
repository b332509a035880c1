package accuracy

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/decon"
)

// minFreeGain is the least relative error reduction of the free boundary
// against RL in the same iterations that the tests ask on every case
// (measured: 2-26 %, README).
const minFreeGain = 0.01

// TestEvaluateDecon: on every PSF the three variants reduce the error of
// the observation, the free boundary is at least 1 % below RL's error in as
// many iterations, and Biggs-Andrews reaches RL's error in no more
// iterations than RL ran.
func TestEvaluateDecon(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	r, err := EvaluateDecon(context.Background(), decon.CPU{}, 1, 40, 40, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Cases) != 6 {
		t.Fatalf("%d cases", len(r.Cases))
	}
	for _, c := range r.Cases {
		if !(c.RLErr < c.Before && c.BiggsErr < c.Before && c.TVErr < c.Before) {
			t.Errorf("%s: errors RL %.4f Biggs %.4f RL-TV %.4f not below the observation's %.4f", c.Name, c.RLErr, c.BiggsErr, c.TVErr, c.Before)
		}
		if !(c.FreeErr < c.RLErr*(1-minFreeGain)) {
			t.Errorf("%s: free boundary %.4f vs RL %.4f after %d iterations: want at least %.0f%% below", c.Name, c.FreeErr, c.RLErr, c.RLIters, 100*minFreeGain)
		}
		if c.BiggsToRL == 0 || c.BiggsToRL > c.RLIters {
			t.Errorf("%s: Biggs needs %d iterations to reach RL's error after %d", c.Name, c.BiggsToRL, c.RLIters)
		}
	}
	var b bytes.Buffer
	if err := WriteDeconTable(&b, r); err != nil || !strings.Contains(b.String(), "lightsheet ch1") {
		t.Errorf("table: %v\n%s", err, b.String())
	}
	t.Log("\n" + b.String())
}

// TestDeconContent asserts the README's findings on the content kinds
// (2 x 48 x 48 scenes, light-sheet DAPI and widefield DAPI PSFs, zero and
// cropped edges): the free boundary is at least 1 % below RL's error at
// RL's iterations on every one (so it is the default); RL-TV (the default
// tv_lambda) reduces the observation's error everywhere; on zero edges, at
// RL's iterations it is at least 0.3 % closer to the truth
// than RL on dense nuclei with the light-sheet PSF, and at least 1 %
// further on thin fibres with it (the test logs the figures): it does not
// win on every channel, which is why richardson_lucy stays the default.
func TestDeconContent(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	cs, err := EvaluateDeconContent(context.Background(), decon.CPU{}, []int{0, 4}, 2, 48, 48, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 2*2*len(decon.SceneKinds) {
		t.Fatalf("%d rows", len(cs))
	}
	for _, c := range cs {
		t.Logf("%s %-9s %-7s observed %.4f RL %.4f (%d) free %.4f (%+.2f%%) free rule %.4f (%d) RL-TV %.4f (%+.2f%%) Biggs %.4f (%d)", c.PSF, c.Kind, c.Edge, c.Before, c.RLErr, c.RLIters,
			c.FreeErr, 100*c.FreeGain(), c.FreeRule, c.FreeIters, c.TVErr, 100*c.TVGain(), c.BiggsErr, c.BiggsIters)
		if !(c.TVErr < c.Before && c.RLErr < c.Before) {
			t.Errorf("%s %s: RL %.4f RL-TV %.4f not below the observation's %.4f", c.PSF, c.Kind, c.RLErr, c.TVErr, c.Before)
		}
		if !(c.FreeErr < c.RLErr*(1-minFreeGain)) {
			t.Errorf("%s %s %s edges: free boundary %.4f vs RL %.4f after %d iterations: want at least %.0f%% below", c.PSF, c.Kind, c.Edge, c.FreeErr, c.RLErr, c.RLIters, 100*minFreeGain)
		}
		if c.Edge != "zero" {
			continue
		}
		light := strings.HasPrefix(c.PSF, "lightsheet")
		if light && c.Kind == "nuclei" && !(c.TVGain() < -0.003) {
			t.Errorf("%s nuclei: RL-TV %.4f vs RL %.4f (%+.2f%%): want at least 0.3%% below", c.PSF, c.TVErr, c.RLErr, 100*c.TVGain())
		}
		if light && c.Kind == "fibres" && !(c.TVGain() > 0.01) {
			t.Errorf("%s fibres: RL-TV %.4f vs RL %.4f (%+.2f%%): RL-TV now wins on thin structures too; revisit the default (README)", c.PSF, c.TVErr, c.RLErr, 100*c.TVGain())
		}
	}
	if def := config.DefaultDecon().Algorithm; def != decon.RichardsonLucy {
		t.Errorf("default algorithm %s, want %s (RL-TV does not win on every channel)", def, decon.RichardsonLucy)
	}
}
