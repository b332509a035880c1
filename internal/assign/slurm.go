package assign

// What the helper reads from SLURM: the user's accounts and their GPU limits
// (sacctmgr, for Discover) and the GPUs that running and pending jobs hold per
// account (squeue, for LiveFromSqueue). Commands run through a Runner so that
// tests replay recorded outputs.

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"os/user"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
)

// Runner runs a command and returns its standard output.
type Runner func(ctx context.Context, name string, args ...string) ([]byte, error)

// ExecRunner runs the command with a time limit (SLURM commands hang while
// the controller is down); a failure carries the command's stderr.
func ExecRunner(timeout time.Duration) Runner {
	return func(ctx context.Context, name string, args ...string) ([]byte, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, args...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			msg := strings.TrimSpace(stderr.String())
			if ctx.Err() != nil {
				msg = fmt.Sprintf("no answer within %s", timeout)
			}
			return nil, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, msg)
		}
		return out, nil
	}
}

// SqueueArgs is the squeue call of LiveFromSqueue: every running and pending
// job (all users) of the accounts, array tasks expanded, with the TRES it holds
// (running) or asks for (pending).
func SqueueArgs(accounts []string) []string {
	return []string{"--noheader", "--array", "--states=RUNNING,PENDING", "--accounts=" + strings.Join(accounts, ","),
		"--Format=JobArrayID:64|,Account:64|,State:16|,tres-alloc:512"}
}

// LiveFromSqueue computes live GPU availability per account: gpu_slots minus
// the GPUs of the account's running and pending jobs (all users: SLURM's
// GrpTRES limit counts them all). The result is not capped: BuildLive caps it
// to [0, gpu_slots]. inUse is the GPU count per account.
func LiveFromSqueue(ctx context.Context, run Runner, accts []config.Account) (live []config.LiveAccount, inUse map[string]int, err error) {
	names := make([]string, len(accts))
	for i, a := range accts {
		names[i] = a.Name
	}
	if len(names) == 0 {
		return nil, nil, fmt.Errorf("live availability: no accounts in resources.accounts")
	}
	out, err := run(ctx, "squeue", SqueueArgs(names)...)
	if err != nil {
		return nil, nil, fmt.Errorf("live availability: %w", err)
	}
	inUse, err = ParseSqueue(out)
	if err != nil {
		return nil, nil, err
	}
	for _, a := range accts {
		n := min(inUse[a.Name], MaxAvail) // bounded, whatever squeue says
		avail := a.GPUSlots - n
		live = append(live, config.LiveAccount{Name: a.Name, GPUAvail: &avail})
	}
	return live, inUse, nil
}

// ParseSqueue sums the GPUs per account of squeue output in SqueueArgs' format
// (fields separated by '|', padded with spaces).
func ParseSqueue(out []byte) (map[string]int, error) {
	inUse := map[string]int{}
	for i, line := range strings.Split(string(out), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		f := strings.Split(line, "|")
		if len(f) < 4 {
			return nil, fmt.Errorf("squeue output line %d: %q: want JobArrayID|Account|State|TRES", i+1, line)
		}
		acct := strings.TrimSpace(f[1])
		g, err := tresGPUs(strings.TrimSpace(f[3]))
		if err != nil {
			return nil, fmt.Errorf("squeue output line %d: %w", i+1, err)
		}
		inUse[acct] = min(inUse[acct]+g, MaxAvail)
	}
	return inUse, nil
}

// tresGPUs returns the GPU count of a TRES string such as
// "cpu=2,mem=1000M,node=1,billing=2,gres/gpu=1" (typed entries like
// gres/gpu:a100=2 are summed when no untyped total is given).
func tresGPUs(tres string) (int, error) {
	total, typed, haveTotal := 0, 0, false
	for _, kv := range strings.Split(tres, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || !(k == "gres/gpu" || strings.HasPrefix(k, "gres/gpu:")) {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("TRES %q: bad GPU count %q", tres, v)
		}
		n = min(n, MaxAvail)
		if k == "gres/gpu" {
			total, haveTotal = n, true
		} else {
			typed = min(typed+n, MaxAvail)
		}
	}
	if haveTotal {
		return total, nil
	}
	return typed, nil
}

