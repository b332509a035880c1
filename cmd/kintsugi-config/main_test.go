package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/assign"
	"github.com/kintsugi-hpc/kintsugi-go/internal/cliutil"
	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/exectest"
)

// execute runs the app as main would, with no SLURM commands to run, and
// returns the exit code, stdout and the error text.
func execute(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return executeWith(t, noSLURM, args...)
}

// noSLURM is the runner of the tests that need no SLURM command.
func noSLURM(_ context.Context, name string, _ ...string) ([]byte, error) {
	return nil, fmt.Errorf("%s: no SLURM in this test", name)
}

// executeWith is execute with run for the SLURM commands.
func executeWith(t *testing.T, run assign.Runner, args ...string) (int, string, string) {
	t.Helper()
	out, err := exectest.Stdout(t, func() error {
		return newApp(run).RunContext(context.Background(), append([]string{"kintsugi-config", "--log-format", "text", "--log-level", "error"}, args...))
	})
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	return cliutil.ExitCode(err), out, msg
}

func write(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// The original's documented example config (issue 16).
const issueConfig = `project_dir: /data/p
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
    - {name: acct_a, gpu_slots: 3}
`

// The JSON contract the Snakefile reads (README "kintsugi-config check").
func TestCheckContract(t *testing.T) {
	code, out, msg := execute(t, "check", write(t, "config.yaml", issueConfig))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, msg)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, out)
	}
	want := map[string]any{
		"channel_names": map[string]any{
			"1": []any{"DAPI-01", "Blank_1a", "Blank_1b", "Blank_1c"},
			"2": []any{"DAPI-02", "CD31", "CD8", "CD45"},
		},
		"edf_files": map[string]any{
			"1": []any{"DAPI-01.tif", "Blank_1a.tif", "Blank_1b.tif", "Blank_1c.tif"},
			"2": []any{"DAPI-02.tif", "CD31.tif", "CD8.tif", "CD45.tif"},
		},
		"renamed": []any{
			map[string]any{"cycle": 1.0, "channel": 2.0, "from": "Blank", "to": "Blank_1a"},
			map[string]any{"cycle": 1.0, "channel": 3.0, "from": "Blank", "to": "Blank_1b"},
			map[string]any{"cycle": 1.0, "channel": 4.0, "from": "Blank", "to": "Blank_1c"},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
	// Nothing renamed: "renamed" is an empty list; a cycle without names has CH files.
	text := strings.Replace(issueConfig, "Blank, Blank, Blank]", "CD3, CD4, CD5]", 1)
	text = strings.Replace(text, "cycles: [1, 2]", "cycles: [1, 2, 3]", 1)
	code, out, msg = execute(t, "check", write(t, "config.yaml", text))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, msg)
	}
	if !strings.Contains(out, `"renamed": []`) || !strings.Contains(out, `"3": [
      "CH1_edf.tif",`) {
		t.Errorf("stdout:\n%s", out)
	}
}

func TestCheckErrors(t *testing.T) {
	cases := []struct {
		name string
		args func(t *testing.T) []string
		want string
	}{
		{"bad name", func(t *testing.T) []string {
			return []string{"check", write(t, "c.yaml", strings.Replace(issueConfig, "CD8,", `"CD8,CD9",`, 1))}
		}, "key channel_names.2[2]:"},
		{"schema", func(t *testing.T) []string {
			return []string{"check", write(t, "c.yaml", strings.Replace(issueConfig, "pou: 0.5", "pou: x", 1))}
		}, "key pou:"},
		{"two files", func(t *testing.T) []string {
			p := write(t, "c.yaml", issueConfig)
			return []string{"check", p, p}
		}, "exactly one"},
		{"no file", func(t *testing.T) []string { return []string{"check"} }, "exactly one"},
		{"missing file", func(t *testing.T) []string { return []string{"check", filepath.Join(t.TempDir(), "nope.yaml")} }, "nope.yaml"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, msg := execute(t, tc.args(t)...)
			if code != cliutil.ExitUsage || out != "" || !strings.Contains(msg, tc.want) {
				t.Errorf("exit %d, stdout %q, error %q; want exit 2, no output, an error naming %q", code, out, msg, tc.want)
			}
		})
	}
}

