package stitch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/cliutil"
	"github.com/kintsugi-hpc/kintsugi-go/internal/gpu"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestCorrectTile: `kintsugi-stitch correct` applies the profiles a run
// saved to one tile's z-stack; every page must equal the correction computed
// here from the raw tile and the saved profile files.
func TestCorrectTile(t *testing.T) {
	cfg := project(t)
	if _, err := run(cfg); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "t5.tif")
	o := CommandOptions{ConfigPath: cfg.Path, Cycle: 1, Workers: 2, Logger: quiet()}
	if err := CorrectTileCommand(context.Background(), o, CorrectTileOptions{Channel: 2, Tile: 5, Out: out}); err != nil {
		t.Fatal(err)
	}
	pages, err := tiffio.ReadGray16Pages(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) != 3 {
		t.Fatalf("%d pages, want one per z-plane (3)", len(pages))
	}
	for i, pg := range pages {
		z := i + 1
		raw, err := tiffio.ReadGray16(filepath.Join(cfg.ProjectDir, "data", "raw", "cyc01", fmt.Sprintf("1_00005_Z%03d_CH2.tif", z)))
		if err != nil {
			t.Fatal(err)
		}
		flat, _ := tiffio.ReadFloat32(filepath.Join(OutDir(cfg.ProjectDir, 1), "CH2", "basic", fmt.Sprintf("%02d_flatfield.tif", z)))
		dark, _ := tiffio.ReadFloat32(filepath.Join(OutDir(cfg.ProjectDir, 1), "CH2", "basic", fmt.Sprintf("%02d_darkfield.tif", z)))
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
	for _, bad := range []CorrectTileOptions{{Channel: 7, Tile: 1, Out: out}, {Channel: 1, Tile: 99, Out: out}} {
		err := CorrectTileCommand(context.Background(), o, bad)
		if cliutil.ExitCode(err) != cliutil.ExitUsage {
			t.Errorf("%+v: err %v, want a usage error", bad, err)
		}
	}
	err = CorrectTileCommand(context.Background(), o, CorrectTileOptions{Channel: 1, Tile: 1, Profiles: t.TempDir(), Out: out})
	if err == nil || !strings.Contains(err.Error(), "01_flatfield.tif") {
		t.Errorf("missing profiles: %v", err)
	}
}

// TestGPUWithoutCUDA: in a build without the cuda tag, the default device
// fails with ErrNoCUDA and a usage exit code; nothing runs on the CPU.
func TestGPUWithoutCUDA(t *testing.T) {
	if gpu.Built {
		t.Skip("CUDA build")
	}
	cfg := project(t)
	o := CommandOptions{ConfigPath: cfg.Path, Cycle: 1, Workers: 2, Device: "gpu", Logger: quiet()}
	err := RunCommand(context.Background(), o)
	if !errors.Is(err, gpu.ErrNoCUDA) || cliutil.ExitCode(err) != cliutil.ExitUsage {
		t.Fatalf("err = %v, want ErrNoCUDA as a usage error", err)
	}
	if _, statErr := tiffio.ReadInfo(filepath.Join(OutDir(cfg.ProjectDir, 1), "CH1", "01.tif")); statErr == nil {
		t.Error("output written although the GPU could not be opened")
	}
	o.Cycle = 9
	if err := RunCommand(context.Background(), o); cliutil.ExitCode(err) != cliutil.ExitUsage || !strings.Contains(err.Error(), "--cycle 9") {
		t.Errorf("unknown cycle: %v", err)
	}
}
