// Package assign decides where every SLURM job of the pipeline runs: which
// account and partition each cycle's GPU jobs use, where registration runs and
// where CPU-only QC rules go. It is GPU-only: every cycle gets mode "gpu";
// there is no CPU overflow. Cycles beyond the total number of GPU slots are
// still assigned to GPU accounts and wait in the SLURM queue.
//
// The semantics follow the original's _build_cycle_assignment and
// _registration_assignment with one fix: overflow cycles are dealt over the
// GPU slot queue, so each account receives cycles in proportion to its slots
// (the original dealt overflow over accounts, one each, which with slots
// 4 and 1 gave the 1-slot account four waves of work while the other had two).
package assign

import (
	"errors"
	"fmt"
	"sort"
	"strconv"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
)

// Mode is where a job computes.
type Mode string

const (
	GPU Mode = "gpu"
	CPU Mode = "cpu"
)

// Slot is the placement of one job.
type Slot struct {
	Account   string `json:"account"`
	Mode      Mode   `json:"mode"`
	Partition string `json:"partition"`
}

// Plan is the helper's output, printed as JSON for the Snakefile.
type Plan struct {
	Cycles       map[string]Slot `json:"cycles"`       // cycle number (decimal string) -> slot, mode always gpu
	Order        []int           `json:"order"`        // cycles in config order
	Registration Slot            `json:"registration"` // the registration job (gpu)
	CPU          Slot            `json:"cpu"`          // CPU-only QC rules
	Jobs         int             `json:"jobs"`         // recommended snakemake -j: total GPU slots in use
	Slots        map[string]int  `json:"slots"`        // effective GPU slots per account
	Source       string          `json:"source"`       // "static" (config gpu_slots), "live" (live_accounts) or "legacy"
}

// ErrNoGPU is returned when no account has a GPU slot.
var ErrNoGPU = errors.New("no account has GPU slots")

// Build computes the plan for cfg.
func Build(cfg *config.Config) (*Plan, error) {
	res := cfg.Resources
	if len(res.Accounts) == 0 {
		return legacy(cfg)
	}
	live := map[string]config.LiveAccount{}
	for _, la := range cfg.LiveAccounts {
		live[la.Name] = la
	}
	static := map[string]int{}
	for _, a := range res.Accounts {
		static[a.Name] = a.GPUSlots
	}
	if sumSlots(res.Accounts, static) == 0 {
		return nil, fmt.Errorf("config %s: key resources.accounts: %w: set gpu_slots > 0 on at least one account (the pipeline is GPU-only)", cfg.Path, ErrNoGPU)
	}
	eff, source := static, "static"
	if len(live) > 0 {
		lv := map[string]int{}
		for _, a := range res.Accounts {
			lv[a.Name] = a.GPUSlots
			if la, ok := live[a.Name]; ok && la.GPUAvail != nil {
				lv[a.Name] = max(0, *la.GPUAvail)
			}
		}
		// If live data zeroes every account, keep the static slots: the jobs
		// then wait in the queue for the accounts' GPUs.
		if sumSlots(res.Accounts, lv) > 0 {
			eff, source = lv, "live"
		}
	}

	// The slot queue: each account's slots, account by account.
	var queue []Slot
	for _, a := range res.Accounts {
		for i := 0; i < eff[a.Name]; i++ {
			queue = append(queue, Slot{Account: a.Name, Mode: GPU, Partition: a.PartitionGPU})
		}
	}
	p := &Plan{Cycles: map[string]Slot{}, Order: append([]int(nil), cfg.Cycles...), Jobs: len(queue), Slots: map[string]int{}, Source: source}
	for _, a := range res.Accounts {
		p.Slots[a.Name] = eff[a.Name]
	}
	for i, c := range cfg.Cycles {
		p.Cycles[strconv.Itoa(c)] = queue[i%len(queue)]
	}
	p.Registration = registration(res.Accounts, live, eff)
	p.CPU = cpuSlot(res.Accounts, live)
	return p, nil
}

