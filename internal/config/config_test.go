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
