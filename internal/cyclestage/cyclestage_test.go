package cyclestage

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/deconstage"
	"github.com/kintsugi-hpc/kintsugi-go/internal/edf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/edfstage"
	"github.com/kintsugi-hpc/kintsugi-go/internal/exectest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/membudget"
	"github.com/kintsugi-hpc/kintsugi-go/internal/qc"
	"github.com/kintsugi-hpc/kintsugi-go/internal/stitch"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth/synthtest"
)

const workers = 2

// project generates the tiny synthetic project (one cycle, two channels,
// three z-planes; the same seed every time) into a new directory and
// loads its config.
func project(t *testing.T) *config.Config {
	t.Helper()
	o := synthtest.Tiny(t)
	o.OutDir = t.TempDir()
	o.NCycles, o.NZ = 1, 3
	return synthtest.Project(t, o)
}

func cpuEngines() Engines {
	return Engines{Stitch: stitch.NewCPUEngine(workers), Decon: deconstage.CPUEngine{Workers: workers}, EDF: edf.CPU{Workers: workers}}
}

// chain runs the three stages one after the other on e, as three jobs
// would.
func chain(t *testing.T, cfg *config.Config, e Engines, batch int) {
	t.Helper()
	ctx := context.Background()
	if _, err := stitch.Run(ctx, stitch.Options{Config: cfg, Cycle: 1, Engine: e.Stitch, Workers: workers, Batch: batch}); err != nil {
		t.Fatal(err)
	}
	if _, err := deconstage.Run(ctx, deconstage.Options{Config: cfg, Cycle: 1, Engine: e.Decon, Workers: workers}); err != nil {
		t.Fatal(err)
	}
	if _, err := edfstage.Run(ctx, edfstage.Options{Config: cfg, Cycle: 1, Engine: e.EDF, Workers: workers}); err != nil {
		t.Fatal(err)
	}
}

// timeLine matches the lines that carry a clock time or a duration in the
// sentinels and DECONV_parameters.txt.
var timeLine = regexp.MustCompile(`(?m)^(completed=|duration_minutes=|deconvolution finished at |elapsed time: ).*$`)

