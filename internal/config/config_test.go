package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// minimal is a valid config; tests edit it.
const minimal = `
project_dir: /data/p
cycles: [1, 2]
channels: [1, 2, 3, 4]
channel_names: {1: [DAPI-01, Blank, Blank, Blank], 2: [DAPI-02, CD31, CD8, CD45]}
tile_rows: 9
tile_cols: 7
tile_overlap: 0.3
ncc_threshold: 0.078
pou: 0.5
resources:
  accounts:
    - {name: clive, gpu_slots: 3}
    - {name: maigan, gpu_slots: 2, partition_gpu: hpg-b200}
`

func TestParseMinimal(t *testing.T) {
	c, err := Parse("c.yaml", []byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	if c.Device != "gpu" || c.BlendSigma != 15 || c.BasicMaxIterations != 500 || c.BasicMaxReweight != 25 || !c.BasicDarkfield {
		t.Errorf("defaults not applied: %+v", c)
	}
	if got := c.Resources.Accounts[0].PartitionGPU; got != DefaultPartitionGPU {
		t.Errorf("default partition_gpu = %q", got)
	}
	if got := c.ChannelNames["2"][1]; got != "CD31" {
		t.Errorf("channel_names[2][1] = %q (integer keys must be read)", got)
	}
	if c.Resources.CPUsStitch != DefaultCPUsStitch {
		t.Errorf("cpus_stitch default = %d", c.Resources.CPUsStitch)
	}
}

func TestExampleConfigIsValid(t *testing.T) {
	if _, err := Load(filepath.Join("..", "..", "config.yaml")); err != nil {
		t.Fatal(err)
	}
}

func TestBadConfigs(t *testing.T) {
	cases := []struct {
		name, edit, wantKey, wantMsg string
	}{
		{"missing key", "tile_rows: 9\n", "(top level)", "tile_rows"},
		{"unknown key", "pou: 0.5\n", "(top level)", "pou: 0.5\ncolour"},
		{"overlap zero", "tile_overlap: 0.3", "tile_overlap", "tile_overlap: 0"},
		{"overlap one", "tile_overlap: 0.3", "tile_overlap", "tile_overlap: 1.0"},
		{"overlap string", "tile_overlap: 0.3", "tile_overlap", "tile_overlap: thirty"},
		{"negative slots", "gpu_slots: 3", "resources.accounts[0].gpu_slots", "gpu_slots: -1"},
		{"lower basic iterations", "pou: 0.5", "basic_max_iterations", "pou: 0.5\nbasic_max_iterations: 100"},
		{"darkfield off", "pou: 0.5", "basic_darkfield", "pou: 0.5\nbasic_darkfield: false"},
		{"bad device", "pou: 0.5", "device", "pou: 0.5\ndevice: tpu"},
		{"names per channel", "[DAPI-01, Blank, Blank, Blank]", "channel_names.1", "[DAPI-01]"},
		{"duplicate account", "name: maigan", "resources.accounts[1].name", "name: clive"},
		{"unknown account key", "gpu_slots: 3}", "resources.accounts[0]", "gpu_slots: 3, gpus: 1}"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var text string
			switch tc.name {
			case "missing key":
				text = strings.Replace(minimal, tc.edit, "", 1)
			case "unknown key":
				text = strings.Replace(minimal, "pou: 0.5", "pou: 0.5\ncolour: red", 1)
			default:
				text = strings.Replace(minimal, tc.edit, tc.wantMsg, 1)
			}
			if text == minimal {
				t.Fatal("edit did not apply")
			}
			_, err := Parse("bad.yaml", []byte(text))
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			if !strings.Contains(msg, "bad.yaml") || !strings.Contains(msg, tc.wantKey) {
				t.Errorf("error %q does not name file and key %q", msg, tc.wantKey)
			}
			if tc.name == "unknown key" && !strings.Contains(msg, "colour") {
				t.Errorf("error %q does not name the unknown key", msg)
			}
			if tc.name == "missing key" && !strings.Contains(msg, "tile_rows") {
				t.Errorf("error %q does not name the missing key", msg)
			}
		})
	}
}

func TestLiveAccounts(t *testing.T) {
	for _, form := range []string{
		`live_accounts: '[{"name":"clive","gpu_avail":1,"cpu_avail":4,"mem_avail_gb":100}]'`,
		`live_accounts: [{name: clive, gpu_avail: 1, cpu_avail: 4, mem_avail_gb: 100}]`,
	} {
		c, err := Parse("c.yaml", []byte(minimal+form+"\n"))
		if err != nil {
			t.Fatalf("%s: %v", form, err)
		}
		if len(c.LiveAccounts) != 1 || *c.LiveAccounts[0].GPUAvail != 1 {
			t.Errorf("%s: got %+v", form, c.LiveAccounts)
		}
	}
	_, err := Parse("c.yaml", []byte(minimal+`live_accounts: '[{"nam":"x"}]'`+"\n"))
	if err == nil || !strings.Contains(err.Error(), "live_accounts") {
		t.Errorf("bad live_accounts: err = %v", err)
	}
}

