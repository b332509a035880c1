package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/cliutil"
	"github.com/kintsugi-hpc/kintsugi-go/internal/cliutil/stagecli"
	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/gpu"
	"github.com/kintsugi-hpc/kintsugi-go/internal/stitch"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func noEnv(string) string { return "" }

// closeFails is the CPU engine with a Close that fails.
type closeFails struct{ *stitch.CPUEngine }

func (closeFails) Close() error { return errors.New("device reset failed") }

// TestRunAndCorrectTile: `run` on the GPU device (an engine whose teardown
// fails: the finished run becomes an error naming it, exit 1), then
// `kintsugi-stitch correct` applies the profiles the run saved to one tile's
// z-stack; every page must equal the correction computed here from the raw
// tile and the saved profile files.
func TestRunAndCorrectTile(t *testing.T) {
	cfgPath, out := tinyProject(t, t.TempDir(), 2)
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	o := commandOptions{ConfigPath: cfgPath, Cycle: 1, Opts: stagecli.Opts{Workers: 2, Logger: quiet(), Getenv: noEnv}}
	opened := 0
	fake := func(gpu.Options) (stitch.Engine, error) {
		opened++
		return closeFails{stitch.NewCPUEngine(2)}, nil
	}
	g := o
	g.Device, g.GPU = "gpu", 1
	err = runCommand(context.Background(), g, runOptions{OpenGPU: fake})
	if opened != 1 || err == nil || !strings.Contains(err.Error(), "device reset failed") || cliutil.ExitCode(err) != cliutil.ExitFailure {
		t.Errorf("engine close failure: opened %d, err %v, want exit 1 naming it", opened, err)
	}
	tif := filepath.Join(t.TempDir(), "t5.tif")
	if err := correctCommand(context.Background(), o, correctOptions{Channel: 2, Tile: 5, Out: tif}); err != nil {
		t.Fatal(err)
	}
	pages, err := tiffio.ReadGray16Pages(tif)
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) != 2 {
		t.Fatalf("%d pages, want one per z-plane (2)", len(pages))
	}
	for i, pg := range pages {
		z := i + 1
		raw, err := tiffio.ReadGray16(filepath.Join(cfg.ProjectDir, "data", "raw", "cyc01", fmt.Sprintf("1_00005_Z%03d_CH2.tif", z)))
		if err != nil {
			t.Fatal(err)
		}
		flat, _ := tiffio.ReadFloat32(filepath.Join(out, "CH2", "basic", fmt.Sprintf("%02d_flatfield.tif", z)))
		dark, _ := tiffio.ReadFloat32(filepath.Join(out, "CH2", "basic", fmt.Sprintf("%02d_darkfield.tif", z)))
		worst := 0
		for j, v := range raw.Pix {
			f := max(float64(flat.Pix[j]), cfg.BasicFlatfieldMin)
			want := min(max((float64(v)-float64(dark.Pix[j]))/f, 0), 65535)
			d := int(pg.Pix[j]) - int(want+0.5)
			worst = max(worst, d, -d)
		}
		// float32 profile arithmetic vs float64 here: at most one count.
		if worst > 1 {
			t.Errorf("z%d: corrected tile differs from (raw - dark)/max(flat, min) by %d counts", z, worst)
		}
	}
	// Bad arguments name the flag.
	for _, bad := range []correctOptions{{Channel: 7, Tile: 1, Out: tif}, {Channel: 1, Tile: 99, Out: tif}, {Channel: 1, Tile: 1, FlatfieldMin: 2, Out: tif}} {
		err := correctCommand(context.Background(), o, bad)
		if cliutil.ExitCode(err) != cliutil.ExitUsage {
			t.Errorf("%+v: err %v, want a usage error", bad, err)
		}
	}
	err = correctCommand(context.Background(), o, correctOptions{Channel: 1, Tile: 1, Profiles: t.TempDir(), Out: tif})
	if err == nil || !strings.Contains(err.Error(), "01_flatfield.tif") {
		t.Errorf("missing profiles: %v", err)
	}
}

// TestGPUEngineChoice: without the cuda tag the default device fails with
// ErrNoCUDA and a usage exit code, nothing runs on the CPU and nothing is
// written; an unknown cycle names the flag.
func TestGPUEngineChoice(t *testing.T) {
	cfgPath, out := tinyProject(t, t.TempDir(), 1)
	o := commandOptions{ConfigPath: cfgPath, Cycle: 1, Opts: stagecli.Opts{Workers: 2, Logger: quiet(), Getenv: noEnv}}
	if !gpu.Built {
		g := o
		g.Device = "gpu"
		err := runCommand(context.Background(), g, runOptions{})
		if !errors.Is(err, gpu.ErrNoCUDA) || cliutil.ExitCode(err) != cliutil.ExitUsage {
			t.Fatalf("err = %v, want ErrNoCUDA as a usage error", err)
		}
		if _, statErr := os.Stat(filepath.Dir(out)); statErr == nil {
			t.Error("output directory created although the GPU could not be opened")
		}
	}
	o.Cycle = 9
	o.Device = "cpu"
	if err := runCommand(context.Background(), o, runOptions{}); cliutil.ExitCode(err) != cliutil.ExitUsage || !strings.Contains(err.Error(), "--cycle 9") {
		t.Errorf("unknown cycle: %v", err)
	}
}
