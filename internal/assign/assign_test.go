package assign

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

const base = `
project_dir: /p
channels: [1]
tile_rows: 2
tile_cols: 2
tile_overlap: 0.3
ncc_threshold: 0.078
pou: 0.5
`

// Each case is a config tail; its plan is compared with testdata/<name>.json.
var cases = []struct{ name, tail string }{
	{"two_accounts_fit", `cycles: [1, 2, 3, 4, 5]
resources: {accounts: [{name: clive, gpu_slots: 3, partition_gpu: "hpg-b200,hpg-turin"}, {name: maigan, gpu_slots: 2}]}`},
	{"overflow_proportional", `cycles: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
resources: {accounts: [{name: big, gpu_slots: 4}, {name: small, gpu_slots: 1}]}`},
	{"overflow_seven_on_five", `cycles: [1, 2, 3, 4, 5, 6, 7]
resources: {accounts: [{name: acct_a, gpu_slots: 3, partition_gpu: gpu, partition_cpu: cpu}, {name: acct_b, gpu_slots: 2, partition_gpu: gpu, partition_cpu: cpu}]}`},
	{"cpu_only_account_skipped", `cycles: [2, 4, 6]
resources: {accounts: [{name: cpuonly, gpu_slots: 0, partition_cpu: hpg-default}, {name: g, gpu_slots: 1}]}`},
	{"live_reorders", `cycles: [1, 2, 3]
live_accounts: '[{"name":"a","gpu_avail":0,"cpu_avail":10,"mem_avail_gb":500},{"name":"b","gpu_avail":2,"cpu_avail":4,"mem_avail_gb":50}]'
resources: {accounts: [{name: a, gpu_slots: 2}, {name: b, gpu_slots: 2}]}`},
	{"live_all_saturated_keeps_static", `cycles: [1, 2, 3]
live_accounts: [{name: a, gpu_avail: 0}, {name: b, gpu_avail: -3}]
resources: {accounts: [{name: a, gpu_slots: 1}, {name: b, gpu_slots: 1}]}`},
	// The snapshot: acct_a's 3 GPUs busy, acct_b 1 of 2 free. Cycle 1 takes the free GPU;
	// the rest are dealt over the static slots (busy GPUs count as one wave of other work), so
	// acct_a's GPUs are used when they free up and jobs stays 5.
	{"live_snapshot_busy", `cycles: [1, 2, 3, 4, 5, 6, 7]
live_accounts: [{name: acct_a, gpu_avail: 0}, {name: acct_b, gpu_avail: 1}]
resources: {accounts: [{name: acct_a, gpu_slots: 3, partition_gpu: gpu, partition_cpu: cpu}, {name: acct_b, gpu_slots: 2, partition_gpu: gpu, partition_cpu: cpu}]}`},
	// gpu_avail above gpu_slots is capped (9 -> 2), a 0-slot account never gets GPU work whatever
	// its live value, and registration stays on the first account with slots in config order.
	{"live_capped", `cycles: [1, 2, 3, 4, 5, 6, 7]
live_accounts: '[{"name":"zero","gpu_avail":4},{"name":"b","gpu_avail":9},{"name":"a","gpu_avail":1}]'
resources: {accounts: [{name: zero, gpu_slots: 0}, {name: a, gpu_slots: 3}, {name: b, gpu_slots: 2}]}`},
	// An account without live data counts all its slots as free; source still says live.
	{"live_partial", `cycles: [1, 2, 3, 4]
live_accounts: [{name: b, gpu_avail: 0}]
resources: {accounts: [{name: a, gpu_slots: 1}, {name: b, gpu_slots: 2}]}`},
	{"legacy_scalar", `cycles: [1, 2]
resources: {account_gpu: old, partition_gpu: hpg-b200, gpu_slots: 2, account_cpu: oldcpu}`},
}