// outputs reads every file under data/processed (none: an empty map),
// sentinels included, with the time lines masked.
func outputs(t *testing.T, cfg *config.Config) map[string][]byte {
	t.Helper()
	dir := layout.ProcessedDir(cfg.ProjectDir)
	tree := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p == dir {
			return nil
		}
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if d.Name() == layout.SentinelName || d.Name() == "DECONV_parameters.txt" {
			b = timeLine.ReplaceAll(b, []byte("${1}<time>"))
			b = bytes.ReplaceAll(b, []byte(cfg.ProjectDir), []byte("<project>"))
		}
		rel, _ := filepath.Rel(dir, p)
		tree[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

// TestFused: the fused cycle writes exactly the chain's files on the CPU
// engines (conformFused).
func TestFused(t *testing.T) { conformFused(t, cpuEngines(), cpuEngines(), 0) }

// conformFused: the fused cycle on e writes exactly the files of the chain
// on ce, byte for byte (time lines and the project directory masked); with
// keep_intermediates false the same files less the stitched and
// deconvolved planes.
func conformFused(t *testing.T, ce, e Engines, batch int) {
	ref := project(t)
	chain(t, ref, ce, batch)
	want := outputs(t, ref)
	if len(want) < 2*3*4 {
		t.Fatalf("the chain wrote %d files", len(want))
	}
	t.Run("keep_intermediates", func(t *testing.T) {
		cfg := project(t)
		res, err := Run(context.Background(), Options{Config: cfg, Cycle: 1, Engines: e, Workers: workers, Batch: batch, KeepIntermediates: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.EDF.Channels) != 2 || len(res.Decon.Channels) != 2 || res.Stitch.Planes != 6 {
			t.Errorf("result: %d EDF channels, %d decon channels, %d stitched planes", len(res.EDF.Channels), len(res.Decon.Channels), res.Stitch.Planes)
		}
		got := outputs(t, cfg)
		if d := exectest.Differing(want, got); len(d) > 0 || len(got) != len(want) {
			t.Errorf("fused differs from the chain in %d of %d files (%d written): %v", len(d), len(want), len(got), d)
		}
	})
	t.Run("no_intermediates", func(t *testing.T) {
		cfg := project(t)
		if _, err := Run(context.Background(), Options{Config: cfg, Cycle: 1, Engines: e, Workers: workers, Batch: batch}); err != nil {
			t.Fatal(err)
		}
		got := outputs(t, cfg)
		plane := regexp.MustCompile(`^(stitched|deconvolved)/cyc01/CH\d+/(deconv_)?\d+\.tif$`)
		summary := regexp.MustCompile(`^(stitched|deconvolved)/cyc01/CH\d+/(` + regexp.QuoteMeta(layout.QCPlanesName) + `|` + regexp.QuoteMeta(layout.QCMaxProjName) + `)$`)
		n := 0
		for name, b := range want {
			gb, ok := got[name]
			switch {
			case plane.MatchString(name):
				n++
				if ok {
					t.Errorf("%s written with keep_intermediates false", name)
				}
			case !ok:
				t.Errorf("%s missing", name)
			case !bytes.Equal(gb, b):
				t.Errorf("%s differs from the chain's", name)
			}
		}
		sums := 0
		for name := range got {
			if summary.MatchString(name) {
				sums++
			} else if _, ok := want[name]; !ok {
				t.Errorf("%s written, not by the chain", name)
			}
		}
		if n != 2*2*3 || sums != 2*2*2 || len(got) != len(want)-n+sums {
			t.Errorf("%d intermediate planes in the chain (want 12), %d QC summary files (want 8), %d files written (want %d)",
				n, sums, len(got), len(want)-n+8)
		}
		// The QC of the stitch and decon stages reads the summaries: the same
		// metrics and PNGs as from the chain's planes.
		for _, stage := range []string{"stitch", "decon"} {
			w, g := qcOutputs(t, ref, stage), qcOutputs(t, cfg, stage)
			if d := exectest.Differing(w, g); len(d) > 0 || len(w) != len(g) || len(w) < 3 {
				t.Errorf("QC %s: %d files from the chain's planes, %d from the summaries; differing %v", stage, len(w), len(g), d)
			}
		}
	})
}

// qcStamp matches the time stamps and durations in the QC's JSON.
var qcStamp = regexp.MustCompile(`\d{4}-\d\d-\d\dT[0-9:.]+(Z|[+-]\d\d:\d\d)?|"[a-z_]*(seconds|elapsed)[a-z_]*": ?[0-9.e+-]+`)

// qcOutputs runs the QC of stage on cfg's project and reads what it wrote
// (qc_plots/<stage>/), time stamps and the project directory masked.
func qcOutputs(t *testing.T, cfg *config.Config, stage string) map[string][]byte {
	t.Helper()
	if _, err := qc.Run(context.Background(), cfg, stage, qc.Options{Workers: workers}); err != nil {
		t.Fatalf("qc %s: %v", stage, err)
	}
	tree := exectest.ReadTree(t, filepath.Join(layout.QCDir(cfg.ProjectDir), stage))
	for name, b := range tree {
		if strings.HasSuffix(name, ".json") {
			b = bytes.ReplaceAll(b, []byte(cfg.ProjectDir), []byte("<project>"))
			tree[name] = qcStamp.ReplaceAll(b, []byte("<t>"))
		}
	}
	return tree
}

// TestFusedBudgetNamesItsKey: a budget below the smallest plan is refused
// naming resources.mem_cycle, with nothing written.
func TestFusedBudgetNamesItsKey(t *testing.T) {
	cfg := project(t)
	_, err := Run(context.Background(), Options{Config: cfg, Cycle: 1, Engines: cpuEngines(), Workers: workers,
		MemBudget: 1 << 20, MemBudgetSource: "test"})
	var ne *membudget.NeedError
	if !errors.As(err, &ne) || ne.ConfigKey != ConfigKeyMem {
		t.Fatalf("err = %v, want a NeedError naming %s", err, ConfigKeyMem)
	}
	if tree := outputs(t, cfg); len(tree) != 0 {
		t.Errorf("%d files written: %v", len(tree), tree)
	}
	// The error gives the job's budget (not the stitch stage's share of
	// it) and a need that covers the decon and EDF stages' reserve too:
	// the figure it says to raise the budget to runs, one MB less fails.
	if ne.Budget != 1<<20 {
		t.Errorf("reported budget %d, want the job's %d", ne.Budget, 1<<20)
	}
	need := (ne.Need + membudget.MB - 1) / membudget.MB * membudget.MB
	if _, err := Run(context.Background(), Options{Config: cfg, Cycle: 1, Engines: cpuEngines(), Workers: workers,
		MemBudget: need - membudget.MB, MemBudgetSource: "test"}); !errors.As(err, &ne) {
		t.Errorf("budget %d (one MB below the need reported): err = %v, want a NeedError", need-membudget.MB, err)
	}
	if _, err := Run(context.Background(), Options{Config: cfg, Cycle: 1, Engines: cpuEngines(), Workers: workers,
		MemBudget: need, MemBudgetSource: "test"}); err != nil {
		t.Errorf("budget %d (the need reported): %v", need, err)
	}
}

// A plane whose raw tiles are all zero (CH2 Z1 of five) passes through the
// fused cycle: not fitted, deconvolved with its channel, and left out of
// the channel's EDF by the quality gate (its zeros), as the EDF sentinel's
// slices_used says; before, it stopped the cycle in the BaSiC fit (exit 1).
func TestFusedBlankPlane(t *testing.T) {
	o := synthtest.Tiny(t)
	o.OutDir = t.TempDir()
	o.NCycles, o.NZ = 1, 5
	cfg := synthtest.Project(t, o)
	synthtest.BlankPlane(t, cfg, 2, 1)
	if _, err := Run(context.Background(), Options{Config: cfg, Cycle: 1, Engines: cpuEngines(), Workers: workers, KeepIntermediates: true}); err != nil {
		t.Fatalf("a blank plane stopped the fused cycle: %v", err)
	}
	sent, err := os.ReadFile(layout.Sentinel(edfstage.OutDir(cfg.ProjectDir, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(sent), "slices_used=CH1:2-4;CH2:2-5\n") {
		t.Errorf("EDF sentinel: want CH1 slices 2-4 (the first and last of five dropped) and CH2 2-5 (Z1 left out by the gate):\n%s", sent)
	}
	st, _ := os.ReadFile(layout.Sentinel(stitch.OutDir(cfg.ProjectDir, 1)))
	if !strings.Contains(string(st), "blank_planes=1\n") {
		t.Errorf("stitch sentinel does not count the blank plane:\n%s", st)
	}
}