// Association is one line of sacctmgr show associations.
type Association struct {
	Cluster, Account, User, Partition, Parent, GrpTRES string
	QOS                                                []string
	DefaultQOS                                         string
}

// AssocFormat is the sacctmgr format of ParseAssociations.
const AssocFormat = "Cluster,Account,User,Partition,ParentName,GrpTRES,QOS,DefaultQOS"

// ParseAssociations parses sacctmgr -n -P show associations format=AssocFormat.
func ParseAssociations(out []byte) ([]Association, error) {
	var as []Association
	for i, line := range strings.Split(string(out), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		f := strings.Split(line, "|")
		if len(f) != 8 {
			return nil, fmt.Errorf("sacctmgr associations line %d: %q: want %d fields (%s)", i+1, line, 8, AssocFormat)
		}
		a := Association{Cluster: f[0], Account: f[1], User: f[2], Partition: f[3], Parent: f[4], GrpTRES: f[5], DefaultQOS: f[7]}
		for _, q := range strings.Split(f[6], ",") {
			if q != "" {
				a.QOS = append(a.QOS, q)
			}
		}
		as = append(as, a)
	}
	return as, nil
}

// ParseQOS parses sacctmgr -n -P show qos format=Name,GrpTRES into name -> GrpTRES.
func ParseQOS(out []byte) (map[string]string, error) {
	q := map[string]string{}
	for i, line := range strings.Split(string(out), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		name, tres, ok := strings.Cut(line, "|")
		if !ok {
			return nil, fmt.Errorf("sacctmgr qos line %d: %q: want Name|GrpTRES", i+1, line)
		}
		q[name] = tres
	}
	return q, nil
}

// DiscoveredAccount is one of the user's accounts with its GPU limit.
type DiscoveredAccount struct {
	Name      string
	GPUs      int    // the smallest gres/gpu GrpTRES limit that applies; -1: none found
	LimitFrom string // where the limit comes from, e.g. "association acct_a", "QOS gpu_q"
	Note      string // why the account has no usable limit (GPUs == -1), or other remarks
}

// Discovery is what Discover found.
type Discovery struct {
	User, Cluster string
	Accounts      []DiscoveredAccount // in sacctmgr order
}