func TestGolden(t *testing.T) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Parse(tc.name+".yaml", []byte(base+tc.tail))
			if err != nil {
				t.Fatal(err)
			}
			p, err := Build(cfg)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := json.MarshalIndent(p, "", "  ")
			got = append(got, '\n')
			golden := filepath.Join("testdata", tc.name+".json")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to create)", err)
			}
			if string(got) != string(want) {
				t.Errorf("plan differs from %s:\ngot:\n%s\nwant:\n%s", golden, got, want)
			}
			checkInvariants(t, cfg, p)
		})
	}
}

// checkInvariants holds for every plan, independent of the golden files.
func checkInvariants(t *testing.T, cfg *config.Config, p *Plan) {
	t.Helper()
	perAcct := map[string]int{}
	for _, c := range cfg.Cycles {
		s, ok := p.Cycles[itoa(c)]
		if !ok {
			t.Fatalf("cycle %d not assigned", c)
		}
		if s.Mode != GPU {
			t.Errorf("cycle %d mode %q: the pipeline is GPU-only", c, s.Mode)
		}
		if p.Slots[s.Account] <= 0 {
			t.Errorf("cycle %d on account %s which has no GPU slots", c, s.Account)
		}
		perAcct[s.Account]++
	}
	if p.Registration.Mode != GPU || p.CPU.Mode != CPU {
		t.Errorf("registration %q / cpu %q modes", p.Registration.Mode, p.CPU.Mode)
	}
	// Live data never shrinks the plan: jobs is the total static slots.
	total := 0
	for _, a := range cfg.Resources.Accounts {
		total += a.GPUSlots
		if p.Slots[a.Name] != a.GPUSlots {
			t.Errorf("slots[%s] = %d, want the static gpu_slots %d", a.Name, p.Slots[a.Name], a.GPUSlots)
		}
	}
	if len(cfg.Resources.Accounts) > 0 && p.Jobs != total {
		t.Errorf("jobs %d != total static slots %d", p.Jobs, total)
	}
	// Registration: first account with GPU slots in config order, live data or not.
	for _, a := range cfg.Resources.Accounts {
		if a.GPUSlots > 0 {
			if p.Registration.Account != a.Name {
				t.Errorf("registration on %s, want %s (first account with GPU slots)", p.Registration.Account, a.Name)
			}
			break
		}
	}
	// Free GPUs are filled first: the first cycles go to accounts with free GPUs, as many as
	// each has free (capped to [0, gpu_slots]).
	busy := map[string]int{}
	if p.Live != nil {
		free := 0
		for _, a := range cfg.Resources.Accounts {
			avail := a.GPUSlots
			if la, ok := p.Live.Applied[a.Name]; ok {
				avail = la.Avail
				if avail < 0 || avail > a.GPUSlots || avail != min(max(la.Reported, 0), a.GPUSlots) {
					t.Errorf("account %s: applied avail %d of reported %d, want capped to [0, %d]", a.Name, avail, la.Reported, a.GPUSlots)
				}
			}
			busy[a.Name] = a.GPUSlots - avail
			free += avail
		}
		first := map[string]int{}
		for _, c := range cfg.Cycles[:min(free, len(cfg.Cycles))] {
			first[p.Cycles[itoa(c)].Account]++
		}
		for a, n := range first {
			if n > p.Slots[a]-busy[a] {
				t.Errorf("account %s got %d of the first %d cycles but has %d free GPUs", a, n, free, p.Slots[a]-busy[a])
			}
		}
	}
	// Balance: waves per account (own cycles plus busy GPUs, over static slots) differ by at most one.
	minW, maxW := 1<<30, 0
	for a, n := range p.Slots {
		if n == 0 || perAcct[a] == 0 {
			continue
		}
		w := (perAcct[a] + busy[a] + n - 1) / n
		minW, maxW = min(minW, w), max(maxW, w)
	}
	if maxW > 0 && maxW-minW > 1 {
		t.Errorf("unbalanced waves: per account %v with slots %v, busy %v", perAcct, p.Slots, busy)
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func TestNoGPUSlots(t *testing.T) {
	for _, tail := range []string{
		"cycles: [1]\nresources: {accounts: [{name: a, gpu_slots: 0}, {name: b, gpu_slots: 0}]}",
		"cycles: [1]\nresources: {accounts: []}",
		"cycles: [1]\nresources: {}",
	} {
		cfg, err := config.Parse("c.yaml", []byte(base+tail))
		if err != nil {
			t.Fatal(err)
		}
		_, err = Build(cfg)
		if !errors.Is(err, ErrNoGPU) || !strings.Contains(err.Error(), "resources.accounts") {
			t.Errorf("%q: err = %v, want ErrNoGPU naming resources.accounts", tail, err)
		}
	}
}

func TestLiveErrors(t *testing.T) {
	const accts = "cycles: [1, 2]\nresources: {accounts: [{name: a, gpu_slots: 2}, {name: b, gpu_slots: 1}]}\n"
	for _, tc := range []struct{ name, live, want string }{
		{"unknown", `[{name: a, gpu_avail: 1}, {name: zz, gpu_avail: 1}, {name: yy}]`, "key live_accounts: unknown account(s) zz, yy (resources.accounts: a, b)"},
		{"duplicate", `[{name: a, gpu_avail: 1}, {name: b}, {name: a, gpu_avail: 0}]`, "key live_accounts: account(s) listed more than once: a"},
		{"both", `[{name: a}, {name: a}, {name: q}]`, "unknown account(s) q (resources.accounts: a, b); account(s) listed more than once: a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Parse("c.yaml", []byte(base+accts+"live_accounts: "+tc.live+"\n"))
			if err != nil {
				t.Fatal(err)
			}
			_, err = Build(cfg)
			var ce *config.Error
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want a config error containing %q", err, tc.want)
			}
		})
	}
	// The same names through --live-accounts are named after the flag.
	cfg, err := config.Parse("c.yaml", []byte(base+accts))
	if err != nil {
		t.Fatal(err)
	}
	live, err := config.ParseLiveAccounts(`[{"name":"nope","gpu_avail":1}]`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := BuildLive(cfg, live, "--live-accounts"); err == nil || !strings.Contains(err.Error(), "key --live-accounts: unknown account(s) nope") {
		t.Errorf("err = %v", err)
	}
	// Legacy form: live names must be the legacy account.
	cfg, err = config.Parse("c.yaml", []byte(base+"cycles: [1]\nresources: {account_gpu: old}\nlive_accounts: [{name: other, gpu_avail: 1}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Build(cfg); err == nil || !strings.Contains(err.Error(), "unknown account(s) other") {
		t.Errorf("legacy: err = %v", err)
	}
}

// Slot counts at the bound plan instantly (nothing is sized by a slot count);
// beyond the bound, or a live value beyond its bound, is an error naming the key.
func TestBounds(t *testing.T) {
	cfg, err := config.Parse("c.yaml", []byte(base+"cycles: [1, 2, 3]\nresources: {accounts: [{name: a, gpu_slots: 100000}, {name: b, gpu_slots: 100000}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Build(cfg)
	if err != nil || p.Jobs != 200000 || p.Cycles["3"].Account != "a" {
		t.Fatalf("plan %+v, err %v", p, err)
	}
	big := 1 << 62
	cfg.LiveAccounts = []config.LiveAccount{{Name: "a", GPUAvail: &big}}
	if _, err := Build(cfg); err == nil || !strings.Contains(err.Error(), "key live_accounts[0].gpu_avail") {
		t.Errorf("huge gpu_avail: err = %v", err)
	}
	cfg.LiveAccounts = nil
	cfg.Resources.Accounts[1].GPUSlots = 200000000
	if _, err := Build(cfg); err == nil || !strings.Contains(err.Error(), "key resources.accounts[1].gpu_slots") {
		t.Errorf("gpu_slots 200000000: err = %v", err)
	}
	cfg.Resources.Accounts[0].GPUSlots, cfg.Resources.Accounts[1].GPUSlots = 1<<62, 1<<62
	if _, err := Build(cfg); err == nil || errors.Is(err, ErrNoGPU) {
		t.Errorf("slots near 2^63: err = %v, want a bound error, not ErrNoGPU", err)
	}
}
