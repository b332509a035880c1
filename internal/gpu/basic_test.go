//go:build cuda

package gpu

import (
	"context"
	"fmt"
	"math"
	"testing"
	"unsafe"

	"github.com/kintsugi-hpc/kintsugi-go/internal/basic"
	"github.com/kintsugi-hpc/kintsugi-go/internal/basic/basictest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// Tolerances of the GPU fit against basic.CPU on the same data. The resize
// is bit-identical (TestResizeMatchesCPU); the ALM runs in float64 with
// other summation orders, so the two runs differ by rounding that the
// iterations carry along. Both bounds are far below the conformance bounds
// against the truth (flatfield RMS 2 %, darkfield mean 200 counts) and
// below what a uint16 correction can resolve (1 count in 1000).
const (
	gpuCPUFlatTol = 1e-3 // worst |flat_gpu - flat_cpu|, mean-1 units
	gpuCPUDarkTol = 1.0  // worst |dark_gpu - dark_cpu|, counts
)

// The GPU fit agrees with basic.CPU on the same stacks (several fitted in
// one batch, of different sizes), with and without darkfield.
func TestBaSiCMatchesCPU(t *testing.T) {
	var stacks []*raster.Stack
	for _, sc := range []basictest.Scene{
		basictest.DefaultScene(),
		{N: 30, H: 120, W: 90, Background: 3, Falloff: 0.4, DarkCounts: 300, DarkSlope: 0, SignalMin: 500, SignalMax: 30000, Seed: 7},
		{N: 63, H: 144, W: 192, Background: 6, Falloff: 0.25, DarkCounts: 460, DarkSlope: 100, Contrast: 0.8, SignalMin: 1000, SignalMax: 20000, Seed: 11},
	} {
		st, _ := basictest.Make(sc)
		stacks = append(stacks, st)
	}
	for _, c := range []struct {
		dark   bool
		method basic.DarkfieldMethod
	}{{true, basic.DarkfieldDarkest}, {true, basic.DarkfieldOriginal}, {false, basic.DarkfieldDarkest}} {
		p := basic.Production()
		p.Darkfield, p.DarkfieldMethod = c.dark, c.method
		dark := fmt.Sprintf("%v (%v)", c.dark, c.method)
		want, err := basic.CPU{}.Fit(context.Background(), stacks, p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := testEngine.BaSiC().Fit(context.Background(), stacks, p)
		if err != nil {
			t.Fatal(err)
		}
		for i := range stacks {
			fd, fi := worstDiff(got[i].Flatfield, want[i].Flatfield, 1)
			dd, di := worstDiff(got[i].Darkfield, want[i].Darkfield, 65535)
			t.Logf("darkfield %s, stack %d (%dx%dx%d): worst flat diff %.3g at (y %d, x %d), worst dark diff %.3g counts at (y %d, x %d); rounds/iterations gpu %d/%d cpu %d/%d",
				dark, i, stacks[i].N, stacks[i].H, stacks[i].W, fd, fi/stacks[i].W, fi%stacks[i].W, dd, di/stacks[i].W, di%stacks[i].W,
				got[i].Reweights, got[i].Iterations, want[i].Reweights, want[i].Iterations)
			if fd > gpuCPUFlatTol {
				t.Errorf("darkfield %s, stack %d: flatfield differs from the CPU by %.3g (bound %g)", dark, i, fd, gpuCPUFlatTol)
			}
			if dd > gpuCPUDarkTol {
				t.Errorf("darkfield %s, stack %d: darkfield differs from the CPU by %.3g counts (bound %g)", dark, i, dd, gpuCPUDarkTol)
			}
		}
	}
}

// Engine.Fit on raw counts equals BaSiC.Fit on the normalised stack
// bit for bit (the normalisation on the GPU is raster.Normalize16's).
func TestFitGray16MatchesFit(t *testing.T) {
	sc := basictest.DefaultScene()
	sc.N = 20
	st, _ := basictest.Make(sc)
	tiles := make([]*raster.Gray16, st.N)
	for j := range tiles {
		tiles[j] = raster.NewGray16(st.W, st.H)
		raster.Quantize16(tiles[j].Pix, st.Plane(j))
		raster.Normalize16(st.Plane(j), tiles[j].Pix)
	}
	p := basic.Production()
	a, err := testEngine.Fit(context.Background(), [][]*raster.Gray16{tiles}, p)
	if err != nil {
		t.Fatal(err)
	}
	b, err := testEngine.BaSiC().Fit(context.Background(), []*raster.Stack{st}, p)
	if err != nil {
		t.Fatal(err)
	}
	if d, i := worstDiff(a[0].Flatfield, b[0].Flatfield, 1); d != 0 {
		t.Errorf("flatfield from counts differs by %g at %d", d, i)
	}
	if d, i := worstDiff(a[0].Darkfield, b[0].Darkfield, 1); d != 0 {
		t.Errorf("darkfield from counts differs by %g at %d", d, i)
	}
}

// The resize to the working size on the GPU is bit-identical to
// basic.ResizeToWorking, from float32 stacks and from counts.
func TestResizeMatchesCPU(t *testing.T) {
	sc := basictest.DefaultScene()
	sc.N, sc.H, sc.W = 5, 1440/4, 1920/4
	st, _ := basictest.Make(sc)
	const ps = 128
	want := basic.ResizeToWorking(nil, st, ps, 4)
	tiles := make([][]uint16, st.N)
	for j := range tiles {
		tiles[j] = raster.Quantize16(nil, st.Plane(j))
	}
	stq := raster.NewStack(st.N, st.H, st.W)
	for j := range tiles {
		raster.Normalize16(stq.Plane(j), tiles[j])
	}
	wantQ := basic.ResizeToWorking(nil, stq, ps, 4)
	for _, c := range []struct {
		name string
		in   fitInput
		want []float64
	}{
		{"float32", fitInput{n: st.N, h: st.H, w: st.W, f32: st.Pix}, want},
		{"counts", fitInput{n: st.N, h: st.H, w: st.W, u16: tiles}, wantQ},
	} {
		got := make([]float64, len(c.want))
		err := testEngine.do(context.Background(), "resize test", func() error {
			D := testEngine.alloc(int64(len(got)) * 8)
			defer testEngine.release(D)
			if err := testEngine.resizeInputs(context.Background(), []fitInput{c.in}, D, ps); err != nil {
				return err
			}
			testEngine.download([]hostSeg{{host: unsafe.Pointer(&got[0]), dev: D, n: int64(len(got)) * 8}})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		worst, at := 0.0, 0
		for i := range got {
			if d := math.Abs(got[i] - c.want[i]); d > worst {
				worst, at = d, i
			}
		}
		if worst != 0 {
			t.Errorf("%s: GPU resize differs from basic.ResizeToWorking by %g at %d", c.name, worst, at)
		}
	}
}

// Splitting a call into batches (as the engine does when device memory is
// short) is lossless: each fit's profiles are bit-identical.
func TestFitBatchingLossless(t *testing.T) {
	var stacks []*raster.Stack
	for seed := range uint64(3) {
		sc := basictest.DefaultScene()
		sc.N, sc.Seed = 24+4*int(seed), 20+seed
		st, _ := basictest.Make(sc)
		stacks = append(stacks, st)
	}
	p := basic.Production()
	all, err := testEngine.BaSiC().Fit(context.Background(), stacks, p)
	if err != nil {
		t.Fatal(err)
	}
	one, err := (&BaSiC{e: testEngine, maxBatch: 1}).Fit(context.Background(), stacks, p)
	if err != nil {
		t.Fatal(err)
	}
	for i := range stacks {
		if d, at := worstDiff(all[i].Flatfield, one[i].Flatfield, 1); d != 0 {
			t.Errorf("stack %d: flatfield differs by %g at %d between batch sizes 3 and 1", i, d, at)
		}
		if d, at := worstDiff(all[i].Darkfield, one[i].Darkfield, 1); d != 0 {
			t.Errorf("stack %d: darkfield differs by %g at %d between batch sizes 3 and 1", i, d, at)
		}
	}
}

// worstDiff returns the largest |a-b|·scale and its index.
func worstDiff(a, b []float32, scale float64) (float64, int) {
	worst, at := 0.0, 0
	for i := range a {
		d := math.Abs(float64(a[i])-float64(b[i])) * scale
		if d > worst || math.IsNaN(d) {
			worst, at = d, i
			if math.IsNaN(d) {
				return math.Inf(1), i
			}
		}
	}
	return worst, at
}

// BenchmarkBaSiCFitBatch is one batch of F production fits (63 tiles each,
// resized to 128 x 128, Production() settings) advanced together, for
// several F: the time per batch, the inner iterations of the batch's
// longest fit and the time per such iteration (the batch's fits run their
// iterations together, so this is the cost of one step of the solve loop).
// Tiles are 360 x 480 (the solve works on the working size; the resize of
// production tiles is measured by the stitch benchmarks).
func BenchmarkBaSiCFitBatch(b *testing.B) {
	sc := basictest.DefaultScene()
	sc.N, sc.H, sc.W = 63, 360, 480
	st, _ := basictest.Make(sc)
	p := basic.Production()
	for _, f := range []int{1, 4, 8, 20} {
		b.Run(fmt.Sprintf("F=%d", f), func(b *testing.B) {
			stacks := make([]*raster.Stack, f)
			for i := range stacks {
				stacks[i] = st
			}
			bs := &BaSiC{e: testEngine, maxBatch: f}
			var iters int
			for b.Loop() {
				profs, err := bs.Fit(context.Background(), stacks, p)
				if err != nil {
					b.Fatal(err)
				}
				iters = 0
				for _, pr := range profs {
					iters = max(iters, pr.Iterations)
				}
			}
			per := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(per*1000, "ms/batch")
			b.ReportMetric(float64(iters), "iterations")
			b.ReportMetric(per*1e6/float64(max(1, iters)), "us/iteration")
		})
	}
}
