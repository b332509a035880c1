// Command kintsugi-assign prints the GPU-only job placement of a pipeline
// config as JSON: for every cycle {account, mode "gpu", partition}, the
// registration job, the CPU QC rules and the most GPU jobs to keep in flight.
// The Snakefile runs it at DAG time. `kintsugi-assign discover` prints the
// user's SLURM accounts with their GPU limits as a resources.accounts block.
package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kintsugi-hpc/kintsugi-go/internal/assign"
	"github.com/kintsugi-hpc/kintsugi-go/internal/cliutil"
	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
)

// slurmTimeout bounds every sacctmgr/squeue call (they hang while the
// controller or slurmdbd is down).
const slurmTimeout = 60 * time.Second

func main() { cliutil.Main(newApp(assign.ExecRunner(slurmTimeout))) }

// newApp builds the command; run executes the SLURM commands (squeue,
// sacctmgr, sinfo): assign.ExecRunner in production, recorded outputs in tests.
func newApp(run assign.Runner) *cli.App {
	app := cliutil.NewApp("kintsugi-assign",
		"print the GPU-only SLURM placement of every cycle as JSON",
		`Reads the config (YAML or JSON) and prints, on stdout:
  {"cycles": {"<cycle>": {"account", "mode": "gpu", "partition"}}, "order": [...],
   "registration": {...}, "cpu": {...}, "jobs": <total static GPU slots>, "slots": {...},
   "source": "static"|"live"|"legacy", "live": {"from", "applied": {...}, "no_data": [...]}}
Live availability (free GPUs per account) orders the placement: free GPUs are filled
first, the remaining cycles are dealt over every account's static gpu_slots (busy GPUs
free up during a run; never onto gpu_slots: 0), and "jobs" (the most GPU jobs the
workflow keeps in flight) stays the total static slots. Live data comes from, in this
order: --live-accounts, the config's live_accounts, or squeue when --live is given or
the config says live: true (running and pending GPU jobs of each account, all users:
gpu_avail = gpu_slots - GPUs in use, capped to [0, gpu_slots]).
Registration runs on the first account with GPU slots in config order. There is never
a CPU mode for a cycle; no account with GPU slots is an error.

  kintsugi-assign discover   prints your accounts and GPU limits as a resources.accounts block`,
		[]cli.Flag{
			&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "config file (config.yaml, or the JSON the Snakefile writes); required"},
			&cli.StringFlag{Name: "live-accounts", Usage: `live availability JSON, e.g. '[{"name":"a","gpu_avail":1}]' (overrides the config's live_accounts and --live)`},
			&cli.BoolFlag{Name: "live", Usage: "read live availability from squeue (as the config's live: true)"},
		},
		func(c *cli.Context) error { return plan(c, run) })
	app.Commands = []*cli.Command{{
		Name:  "discover",
		Usage: "print your SLURM accounts and their GPU limits as a ready resources.accounts block (YAML)",
		Description: `Reads sacctmgr: the user's associations, the account associations up to root and the
QOS limits. gpu_slots is the smallest GrpTRES gres/gpu limit that applies to the user's
jobs under the account (user association, account and parent associations, the
association's default or only QOS). Accounts without any GPU limit are listed as
comments, not guessed. Partitions come from --partition-gpu/--partition-cpu, else from
sinfo (GPU partitions: those whose nodes have gres gpu; CPU: the default partition
without GPUs). Paste the block into config.yaml.

` + cliutil.ExitCodesHelp,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "user", Usage: "SLURM user (default: $USER, else the current user)"},
			&cli.StringFlag{Name: "cluster", Usage: "cluster name, when your associations span several clusters"},
			&cli.StringFlag{Name: "partition-gpu", Usage: "partition_gpu of every account (default: from sinfo)"},
			&cli.StringFlag{Name: "partition-cpu", Usage: "partition_cpu of every account (default: from sinfo)"},
		}, cliutil.LoggingFlags()...),
		Action:       func(c *cli.Context) error { return discover(c, run) },
		OnUsageError: func(_ *cli.Context, err error, _ bool) error { return cliutil.AsUsage(err) },
	}}
	return app
}

func noArgs(c *cli.Context) error {
	if c.Args().Len() > 0 {
		return cliutil.Usagef("unexpected argument(s) %q: %s takes flags only", strings.Join(c.Args().Slice(), " "), c.Command.FullName())
	}
	return nil
}