func sumSlots(accts []config.Account, slots map[string]int) int {
	n := 0
	for _, a := range accts {
		n += slots[a.Name]
	}
	return n
}

// registration picks the account with the most free GPUs (then memory) when
// live data is present, else the first account with GPU slots.
func registration(accts []config.Account, live map[string]config.LiveAccount, eff map[string]int) Slot {
	cands := make([]config.Account, 0, len(accts))
	for _, a := range accts {
		if eff[a.Name] > 0 {
			cands = append(cands, a)
		}
	}
	if len(live) > 0 {
		sort.SliceStable(cands, func(i, j int) bool {
			gi, mi := liveGPU(live, cands[i].Name), liveMem(live, cands[i].Name)
			gj, mj := liveGPU(live, cands[j].Name), liveMem(live, cands[j].Name)
			if gi != gj {
				return gi > gj
			}
			return mi > mj
		})
	}
	a := cands[0]
	return Slot{Account: a.Name, Mode: GPU, Partition: a.PartitionGPU}
}

// cpuSlot picks the account for CPU-only QC rules: with live data the one with
// the most free memory (then CPUs), else the first account.
func cpuSlot(accts []config.Account, live map[string]config.LiveAccount) Slot {
	cands := append([]config.Account(nil), accts...)
	if len(live) > 0 {
		sort.SliceStable(cands, func(i, j int) bool {
			mi, mj := liveMem(live, cands[i].Name), liveMem(live, cands[j].Name)
			if mi != mj {
				return mi > mj
			}
			return liveCPU(live, cands[i].Name) > liveCPU(live, cands[j].Name)
		})
	}
	return Slot{Account: cands[0].Name, Mode: CPU, Partition: cands[0].PartitionCPU}
}

func liveGPU(live map[string]config.LiveAccount, name string) int {
	if la, ok := live[name]; ok && la.GPUAvail != nil {
		return *la.GPUAvail
	}
	return -1
}

func liveCPU(live map[string]config.LiveAccount, name string) int {
	if la, ok := live[name]; ok && la.CPUAvail != nil {
		return *la.CPUAvail
	}
	return -1
}

func liveMem(live map[string]config.LiveAccount, name string) float64 {
	if la, ok := live[name]; ok && la.MemAvailGB != nil {
		return *la.MemAvailGB
	}
	return -1
}

// legacy handles the original's scalar form (account_gpu / partition_gpu /
// gpu_slots, or account) used before resources.accounts existed.
func legacy(cfg *config.Config) (*Plan, error) {
	res := cfg.Resources
	acct := res.AccountGPU
	if acct == "" {
		acct = res.Account
	}
	if acct == "" {
		return nil, fmt.Errorf("config %s: key resources.accounts: %w: list accounts as [{name, gpu_slots, partition_gpu}] (or set the legacy resources.account_gpu)", cfg.Path, ErrNoGPU)
	}
	part := res.PartitionGPU
	if part == "" {
		part = "hpg-b200"
	}
	slots := res.GPUSlots
	if slots <= 0 {
		slots = 1
	}
	gpu := Slot{Account: acct, Mode: GPU, Partition: part}
	p := &Plan{Cycles: map[string]Slot{}, Order: append([]int(nil), cfg.Cycles...), Registration: gpu, Jobs: slots,
		Slots: map[string]int{acct: slots}, Source: "legacy"}
	for _, c := range cfg.Cycles {
		p.Cycles[strconv.Itoa(c)] = gpu
	}
	cpuAcct, cpuPart := res.AccountCPU, res.PartitionCPU
	if cpuAcct == "" {
		cpuAcct = acct
	}
	if cpuPart == "" {
		cpuPart = config.DefaultPartitionCPU
	}
	p.CPU = Slot{Account: cpuAcct, Mode: CPU, Partition: cpuPart}
	return p, nil
}
