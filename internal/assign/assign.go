// Package assign decides where every SLURM job of the pipeline runs: which
// account and partition each cycle's GPU jobs use, where registration runs and
// where CPU-only QC rules go. It is GPU-only: every cycle gets mode "gpu";
// there is no CPU overflow. Cycles beyond the GPU slots are still assigned to
// GPU accounts and wait in the SLURM queue.
//
// Placement (Build):
//
//  1. Live availability, when given (live_accounts, or squeue through
//     LiveFromSqueue), orders the placement: each account's free GPUs
//     (gpu_avail, capped to [0, gpu_slots]) are filled first, account by
//     account in config order.
//  2. The remaining cycles are dealt over every account's static gpu_slots,
//     wave by wave: each goes to the account whose queue would finish in the
//     fewest waves, ceil((load+1)/gpu_slots), ties in config order, where an
//     account's load is its cycles so far plus its GPUs busy with other work
//     (gpu_slots - gpu_avail; busy GPUs free up during a run). An account with
//     gpu_slots 0 never gets a GPU job.
//
// Live data never shrinks the plan: Jobs, the most GPU jobs the workflow keeps
// in flight, is the total static gpu_slots. Without live data step 1 fills the
// slots account by account and step 2 deals overflow in proportion to
// gpu_slots (the original dealt overflow over accounts, one each, which with
// slots 4 and 1 gave the 1-slot account four waves of work while the other had
// two). Registration runs on the first account with GPU slots in config order;
// CPU QC rules on the account with the most free memory (live data), else the
// first account. The plan costs O(cycles x accounts), never O(slots).
package assign

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
)

// Mode is where a job computes.
type Mode string

const (
	GPU Mode = "gpu"
	CPU Mode = "cpu"
)

// Bounds the helper enforces itself (the schema has the same ones), so that no
// sum overflows and nothing is sized by a slot count.
const (
	MaxSlots    = 100000  // gpu_slots of one account
	MaxAccounts = 1000    // entries of resources.accounts
	MaxAvail    = 1000000 // |gpu_avail| of live data before capping
)

// Slot is the placement of one job.
type Slot struct {
	Account   string `json:"account"`
	Mode      Mode   `json:"mode"`
	Partition string `json:"partition"`
}

// Plan is the helper's output, printed as JSON for the Snakefile.
type Plan struct {
	Cycles       map[string]Slot `json:"cycles"`         // cycle number (decimal string) -> slot, mode always gpu
	Order        []int           `json:"order"`          // cycles in config order
	Registration Slot            `json:"registration"`   // the registration job (gpu, one GPU)
	CPU          Slot            `json:"cpu"`            // CPU-only QC rules
	Jobs         int             `json:"jobs"`           // most GPU jobs in flight: total static gpu_slots (Snakemake resource gpu_jobs)
	Slots        map[string]int  `json:"slots"`          // static gpu_slots per account
	Source       string          `json:"source"`         // "static", "live" (live data applied to at least one account) or "legacy"
	Live         *LiveReport     `json:"live,omitempty"` // what live data was applied; nil without live data
}

// LiveReport says which live data the plan used.
type LiveReport struct {
	From    string                 `json:"from"`              // "squeue", "config live_accounts" or "--live-accounts"
	Applied map[string]LiveApplied `json:"applied"`           // accounts whose gpu_avail ordered the placement
	NoData  []string               `json:"no_data,omitempty"` // accounts without a live gpu_avail: all their slots count as free
}

// LiveApplied is one account's live availability as reported and as used.
type LiveApplied struct {
	Reported int `json:"reported"` // gpu_avail as given (squeue: gpu_slots minus GPUs of running and pending jobs)
	Avail    int `json:"avail"`    // capped to [0, gpu_slots]: free GPUs filled first
}

// ErrNoGPU is returned when no account has a GPU slot.
var ErrNoGPU = errors.New("no account has GPU slots")

// Build computes the plan for cfg with the config's own live data
// (live_accounts).
func Build(cfg *config.Config) (*Plan, error) {
	return BuildLive(cfg, cfg.LiveAccounts, "config live_accounts")
}

