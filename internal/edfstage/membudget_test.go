package edfstage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/cliutil"
	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/edf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/exectest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/membudget"
	"github.com/kintsugi-hpc/kintsugi-go/internal/membudget/childproc"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth/synthtest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// The child side of the budget tests: run by TestMemBudget* in a fresh
// process (this test binary re-executed) so that the kernel's peak resident
// set (VmHWM) is the stage's own. It does nothing in a normal test run.
// KINTSUGI_EDF_MEM_CHILD=config,budget bytes,workers.
const childEnv = "KINTSUGI_EDF_MEM_CHILD"

func TestMemBudgetChild(t *testing.T) {
	childproc.ServeStage(childEnv, func(cfg *config.Config, budget int64, workers int) (map[string]string, error) {
		res, err := Run(context.Background(), Options{Config: cfg, Cycle: 1, Engine: edf.CPU{Workers: workers}, Workers: workers,
			MemBudget: budget, MemBudgetSource: membudget.SourceFlag})
		if err != nil {
			return nil, err
		}
		return map[string]string{"PLAN": res.MemPlan, "PLANNED": strconv.FormatInt(res.MemPlanned, 10)}, nil
	})
}

type childOut struct {
	peak, planned int64
	plan, stderr  string
	code          int
}

// childRun runs the stage on cfgPath in a child process.
func childRun(t *testing.T, cfgPath string, budget int64, workers int) childOut {
	t.Helper()
	r := childproc.Run(t, "TestMemBudgetChild", childEnv, cfgPath, budget, workers)
	return childOut{peak: r.Peak, planned: r.Int("PLANNED"), plan: r.Values["PLAN"], stderr: r.Stderr, code: r.Code}
}

// Budget-test cycle: the stacks, not the runtime, dominate the stage's
// memory: 2 channels of 30 planes of 1536 x 1536 px (4.5 MiB a plane, 135
// MiB a stack), with no Gaussian pre-filter (sigma 0) and a 3 x 3 variance
// window so that the CPU fusion is fast.
const (
	budgetChannels = 2
	budgetZ        = 30
	budgetH        = 1536
	budgetW        = 1536
)

