package assign

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"gopkg.in/yaml.v3"
)

// replay answers SLURM commands with recorded outputs: key "name arg arg..." -> testdata/slurm file.
// The *_local files were recorded on the test cluster of scripts/slurm-up.sh (accounts acct_a
// GrpTRES gres/gpu=3, acct_b =2; squeue_held.txt with held GPU jobs in the queue); the *_site
// files are a hand-written cluster with parent accounts, QOS limits, typed GPUs and bad values.
func replay(t *testing.T, files map[string]string) (Runner, *[]string) {
	var calls []string
	return func(_ context.Context, name string, args ...string) ([]byte, error) {
		key := name + " " + strings.Join(args, " ")
		calls = append(calls, key)
		for prefix, f := range files {
			if strings.HasPrefix(key, prefix) {
				if f == "" {
					return nil, fmt.Errorf("%s: exit status 1: connection refused", name)
				}
				return os.ReadFile(filepath.Join("testdata", "slurm", f))
			}
		}
		t.Fatalf("unexpected command %q", key)
		return nil, nil
	}, &calls
}

func TestParseSqueue(t *testing.T) {
	for _, tc := range []struct {
		file string
		want map[string]int
	}{
		// acct_a: job 1 (1 GPU, held), array 3_[1-3] (1 each, held), job 5 (--gpus=2, held);
		// acct_b: job 2 (2 GPUs, running), job 4 (CPU only).
		{"squeue_held.txt", map[string]int{"acct_a": 6, "acct_b": 2}},
		// lab_big: 1 running + 2 pending + 1 typed-only; lab_small: a CPU job and a job with both an
		// untyped total (4) and its typed part (b200=4), counted once.
		{"squeue_site.txt", map[string]int{"lab_big": 4, "lab_small": 4}},
	} {
		out, err := os.ReadFile(filepath.Join("testdata", "slurm", tc.file))
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseSqueue(out)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: GPUs in use %v, want %v", tc.file, got, tc.want)
		}
	}
	for _, bad := range []string{"1|a|RUNNING\n", "1|a|RUNNING|gres/gpu=x\n", "1|a|RUNNING|gres/gpu=-2\n"} {
		if _, err := ParseSqueue([]byte(bad)); err == nil {
			t.Errorf("ParseSqueue(%q): no error", bad)
		}
	}
	// Counts beyond any bound saturate instead of overflowing.
	huge := "1|a|RUNNING|gres/gpu=9223372036854775807\n2|a|PENDING|gres/gpu=9223372036854775807\n"
	if got, err := ParseSqueue([]byte(huge)); err != nil || got["a"] != MaxAvail {
		t.Errorf("huge counts: %v %v, want %d", got, err, MaxAvail)
	}
}

// --live: gpu_avail = gpu_slots - GPUs of running and pending jobs, capped to [0, gpu_slots] by the
// placement, which fills free GPUs first and never shrinks jobs.
func TestLiveFromSqueue(t *testing.T) {
	run, calls := replay(t, map[string]string{"squeue ": "squeue_site.txt"})
	accts := []config.Account{{Name: "lab_big", GPUSlots: 6, PartitionGPU: "g"}, {Name: "lab_small", GPUSlots: 2, PartitionGPU: "g"}, {Name: "idle", GPUSlots: 3, PartitionGPU: "g"}}
	live, inUse, err := LiveFromSqueue(context.Background(), run, accts)
	if err != nil {
		t.Fatal(err)
	}
	if want := "squeue --noheader --array --states=RUNNING,PENDING --accounts=lab_big,lab_small,idle"; !strings.HasPrefix((*calls)[0], want) {
		t.Errorf("call %q, want prefix %q", (*calls)[0], want)
	}
	got := map[string]int{}
	for _, la := range live {
		got[la.Name] = *la.GPUAvail
	}
	if fmt.Sprint(got) != fmt.Sprint(map[string]int{"lab_big": 2, "lab_small": -2, "idle": 3}) || inUse["lab_big"] != 4 {
		t.Fatalf("live %v, in use %v", got, inUse)
	}
	cfg := &config.Config{Path: "c", Cycles: []int{1, 2, 3, 4, 5, 6, 7, 8}, Resources: config.Resources{Accounts: accts}}
	p, err := BuildLive(cfg, live, "squeue")
	if err != nil {
		t.Fatal(err)
	}
	if p.Source != "live" || p.Live.From != "squeue" || p.Jobs != 11 || p.Live.Applied["lab_small"].Avail != 0 {
		t.Errorf("plan source %s live %+v jobs %d", p.Source, p.Live, p.Jobs)
	}
	// Free GPUs first: 2 on lab_big, then 3 on idle; lab_small (none free) only in later waves.
	var first []string
	for c := 1; c <= 5; c++ {
		first = append(first, p.Cycles[itoa(c)].Account)
	}
	if strings.Join(first, ",") != "lab_big,lab_big,idle,idle,idle" {
		t.Errorf("first five cycles on %v", first)
	}
	checkInvariants(t, cfg, p)

	run, _ = replay(t, map[string]string{"squeue ": ""})
	if _, _, err := LiveFromSqueue(context.Background(), run, accts); err == nil || !strings.Contains(err.Error(), "live availability") {
		t.Errorf("squeue failure: err = %v", err)
	}
}

