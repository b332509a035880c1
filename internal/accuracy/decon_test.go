package accuracy

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/decon"
)

// TestEvaluateDecon: on every PSF both variants reduce the error of the
// observation, and Biggs-Andrews reaches RL's error in no more iterations
// than RL ran.
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
		if !(c.RLErr < c.Before && c.BiggsErr < c.Before) {
			t.Errorf("%s: errors RL %.4f Biggs %.4f not below the observation's %.4f", c.Name, c.RLErr, c.BiggsErr, c.Before)
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
