package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/assign"
	"github.com/kintsugi-hpc/kintsugi-go/internal/cliutil"
	"github.com/kintsugi-hpc/kintsugi-go/internal/exectest"
)

const cfgText = `project_dir: /p
cycles: [1, 2, 3, 4, 5, 6, 7]
channels: [1]
tile_rows: 2
tile_cols: 2
tile_overlap: 0.3
ncc_threshold: 0.078
pou: 0.5
resources:
  accounts:
    - {name: acct_a, gpu_slots: 3, partition_gpu: gpu, partition_cpu: cpu}
    - {name: acct_b, gpu_slots: 2, partition_gpu: gpu, partition_cpu: cpu}
`

// execute runs the app as main would, with run for the SLURM commands, and
// returns the exit code and stdout.
func execute(t *testing.T, run assign.Runner, args ...string) (int, string) {
	t.Helper()
	out, err := exectest.Stdout(t, func() error {
		return newApp(run).RunContext(context.Background(), append([]string{"kintsugi-assign", "--log-format", "text", "--log-level", "error"}, args...))
	})
	return cliutil.ExitCode(err), out
}

func writeConfig(t *testing.T, text string) string {
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// fakeSLURM answers squeue/sacctmgr/sinfo from the recorded outputs of internal/assign/testdata/slurm.
func fakeSLURM(fail bool) assign.Runner {
	return func(_ context.Context, name string, args ...string) ([]byte, error) {
		if fail {
			return nil, fmt.Errorf("%s: exit status 1: slurm_load_jobs error: Unable to contact slurm controller", name)
		}
		key := name + " " + strings.Join(args, " ")
		file := map[string]string{
			"squeue": "squeue_held.txt",
			"sinfo":  "sinfo_local.txt",
			"sacctmgr -n -P show associations user=root":  "assoc_user_local.txt",
			"sacctmgr -n -P show associations cluster=ci": "assoc_accounts_local.txt",
			"sacctmgr -n -P show qos":                     "qos_local.txt",
		}
		for prefix, f := range file {
			if strings.HasPrefix(key, prefix) {
				return os.ReadFile(filepath.Join("..", "..", "internal", "assign", "testdata", "slurm", f))
			}
		}
		return nil, fmt.Errorf("unexpected %q", key)
	}
}

func TestExitCodes(t *testing.T) {
	slurm := fakeSLURM(false)
	cfg := writeConfig(t, cfgText)
	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{"plan", []string{"--config", cfg}, 0},
		{"missing --config", nil, 2},
		{"extra argument", []string{"--config", cfg, "extra"}, 2},
		{"unknown command", []string{"--config", cfg, "discovr"}, 2},
		{"unknown flag", []string{"--config", cfg, "--bogus"}, 2},
		{"missing config file", []string{"--config", cfg + ".nope"}, 2},
		{"bad live json", []string{"--config", cfg, "--live-accounts", "{"}, 2},
		{"unknown live account", []string{"--config", cfg, "--live-accounts", `[{"name":"acct_z","gpu_avail":1}]`}, 2},
		{"duplicate live account", []string{"--config", cfg, "--live-accounts", `[{"name":"acct_a"},{"name":"acct_a"}]`}, 2},
		{"discover", []string{"discover", "--user", "root"}, 0},
		{"discover extra argument", []string{"discover", "--user", "root", "now"}, 2},
		{"discover unknown flag", []string{"discover", "--usr", "root"}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, _ := execute(t, slurm, tc.args...); got != tc.want {
				t.Errorf("exit %d, want %d", got, tc.want)
			}
		})
	}
	down := fakeSLURM(true)
	if got, _ := execute(t, down, "--config", cfg, "--live"); got != 1 {
		t.Errorf("squeue failing: exit %d, want 1", got)
	}
	if got, _ := execute(t, down, "discover", "--user", "root"); got != 1 {
		t.Errorf("sacctmgr failing: exit %d, want 1", got)
	}
}