func TestCheckRaw(t *testing.T) {
	many := strings.Builder{}
	for i := 0; i <= config.MaxKeysPerMapping; i++ {
		many.WriteString("k" + itoa(i) + ": 1\n")
	}
	deep := strings.Repeat("[", config.MaxDepth+2) + strings.Repeat("]", config.MaxDepth+2) + "\n"
	cases := []struct{ name, text, want string }{
		{"duplicate key", "a: 1\nb:\n  c: 1\n  c: 2\n", "key b.c: line 4: duplicate key (first at line 3)"},
		{"alias", "a: &x [1]\nb: *x\n", "anchor &x"},
		{"alias only", "b: *x\n", "invalid YAML"},
		{"merge key", "a: {b: 1}\nc:\n  <<: {b: 2}\n", "merge key"},
		{"too many keys", many.String(), fmt.Sprintf("%d keys in one mapping", config.MaxKeysPerMapping+1)},
		{"too deep", "a: " + deep, "levels deep"},
		{"two documents", "a: 1\n---\nb: 2\n", "more than one YAML document"},
		{"empty", "", "empty file"},
		{"too big", "a: '" + strings.Repeat("x", config.MaxFileBytes) + "'\n", "larger than"},
		{"not a regular file", "", "not a regular file"},
		{"bad syntax", "a: [1\n", "invalid YAML"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			good := write(t, "good.yaml", issueConfig)
			bad := write(t, "bad.yaml", tc.text)
			if tc.name == "not a regular file" {
				os.Remove(bad)
				if err := syscall.Mkfifo(bad, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			code, out, msg := execute(t, "check", "--raw", good, bad)
			if code != cliutil.ExitUsage || out != "" || !strings.Contains(msg, "bad.yaml") || !strings.Contains(msg, tc.want) {
				t.Errorf("exit %d, error %q; want exit 2 naming bad.yaml and %q", code, msg, tc.want)
			}
		})
	}
	if code, _, msg := execute(t, "check", "--raw", write(t, "good.yaml", issueConfig)); code != 0 {
		t.Errorf("a valid file: exit %d: %s", code, msg)
	}
	if code, _, _ := execute(t, "check", "--raw"); code != cliutil.ExitUsage {
		t.Errorf("no files: exit %d, want 2", code)
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// fixture is internal/project/testdata/<name>: a project directory with
// meta/ only (init reads it and writes nothing there with --out elsewhere).
func fixture(name string) string {
	return filepath.Join("..", "..", "internal", "project", "testdata", name)
}

func TestInit(t *testing.T) {
	for _, name := range []string{"kintsugi", "codex"} {
		t.Run(name, func(t *testing.T) {
			proj := fixture(name)
			cfgPath := filepath.Join(t.TempDir(), "config.yaml")
			args := []string{"init", "--project", proj, "--out", cfgPath, "--kintsugi-dir", "/opt/k", "--account", "acct_a:3", "--account", "acct_b:2",
				"--partition-gpu", "gpu", "--partition-cpu", "cpu", "--resource", "mem_stitch=1500", "--device", "cpu"}
			code, out, msg := execute(t, args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, msg)
			}
			for _, want := range []string{"channel_names.1", "Blank_1a", "renamed  cycle 1 channel 2: Blank -> Blank_1a", "from experiment.json", "wrote " + cfgPath} {
				if !strings.Contains(out, want) {
					t.Errorf("report lacks %q:\n%s", want, out)
				}
			}
			// The written config passes the project's own check, names unchanged.
			code, js, msg := execute(t, "check", cfgPath)
			if code != 0 {
				t.Fatalf("check of the written config: exit %d: %s", code, msg)
			}
			var rep struct {
				ChannelNames map[string][]string `json:"channel_names"`
				Renamed      []any               `json:"renamed"`
			}
			if err := json.Unmarshal([]byte(js), &rep); err != nil || len(rep.Renamed) != 0 || rep.ChannelNames["1"][1] != "Blank_1a" {
				t.Errorf("check: %v %+v", err, rep)
			}
			text, _ := os.ReadFile(cfgPath)
			for _, want := range []string{"device: cpu", "mem_stitch: 1500", "{name: acct_a, gpu_slots: 3, partition_gpu: gpu, partition_cpu: cpu}", "kintsugi_dir: /opt/k"} {
				if !strings.Contains(string(text), want) {
					t.Errorf("config lacks %q", want)
				}
			}
			// No overwrite without --force; with it, the file is replaced.
			os.WriteFile(cfgPath, []byte("mine\n"), 0o644)
			code, _, msg = execute(t, args...)
			if b, _ := os.ReadFile(cfgPath); code != cliutil.ExitUsage || !strings.Contains(msg, "--force") || string(b) != "mine\n" {
				t.Errorf("existing file: exit %d (%s), content %q; want exit 2 and the file kept", code, msg, b)
			}
			if code, _, msg = execute(t, append(args, "--force")...); code != 0 {
				t.Fatalf("--force: exit %d: %s", code, msg)
			}
			if b, _ := os.ReadFile(cfgPath); !strings.Contains(string(b), "channel_names:") {
				t.Error("--force did not replace the file")
			}
		})
	}
}

func TestInitAccountsFromSLURM(t *testing.T) {
	slurm := func(_ context.Context, name string, args ...string) ([]byte, error) {
		key := name + " " + strings.Join(args, " ")
		for prefix, f := range map[string]string{
			"sinfo": "sinfo_local.txt",
			"sacctmgr -n -P show associations user=root":  "assoc_user_local.txt",
			"sacctmgr -n -P show associations cluster=ci": "assoc_accounts_local.txt",
			"sacctmgr -n -P show qos":                     "qos_local.txt",
		} {
			if strings.HasPrefix(key, prefix) {
				return os.ReadFile(filepath.Join("..", "..", "internal", "assign", "testdata", "slurm", f))
			}
		}
		return nil, os.ErrNotExist
	}
	proj := fixture("codex")
	out := filepath.Join(t.TempDir(), "c.yaml")
	code, stdout, msg := executeWith(t, slurm, "init", "--project", proj, "--out", out, "--kintsugi-dir", "/k", "--accounts-from-slurm", "--user", "root")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, msg)
	}
	text, _ := os.ReadFile(out)
	for _, want := range []string{"{name: acct_a, gpu_slots: 3, partition_gpu: gpu, partition_cpu: cpu}", "{name: acct_b, gpu_slots: 2, partition_gpu: gpu, partition_cpu: cpu}", "total_gpu_slots: 5"} {
		if !strings.Contains(string(text), want) {
			t.Errorf("config lacks %q:\n%s", want, text)
		}
	}
	if !strings.Contains(stdout, "account acct_a: gpu_slots 3") {
		t.Errorf("report:\n%s", stdout)
	}
	// sacctmgr failing (controller down): exit 1 naming it, no config written.
	out2 := filepath.Join(t.TempDir(), "c.yaml")
	code, _, msg = executeWith(t, noSLURM, "init", "--project", proj, "--out", out2, "--kintsugi-dir", "/k", "--accounts-from-slurm", "--user", "root")
	if _, err := os.Stat(out2); code != 1 || !strings.Contains(msg, "sacctmgr") || err == nil {
		t.Errorf("sacctmgr failing: exit %d (%s), config written: %v; want exit 1 naming sacctmgr and no config", code, msg, err == nil)
	}
}

