package layout

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCycleNames(t *testing.T) {
	for _, tc := range []struct {
		c            int
		label, name  string
		metrics, trf string
	}{
		{1, "01", "cyc01", "cyc01_metrics.json", "cyc01_transform.json"},
		{12, "12", "cyc12", "cyc12_metrics.json", "cyc12_transform.json"},
		{100, "100", "cyc100", "cyc100_metrics.json", "cyc100_transform.json"},
	} {
		if got := CycleLabel(tc.c); got != tc.label {
			t.Errorf("CycleLabel(%d) = %q, want %q", tc.c, got, tc.label)
		}
		if got := CycleName(tc.c); got != tc.name {
			t.Errorf("CycleName(%d) = %q, want %q", tc.c, got, tc.name)
		}
		if got := MetricsName(tc.c); got != tc.metrics {
			t.Errorf("MetricsName(%d) = %q, want %q", tc.c, got, tc.metrics)
		}
		if got := TransformName(tc.c); got != tc.trf {
			t.Errorf("TransformName(%d) = %q, want %q", tc.c, got, tc.trf)
		}
	}
}

// TestFileNames holds the per-channel and per-plane names to the original's
// (kintsugi-pipeline.md: {z:02d}.tif, deconv_{k:03d}.tif, basic/{z:02d}_flatfield.tif).
func TestFileNames(t *testing.T) {
	for got, want := range map[string]string{
		ChannelDir(3): "CH3", StitchedPlane(7): "07.tif", StitchedPlane(12): "12.tif",
		DeconPlane(1): "deconv_001.tif", DeconPlane(120): "deconv_120.tif",
		Flatfield(2): "02_flatfield.tif", Darkfield(2): "02_darkfield.tif",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	if ok, _ := filepath.Match(DeconPlaneGlob, DeconPlane(5)); !ok {
		t.Errorf("DeconPlaneGlob %q does not match %q", DeconPlaneGlob, DeconPlane(5))
	}
}

func TestProjectPaths(t *testing.T) {
	p := filepath.Join("some", "project")
	j := func(parts ...string) string { return filepath.Join(append([]string{p}, parts...)...) }
	for _, tc := range []struct{ got, want string }{
		{RawDir(p), j("data", "raw")},
		{ProcessedDir(p), j("data", "processed")},
		{Stitched(p, 2), j("data", "processed", "stitched", "cyc02")},
		{Deconvolved(p, 2), j("data", "processed", "deconvolved", "cyc02")},
		{EDFOut(p, 2), j("data", "processed", "edf", "cyc02")},
		{Registered(p), j("data", "processed", "registered")},
		{StageOut(p, Stitch, 3), Stitched(p, 3)},
		{StageOut(p, Decon, 3), Deconvolved(p, 3)},
		{StageOut(p, EDF, 3), EDFOut(p, 3)},
		{StageOut(p, Registration, 3), Registered(p)},
		{StageSentinel(p, Decon, 4), j("data", "processed", "deconvolved", "cyc04", ".snakemake_complete")},
		{StageSentinel(p, Registration, 4), j("data", "processed", "registered", ".snakemake_complete")},
		{QCDir(p), j("qc_plots")},
		{QCStage(p, EDF), j("qc_plots", "edf")},
		{QCSentinel(p, Registration), j("qc_plots", ".snakemake_complete_registration")},
		{QCReport(p), j("qc_plots", "report.html")},
		{Logs(p), j("slurm", "logs", "snakemake")},
		{Config(p), j(".kintsugi", "config.json")},
	} {
		if tc.got != tc.want {
			t.Errorf("got %s, want %s", tc.got, tc.want)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("StageDir(\"stitched\") did not panic (want: unknown stage)")
		}
	}()
	StageDir("stitched")
}

// TestResolveRawCycleDir walks the original's variants in order, removing
// the winner each time (kintsugi-pipeline.md: cyc{n:03d}_*, cyc{n:02d}_*,
// Cyc{n:02d}_*, then the exact names).
func TestResolveRawCycleDir(t *testing.T) {
	p := t.TempDir()
	raw := RawDir(p)
	order := []string{"cyc001_a", "cyc001_b", "cyc01_x", "Cyc01_y", "cyc001", "cyc01", "Cyc01"}
	for _, d := range order {
		if err := os.MkdirAll(filepath.Join(raw, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A file with a matching name is no cycle directory; another cycle's is ignored.
	for _, f := range []string{"cyc001_0file", "cyc02_other"} {
		if err := os.WriteFile(filepath.Join(raw, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(raw, "cyc002_z"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, want := range order {
		got, ok := ResolveRawCycleDir(p, 1)
		if !ok || got != filepath.Join(raw, want) {
			t.Fatalf("ResolveRawCycleDir = %q, %v; want %s", got, ok, want)
		}
		if RawCycleDir(p, 1) != got {
			t.Fatalf("RawCycleDir = %q, want %q", RawCycleDir(p, 1), got)
		}
		if err := os.Remove(got); err != nil {
			t.Fatal(err)
		}
	}
	if got, ok := ResolveRawCycleDir(p, 1); ok {
		t.Fatalf("no cycle-1 directory left, got %q", got)
	}
	if got, want := RawCycleDir(p, 1), filepath.Join(raw, "cyc01"); got != want {
		t.Fatalf("RawCycleDir fallback %q, want %q", got, want)
	}
	if got, _ := ResolveRawCycleDir(p, 2); got != filepath.Join(raw, "cyc002_z") {
		t.Fatalf("cycle 2: %q", got)
	}
}

func TestForSnakemake(t *testing.T) {
	p := t.TempDir()
	if err := os.MkdirAll(filepath.Join(RawDir(p), "cyc002_run"), 0o755); err != nil {
		t.Fatal(err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(wd, p)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ForSnakemake(rel, []int{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{s.Processed, s.QCDir, s.LogDir, s.ConfigJSON, s.QCReport} {
		if !filepath.IsAbs(path) || !strings.HasPrefix(path, p) {
			t.Errorf("%s: want an absolute path under %s", path, p)
		}
	}
	if s.Processed != ProcessedDir(p) || s.QCDir != QCDir(p) || s.LogDir != Logs(p) || s.ConfigJSON != Config(p) || s.QCReport != QCReport(p) {
		t.Errorf("paths %+v differ from the package's", s)
	}
	if s.CycleLabel["1"] != "01" || s.CycleLabel["2"] != "02" || len(s.CycleLabel) != 2 {
		t.Errorf("cycle_label %v", s.CycleLabel)
	}
	if s.RawDir["1"] != filepath.Join(RawDir(p), "cyc01") || s.RawDir["2"] != filepath.Join(RawDir(p), "cyc002_run") {
		t.Errorf("raw_dir %v", s.RawDir)
	}
	for _, st := range Stages {
		got := strings.ReplaceAll(s.Sentinel[st], CycleWildcard, CycleLabel(2))
		if want := StageSentinel(p, st, 2); got != want {
			t.Errorf("sentinel %s: %s with the wildcard filled is %s, want %s", st, s.Sentinel[st], got, want)
		}
		if s.QCSentinel[st] != QCSentinel(p, st) {
			t.Errorf("qc_sentinel %s: %s", st, s.QCSentinel[st])
		}
	}
	if !strings.Contains(s.Sentinel[Stitch], "cyc"+CycleWildcard) || strings.Contains(s.Sentinel[Registration], CycleWildcard) {
		t.Errorf("sentinel %v: per-cycle stages want cyc{cycle}, registration none", s.Sentinel)
	}
}
