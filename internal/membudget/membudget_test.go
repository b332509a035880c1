package membudget

import (
	"errors"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

// fakeRoot lays out files (path relative to the root -> content).
func fakeRoot(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, s := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const gib = 1 << 30

func TestResolve(t *testing.T) {
	meminfo := "MemTotal:       16777216 kB\nMemFree:         1000 kB\n" // 16 GiB
	v2 := map[string]string{
		"proc/meminfo":     meminfo,
		"proc/self/cgroup": "0::/system.slice/slurmstepd.scope/job_7/step_0/user/task_0\n",
		// The job's limit sits two levels above the task; the task has none.
		"sys/fs/cgroup/system.slice/slurmstepd.scope/job_7/memory.max":                    "4294967296\n",
		"sys/fs/cgroup/system.slice/slurmstepd.scope/job_7/step_0/user/task_0/memory.max": "max\n",
		"sys/fs/cgroup/system.slice/slurmstepd.scope/job_7/step_0/memory.max":             "6442450944\n",
		"sys/fs/cgroup/system.slice/slurmstepd.scope/memory.max":                          "max\n",
	}
	cases := []struct {
		name     string
		flag     int
		env      map[string]string
		files    map[string]string
		want     int64
		source   string
		errMatch string
	}{
		{"flag wins", 3000, map[string]string{"SLURM_MEM_PER_NODE": "8000"}, v2, 3000 * MB, SourceFlag, ""},
		{"per node", 0, map[string]string{"SLURM_MEM_PER_NODE": " 3000 ", "SLURM_MEM_PER_CPU": "100"}, v2, 3000 * MB, SourceMemNode, ""},
		{"per cpu x cpus", 0, map[string]string{"SLURM_MEM_PER_CPU": "2000", "SLURM_CPUS_PER_TASK": "4"}, map[string]string{"proc/meminfo": meminfo}, 8000 * MB, SourceMemCPU, ""},
		// Budgets above the machine (cgroup limit, else MemTotal) are capped, never overflow.
		{"per node above the cgroup", 0, map[string]string{"SLURM_MEM_PER_NODE": "8000"}, v2, 4 * gib, SourceMemNode + ", capped at the machine's 4.00 GiB (" + SourceCgroupV2 + ")", ""},
		{"mem_mb above MemTotal", 0, map[string]string{"mem_mb": "48000"}, map[string]string{"proc/meminfo": meminfo}, 16 * gib, SourceMemMB + ", capped at the machine's 16.00 GiB (/proc/meminfo MemTotal)", ""},
		{"flag of 99999999999999 MB", 99999999999999, nil, v2, 4 * gib, SourceFlag + ", capped at the machine's 4.00 GiB (" + SourceCgroupV2 + ")", ""},
		{"flag of 2^43 MB", 1 << 43, nil, v2, 4 * gib, SourceFlag + ", capped at the machine's 4.00 GiB (" + SourceCgroupV2 + ")", ""},
		{"per cpu x cpus overflowing", 0, map[string]string{"SLURM_MEM_PER_CPU": "2000000000", "SLURM_CPUS_PER_TASK": "2000000000"}, v2, 4 * gib, SourceMemCPU + ", capped at the machine's 4.00 GiB (" + SourceCgroupV2 + ")", ""},
		{"per cpu, one cpu", 0, map[string]string{"SLURM_MEM_PER_CPU": "2000"}, v2, 2000 * MB, SourceMemCPU, ""},
		{"mem=0 means the cgroup", 0, map[string]string{"SLURM_MEM_PER_NODE": "0"}, v2, 4 * gib, SourceCgroupV2, ""},
		{"mem_mb", 0, map[string]string{"mem_mb": "3500"}, v2, 3500 * MB, SourceMemMB, ""},
		{"cgroup v2, smallest on the path", 0, nil, v2, 4 * gib, SourceCgroupV2, ""},
		{"cgroup v2 max = physical fraction", 0, nil, map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "0::/\n", "sys/fs/cgroup/memory.max": "max\n"},
			frac(16 * gib), SourcePhysical, ""},
		{"cgroup v1", 0, nil, map[string]string{
			"proc/meminfo":     meminfo,
			"proc/self/cgroup": "12:cpuset:/slurm/uid_0/job_9\n5:memory:/slurm/uid_0/job_9/step_batch\n",
			"sys/fs/cgroup/memory/slurm/uid_0/job_9/memory.limit_in_bytes":            "2147483648\n",
			"sys/fs/cgroup/memory/slurm/uid_0/job_9/step_batch/memory.limit_in_bytes": "9223372036854771712\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes":                              "9223372036854771712\n"},
			2 * gib, SourceCgroupV1, ""},
		{"cgroup above physical is no limit", 0, nil, map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "0::/\n", "sys/fs/cgroup/memory.max": "68719476736\n"},
			frac(16 * gib), SourcePhysical, ""},
		{"no cgroup file", 0, nil, map[string]string{"proc/meminfo": meminfo},
			frac(16 * gib), SourcePhysical, ""},
		{"negative flag", -1, nil, v2, 0, "", "--mem-budget"},
		{"malformed per node", 0, map[string]string{"SLURM_MEM_PER_NODE": "8G"}, v2, 0, "", "SLURM_MEM_PER_NODE"},
		{"malformed per cpu", 0, map[string]string{"SLURM_MEM_PER_CPU": "-5"}, v2, 0, "", "SLURM_MEM_PER_CPU"},
		{"malformed cpus", 0, map[string]string{"SLURM_MEM_PER_CPU": "100", "SLURM_CPUS_PER_TASK": "0"}, v2, 0, "", "SLURM_CPUS_PER_TASK"},
		{"malformed mem_mb", 0, map[string]string{"mem_mb": "lots"}, v2, 0, "", "mem_mb"},
		{"malformed cgroup", 0, nil, map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "0::/a\n", "sys/fs/cgroup/a/memory.max": "plenty\n"},
			0, "", "sys/fs/cgroup/a/memory.max"},
		{"malformed meminfo", 0, nil, map[string]string{"proc/meminfo": "MemTotal: many kB\n"}, 0, "", "MemTotal"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := Env{Getenv: func(k string) string { return tc.env[k] }, Root: fakeRoot(t, tc.files)}
			got, src, err := e.Resolve(tc.flag)
			if tc.errMatch != "" {
				var ue *UsageError
				if err == nil || !strings.Contains(err.Error(), tc.errMatch) || !errors.As(err, &ue) {
					t.Fatalf("err = %v, want a usage error naming %s", err, tc.errMatch)
				}
				return
			}
			if err != nil || got != tc.want || src != tc.source {
				t.Fatalf("got %d (%s) %q %v, want %d (%s) %q", got, Format(got), src, err, tc.want, Format(tc.want), tc.source)
			}
		})
	}
}