func TestLoadErrors(t *testing.T) {
	if _, err := Load(filepath.Join(t.TempDir(), "nope.yaml")); err == nil || !strings.Contains(err.Error(), "nope.yaml") {
		t.Errorf("missing file: %v", err)
	}
	p := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(p, []byte("project_dir: [unclosed\n"), 0o644)
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), "invalid YAML") {
		t.Errorf("bad yaml: %v", err)
	}
	os.WriteFile(p, nil, 0o644)
	if _, err := Load(p); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("empty: %v", err)
	}
}

func TestStageDefaultsAndOverrides(t *testing.T) {
	base := "project_dir: /tmp/p\ncycles: [1]\nchannels: [1, 2]\ntile_rows: 1\ntile_cols: 2\ntile_overlap: 0.3\nncc_threshold: 0.078\npou: 0.5\n" +
		"resources: {accounts: [{name: a, gpu_slots: 1}]}\nchannel_names: {1: [DAPI-01, CD3 / x]}\nwavelengths: {'1': [358, 461]}\n"
	cfg, err := Parse("c.yaml", []byte(base))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Decon != DefaultDecon() || cfg.EDF.Method != "variance" || cfg.EDF.Sigma != 10 || cfg.QualityGate != DefaultQualityGate() ||
		cfg.Registration.NonRigid.MaxDim != 4096 || cfg.Registration.ReferenceCycle != 1 {
		t.Fatalf("defaults not applied: %+v %+v %+v %+v", cfg.Decon, cfg.EDF, cfg.QualityGate, cfg.Registration)
	}
	if got := cfg.EDFFileName(1, 2); got != "CD3___x.tif" {
		t.Errorf("EDFFileName(1, 2) = %q, want CD3___x.tif", got)
	}
	if got := cfg.EDFFileName(2, 1); got != "CH1_edf.tif" {
		t.Errorf("EDFFileName(2, 1) = %q, want CH1_edf.tif", got)
	}
	if _, _, err := cfg.Wavelength(2); err == nil || !strings.Contains(err.Error(), "wavelengths.2") {
		t.Errorf("missing wavelength: err %v, want one naming wavelengths.2", err)
	}
	cfg, err = Parse("c.yaml", []byte(base+"decon: {algorithm: biggs_andrews, iterations: 40}\nedf: {method: wavelet, sigma: 5}\nregistration: {reference_cycle: 1, non_rigid: {sigma_ratio: 0.02}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Decon.Algorithm != "biggs_andrews" || cfg.Decon.Iterations != 40 || cfg.Decon.StopCriterion != 5 ||
		cfg.EDF.Method != "wavelet" || cfg.EDF.Sigma != 5 || cfg.EDF.RadiusX != 2 || cfg.Registration.NonRigid.SigmaRatio != 0.02 ||
		cfg.Registration.NonRigid.MaxDim != 4096 {
		t.Fatalf("overrides: %+v %+v %+v", cfg.Decon, cfg.EDF, cfg.Registration)
	}
	if _, err := Parse("c.yaml", []byte(base+"decon: {algorithm: fast}\n")); err == nil || !strings.Contains(err.Error(), "decon.algorithm") {
		t.Errorf("bad decon.algorithm: err %v, want one naming decon.algorithm", err)
	}
	// stitching.global_refinement: on by default, off when asked, a boolean
	cfg, err = Parse("c.yaml", []byte(base))
	if err != nil || !cfg.Stitching.GlobalRefinement {
		t.Errorf("stitching.global_refinement default: %+v, %v; want true", cfg.Stitching, err)
	}
	cfg, err = Parse("c.yaml", []byte(base+"stitching: {global_refinement: false}\n"))
	if err != nil || cfg.Stitching.GlobalRefinement {
		t.Errorf("stitching.global_refinement false: %+v, %v", cfg.Stitching, err)
	}
	if _, err := Parse("c.yaml", []byte(base+"stitching: {global_refinement: maybe}\n")); err == nil || !strings.Contains(err.Error(), "stitching.global_refinement") {
		t.Errorf("non-boolean stitching.global_refinement: err %v, want one naming the key", err)
	}
	// stitching.profile_mode: compatible by default, envelope_darkfield when
	// asked, nothing else
	if cfg, err = Parse("c.yaml", []byte(base)); err != nil || cfg.Stitching.ProfileMode != "compatible" {
		t.Errorf("stitching.profile_mode default: %+v, %v; want compatible", cfg.Stitching, err)
	}
	if cfg, err = Parse("c.yaml", []byte(base+"stitching: {profile_mode: envelope_darkfield}\n")); err != nil || cfg.Stitching.ProfileMode != "envelope_darkfield" {
		t.Errorf("stitching.profile_mode envelope_darkfield: %+v, %v", cfg.Stitching, err)
	}
	if _, err := Parse("c.yaml", []byte(base+"stitching: {profile_mode: cached}\n")); err == nil || !strings.Contains(err.Error(), "stitching.profile_mode") {
		t.Errorf("unknown stitching.profile_mode: err %v, want one naming the key", err)
	}
}