// budgetProject writes the config and the deconvolved cycle 1: every plane
// is a deterministic pattern of counts 500..16883 whose sharpness depends on
// z and on the position (so the argmax over z varies over the plane), with
// no zeros or saturated pixels.
func budgetProject(t *testing.T) (string, *config.Config) {
	t.Helper()
	dir := t.TempDir()
	o := synthtest.Tiny(t)
	o.OutDir, o.NCycles, o.NChannels = dir, 1, budgetChannels
	path := synth.ConfigPath(dir)
	if err := synth.WriteConfig(path, o, map[string]any{"edf": map[string]any{"sigma": 0.0, "radius_x": 1, "radius_y": 1, "z_smooth_sigma": 1.0}}); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	pl := raster.NewGray16(budgetW, budgetH)
	for ch := 1; ch <= budgetChannels; ch++ {
		d := filepath.Join(InputDir(dir, 1), fmt.Sprintf("CH%d", ch))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for z := range budgetZ {
			for y := range budgetH {
				for x := range budgetW {
					h := uint32(x*73856093^y*19349663^(z+8*ch)*83492791) * 2654435761
					// In focus (full noise amplitude) where z matches the
					// position's band, blurred elsewhere.
					amp := uint32(255)
					if (x/192+y/192+ch)%budgetZ != z {
						amp = 31
					}
					pl.Pix[y*budgetW+x] = uint16(500 + (h>>16)&amp*64)
				}
			}
			if err := tiffio.WriteGray16(filepath.Join(d, fmt.Sprintf("deconv_%03d.tif", z+1)), pl); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.WriteFile(layout.Sentinel(InputDir(dir, 1)), []byte("stage=decon\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, cfg
}

// TestMemBudgetHeld runs the stage unconstrained and under a budget below
// that run's peak, each in its own process: the constrained run's own peak
// resident set (VmHWM) stays within its budget and its outputs are
// byte-identical to the unconstrained run's.
func TestMemBudgetHeld(t *testing.T) {
	if testing.Short() {
		t.Skip("three stage runs in child processes")
	}
	cfgPath, cfg := budgetProject(t)
	out := OutDir(cfg.ProjectDir, 1)
	const workers = 2

	free := childRun(t, cfgPath, 0, workers)
	if free.code != 0 {
		t.Fatalf("unconstrained run: exit %d\n%s", free.code, free.stderr)
	}
	want := exectest.ReadTree(t, out)
	if err := os.RemoveAll(out); err != nil {
		t.Fatal(err)
	}
	if len(want) != budgetChannels {
		t.Fatalf("unconstrained run wrote %d planes, want %d", len(want), budgetChannels)
	}
	// The smallest working set, from the stage's own model of this cycle.
	p := Params(cfg.EDF)
	m := newMemModel(edf.CPU{Workers: workers}, budgetZ, budgetH, budgetW, workers, p, 0, 0, "")
	ps := m.plans()
	minNeed := m.need(ps[len(ps)-1])
	// The budget: just above the smallest working set, well below the
	// unconstrained peak.
	budget := minNeed * 21 / 20
	t.Logf("unconstrained peak %s (plan %s); smallest working set %s; budget %s",
		membudget.Format(free.peak), free.plan, membudget.Format(minNeed), membudget.Format(budget))
	if budget > free.peak*9/10 {
		t.Fatalf("test data too small: the budget %s is above 9/10 of the unconstrained peak %s",
			membudget.Format(budget), membudget.Format(free.peak))
	}
	got := childRun(t, cfgPath, budget, workers)
	if got.code != 0 {
		t.Fatalf("run under %s: exit %d\n%s", membudget.Format(budget), got.code, got.stderr)
	}
	t.Logf("peak under the budget %s: %s (plan %s, planned %s)", membudget.Format(budget), membudget.Format(got.peak),
		got.plan, membudget.Format(got.planned))
	if got.peak > budget {
		t.Errorf("peak resident set %s exceeds the budget %s (unconstrained %s)",
			membudget.Format(got.peak), membudget.Format(budget), membudget.Format(free.peak))
	}
	if !strings.Contains(got.stderr, "memory plan") || !strings.Contains(got.stderr, "1 channel stack(s)") {
		t.Errorf("the plan under %s is not logged as one stack:\n%s", membudget.Format(budget), got.stderr)
	}
	res := exectest.ReadTree(t, out)
	if len(res) != len(want) {
		t.Fatalf("%d output files under the budget, %d unconstrained", len(res), len(want))
	}
	for _, name := range exectest.Differing(want, res) {
		t.Errorf("%s differs between the unconstrained and the budgeted run", name)
	}
}

// TestMemBudgetTooSmall asks for a budget below the smallest working set:
// a NeedError naming resources.mem_edf, exit 2, nothing written.
func TestMemBudgetTooSmall(t *testing.T) {
	cfg, _ := project(t, nil)
	var ne *membudget.NeedError
	_, err := Run(context.Background(), Options{Config: cfg, Cycle: 1, Engine: edf.CPU{Workers: 2}, Workers: 2,
		MemBudget: 40 * membudget.MB, MemBudgetSource: membudget.SourceFlag})
	if !errors.As(err, &ne) || !errors.Is(err, membudget.ErrTooSmall) || cliutil.ExitCode(err) != cliutil.ExitUsage {
		t.Fatalf("40 MiB: %v (exit %d), want a NeedError (exit %d)", err, cliutil.ExitCode(err), cliutil.ExitUsage)
	}
	for _, s := range []string{"memory budget 40 MiB", "needs", ConfigKeyMem, "--mem-budget"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error lacks %q: %v", s, err)
		}
	}
	edfDir := filepath.Dir(OutDir(cfg.ProjectDir, 1))
	if ents, err := os.ReadDir(edfDir); err == nil && len(ents) > 0 {
		t.Errorf("partial output under %s: %v", edfDir, ents)
	}
}

// memStream is a streamed form for tests: the "device" is a slice of
// planes, fused by the CPU reference.
type memStream struct {
	cpu    edf.CPU
	planes []*raster.Gray16
	puts   int
}

func (s *memStream) Put(_ context.Context, z int, pg *raster.Gray16) error {
	s.planes[z] = pg
	s.puts++
	return nil
}
func (s *memStream) Fuse(ctx context.Context, g edf.Gate, p edf.Params) (*edf.Result, error) {
	if s.puts != len(s.planes) {
		return nil, fmt.Errorf("%d planes put, %d in the stack", s.puts, len(s.planes))
	}
	return s.cpu.EDF(ctx, s.planes, g, p)
}
func (s *memStream) Free() {}

type memStreamer struct {
	edf.CPU
	opened int
}

// EngineMemory reports what the CUDA engine does: memStreamer stands for it.
func (*memStreamer) EngineMemory() membudget.EngineMemory { return membudget.CUDAEngine }

func (m *memStreamer) EDFDeviceStack(_ context.Context, n, h, w int) (edf.DeviceStack, error) {
	m.opened++
	return &memStream{cpu: m.CPU, planes: make([]*raster.Gray16, n)}, nil
}

// The streamed path (the GPU's) writes the same bytes as the stacked path,
// takes the streamed plan, and refuses a budget below its smaller need.
func TestStreamedPath(t *testing.T) {
	cfg, _ := project(t, nil)
	out := OutDir(cfg.ProjectDir, 1)
	if _, err := run(cfg); err != nil {
		t.Fatal(err)
	}
	want := exectest.ReadTree(t, out)
	os.RemoveAll(out)
	st := &memStreamer{CPU: edf.CPU{Workers: 2}}
	res, err := Run(context.Background(), Options{Config: cfg, Cycle: 1, Engine: st, Workers: 2,
		MemBudget: 1 << 30, MemBudgetSource: membudget.SourceFlag})
	if err != nil {
		t.Fatal(err)
	}
	if st.opened != 2 || !strings.HasPrefix(res.MemPlan, "streamed") {
		t.Errorf("streams opened %d, plan %q: want 2, streamed", st.opened, res.MemPlan)
	}
	got := exectest.ReadTree(t, out)
	for _, name := range exectest.Differing(want, got) {
		t.Errorf("%s differs between the stacked and the streamed path", name)
	}
	os.RemoveAll(out)
	_, err = Run(context.Background(), Options{Config: cfg, Cycle: 1, Engine: st, Workers: 2,
		MemBudget: 300 * membudget.MB, MemBudgetSource: membudget.SourceFlag})
	if !errors.Is(err, membudget.ErrTooSmall) || !strings.Contains(err.Error(), "streamed to the device") {
		t.Errorf("300 MiB for a streamed engine (fixed 512 MiB): %v", err)
	}
}

// The plans shrink monotonically; on a production cycle the GPU's streamed
// plan fits the 4 GiB the figures suggest, the CPU's needs a stack.
func TestMemPlans(t *testing.T) {
	p := edf.DefaultParams()
	st := &memStreamer{CPU: edf.CPU{Workers: 16}}
	for name, f := range map[string]edf.Fuser{"cpu": edf.CPU{Workers: 16}, "gpu": st} {
		m := newMemModel(f, 20, 7493, 12676, 16, p, 0, 0, "")
		ps := m.plans()
		for i := 1; i < len(ps); i++ {
			if m.need(ps[i]) > m.need(ps[i-1]) {
				t.Errorf("%s: plan %v needs more than %v", name, ps[i], ps[i-1])
			}
		}
		for _, q := range ps {
			m.budget = m.need(q)
			got, err := m.choose()
			if err != nil || m.need(got) > m.budget {
				t.Errorf("%s: budget %s: plan %v %v", name, membudget.Format(m.budget), got, err)
			}
		}
		m.budget = m.need(ps[len(ps)-1]) - 1
		var ne *membudget.NeedError
		if _, err := m.choose(); !errors.As(err, &ne) || ne.ConfigKey != ConfigKeyMem {
			t.Errorf("%s: budget 1 byte short: %v", name, err)
		}
		t.Logf("%s: production cycle: preferred %v %s, smallest %v %s", name, ps[0], membudget.Format(m.need(ps[0])),
			ps[len(ps)-1], membudget.Format(m.need(ps[len(ps)-1])))
	}
	m := newMemModel(st, 20, 7493, 12676, 16, p, 0, 4096*membudget.MB, membudget.SourceFlag)
	if q, err := m.choose(); err != nil || !q.Streamed || q.Readers < 4 {
		t.Errorf("GPU, production cycle, 4096 MB: %v %v", q, err)
	}
}
