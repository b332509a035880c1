package deconstage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/cliutil"
	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/decon"
	"github.com/kintsugi-hpc/kintsugi-go/internal/exectest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/membudget"
	"github.com/kintsugi-hpc/kintsugi-go/internal/membudget/childproc"
	"github.com/kintsugi-hpc/kintsugi-go/internal/psf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth/synthtest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// The child side of the budget tests: run by TestMemBudget* in a fresh
// process (this test binary re-executed) so that the kernel's peak resident
// set (VmHWM) is the stage's own. It does nothing in a normal test run.
// KINTSUGI_DECON_MEM_CHILD=config,budget bytes,workers.
const childEnv = "KINTSUGI_DECON_MEM_CHILD"

func TestMemBudgetChild(t *testing.T) {
	childproc.ServeStage(childEnv, func(cfg *config.Config, budget int64, workers int) (map[string]string, error) {
		res, err := Run(context.Background(), Options{Config: cfg, Cycle: 1, Engine: CPUEngine{Workers: workers}, Workers: workers,
			MemBudget: budget, MemBudgetSource: membudget.SourceFlag})
		if err != nil {
			return nil, err
		}
		return map[string]string{"PLAN": res.Plan}, nil
	})
}

// childRun runs the stage on cfgPath in a child process and returns its
// peak resident set, its plan, its stderr and its exit code.
func childRun(t *testing.T, cfgPath string, budget int64, workers int) (int64, string, string, int) {
	t.Helper()
	r := childproc.Run(t, "TestMemBudgetChild", childEnv, cfgPath, budget, workers)
	return r.Peak, r.Values["PLAN"], r.Stderr, r.Code
}

// Geometry of the budget tests' cycle: 2 channels of 4 planes of
// 800 x 1200 px, 2 iterations, so that the planes (7.7 MB per channel as
// uint16, about 40 MB per padded float32 array: z is padded to 8 planes)
// and not the runtime dominate the stage's memory, in a few seconds of CPU
// per run.
const (
	memNZ, memH, memW = 4, 800, 1200
	memIterations     = 2
)

