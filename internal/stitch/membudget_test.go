package stitch

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/basic"
	"github.com/kintsugi-hpc/kintsugi-go/internal/cliutil"
	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/exectest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/membudget"
	"github.com/kintsugi-hpc/kintsugi-go/internal/membudget/childproc"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth/synthtest"
)

// The child side of the budget tests: run by TestMemBudget* in a fresh
// process (this test binary re-executed) so that the kernel's peak resident
// set (VmHWM) is the stage's own. It does nothing in a normal test run.
// KINTSUGI_STITCH_MEM_CHILD=config,budget bytes,batch,workers[,cpu] (cpu:
// the real CPU engine, for measuring by hand; default the cheap fit).
const childEnv = "KINTSUGI_STITCH_MEM_CHILD"

func TestMemBudgetChild(t *testing.T) {
	childproc.Serve(childEnv, func(f []string) (map[string]string, error) {
		budget, _ := strconv.ParseInt(f[1], 10, 64)
		batch, _ := strconv.Atoi(f[2])
		workers, _ := strconv.Atoi(f[3])
		var eng Engine = cheapFit{NewCPUEngine(workers)}
		if len(f) > 4 && f[4] == "cpu" {
			eng = NewCPUEngine(workers)
		}
		cfg, err := config.Load(f[0])
		if err != nil {
			return nil, err
		}
		res, err := Run(context.Background(), Options{Config: cfg, Cycle: 1, Engine: eng, Workers: workers,
			Batch: batch, MemBudget: budget, MemBudgetSource: membudget.SourceFlag})
		if err != nil {
			return nil, err
		}
		return map[string]string{"PLANES": strconv.Itoa(res.PlanesInMemory)}, nil
	})
}

// cheapFit is the CPU engine with BaSiC cut to 40 iterations and 2
// reweighting rounds: the same buffers as the CPU engine (the stage sizes it
// with the CPU model, as every engine it does not know), in a fraction of
// the time. These tests are about memory, not about the fit.
type cheapFit struct{ *CPUEngine }

func (c cheapFit) Fit(ctx context.Context, planes [][]*raster.Gray16, p basic.Params) ([]basic.Profile, error) {
	p.MaxIterations, p.MaxReweightIterations = 40, 2
	return c.CPUEngine.Fit(ctx, planes, p)
}

// childRun runs the stage on cfgPath in a child process and returns its peak
// resident set, its stderr and its exit code.
func childRun(t *testing.T, cfgPath string, budget int64, batch, workers int) (int64, string, int) {
	peak, _, stderr, code := childRunPlanes(t, cfgPath, budget, batch, workers)
	return peak, stderr, code
}

// childRunPlanes is childRun that also returns the most raw planes the
// stage held at once.
func childRunPlanes(t *testing.T, cfgPath string, budget int64, batch, workers int) (int64, int, string, int) {
	t.Helper()
	r := childproc.Run(t, "TestMemBudgetChild", childEnv, cfgPath, budget, batch, workers)
	return r.Peak, int(r.Int("PLANES")), r.Stderr, r.Code
}

// budgetProject writes a one-channel cycle whose planes, not the runtime,
// dominate the stage's memory: 2 x 3 tiles of 1440 x 1920 px (production
// tiles), 6 z-planes.
func budgetProject(t *testing.T) (string, *config.Config) {
	t.Helper()
	o := synthtest.Tiny(t)
	o.OutDir = t.TempDir()
	o.TileH, o.TileW = 1440, 1920
	o.NZ, o.NCycles, o.Cycles, o.Channels = 6, 1, []int{1}, []int{1}
	o.WriteTruthScene = false
	cfg := synthProject(t, o)
	return filepath.Join(o.OutDir, "config.yaml"), cfg
}