// Discover lists the user's accounts and their GPU limits: the smallest
// GrpTRES gres/gpu of the user's association, its account's association and
// every parent account's association up to root, and the association's QOS
// (its default QOS, or its only QOS). Accounts without any such limit are
// reported with GPUs -1: their slot count is not guessed. Accounts come largest
// limit first, then by name.
func Discover(ctx context.Context, run Runner, user, cluster string) (*Discovery, error) {
	filter := []string{"user=" + user}
	if cluster != "" {
		filter = append(filter, "cluster="+cluster)
	}
	out, err := run(ctx, "sacctmgr", append(append([]string{"-n", "-P", "show", "associations"}, filter...), "format="+AssocFormat)...)
	if err != nil {
		return nil, fmt.Errorf("discover: %w", err)
	}
	mine, err := ParseAssociations(out)
	if err != nil {
		return nil, err
	}
	if len(mine) == 0 {
		return nil, fmt.Errorf("discover: sacctmgr lists no associations for user %s%s", user, clusterNote(cluster))
	}
	clusters := map[string]bool{}
	for _, a := range mine {
		clusters[a.Cluster] = true
	}
	if len(clusters) > 1 {
		return nil, &usageErr{fmt.Sprintf("user %s has associations on clusters %s: choose one with --cluster", user, strings.Join(slices.Sorted(maps.Keys(clusters)), ", "))}
	}
	cl := mine[0].Cluster
	// Account-level associations (no user) of the cluster, for the parent chain.
	out, err = run(ctx, "sacctmgr", "-n", "-P", "show", "associations", "cluster="+cl, "user=", "format="+AssocFormat)
	if err != nil {
		return nil, fmt.Errorf("discover: %w", err)
	}
	all, err := ParseAssociations(out)
	if err != nil {
		return nil, err
	}
	acctAssoc := map[string]Association{}
	for _, a := range all {
		if a.User == "" && a.Partition == "" {
			acctAssoc[a.Account] = a
		}
	}
	out, err = run(ctx, "sacctmgr", "-n", "-P", "show", "qos", "format=Name,GrpTRES")
	if err != nil {
		return nil, fmt.Errorf("discover: %w", err)
	}
	qos, err := ParseQOS(out)
	if err != nil {
		return nil, err
	}

	d := &Discovery{User: user, Cluster: cl}
	seen := map[string]bool{}
	for _, ua := range mine {
		if seen[ua.Account] {
			continue // a further partition-specific association of the same account
		}
		seen[ua.Account] = true
		da := DiscoveredAccount{Name: ua.Account, GPUs: -1}
		consider := func(tres, from string) {
			n, ok, err := gpuLimit(tres)
			if err != nil {
				da.Note = joinNote(da.Note, fmt.Sprintf("%s: %v", from, err))
				return
			}
			if ok && (da.GPUs < 0 || n < da.GPUs) {
				da.GPUs, da.LimitFrom = n, from
			}
		}
		consider(ua.GrpTRES, fmt.Sprintf("association %s/%s", ua.Account, user))
		for acct, hops := ua.Account, 0; acct != "" && hops < 64; hops++ {
			aa, ok := acctAssoc[acct]
			if !ok {
				break
			}
			consider(aa.GrpTRES, "association "+acct)
			if acct == "root" {
				break
			}
			acct = aa.Parent
		}
		q := ua.DefaultQOS
		if q == "" && len(ua.QOS) == 1 {
			q = ua.QOS[0]
		}
		switch {
		case q != "":
			if tres, ok := qos[q]; ok {
				consider(tres, "QOS "+q)
			} else {
				da.Note = joinNote(da.Note, "QOS "+q+" not listed by sacctmgr show qos")
			}
		case len(ua.QOS) > 1:
			da.Note = joinNote(da.Note, "QOS "+strings.Join(ua.QOS, ",")+" without a default QOS: their limits are not used")
		}
		if da.GPUs < 0 {
			da.Note = joinNote(da.Note, "no GrpTRES gres/gpu limit on its associations or QOS: set gpu_slots by hand")
		}
		d.Accounts = append(d.Accounts, da)
	}
	// Largest GPU limit first (the placement fills accounts in this order), then by name.
	sort.SliceStable(d.Accounts, func(i, j int) bool {
		a, b := d.Accounts[i], d.Accounts[j]
		if a.GPUs != b.GPUs {
			return a.GPUs > b.GPUs
		}
		return a.Name < b.Name
	})
	return d, nil
}

// gpuLimit reads the gres/gpu limit of a GrpTRES string ("" or no gres/gpu:
// no limit; -1 in SLURM also means none).
func gpuLimit(tres string) (int, bool, error) {
	for _, kv := range strings.Split(tres, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || k != "gres/gpu" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return 0, false, fmt.Errorf("GrpTRES %q: bad gres/gpu value", tres)
		}
		if n < 0 {
			return 0, false, nil
		}
		return min(n, MaxSlots), true, nil
	}
	return 0, false, nil
}

// YAML renders the discovery as a ready resources.accounts block; accounts
// without a GPU limit are listed as comments.
func (d *Discovery) YAML(partitionGPU, partitionCPU string, now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# kintsugi-assign discover: user %s, cluster %s, %s\n", d.User, d.Cluster, now.UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "# gpu_slots = the smallest GrpTRES gres/gpu of the user's association, its accounts and QOS\n")
	b.WriteString("resources:\n  accounts:\n")
	n := 0
	for _, a := range d.Accounts {
		if a.GPUs < 0 {
			continue
		}
		n++
		fmt.Fprintf(&b, "    - {name: %s, gpu_slots: %d, partition_gpu: %s, partition_cpu: %s}   # %s%s\n",
			yamlScalar(a.Name), a.GPUs, yamlScalar(partitionGPU), yamlScalar(partitionCPU), a.LimitFrom, noteSuffix(a.Note))
	}
	for _, a := range d.Accounts {
		if a.GPUs >= 0 {
			continue
		}
		fmt.Fprintf(&b, "    # not listed: %s: %s\n", a.Name, a.Note)
	}
	if n == 0 {
		b.WriteString("    []   # no account with a GPU limit was found\n")
	}
	return b.String()
}