// BuildLive computes the plan for cfg with live availability live (nil: none);
// from names its origin in messages and in the plan ("squeue",
// "--live-accounts", ...). Unknown or duplicate names in live are errors.
func BuildLive(cfg *config.Config, live []config.LiveAccount, from string) (*Plan, error) {
	res := cfg.Resources
	if len(res.Accounts) == 0 {
		return legacy(cfg, live, from)
	}
	if len(res.Accounts) > MaxAccounts {
		return nil, &config.Error{File: cfg.Path, Key: "resources.accounts", Msg: fmt.Sprintf("%d accounts: at most %d", len(res.Accounts), MaxAccounts)}
	}
	names := make([]string, len(res.Accounts))
	total := 0
	for i, a := range res.Accounts {
		if a.GPUSlots < 0 || a.GPUSlots > MaxSlots {
			return nil, &config.Error{File: cfg.Path, Key: fmt.Sprintf("resources.accounts[%d].gpu_slots", i),
				Msg: fmt.Sprintf("%d: want 0..%d", a.GPUSlots, MaxSlots)}
		}
		names[i] = a.Name
		total += a.GPUSlots
	}
	if total == 0 {
		return nil, fmt.Errorf("config %s: key resources.accounts: %w: set gpu_slots > 0 on at least one account (the pipeline is GPU-only)", cfg.Path, ErrNoGPU)
	}
	byName, err := checkLive(cfg, live, from, names)
	if err != nil {
		return nil, err
	}

	p := &Plan{Cycles: map[string]Slot{}, Order: append([]int(nil), cfg.Cycles...), Jobs: total,
		Slots: map[string]int{}, Source: "static"}
	avail := make([]int, len(res.Accounts)) // free GPUs now
	if len(live) > 0 {
		p.Live = &LiveReport{From: from, Applied: map[string]LiveApplied{}}
	}
	for i, a := range res.Accounts {
		p.Slots[a.Name] = a.GPUSlots
		avail[i] = a.GPUSlots
		la, ok := byName[a.Name]
		if p.Live == nil {
			continue
		}
		if !ok || la.GPUAvail == nil {
			p.Live.NoData = append(p.Live.NoData, a.Name)
			continue
		}
		avail[i] = min(max(*la.GPUAvail, 0), a.GPUSlots)
		p.Live.Applied[a.Name] = LiveApplied{Reported: *la.GPUAvail, Avail: avail[i]}
	}
	if p.Live != nil && len(p.Live.Applied) > 0 {
		p.Source = "live"
	}

	// 1. Free GPUs first, account by account.
	load := make([]int, len(res.Accounts)) // cycles placed + GPUs busy with other work
	for i, a := range res.Accounts {
		load[i] = a.GPUSlots - avail[i]
	}
	next := 0
	for i, a := range res.Accounts {
		for n := 0; n < avail[i] && next < len(cfg.Cycles); n++ {
			p.Cycles[strconv.Itoa(cfg.Cycles[next])] = gpuSlot(a)
			load[i]++
			next++
		}
	}
	// 2. The rest, wave by wave over the static slots.
	for ; next < len(cfg.Cycles); next++ {
		best, bestWaves := -1, 0
		for i, a := range res.Accounts {
			if a.GPUSlots == 0 {
				continue
			}
			w := (load[i] + a.GPUSlots) / a.GPUSlots // ceil((load+1)/slots)
			if best < 0 || w < bestWaves {
				best, bestWaves = i, w
			}
		}
		p.Cycles[strconv.Itoa(cfg.Cycles[next])] = gpuSlot(res.Accounts[best])
		load[best]++
	}
	for _, a := range res.Accounts {
		if a.GPUSlots > 0 {
			p.Registration = gpuSlot(a)
			break
		}
	}
	p.CPU = cpuSlot(res.Accounts, byName)
	return p, nil
}

func gpuSlot(a config.Account) Slot {
	return Slot{Account: a.Name, Mode: GPU, Partition: a.PartitionGPU}
}

