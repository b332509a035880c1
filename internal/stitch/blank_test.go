package stitch

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/accuracy"
	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth/synthtest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// A plane whose tiles are all zero (a shutter that stayed closed) is not
// fitted (BaSiC is undefined on it; it stopped the cycle with exit 1): it
// gets the identity profile and a zero mosaic, the sentinel counts it, and
// every other plane comes out as it does without it (the batch's other fits
// keep their own profiles).
func TestBlankPlane(t *testing.T) {
	cfg := project(t)
	// Batches of 4 planes: the blank plane is in a batch with two that are fitted
	// (CH1 Z2, Z3; CH1 Z1 is the reference, fitted before).
	run := func(cfg *config.Config) (*Result, error) {
		return Run(context.Background(), Options{Config: cfg, Cycle: 1, Engine: NewCPUEngine(2), Workers: 2, Batch: 4})
	}
	if _, err := run(cfg); err != nil {
		t.Fatal(err)
	}
	out := OutDir(cfg.ProjectDir, 1)
	files := func() map[string][]byte {
		m := map[string][]byte{}
		err := filepath.Walk(out, func(p string, fi os.FileInfo, err error) error {
			if err != nil || fi.IsDir() || !strings.HasSuffix(p, ".tif") {
				return err
			}
			b, err := os.ReadFile(p)
			m[strings.TrimPrefix(p, out+"/")] = b
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	before := files()

	synthtest.BlankPlane(t, cfg, 2, 1)
	if err := os.RemoveAll(out); err != nil {
		t.Fatal(err)
	}
	if _, err := run(cfg); err != nil {
		t.Fatalf("a blank plane stopped the stage: %v", err)
	}
	after := files()

	mosaic, err := tiffio.ReadGray16(filepath.Join(out, "CH2", layout.StitchedPlane(1)))
	if err != nil {
		t.Fatal(err)
	}
	if !raster.AllZero16(mosaic.Pix) {
		t.Error("the blank plane's mosaic is not all zero")
	}
	identityProfileFiles(t, out, 2, 1)
	for name, b := range before {
		if strings.HasPrefix(name, "CH2/01") || strings.HasPrefix(name, "CH2/"+layout.BaSiCDir+"/01_") {
			continue
		}
		if !bytes.Equal(b, after[name]) {
			t.Errorf("%s differs from the run without the blank plane", name)
		}
	}
	sent, err := os.ReadFile(layout.Sentinel(out))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(sent), "blank_planes=1\n") {
		t.Errorf("sentinel does not count the blank plane:\n%s", sent)
	}
}

// When every tile of the reference plane (CH1 Z1 of three planes) is zero,
// the tiles are aligned on the nearest plane of the reference channel that
// is not blank (CH1 Z2), so the positions come out as accurate as usual
// instead of staying nominal (no pair can be measured on zeros).
func TestBlankReferencePlane(t *testing.T) {
	cfg := project(t)
	synthtest.BlankPlane(t, cfg, 1, 1)
	if _, err := run(cfg); err != nil {
		t.Fatal(err)
	}
	rep, err := accuracy.Evaluate(cfg.ProjectDir, 1)
	if err != nil {
		t.Fatal(err)
	}
	p := rep.Positions
	if p == nil {
		t.Fatal("no tile positions evaluated")
	}
	t.Logf("tile positions against the truth: rms %.3f px, worst %.3f px (tile %d)", p.RMS, p.Max, p.MaxTile)
	if p.Max > 0.5 {
		t.Errorf("worst tile position error %.3f px, want <= 0.5 px (aligned on CH1 Z2)", p.Max)
	}
	// CH1 Z1 is a blank plane like any other (identity profile, counted);
	// CH1 Z2, the new reference, keeps the profile it was aligned with.
	sent, err := os.ReadFile(layout.Sentinel(OutDir(cfg.ProjectDir, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(sent), "blank_planes=1\n") {
		t.Errorf("sentinel does not count the blank reference plane:\n%s", sent)
	}
	identityProfileFiles(t, OutDir(cfg.ProjectDir, 1), 1, 1)
}

// identityProfileFiles checks that the profile files of channel ch,
// z-plane z in the stage's output dir out are the identity: flatfield 1
// and darkfield 0 everywhere (a blank plane's).
func identityProfileFiles(t *testing.T, out string, ch, z int) {
	t.Helper()
	prof := filepath.Join(out, layout.ChannelDir(ch), layout.BaSiCDir, layout.BaSiCStem(z))
	flat, err := tiffio.ReadFloat32(prof + "_flatfield.tif")
	if err != nil {
		t.Fatal(err)
	}
	dark, err := tiffio.ReadFloat32(prof + "_darkfield.tif")
	if err != nil {
		t.Fatal(err)
	}
	for i := range flat.Pix {
		if flat.Pix[i] != 1 || dark.Pix[i] != 0 {
			t.Fatalf("CH%d Z%d profile at %d: flatfield %g, darkfield %g; want the identity (1, 0) of a blank plane", ch, z, i, flat.Pix[i], dark.Pix[i])
		}
	}
}
