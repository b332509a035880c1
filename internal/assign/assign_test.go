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
	total := 0
	for _, n := range p.Slots {
		total += n
	}
	if p.Jobs != total {
		t.Errorf("jobs %d != total slots %d", p.Jobs, total)
	}
	// Proportionality: waves per account differ by at most one.
	minW, maxW := 1<<30, 0
	for a, n := range p.Slots {
		if n == 0 {
			continue
		}
		w := (perAcct[a] + n - 1) / n
		minW, maxW = min(minW, w), max(maxW, w)
	}
	if maxW-minW > 1 {
		t.Errorf("unbalanced waves: per account %v with slots %v", perAcct, p.Slots)
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