// The real process: some budget, from some source, and a plausible peak.
func TestRealProcess(t *testing.T) {
	b, src, err := Resolve(0, func(string) string { return "" })
	if err != nil || b <= 0 || src == "" {
		t.Fatalf("Resolve on this machine: %d %q %v", b, src, err)
	}
	rss := RSS()
	before := PeakRSS()
	if before <= 0 || rss <= 0 || rss > before {
		t.Fatalf("PeakRSS %d, RSS before it %d", before, rss)
	}
	// Touch 64 MiB: the peak grows by about that much.
	buf := make([]byte, 64*MB)
	for i := range buf {
		buf[i] = byte(i)
	}
	after := PeakRSS()
	if after < before+60*MB && after < RSS() {
		t.Fatalf("peak %d -> %d after touching 64 MiB", before, after)
	}
	_ = buf[len(buf)-1]
	// Give the 64 MiB back to the system, reset the peak: it drops.
	buf = nil
	debug.FreeOSMemory()
	if err := ResetPeak(); err != nil {
		t.Fatalf("ResetPeak: %v", err)
	}
	if p := PeakRSS(); p > after-32*MB {
		t.Fatalf("peak after reset %s, before %s", Format(p), Format(after))
	}
}

func TestNeedError(t *testing.T) {
	err := error(&NeedError{Stage: "stitch", Budget: 100 * MB, Source: SourceFlag, Need: 3*gib + 1, What: "one plane", ConfigKey: "resources.mem_stitch"})
	for _, s := range []string{"100 MiB", "3.00 GiB", "resources.mem_stitch", "--mem-budget", "3073"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%q lacks %q", err, s)
		}
	}
	if !errors.Is(err, ErrTooSmall) {
		t.Error("not ErrTooSmall")
	}
}

func frac(b int64) int64 { return int64(float64(b) * DefaultFraction) }

func TestFirst(t *testing.T) {
	plans := []int64{900, 500, 200}
	need := func(p int64) int64 { return p + 100 }
	for _, c := range []struct {
		budget int64
		want   int64
		ok     bool
	}{{0, 900, true}, {-1, 900, true}, {1000, 900, true}, {999, 500, true}, {600, 500, true}, {300, 200, true}, {299, 200, false}} {
		got, ok := First(plans, c.budget, need)
		if got != c.want || ok != c.ok {
			t.Errorf("budget %d: got %d, %v; want %d, %v", c.budget, got, ok, c.want, c.ok)
		}
	}
}

func TestDescribe(t *testing.T) {
	if got := Describe(0, "x"); got != "none" {
		t.Errorf("no budget: %q", got)
	}
	if got, want := Describe(6144*MB, "--mem-budget"), "6.00 GiB (--mem-budget)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