func TestInitErrors(t *testing.T) {
	proj := fixture("codex")
	noExp := t.TempDir()
	badNames := t.TempDir() // the CODEX fixture with three names for four channels
	os.MkdirAll(filepath.Join(badNames, "meta"), 0o755)
	exp, err := os.ReadFile(filepath.Join(proj, "meta", "experiment.json"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(badNames, "meta", "experiment.json"), exp, 0o644)
	os.WriteFile(filepath.Join(badNames, "meta", "CHANNELNAMES.txt"), []byte("1: DAPI, Blank, Blank\n"), 0o644)
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no project", []string{"init"}, "--project"},
		{"no experiment.json", []string{"init", "--project", noExp}, "experiment.json: missing"},
		{"names per channel", []string{"init", "--project", badNames}, "CHANNELNAMES.txt: line 1: cycle 1 has 3 names, want 4"},
		{"bad account", []string{"init", "--project", proj, "--account", "acct_a"}, "NAME:GPU_SLOTS"},
		{"both account sources", []string{"init", "--project", proj, "--account", "a:1", "--accounts-from-slurm"}, "give one"},
		{"bad resource", []string{"init", "--project", proj, "--resource", "mem_stitch=-1"}, "resources.mem_stitch"},
		{"unknown resource", []string{"init", "--project", proj, "--resource", "gpus=1"}, "gpus"},
		{"bad device", []string{"init", "--project", proj, "--device", "tpu"}, "--device"},
		{"argument", []string{"init", "--project", proj, "extra"}, "unexpected"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "c.yaml")
			args := append(tc.args[:1:1], append([]string{"--out", out, "--kintsugi-dir", "/k"}, tc.args[1:]...)...)
			code, _, msg := execute(t, args...)
			if code != cliutil.ExitUsage || !strings.Contains(msg, tc.want) {
				t.Errorf("exit %d, error %q; want exit 2 naming %q", code, msg, tc.want)
			}
			if _, err := os.Stat(out); err == nil {
				t.Errorf("%s written on error", out)
			}
		})
	}
}
