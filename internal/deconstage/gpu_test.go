//go:build cuda

package deconstage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/exectest"
	cuda "github.com/kintsugi-hpc/kintsugi-go/internal/gpu"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/membudget"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// openGPU opens the CUDA engine on device 0 (a *gpu.Engine is a
// deconstage PlaneEngine) for the test, which closes it at its end; an
// error is fatal.
func openGPU(t *testing.T) *cuda.Engine {
	t.Helper()
	g, err := cuda.Open(cuda.Options{Device: 0})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

// TestRunGPU runs the stage on the GPU (rounding on the device) and on the
// CPU over the same stitched cycle: the uint16 outputs must be identical
// (the convolutions are bit-identical; the stop decision uses float64 sums
// in another order, which on this data does not change the iterations).
func TestRunGPU(t *testing.T) {
	g := openGPU(t)
	cfg, dir := project(t, nil)
	if _, err := Run(context.Background(), Options{Config: cfg, Cycle: 1, Engine: g, Workers: 2}); err != nil {
		t.Fatal(err)
	}
	gpuOut := OutDir(dir, 1) + ".gpu"
	if err := os.Rename(OutDir(dir, 1), gpuOut); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), Options{Config: cfg, Cycle: 1, Engine: CPUEngine{Workers: 2}, Workers: 2}); err != nil {
		t.Fatal(err)
	}
	for _, ch := range cfg.Channels {
		for z := 1; z <= nz; z++ {
			name := filepath.Join(fmt.Sprintf("CH%d", ch), fmt.Sprintf("deconv_%03d.tif", z))
			a, err := tiffio.ReadGray16(filepath.Join(gpuOut, name))
			if err != nil {
				t.Fatal(err)
			}
			b, err := tiffio.ReadGray16(filepath.Join(OutDir(dir, 1), name))
			if err != nil {
				t.Fatal(err)
			}
			for i := range a.Pix {
				if a.Pix[i] != b.Pix[i] {
					t.Fatalf("%s pixel %d: GPU %d, CPU %d", name, i, a.Pix[i], b.Pix[i])
				}
			}
		}
	}
	s, _ := os.ReadFile(layout.Sentinel(gpuOut))
	if !bytes.Contains(s, []byte("engine=gpu ")) {
		t.Errorf("sentinel engine:\n%s", s)
	}
}

// TestRunGPUPlans runs the stage on the GPU under the smallest plan (one
// plane read and one written at a time, no read-ahead or write-behind) and
// under the preferred one (read-ahead and write-behind): both give the
// unconstrained run's bytes.
func TestRunGPUPlans(t *testing.T) {
	g := openGPU(t)
	cfg, dir := project(t, nil)
	out := OutDir(dir, 1)
	if _, err := Run(context.Background(), Options{Config: cfg, Cycle: 1, Engine: g, Workers: 2}); err != nil {
		t.Fatal(err)
	}
	want := exectest.ReadTree(t, out)
	for _, p := range []memPlan{{IO: 1}, {Ahead: 1, Behind: 1, IO: 2}, {Behind: 1, IO: 3}} {
		os.RemoveAll(out)
		res, err := Run(context.Background(), Options{Config: cfg, Cycle: 1, Engine: g, Workers: 2, plan: &p})
		if err != nil {
			t.Fatalf("plan %+v: %v", p, err)
		}
		sameOutputs(t, fmt.Sprintf("plan %+v", p), want, exectest.ReadTree(t, out))
		t.Logf("plan %+v: %s", p, res.Plan)
	}
	// The budget resolved for a GPU job keeps the planes off the host: the
	// smallest working set is the engine plus two planes.
	os.RemoveAll(out)
	if _, err := Run(context.Background(), Options{Config: cfg, Cycle: 1, Engine: g, Workers: 2, MemBudget: 1 << 20, MemBudgetSource: "test"}); !errors.Is(err, membudget.ErrTooSmall) {
		t.Errorf("1 MiB budget: %v, want a NeedError", err)
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("output left behind after a refused budget")
	}
}