// TestMemBudgetHeld runs the stage unconstrained and under a budget below
// that run's peak, each in its own process: the constrained run's own peak
// resident set stays within its budget and its outputs are byte-identical.
func TestMemBudgetHeld(t *testing.T) {
	if testing.Short() {
		t.Skip("two stage runs in child processes (about 20 s of CPU)")
	}
	cfgPath, cfg := budgetProject(t)
	out := OutDir(cfg.ProjectDir, 1)
	const batch, workers = 4, 2

	free, stderr, code := childRun(t, cfgPath, 0, batch, workers)
	if code != 0 {
		t.Fatalf("unconstrained run: exit %d\n%s", code, stderr)
	}
	want := exectest.ReadTree(t, out)
	if err := os.RemoveAll(out); err != nil {
		t.Fatal(err)
	}

	// What the stage needs at least, from its own model and this cycle.
	g := geometry{Tiles: 6, H: 1440, W: 1920, Workers: workers, WorkingDim: 128}
	g.MosaicH, g.MosaicW = nominalMosaic(2, 1440, cfg), nominalMosaic(3, 1920, cfg)
	minNeed := newMemModel(NewCPUEngine(workers), g, 0, 0, "").need(minPlan)
	// Two budgets well below the unconstrained peak: 60 % of it (a plan with
	// some read-ahead) and just above the smallest working set (the
	// tightest the stage accepts).
	for _, budget := range []int64{free * 6 / 10, minNeed * 21 / 20} {
		t.Logf("unconstrained peak %s; smallest working set %s; budget %s", membudget.Format(free), membudget.Format(minNeed), membudget.Format(budget))
		if budget < minNeed || budget > free*3/4 {
			t.Fatalf("test data too small: the budget %s is not between the smallest working set %s and 3/4 of the unconstrained peak %s",
				membudget.Format(budget), membudget.Format(minNeed), membudget.Format(free))
		}
		peak, held, stderr, code := childRunPlanes(t, cfgPath, budget, batch, workers)
		if code != 0 {
			t.Fatalf("run under %s: exit %d\n%s", membudget.Format(budget), code, stderr)
		}
		plan := ""
		if i := strings.Index(stderr, "memory plan"); i >= 0 {
			plan, _, _ = strings.Cut(stderr[i:], "\n")
		}
		t.Logf("peak under the budget %s: %s, %d raw planes held at most (%s)", membudget.Format(budget), membudget.Format(peak), held, plan)
		// The stage's own model has slack; the plan itself must be kept.
		_, after, _ := strings.Cut(plan, "planes_in_memory=")
		if planned, err := strconv.Atoi(strings.Fields(after + " x")[0]); err != nil || held < 1 || held > planned {
			t.Errorf("%d raw planes held at once, the plan allows %q", held, plan)
		}
		if peak > budget {
			t.Errorf("peak resident set %s exceeds the budget %s (unconstrained %s)", membudget.Format(peak), membudget.Format(budget), membudget.Format(free))
		}
		got := exectest.ReadTree(t, out)
		if len(got) != len(want) || len(got) < 13 {
			t.Fatalf("%d output files under the budget, %d unconstrained", len(got), len(want))
		}
		for _, name := range exectest.Differing(want, got) {
			t.Errorf("%s differs between the unconstrained and the budgeted run", name)
		}
		if err := os.RemoveAll(out); err != nil {
			t.Fatal(err)
		}
	}
}

func TestMemBudgetTooSmall(t *testing.T) {
	cfgPath, cfg := budgetProject(t)
	_, stderr, code := childRun(t, cfgPath, 40*membudget.MB, 0, 2)
	if code != cliutil.ExitUsage {
		t.Fatalf("exit %d, want %d\n%s", code, cliutil.ExitUsage, stderr)
	}
	for _, s := range []string{"memory budget 40 MiB", "needs", ConfigKeyMem, "--mem-budget"} {
		if !strings.Contains(stderr, s) {
			t.Errorf("error lacks %q:\n%s", s, stderr)
		}
	}
	if strings.Contains(stderr, "tiles aligned") {
		t.Errorf("the stage aligned tiles before refusing the budget:\n%s", stderr)
	}
	stitched := filepath.Dir(OutDir(cfg.ProjectDir, 1))
	if ents, err := os.ReadDir(stitched); err == nil && len(ents) > 0 {
		t.Errorf("partial output under %s: %v", stitched, ents)
	}
}

// The plans shrink monotonically to the smallest working set, every plan
// holds a whole batch, and choose takes the first that fits.
func TestMemPlans(t *testing.T) {
	g := geometry{Tiles: 63, H: 1440, W: 1920, MosaicH: 7488, MosaicW: 12672, Workers: 16, WorkingDim: 128}
	for name, eng := range map[string]Engine{"cpu": NewCPUEngine(16), "gpu": deviceEngine{}} {
		m := newMemModel(eng, g, 0, 0, "")
		ps := plans(8, 16)
		if ps[len(ps)-1] != minPlan {
			t.Fatalf("last plan %+v, want %+v", ps[len(ps)-1], minPlan)
		}
		for i, p := range ps {
			if p.Planes < p.Batch || p.Batch < 1 || p.Writes < 1 {
				t.Errorf("plan %+v", p)
			}
			if i > 0 && m.need(p) > m.need(ps[i-1]) {
				t.Errorf("%s: plan %+v needs %s, more than the plan before it (%s)", name, p, membudget.Format(m.need(p)), membudget.Format(m.need(ps[i-1])))
			}
		}
		for _, p := range ps {
			m.budget = m.need(p)
			got, err := m.choose(8)
			if err != nil || m.need(got) > m.budget {
				t.Errorf("budget %s: plan %+v %v", membudget.Format(m.budget), got, err)
			}
		}
		m.budget = m.need(minPlan) - 1
		var ne *membudget.NeedError
		if _, err := m.choose(8); !errors.As(err, &ne) || ne.Need != m.need(minPlan) || ne.ConfigKey != ConfigKeyMem {
			t.Errorf("budget 1 byte short: %v", err)
		}
		t.Logf("%s: production cycle: preferred plan %s, smallest %s", name, membudget.Format(m.need(ps[0])), membudget.Format(m.need(minPlan)))
	}
	// The target: a production cycle on the GPU under 6 GiB keeps
	// the GPU's batch of 8.
	m := newMemModel(deviceEngine{}, g, 0, 6<<30, membudget.SourceFlag)
	p, err := m.choose(8)
	if err != nil || p.Batch != 8 {
		t.Errorf("GPU, production cycle, 6 GiB: plan %+v %v", p, err)
	}
	t.Logf("gpu: production cycle under 6 GiB: %+v, planned %s", p, membudget.Format(m.need(p)))
}

// deviceEngine stands for the CUDA engine in model tests: it reports
// membudget.CUDAEngine (data on the device), as *gpu.Engine does.
type deviceEngine struct{ *CPUEngine }

func (deviceEngine) EngineMemory() membudget.EngineMemory { return membudget.CUDAEngine }
