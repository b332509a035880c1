package cliutil

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/staging"
)

func lockConfig(t *testing.T, extra string) *config.Config {
	t.Helper()
	if !strings.Contains(extra, "resources:") {
		extra += "resources: {accounts: [{name: a, gpu_slots: 1}]}\n"
	}
	cfg, err := config.Parse("lock.yaml", []byte(`project_dir: /p
cycles: [1, 2]
channels: [1, 2]
tile_rows: 2
tile_cols: 2
tile_overlap: 0.3
ncc_threshold: 0.078
pou: 0.5
`+extra))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// The lock parameters: the same for the same computation, whatever the
// scheduling keys (resources, live, device key: the flag decides); different
// when a computing key, the stage, the cycle or the device differs.
func TestLockParams(t *testing.T) {
	p := func(job LockJob) string {
		t.Helper()
		s, err := LockParams(job)
		if err != nil {
			t.Fatal(err)
		}
		if len(s) != 64 {
			t.Fatalf("params %q: want a hex SHA-256", s)
		}
		return s
	}
	base := LockJob{Config: lockConfig(t, ""), Stage: "decon", Cycle: 1, Device: DeviceGPU}
	ref := p(base)
	if p(base) != ref {
		t.Error("the same job gives two fingerprints")
	}
	same := base
	same.Config = lockConfig(t, "resources: {accounts: [{name: other, gpu_slots: 2}], mem_decon: 9000}\nlive: true\n")
	if p(same) != ref {
		t.Error("scheduling keys change the fingerprint")
	}
	for name, job := range map[string]LockJob{
		"decon.iterations": {Config: lockConfig(t, "decon: {iterations: 7}\n"), Stage: "decon", Cycle: 1, Device: DeviceGPU},
		"stage":            {Config: base.Config, Stage: "edf", Cycle: 1, Device: DeviceGPU},
		"cycle":            {Config: base.Config, Stage: "decon", Cycle: 2, Device: DeviceGPU},
		"device":           {Config: base.Config, Stage: "decon", Cycle: 1, Device: DeviceCPU},
	} {
		if p(job) == ref {
			t.Errorf("a different %s gives the same fingerprint", name)
		}
	}
}

// WaitLimit: outside SLURM no wait unless KINTSUGI_LOCK_WAIT; inside, until a
// minute before the job's end time (env, else squeue), the smaller of both.
func TestWaitLimit(t *testing.T) {
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	start := time.Now()
	noSqueue := func(string) (time.Time, error) { return time.Time{}, errors.New("no squeue") }
	if u, src := WaitLimit(start, -1, env(), noSqueue); !u.IsZero() || !strings.Contains(src, "no wait") {
		t.Errorf("outside SLURM: %v %q, want no wait", u, src)
	}
	if u, _ := WaitLimit(start, 90*time.Second, env(), noSqueue); !u.Equal(start.Add(90 * time.Second)) {
		t.Errorf("outside SLURM with 90s: %v", u)
	}
	end := time.Now().Add(time.Hour).Truncate(time.Second)
	u, src := WaitLimit(start, -1, env("SLURM_JOB_ID", "12", "SLURM_JOB_END_TIME", fmt.Sprint(end.Unix())), noSqueue)
	if !u.Equal(end.Add(-time.Minute)) || !strings.Contains(src, "SLURM_JOB_END_TIME") {
		t.Errorf("SLURM end time in the environment: %v %q, want %v", u, src, end.Add(-time.Minute))
	}
	asked := ""
	sq := func(id string) (time.Time, error) { asked = id; return end, nil }
	if u, src := WaitLimit(start, -1, env("SLURM_JOB_ID", "13"), sq); asked != "13" || !u.Equal(end.Add(-time.Minute)) || !strings.Contains(src, "squeue") {
		t.Errorf("SLURM end time from squeue: %v %q (asked %q)", u, src, asked)
	}
	if u, _ := WaitLimit(start, 10*time.Minute, env("SLURM_JOB_ID", "13"), sq); !u.Equal(start.Add(10 * time.Minute)) {
		t.Errorf("KINTSUGI_LOCK_WAIT below the job's end: %v", u)
	}
	soon := time.Now().Add(60 * time.Second)
	if u, _ := WaitLimit(start, -1, env("SLURM_JOB_ID", "14", "SLURM_JOB_END_TIME", fmt.Sprint(soon.Unix())), noSqueue); !u.Before(soon) || time.Until(u) > 45*time.Second {
		t.Errorf("a minute left: waits until %v (end %v), want about half of it", u, soon)
	}
	unlimited := func(string) (time.Time, error) { return time.Time{}, nil }
	if u, _ := WaitLimit(start, -1, env("SLURM_JOB_ID", "15"), unlimited); time.Until(u) < 24*time.Hour {
		t.Errorf("a job without an end time: waits only until %v", u)
	}
	if u, src := WaitLimit(start, -1, env("SLURM_JOB_ID", "16"), noSqueue); !u.IsZero() || !strings.Contains(src, "no wait") {
		t.Errorf("a job SLURM does not know: waits until %v (%s), want no wait", u, src)
	}
	if u, _ := WaitLimit(start, time.Minute, env("SLURM_JOB_ID", "16"), noSqueue); !u.Equal(start.Add(time.Minute)) {
		t.Errorf("a job SLURM does not know, with 1m: waits until %v", u)
	}
}

// LockContext: a malformed KINTSUGI_LOCK_WAIT is a usage error; the exit
// code of a run whose holder completed the output is 0.
func TestLockContext(t *testing.T) {
	job := LockJob{Config: lockConfig(t, ""), Stage: "stitch", Cycle: 1, Device: DeviceCPU}
	for _, bad := range []string{"soon", "-5m", "10"} {
		_, err := LockContext(context.Background(), job, func(k string) string {
			if k == LockWaitEnv {
				return bad
			}
			return ""
		}, nil)
		if ExitCode(err) != ExitUsage || !strings.Contains(fmt.Sprint(err), LockWaitEnv) {
			t.Errorf("%s=%q: %v (exit %d), want a usage error naming it", LockWaitEnv, bad, err, ExitCode(err))
		}
	}
	if _, err := LockContext(context.Background(), job, func(string) string { return "" }, nil); err != nil {
		t.Fatal(err)
	}
	done := &staging.CompletedError{Final: "/p/cyc01", Holder: staging.Holder{JobID: "7", Host: "n1", PID: 9}}
	if got := ExitCode(fmt.Errorf("stitch: %w", done)); got != ExitOK {
		t.Errorf("completed by the holder: exit %d, want 0", got)
	}
}