// memProject writes the config (tiny preset: 2 channels, the generator's
// optics) and a stitched cycle 1 of memNZ planes per channel: a background
// of 100 counts, seeded Poisson-like noise and bright spots, with the
// stitch sentinel.
func memProject(t *testing.T) (string, *config.Config) {
	t.Helper()
	dir := t.TempDir()
	o := synthtest.Tiny(t)
	o.OutDir, o.NCycles, o.NZ = dir, 1, memNZ
	path := filepath.Join(dir, "config.yaml")
	if err := synth.WriteConfig(path, o, map[string]any{"decon": map[string]any{"iterations": memIterations}}); err != nil {
		t.Fatal(err)
	}
	cfg := mustLoad(t, path)
	in := InputDir(dir, 1)
	for _, ch := range cfg.Channels {
		r := rand.New(rand.NewPCG(uint64(ch), 7))
		chDir := filepath.Join(in, fmt.Sprintf("CH%d", ch))
		if err := os.MkdirAll(chDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for z := 0; z < memNZ; z++ {
			img := raster.NewGray16(memW, memH)
			for i := range img.Pix {
				img.Pix[i] = uint16(90 + r.IntN(21))
			}
			for s := 0; s < memH*memW/400; s++ {
				y, x := r.IntN(memH-2), r.IntN(memW-2)
				a := uint16(500 + r.IntN(3000))
				for dy := 0; dy < 3; dy++ {
					for dx := 0; dx < 3; dx++ {
						img.Pix[(y+dy)*memW+x+dx] += a / uint16(1+dy%2+dx%2)
					}
				}
			}
			if err := tiffio.WriteGray16(filepath.Join(chDir, fmt.Sprintf("%02d.tif", z+1)), img); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.WriteFile(layout.Sentinel(in), []byte("stage=stitch\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, cfg
}

// memModelOf is the stage's model of cfg's cycle on the CPU engine.
func memModelOf(t *testing.T, cfg *config.Config, workers int, budget int64) memModel {
	t.Helper()
	var chans []chanMem
	var modes []mode
	for _, ch := range cfg.Channels {
		p, k, _, err := settings(cfg, ch, true, workers)
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, newChanMem(memNZ, memH, memW, k, p))
		modes = append(modes, modeStack)
	}
	return newMemModel(cpuEngineMemory, true, modes, chans, workers, 0, budget, membudget.SourceFlag)
}

// TestMemBudgetHeld runs the stage unconstrained and under budgets below
// that run's peak, each in its own process: the constrained runs' own peak
// resident set stays within the budget and their outputs are
// byte-identical to the unconstrained run's.
func TestMemBudgetHeld(t *testing.T) {
	if testing.Short() {
		t.Skip("three stage runs in child processes (a few seconds of CPU)")
	}
	cfgPath, cfg := memProject(t)
	out := OutDir(cfg.ProjectDir, 1)
	const workers = 2

	free, freePlan, stderr, code := childRun(t, cfgPath, 0, workers)
	if code != 0 {
		t.Fatalf("unconstrained run: exit %d\n%s", code, stderr)
	}
	t.Logf("unconstrained: peak %s, plan %s", membudget.Format(free), freePlan)
	want := exectest.ReadTree(t, out)
	if err := os.RemoveAll(out); err != nil {
		t.Fatal(err)
	}

	m := memModelOf(t, cfg, workers, 0)
	minNeed := m.need(m.smallest())
	// Two budgets well below the unconstrained peak: 3/4 of it and just
	// above the smallest working set (the tightest the stage accepts).
	for _, budget := range []int64{free * 3 / 4, minNeed * 21 / 20} {
		if budget < minNeed || budget > free*3/4 {
			t.Fatalf("test data too small: the budget %s is not between the smallest working set %s and 3/4 of the unconstrained peak %s",
				membudget.Format(budget), membudget.Format(minNeed), membudget.Format(free))
		}
		peak, plan, stderr, code := childRun(t, cfgPath, budget, workers)
		if code != 0 {
			t.Fatalf("run under %s: exit %d\n%s", membudget.Format(budget), code, stderr)
		}
		t.Logf("budget %s (smallest working set %s): peak %s, plan %s", membudget.Format(budget), membudget.Format(minNeed),
			membudget.Format(peak), plan)
		if peak > budget {
			t.Errorf("peak resident set %s exceeds the budget %s (unconstrained %s)", membudget.Format(peak), membudget.Format(budget), membudget.Format(free))
		}
		if !strings.Contains(stderr, "memory plan") {
			t.Errorf("the stage did not log its memory plan:\n%s", stderr)
		}
		got := exectest.ReadTree(t, out)
		if len(got) != len(want) || len(got) != len(cfg.Channels)*memNZ+1 {
			t.Fatalf("%d output files under the budget, %d unconstrained", len(got), len(want))
		}
		for name, b := range want {
			if name == "DECONV_parameters.txt" {
				continue // holds the time
			}
			if !bytes.Equal(got[name], b) {
				t.Errorf("%s differs between the unconstrained and the budgeted run", name)
			}
		}
		if err := os.RemoveAll(out); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMemBudgetTooSmall asks for a budget below the smallest working set:
// the stage refuses it before any output with the need, the budget and the
// config key, exit 2.
func TestMemBudgetTooSmall(t *testing.T) {
	cfgPath, cfg := memProject(t)
	m := memModelOf(t, cfg, 2, 0)
	budget := m.need(m.smallest()) - 1
	_, _, stderr, code := childRun(t, cfgPath, budget, 2)
	if code != cliutil.ExitUsage {
		t.Fatalf("exit %d, want %d\n%s", code, cliutil.ExitUsage, stderr)
	}
	for _, s := range []string{"decon: memory budget " + membudget.Format(budget), "needs " + membudget.Format(m.need(m.smallest())),
		ConfigKeyMem, "--mem-budget", membudget.SourceFlag} {
		if !strings.Contains(stderr, s) {
			t.Errorf("error lacks %q:\n%s", s, stderr)
		}
	}
	if strings.Contains(stderr, "deconvolving cycle") {
		t.Errorf("the stage started before refusing the budget:\n%s", stderr)
	}
	decd := filepath.Dir(OutDir(cfg.ProjectDir, 1))
	if ents, err := os.ReadDir(decd); err == nil && len(ents) > 0 {
		t.Errorf("partial output under %s: %v", decd, ents)
	}
}

// The plans shrink monotonically to the smallest working set, choose takes
// the first that fits, and a budget one byte short of the smallest is a
// NeedError naming the config key. The model's figures for a production
// channel are logged (CPU and GPU).
func TestMemPlans(t *testing.T) {
	k := &psf.Kernel{NZ: 1, NY: 9, NX: 9, Data: make([]float32, 81)}
	p := decon.Params{Iterations: 25, MemoryBudget: DefaultCPUBudget}
	prod := func() []chanMem {
		c := newChanMem(20, 7493, 12676, k, p)
		return []chanMem{c, c, c, c}
	}
	for _, tc := range []struct {
		name     string
		gpu, cpu bool
		mode     mode
	}{{"cpu", false, true, modeStack}, {"gpu", true, false, modePlane}} {
		modes := []mode{tc.mode, tc.mode, tc.mode, tc.mode}
		em := cpuEngineMemory
		if tc.gpu {
			em = membudget.CUDAEngine
		}
		m := newMemModel(em, tc.cpu, modes, prod(), 16, 0, 0, "")
		ps := m.plans()
		for i, pl := range ps {
			if i > 0 && m.need(pl) > m.need(ps[i-1]) {
				t.Errorf("%s: plan %+v needs %s, more than the plan before it (%s)", tc.name, pl, membudget.Format(m.need(pl)), membudget.Format(m.need(ps[i-1])))
			}
		}
		for _, pl := range ps {
			m.budget = m.need(pl)
			got, err := m.choose()
			if err != nil || m.need(got) > m.budget {
				t.Errorf("%s: budget %s: plan %+v %v", tc.name, membudget.Format(m.budget), got, err)
			}
		}
		small := m.need(m.smallest())
		m.budget = small - 1
		var ne *membudget.NeedError
		if _, err := m.choose(); !errors.As(err, &ne) || ne.Need != small || ne.ConfigKey != ConfigKeyMem || !errors.Is(err, membudget.ErrTooSmall) {
			t.Errorf("%s: budget 1 byte short: %v", tc.name, err)
		}
		t.Logf("%s: production cycle (4 channels of 20 x 7493 x 12676): preferred plan %s, smallest %s (%d plans)", tc.name,
			membudget.Format(m.need(ps[0])), membudget.Format(small), len(ps))
	}
	// The GPU's resident form holds only planes in flight: a production
	// cycle keeps read-ahead and write-behind under 14 GiB and runs under
	// 2 GiB.
	m := newMemModel(membudget.CUDAEngine, false, []mode{modePlane, modePlane, modePlane, modePlane}, prod(), 16, 0, 14<<30, membudget.SourceFlag)
	if pl, err := m.choose(); err != nil || pl.Ahead != 1 || pl.Behind != 1 {
		t.Errorf("GPU, production cycle, 14 GiB: plan %+v %v", pl, err)
	}
	if small := m.need(m.smallest()); small > 2<<30 {
		t.Errorf("GPU, production cycle: smallest working set %s, want <= 2 GiB", membudget.Format(small))
	}
}

// TestRunCPUPlans runs every pipeline form (read-ahead, write-behind,
// planes in flight, small CPU windows) on a small cycle: each gives the
// unconstrained run's bytes.
func TestRunCPUPlans(t *testing.T) {
	cfg, dir := project(t, nil)
	out := OutDir(dir, 1)
	run := func(p *memPlan) {
		t.Helper()
		if _, err := Run(context.Background(), Options{Config: cfg, Cycle: 1, Engine: CPUEngine{Workers: 2}, Workers: 2, plan: p}); err != nil {
			t.Fatal(err)
		}
	}
	run(nil)
	want := exectest.ReadTree(t, out)
	for _, p := range []memPlan{{IO: 1, Window: DefaultCPUBudget}, {Ahead: 1, Behind: 1, IO: 2, Window: DefaultCPUBudget},
		{Ahead: 1, IO: 3, Window: 1}, {Behind: 1, IO: 1, Window: 20 << 10}} {
		os.RemoveAll(out)
		run(&p)
		sameOutputs(t, fmt.Sprintf("plan %+v", p), want, exectest.ReadTree(t, out))
	}
}

// sameOutputs fails the test unless got has want's files with want's bytes;
// DECONV_parameters.txt is compared by name only (it records the finish
// time and the engine, as the original's does).
func sameOutputs(t *testing.T, label string, want, got map[string][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d files, want %d", label, len(got), len(want))
	}
	for name, b := range want {
		g, ok := got[name]
		if !ok {
			t.Errorf("%s: %s missing", label, name)
		} else if name != "DECONV_parameters.txt" && !bytes.Equal(g, b) {
			t.Errorf("%s: %s differs", label, name)
		}
	}
}
