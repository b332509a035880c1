package stitch

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/accuracy"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth"
)

// TestEnvelopeDarkfieldStage runs the stage with stitching.profile_mode
// envelope_darkfield on the example preset (two z-planes, a darkfield
// varying by 300 counts across a tile) beside the compatible mode on the same data: every
// channel's darkfield within 15 % of the truth (the target; the
// accuracy of the mode itself is internal/basic's TestEnvelopeDarkfield*),
// no worse than the compatible mode's, the flatfield error at most the
// compatible mode's plus a point, and the sentinel naming the mode.
func TestEnvelopeDarkfieldStage(t *testing.T) {
	o, err := synth.Preset("example")
	if err != nil {
		t.Fatal(err)
	}
	o.OutDir, o.NZ, o.Cycles, o.DarkfieldVary = t.TempDir(), 2, []int{1}, 300
	cfg := synthProject(t, o)
	score := func(mode string) map[int]accuracy.ChannelReport {
		cfg.Stitching.ProfileMode = mode
		if _, err := Run(context.Background(), Options{Config: cfg, Cycle: 1, Engine: NewCPUEngine(2), Workers: 2}); err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		rep, err := accuracy.Evaluate(cfg.ProjectDir, 1)
		if err != nil || len(rep.Channels) != o.NChannels {
			t.Fatalf("%s: %v (%d channels scored)", mode, err, len(rep.Channels))
		}
		out := map[int]accuracy.ChannelReport{}
		for _, ch := range rep.Channels {
			out[ch.Channel] = ch
		}
		return out
	}
	compat := score("compatible")
	env := score("envelope_darkfield")
	b, err := os.ReadFile(layout.Sentinel(OutDir(cfg.ProjectDir, 1)))
	if err != nil || !strings.Contains(string(b), "profile_mode=envelope_darkfield") {
		t.Errorf("sentinel %s does not name the mode (%v):\n%s", filepath.Base(OutDir(cfg.ProjectDir, 1)), err, b)
	}
	for ch, e := range env {
		c := compat[ch]
		rel := func(r accuracy.ChannelReport) float64 { return math.Abs(r.DarkFitMean-r.DarkTrueMean) / r.DarkTrueMean }
		t.Logf("CH%d: darkfield %.1f / %.1f counts for %.1f true (compatible / envelope); flatfield RMS error %.4f / %.4f",
			ch, c.DarkFitMean, e.DarkFitMean, e.DarkTrueMean, c.FlatRMSMax, e.FlatRMSMax)
		if rel(e) > 0.15 || rel(e) > rel(c)+0.01 {
			t.Errorf("CH%d: envelope darkfield %.1f counts for %.1f true (%.1f %%; compatible %.1f %%): want within 15 %% and no worse",
				ch, e.DarkFitMean, e.DarkTrueMean, 100*rel(e), 100*rel(c))
		}
		if e.FlatRMSMax > c.FlatRMSMax+0.01 {
			t.Errorf("CH%d: envelope flatfield RMS error %.4f, compatible %.4f", ch, e.FlatRMSMax, c.FlatRMSMax)
		}
	}
}