func TestDiscover(t *testing.T) {
	for _, tc := range []struct {
		name, user, cluster string
		files               map[string]string
		want                []string // name=gpus (from)
		yaml                string   // the block, parsed back, must list these accounts
	}{
		{"local", "root", "", map[string]string{
			"sacctmgr -n -P show associations user=root":  "assoc_user_local.txt",
			"sacctmgr -n -P show associations cluster=ci": "assoc_accounts_local.txt",
			"sacctmgr -n -P show qos":                     "qos_local.txt",
		}, []string{"acct_a=3 (association acct_a)", "acct_b=2 (association acct_b)", "root=-1 ()"}, "acct_a:3,acct_b:2"},
		{"site", "alice", "hpg", map[string]string{
			"sacctmgr -n -P show associations user=alice cluster=hpg": "assoc_user_site.txt",
			"sacctmgr -n -P show associations cluster=hpg":            "assoc_accounts_site.txt",
			"sacctmgr -n -P show qos":                                 "qos_site.txt",
		}, []string{
			"lab_small-b=6 (association dept)", // parent account's limit below the QOS's 40
			"lab_big=4 (QOS lab_big)",          // default QOS 4 below the parent's 6
			"lab_small=2 (QOS lab_small)",      // only QOS 2 below the account's 8
			"shared=1 (association shared/alice)",
			"nolimit=-1 ()", "typed=-1 ()", // no untyped gres/gpu limit anywhere: not guessed
		}, "lab_small-b:6,lab_big:4,lab_small:2,shared:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run, _ := replay(t, tc.files)
			d, err := Discover(context.Background(), run, tc.user, tc.cluster)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, a := range d.Accounts {
				got = append(got, fmt.Sprintf("%s=%d (%s)", a.Name, a.GPUs, a.LimitFrom))
				if a.GPUs < 0 && !strings.Contains(a.Note, "set gpu_slots by hand") {
					t.Errorf("%s: note %q does not say the limit is missing", a.Name, a.Note)
				}
			}
			if strings.Join(got, "; ") != strings.Join(tc.want, "; ") {
				t.Errorf("accounts\n got %v\nwant %v", got, tc.want)
			}
			y := d.YAML("gpu", "cpu", time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
			var doc struct {
				Resources struct {
					Accounts []struct {
						Name     string `yaml:"name"`
						GPUSlots int    `yaml:"gpu_slots"`
					} `yaml:"accounts"`
				} `yaml:"resources"`
			}
			if err := yaml.Unmarshal([]byte(y), &doc); err != nil {
				t.Fatalf("YAML block does not parse: %v\n%s", err, y)
			}
			var listed []string
			for _, a := range doc.Resources.Accounts {
				listed = append(listed, fmt.Sprintf("%s:%d", a.Name, a.GPUSlots))
			}
			if strings.Join(listed, ",") != tc.yaml {
				t.Errorf("YAML lists %v, want %s\n%s", listed, tc.yaml, y)
			}
			for _, a := range d.Accounts {
				if a.GPUs < 0 && !strings.Contains(y, "# not listed: "+a.Name+":") {
					t.Errorf("account %s without a limit is not reported in\n%s", a.Name, y)
				}
			}
			// The block drops into a config: it validates and plans.
			cfg, err := config.Parse("d.yaml", []byte(base+"cycles: [1, 2, 3]\n"+y))
			if err != nil {
				t.Fatalf("discovered block is not a valid config: %v\n%s", err, y)
			}
			if _, err := Build(cfg); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestDiscoverErrors(t *testing.T) {
	run, _ := replay(t, map[string]string{"sacctmgr -n -P show associations user=bob": "qos_local.txt"})
	if _, err := Discover(context.Background(), run, "bob", ""); err == nil || !strings.Contains(err.Error(), "want 8 fields") {
		t.Errorf("malformed sacctmgr output: err = %v", err)
	}
	run, _ = replay(t, map[string]string{"sacctmgr": ""})
	if _, err := Discover(context.Background(), run, "bob", ""); err == nil || IsUsage(err) {
		t.Errorf("sacctmgr failure: err = %v, want a failure (exit 1)", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "two.txt"), []byte("c1|a|bob||||normal|\nc2|b|bob||||normal|\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	run = func(context.Context, string, ...string) ([]byte, error) {
		return os.ReadFile(filepath.Join(dir, "two.txt"))
	}
	if _, err := Discover(context.Background(), run, "bob", ""); !IsUsage(err) || !strings.Contains(err.Error(), "--cluster") {
		t.Errorf("two clusters: err = %v, want a usage error asking for --cluster", err)
	}
	run = func(context.Context, string, ...string) ([]byte, error) { return nil, nil }
	if _, err := Discover(context.Background(), run, "bob", ""); err == nil || !strings.Contains(err.Error(), "no associations for user bob") {
		t.Errorf("no associations: err = %v", err)
	}
	if errors.Is(nil, ErrNoGPU) {
		t.Fatal("unreachable")
	}
}

func TestPartitions(t *testing.T) {
	for _, tc := range []struct{ file, gpu, cpu string }{
		{"sinfo_local.txt", "gpu", "cpu"}, // every partition has GPUs: the default one is the CPU partition
		{"sinfo_site.txt", "hpg-b200,hpg-turin", "hpg-default"},
	} {
		out, err := os.ReadFile(filepath.Join("testdata", "slurm", tc.file))
		if err != nil {
			t.Fatal(err)
		}
		if g, c := Partitions(out); g != tc.gpu || c != tc.cpu {
			t.Errorf("%s: gpu %q cpu %q, want %q %q", tc.file, g, c, tc.gpu, tc.cpu)
		}
	}
}

// ExecRunner carries the command's stderr into the error and gives up on a hung command
// (sacctmgr and squeue hang while slurmctld or slurmdbd is down).
func TestExecRunner(t *testing.T) {
	run := ExecRunner(200 * time.Millisecond)
	out, err := run(context.Background(), "sh", "-c", "echo fine")
	if err != nil || string(out) != "fine\n" {
		t.Errorf("out %q err %v", out, err)
	}
	if _, err := run(context.Background(), "sh", "-c", "echo 'slurm_load_jobs error: Unable to contact slurm controller' >&2; exit 1"); err == nil ||
		!strings.Contains(err.Error(), "Unable to contact slurm controller") {
		t.Errorf("failing command: err = %v", err)
	}
	t0 := time.Now()
	if _, err := run(context.Background(), "sleep", "5"); err == nil || !strings.Contains(err.Error(), "no answer within 200ms") {
		t.Errorf("hung command: err = %v", err)
	}
	if time.Since(t0) > 3*time.Second {
		t.Errorf("hung command took %v to give up", time.Since(t0))
	}
}