// checkLive validates live data against the configured accounts: every name
// known, none twice, values within bounds.
func checkLive(cfg *config.Config, live []config.LiveAccount, from string, names []string) (map[string]config.LiveAccount, error) {
	key := from
	if strings.HasPrefix(from, "config ") {
		key = strings.TrimPrefix(from, "config ")
	}
	known := map[string]bool{}
	for _, n := range names {
		known[n] = true
	}
	byName := map[string]config.LiveAccount{}
	var unknown, dup []string
	for i, la := range live {
		switch {
		case la.Name == "":
			return nil, &config.Error{File: cfg.Path, Key: fmt.Sprintf("%s[%d].name", key, i), Msg: "empty account name"}
		case !known[la.Name]:
			unknown = append(unknown, la.Name)
		case byName[la.Name].Name != "":
			dup = append(dup, la.Name)
		}
		if la.GPUAvail != nil && (*la.GPUAvail < -MaxAvail || *la.GPUAvail > MaxAvail) {
			return nil, &config.Error{File: cfg.Path, Key: fmt.Sprintf("%s[%d].gpu_avail", key, i),
				Msg: fmt.Sprintf("%d: want %d..%d", *la.GPUAvail, -MaxAvail, MaxAvail)}
		}
		byName[la.Name] = la
	}
	var msgs []string
	if len(unknown) > 0 {
		msgs = append(msgs, fmt.Sprintf("unknown account(s) %s (resources.accounts: %s)", strings.Join(unknown, ", "), strings.Join(names, ", ")))
	}
	if len(dup) > 0 {
		msgs = append(msgs, "account(s) listed more than once: "+strings.Join(dup, ", "))
	}
	if len(msgs) > 0 {
		return nil, &config.Error{File: cfg.Path, Key: key, Msg: strings.Join(msgs, "; ")}
	}
	return byName, nil
}

// cpuSlot picks the account for CPU-only QC rules: with live memory data the
// one with the most free memory (then CPUs), else the first account.
func cpuSlot(accts []config.Account, live map[string]config.LiveAccount) Slot {
	cands := append([]config.Account(nil), accts...)
	sort.SliceStable(cands, func(i, j int) bool {
		mi, mj := liveMem(live, cands[i].Name), liveMem(live, cands[j].Name)
		if mi != mj {
			return mi > mj
		}
		return liveCPU(live, cands[i].Name) > liveCPU(live, cands[j].Name)
	})
	return Slot{Account: cands[0].Name, Mode: CPU, Partition: cands[0].PartitionCPU}
}

func liveCPU(live map[string]config.LiveAccount, name string) int {
	if la, ok := live[name]; ok && la.CPUAvail != nil {
		return *la.CPUAvail
	}
	return -1 << 40
}

func liveMem(live map[string]config.LiveAccount, name string) float64 {
	if la, ok := live[name]; ok && la.MemAvailGB != nil {
		return *la.MemAvailGB
	}
	return -1e300
}

// legacy handles the original's scalar form (account_gpu / partition_gpu /
// gpu_slots, or account) used before resources.accounts existed.
func legacy(cfg *config.Config, live []config.LiveAccount, from string) (*Plan, error) {
	res := cfg.Resources
	acct := res.AccountGPU
	if acct == "" {
		acct = res.Account
	}
	if acct == "" {
		return nil, fmt.Errorf("config %s: key resources.accounts: %w: list accounts as [{name, gpu_slots, partition_gpu}] (or set the legacy resources.account_gpu)", cfg.Path, ErrNoGPU)
	}
	if _, err := checkLive(cfg, live, from, []string{acct}); err != nil {
		return nil, err
	}
	part := res.PartitionGPU
	if part == "" {
		part = "hpg-b200"
	}
	slots := res.GPUSlots
	if slots <= 0 {
		slots = 1
	}
	if slots > MaxSlots {
		return nil, &config.Error{File: cfg.Path, Key: "resources.gpu_slots", Msg: fmt.Sprintf("%d: want 0..%d", slots, MaxSlots)}
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