func plan(c *cli.Context, runner assign.Runner) error {
	lg, err := cliutil.SetupLogging(c)
	if err != nil {
		return err
	}
	if err := noArgs(c); err != nil {
		return err
	}
	if c.String("config") == "" {
		return cliutil.Usagef("missing --config (the pipeline's config.yaml)")
	}
	cfg, err := cliutil.LoadConfig(c.String("config"))
	if err != nil {
		return err
	}
	live, from := cfg.LiveAccounts, "config live_accounts"
	switch s := c.String("live-accounts"); {
	case s != "":
		if live, err = config.ParseLiveAccounts(s); err != nil {
			return cliutil.Usagef("--live-accounts: %w", err)
		}
		from = "--live-accounts"
	case len(live) > 0:
	case c.Bool("live") || cfg.Live:
		if len(cfg.Resources.Accounts) == 0 {
			return cliutil.Usagef("config %s: key resources.accounts: live availability needs the accounts list", cfg.Path)
		}
		var inUse map[string]int
		if live, inUse, err = assign.LiveFromSqueue(c.Context, runner, cfg.Resources.Accounts); err != nil {
			return err
		}
		from = "squeue"
		lg.Info("live GPU use from squeue (running + pending jobs, all users)", "in_use", countsText(inUse))
	}
	p, err := assign.BuildLive(cfg, live, from)
	if err != nil {
		return cliutil.AsUsage(err)
	}
	if p.Live != nil {
		lg.Info("placement", "source", p.Source, "from", p.Live.From, "applied", appliedText(p), "no_data", strings.Join(p.Live.NoData, ", "), "jobs", p.Jobs)
		free := 0
		for _, a := range p.Live.Applied {
			free += a.Avail
		}
		if len(p.Live.Applied) == len(p.Slots) && free == 0 {
			lg.Warn("no account has a free GPU now: every cycle waits in the SLURM queue")
		}
	} else {
		lg.Info("placement", "source", p.Source, "jobs", p.Jobs)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(p)
}

func discover(c *cli.Context, runner assign.Runner) error {
	if _, err := cliutil.SetupLogging(c); err != nil {
		return err
	}
	if err := noArgs(c); err != nil {
		return err
	}
	name, err := assign.UserName(c.String("user"))
	if err != nil {
		return cliutil.AsUsage(err)
	}
	d, err := assign.Discover(c.Context, runner, name, c.String("cluster"))
	if err != nil {
		if assign.IsUsage(err) {
			return cliutil.AsUsage(err)
		}
		return err
	}
	pg, pc := c.String("partition-gpu"), c.String("partition-cpu")
	if pg == "" || pc == "" {
		sg, sc, err := assign.DiscoverPartitions(c.Context, runner)
		if err != nil {
			return fmt.Errorf("%w (or pass --partition-gpu and --partition-cpu)", err)
		}
		if pg == "" {
			pg = sg
		}
		if pc == "" {
			pc = sc
		}
		if pg == "" || pc == "" {
			return cliutil.Usagef("sinfo shows no %s partition: pass --partition-gpu and --partition-cpu", map[bool]string{true: "GPU", false: "CPU"}[pg == ""])
		}
	}
	for _, a := range d.Accounts {
		if a.GPUs < 0 {
			slog.Warn("account without a GPU limit: not listed", "account", a.Name, "why", a.Note)
		}
	}
	fmt.Print(d.YAML(pg, pc, time.Now()))
	return nil
}

// countsText renders a per-account count for a log line: "acct_a 2, acct_b 0"
// (by name), not Go's map[...] form.
func countsText(m map[string]int) string {
	var parts []string
	for _, n := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", n, m[n]))
	}
	return strings.Join(parts, ", ")
}

// appliedText renders the live availability a plan used for a log line:
// "acct_a 1 free of 3, acct_b 0 free of 2 (reported -1)" (by name; the
// reported value where the cap changed it).
func appliedText(p *assign.Plan) string {
	names := slices.Sorted(maps.Keys(p.Live.Applied))
	parts := make([]string, len(names))
	for i, n := range names {
		a := p.Live.Applied[n]
		parts[i] = fmt.Sprintf("%s %d free of %d", n, a.Avail, p.Slots[n])
		if a.Reported != a.Avail {
			parts[i] += fmt.Sprintf(" (reported %d)", a.Reported)
		}
	}
	return strings.Join(parts, ", ")
}