// Where live data comes from, and that the plan says so: --live-accounts over the config's
// live_accounts over squeue (--live or live: true).
func TestLiveSources(t *testing.T) {
	slurm := fakeSLURM(false)
	plain := writeConfig(t, cfgText)
	liveCfg := writeConfig(t, cfgText+"live: true\n")
	injected := writeConfig(t, cfgText+"live: true\nlive_accounts: [{name: acct_b, gpu_avail: 1}]\n")
	for _, tc := range []struct {
		name   string
		args   []string
		source string
		from   string
		avail  map[string]int
	}{
		{"static", []string{"--config", plain}, "static", "", nil},
		{"--live", []string{"--config", plain, "--live"}, "live", "squeue", map[string]int{"acct_a": 0, "acct_b": 0}},
		{"live: true", []string{"--config", liveCfg}, "live", "squeue", map[string]int{"acct_a": 0, "acct_b": 0}},
		{"injected over live: true", []string{"--config", injected}, "live", "config live_accounts", map[string]int{"acct_b": 1}},
		{"flag over all", []string{"--config", injected, "--live-accounts", `[{"name":"acct_a","gpu_avail":2}]`}, "live", "--live-accounts", map[string]int{"acct_a": 2}},
		{"empty flag: static in jobs", []string{"--config", liveCfg, "--live-accounts", "[]"}, "static", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := execute(t, slurm, tc.args...)
			if code != 0 {
				t.Fatalf("exit %d", code)
			}
			var p assign.Plan
			if err := json.Unmarshal([]byte(out), &p); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			if p.Source != tc.source || p.Jobs != 5 {
				t.Errorf("source %q jobs %d, want %q 5", p.Source, p.Jobs, tc.source)
			}
			if tc.from == "" {
				if p.Live != nil {
					t.Errorf("live report %+v, want none", p.Live)
				}
				return
			}
			got := map[string]int{}
			for a, v := range p.Live.Applied {
				got[a] = v.Avail
			}
			if p.Live.From != tc.from || fmt.Sprint(got) != fmt.Sprint(tc.avail) {
				t.Errorf("live from %q applied %v, want %q %v", p.Live.From, got, tc.from, tc.avail)
			}
		})
	}
}

func TestDiscoverOutput(t *testing.T) {
	slurm := fakeSLURM(false)
	code, out := execute(t, slurm, "discover", "--user", "root")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{
		"- {name: acct_a, gpu_slots: 3, partition_gpu: gpu, partition_cpu: cpu}",
		"- {name: acct_b, gpu_slots: 2, partition_gpu: gpu, partition_cpu: cpu}",
		"# not listed: root:",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("discover output lacks %q:\n%s", want, out)
		}
	}
	_, out = execute(t, slurm, "discover", "--user", "root", "--partition-gpu", "hpg-b200,hpg-turin", "--partition-cpu", "hpg-default")
	if !strings.Contains(out, `partition_gpu: "hpg-b200,hpg-turin", partition_cpu: hpg-default}`) {
		t.Errorf("partition flags not used:\n%s", out)
	}
}

// Issue 16 point 8: the placement log line names accounts in words, not Go's
// map[acct_a:{Reported:1 Avail:1}] form.
func TestLogLinesReadable(t *testing.T) {
	logs, err := exectest.Capture(t, &os.Stderr, func() error {
		_, err := exectest.Stdout(t, func() error {
			return newApp(fakeSLURM(false)).RunContext(context.Background(), []string{"kintsugi-assign", "--log-format", "text", "--config", writeConfig(t, cfgText),
				"--live-accounts", `[{"name":"acct_a","gpu_avail":-2},{"name":"acct_b","gpu_avail":1}]`})
		})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs, "map[") || !strings.Contains(logs, `applied="acct_a 0 free of 3 (reported -2), acct_b 1 free of 2"`) {
		t.Errorf("placement log line:\n%s", logs)
	}
	if got := countsText(map[string]int{"b": 0, "a": 2}); got != "a 2, b 0" {
		t.Errorf("countsText = %q", got)
	}
}