func noteSuffix(n string) string {
	if n == "" {
		return ""
	}
	return "; " + n
}

// yamlScalar quotes s when plain YAML would not read it back as that string.
func yamlScalar(s string) string {
	if s != "" && !strings.ContainsAny(s, ":#{}[]&*!|>'\"%@`, ") && strings.Trim(s, "-?0123456789.") != "" &&
		!strings.EqualFold(s, "true") && !strings.EqualFold(s, "false") && !strings.EqualFold(s, "null") &&
		!strings.EqualFold(s, "yes") && !strings.EqualFold(s, "no") && s != "~" {
		return s
	}
	return strconv.Quote(s)
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

func clusterNote(c string) string {
	if c == "" {
		return ""
	}
	return " on cluster " + c
}

// usageErr marks a discovery error caused by the caller's choice (IsUsage).
type usageErr struct{ msg string }

func (e *usageErr) Error() string { return e.msg }

// IsUsage reports whether err from Discover is the caller's to fix (exit 2).
func IsUsage(err error) bool {
	_, ok := err.(*usageErr)
	return ok
}

// DiscoverPartitions asks sinfo for the partitions of a discovered
// accounts block (Partitions).
func DiscoverPartitions(ctx context.Context, run Runner) (gpu, cpu string, err error) {
	out, err := run(ctx, "sinfo", "--noheader", "--format=%P|%G")
	if err != nil {
		return "", "", err
	}
	gpu, cpu = Partitions(out)
	return gpu, cpu, nil
}

// UserName is the SLURM user Discover asks about: name when given, else
// $USER, else the current user.
func UserName(name string) (string, error) {
	if name == "" {
		name = os.Getenv("USER")
	}
	if name == "" {
		u, err := user.Current()
		if err != nil {
			return "", &usageErr{fmt.Sprintf("no user name: pass --user (%v)", err)}
		}
		name = u.Username
	}
	return name, nil
}

// Partitions picks the partitions of the discovered block from sinfo -h -o
// '%P|%G' output: GPU partitions are those whose nodes have gres gpu; the CPU
// partition is the default one (marked '*') when it has no GPUs, else the first
// without GPUs; when every partition has GPUs, the default one is the CPU
// partition and not a GPU one. Empty when none qualifies.
func Partitions(sinfo []byte) (gpu, cpu string) {
	type part struct {
		name     string
		def, gpu bool
	}
	var parts []part
	idx := map[string]int{}
	for _, line := range strings.Split(string(sinfo), "\n") {
		name, gres, ok := strings.Cut(strings.TrimSpace(line), "|")
		if !ok || name == "" {
			continue
		}
		def := strings.HasSuffix(name, "*")
		name = strings.TrimSuffix(name, "*")
		hasGPU := strings.Contains(gres, "gpu")
		if i, ok := idx[name]; ok {
			parts[i].gpu = parts[i].gpu || hasGPU
			parts[i].def = parts[i].def || def
			continue
		}
		idx[name] = len(parts)
		parts = append(parts, part{name, def, hasGPU})
	}
	// When every partition has GPUs (one node pool), the default partition takes the CPU jobs.
	allGPU := true
	for _, p := range parts {
		allGPU = allGPU && p.gpu
	}
	var gpus []string
	for _, p := range parts {
		if p.gpu && !(allGPU && p.def && len(parts) > 1) {
			gpus = append(gpus, p.name)
		}
	}
	for _, p := range parts {
		if p.def && (!p.gpu || allGPU) {
			cpu = p.name
		}
	}
	if cpu == "" {
		for _, p := range parts {
			if !p.gpu {
				cpu = p.name
				break
			}
		}
	}
	return strings.Join(gpus, ","), cpu
}
