package regstage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/exectest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/membudget"
	"github.com/kintsugi-hpc/kintsugi-go/internal/membudget/childproc"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/register"
	"github.com/kintsugi-hpc/kintsugi-go/internal/regstage/regtest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// The child side of the budget tests: run by TestMemBudget* in a fresh
// process (this test binary re-executed) so that the kernel's peak resident
// set (VmHWM) is the stage's own. It does nothing in a normal test run.
// KINTSUGI_REG_MEM_CHILD=config,budget bytes,workers.
const childEnv = "KINTSUGI_REG_MEM_CHILD"

func TestMemBudgetChild(t *testing.T) {
	childproc.ServeStage(childEnv, func(cfg *config.Config, budget int64, workers int) (map[string]string, error) {
		// One worker of phase correlation (its FFT workspaces scale with the
		// workers), several goroutines for the stage's pipeline.
		res, err := Run(context.Background(), Options{Config: cfg, Engine: register.CPU{Workers: 1}, Workers: workers,
			MemBudget: budget, MemBudgetSource: membudget.SourceFlag, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
		if err != nil {
			return nil, err
		}
		return map[string]string{"PLANES": strconv.Itoa(res.PlanesInMemory)}, nil
	})
}

// childRun runs the stage on cfgPath in a child process and returns its
// peak resident set, the most planes it held, its stderr and its exit code.
func childRun(t *testing.T, cfgPath string, budget int64, workers int) (int64, int, string, int) {
	t.Helper()
	r := childproc.Run(t, "TestMemBudgetChild", childEnv, cfgPath, budget, workers)
	return r.Peak, int(r.Int("PLANES")), r.Stderr, r.Code
}

// Budget test geometry: 2 cycles x 4 channels of memH x memW px, so that
// the planes (24 MB each), not the runtime, dominate the stage's memory;
// as in production, the cycles' sizes differ a little and every image is
// padded: cycle 1's are 7 px narrower, cycle 2's 5 px lower.
const memH, memW, memCycles, memChannels = 3000, 4000, 2, 4

func budgetProject(t *testing.T) (string, *config.Config) {
	t.Helper()
	cfg, _ := regtest.WriteProjectChannels(t, t.TempDir(), memCycles, memChannels, regConfig,
		synth.RegOptions{H: memH, W: memW, Seed: 9, MaxShift: 30, MaxRotDeg: 1, WarpPx: 3, Workers: 2})
	for c := 1; c <= memCycles; c++ {
		for ch := 1; ch <= memChannels; ch++ {
			p := filepath.Join(EDFDir(cfg.ProjectDir, c), cfg.EDFFileName(c, ch))
			g, err := tiffio.ReadGray16(p)
			if err != nil {
				t.Fatal(err)
			}
			small := raster.NewGray16(g.W-7*(c%2), g.H-5*(1-c%2))
			for y := range small.H {
				copy(small.Pix[y*small.W:(y+1)*small.W], g.Pix[y*g.W:])
			}
			if err := tiffio.WriteGray16(p, small); err != nil {
				t.Fatal(err)
			}
		}
	}
	return cfg.Path, cfg
}

// TestMemBudgetHeld runs the stage unconstrained and under budgets below
// that run's peak, each in its own process: the constrained runs' own peak
// resident set stays within the budget, the plan's planes are not exceeded
// and the outputs (registered images, OME-TIFF, transforms, fields,
// metrics, overlays) are byte-identical.
func TestMemBudgetHeld(t *testing.T) {
	if testing.Short() {
		t.Skip("two stage runs in child processes (about 15 s of CPU)")
	}
	cfgPath, cfg := budgetProject(t)
	out := OutDir(cfg.ProjectDir)
	const workers = 4

	free, freePlanes, stderr, code := childRun(t, cfgPath, 0, workers)
	if code != 0 {
		t.Fatalf("unconstrained run: exit %d\n%s", code, stderr)
	}
	want := exectest.ReadTree(t, out)
	if err := os.RemoveAll(out); err != nil {
		t.Fatal(err)
	}
	// What the stage needs at least, from its own model and this project.
	p := Params(cfg.Registration)
	g := geometry{H: memH, W: memW, Pad: true, Workers: workers, Channels: memChannels, Levels: levelFactors(p, memH, memW)}
	m := newMemModel(register.CPU{Workers: 1}, g, 0, 0, "")
	minNeed := m.need(minPlan)
	t.Logf("unconstrained: peak %s, %d planes held at most (plan %+v needs %s); smallest working set %s",
		membudget.Format(free), freePlanes, plans(workers, memChannels)[0], membudget.Format(m.need(plans(workers, memChannels)[0])), membudget.Format(minNeed))
	budget := minNeed * 11 / 10
	if budget > free*9/10 {
		t.Fatalf("test data too small: the budget %s (the smallest working set %s + 10 %%) is not below 9/10 of the unconstrained peak %s",
			membudget.Format(budget), membudget.Format(minNeed), membudget.Format(free))
	}
	peak, held, stderr, code := childRun(t, cfgPath, budget, workers)
	if code != 0 {
		t.Fatalf("run under %s: exit %d\n%s", membudget.Format(budget), code, stderr)
	}
	t.Logf("under the budget %s: peak %s, %d planes held at most", membudget.Format(budget), membudget.Format(peak), held)
	if held < 1 || held > minPlan.Planes() {
		t.Errorf("%d planes held at once, the smallest plan allows %d", held, minPlan.Planes())
	}
	if peak > budget {
		t.Errorf("peak resident set %s exceeds the budget %s (unconstrained %s)", membudget.Format(peak), membudget.Format(budget), membudget.Format(free))
	}
	// The model is an upper bound of what the plan really holds (without
	// counting on the Go runtime's soft limit to squeeze the heap).
	if peak > minNeed {
		t.Errorf("peak resident set %s exceeds the model's smallest working set %s: the model misses memory", membudget.Format(peak), membudget.Format(minNeed))
	}
	got := exectest.ReadTree(t, out)
	if len(got) != len(want) || len(got) < memCycles*memChannels+1+5*(memCycles-1) {
		t.Fatalf("%d output files under the budget, %d unconstrained", len(got), len(want))
	}
	for _, name := range exectest.Differing(want, got) {
		t.Errorf("%s differs between the unconstrained and the budgeted run", name)
	}

	// The preferred plan writes the OME-TIFF beside the registration: both
	// phases' memory at once, within its budget (the model's need, plus
	// what the child's runtime may hold beyond this process's model).
	if err := os.RemoveAll(out); err != nil {
		t.Fatal(err)
	}
	best := plans(workers, memChannels)[0]
	budget = m.need(best) + 64*membudget.MB
	peak, _, stderr, code = childRun(t, cfgPath, budget, workers)
	if code != 0 {
		t.Fatalf("run under %s: exit %d\n%s", membudget.Format(budget), code, stderr)
	}
	t.Logf("under the budget %s (plan %+v): peak %s", membudget.Format(budget), best, membudget.Format(peak))
	if !best.Beside || !strings.Contains(stderr, "ome_tiff_beside=true") {
		t.Errorf("plan %+v under %s: want the OME-TIFF beside the registration; log:\n%s", best, membudget.Format(budget), stderr)
	}
	if peak > budget {
		t.Errorf("peak resident set %s exceeds the budget %s of the plan with the OME-TIFF beside", membudget.Format(peak), membudget.Format(budget))
	}
	for _, name := range exectest.Differing(want, exectest.ReadTree(t, out)) {
		t.Errorf("%s differs between the unconstrained run and the one with the OME-TIFF beside under its budget", name)
	}
}

// An impossible budget is refused before anything is read or written,
// naming the budget, the need and the config key.
func TestMemBudgetTooSmall(t *testing.T) {
	cfg, _ := project(t, 2)
	_, err := Run(context.Background(), Options{Config: cfg, Engine: register.CPU{Workers: 2}, Workers: 2,
		MemBudget: 8 * membudget.MB, MemBudgetSource: membudget.SourceFlag})
	var ne *membudget.NeedError
	if !errors.Is(err, membudget.ErrTooSmall) || !errors.As(err, &ne) {
		t.Fatalf("error %v, want a NeedError", err)
	}
	if ne.ConfigKey != ConfigKeyMem || ne.Stage != "registration" || ne.Budget != 8*membudget.MB || !(ne.Need > ne.Budget) {
		t.Errorf("NeedError %+v", ne)
	}
	for _, s := range []string{"memory budget 8 MiB", "needs", ConfigKeyMem, "--mem-budget"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error lacks %q: %v", s, err)
		}
	}
	noOutput(t, cfg)
}

// The plans shrink monotonically to the smallest working set and choose
// takes the first that fits; production figures are logged.
func TestMemPlans(t *testing.T) {
	const h, w = 7493, 12676
	p := Params(config.DefaultRegistration())
	g := geometry{H: h, W: w, Pad: true, Workers: 16, Channels: 4, Levels: levelFactors(p, h, w)}
	for _, dev := range []string{"cpu", "gpu"} {
		var be register.Backend = register.CPU{Workers: 16}
		if dev == "gpu" {
			be = gpuLike{}
		}
		m := newMemModel(be, g, 0, 0, "")
		ps := plans(g.Workers, g.Channels)
		if ps[0] != (memPlan{In: 4, Out: 4, Beside: true}) || ps[1] != (memPlan{In: 4, Out: 4}) || ps[len(ps)-1] != minPlan {
			t.Fatalf("plans %+v", ps)
		}
		for i := 1; i < len(ps); i++ {
			if m.need(ps[i]) > m.need(ps[i-1]) || ps[i].Planes() >= ps[i-1].Planes() {
				t.Errorf("%s: plan %+v needs %s, the one before it %s", dev, ps[i], membudget.Format(m.need(ps[i])), membudget.Format(m.need(ps[i-1])))
			}
		}
		for _, q := range ps {
			m.budget = m.need(q)
			got, err := m.choose()
			if err != nil || got != q {
				t.Errorf("%s: budget %s: plan %+v %v, want %+v", dev, membudget.Format(m.budget), got, err, q)
			}
		}
		m.budget = m.need(minPlan) - 1
		var ne *membudget.NeedError
		if _, err := m.choose(); !errors.As(err, &ne) || ne.Need != m.need(minPlan) || ne.ConfigKey != ConfigKeyMem {
			t.Errorf("%s: budget 1 byte short: %v", dev, err)
		}
		var needs []string
		for _, q := range ps {
			needs = append(needs, fmt.Sprintf("%+v %s", q, membudget.Format(m.need(q))))
		}
		t.Logf("%s, production (13 x 4 planes of %dx%d, padded, 16 workers, fixed %s): %s", dev, w, h, membudget.Format(m.e.Fixed), strings.Join(needs, ", "))
	}
}

// gpuLike stands for the CUDA backend in model tests: it reports
// membudget.CUDAEngine (data on the device), as the GPU's Registrar does.
type gpuLike struct{ register.CPU }

func (gpuLike) EngineMemory() membudget.EngineMemory { return membudget.CUDAEngine }

// Every plan gives the same bytes as the preferred one (in process, so
// that the race detector sees the pipeline's goroutines), and holds at
// most its planes.
func TestPlansSameOutput(t *testing.T) {
	cfg, _ := project(t, 3)
	out := OutDir(cfg.ProjectDir)
	var want map[string][]byte
	for i, p := range append([]memPlan{{}}, plans(4, 2)...) {
		res, err := Run(context.Background(), Options{Config: cfg, Engine: register.CPU{Workers: 2}, Workers: 4, plan: p})
		if err != nil {
			t.Fatalf("plan %+v: %v", p, err)
		}
		if p != (memPlan{}) && (res.PlanesInMemory < 1 || res.PlanesInMemory > p.Planes()) {
			t.Errorf("plan %+v: %d planes held at once", p, res.PlanesInMemory)
		}
		got := exectest.ReadTree(t, out)
		if i == 0 {
			want = got
		} else if len(got) != len(want) {
			t.Errorf("plan %+v: %d files, %d with the preferred plan", p, len(got), len(want))
		}
		for _, name := range exectest.Differing(want, got) {
			t.Errorf("plan %+v: %s differs", p, name)
		}
		if err := os.RemoveAll(out); err != nil {
			t.Fatal(err)
		}
	}
}
