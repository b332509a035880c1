// Command kintsugi-assign prints the GPU-only job placement of a pipeline
// config as JSON: for every cycle {account, mode "gpu", partition}, the
// registration job, the CPU QC rules and the recommended snakemake -j. The
// Snakefile's _build_cycle_assignment runs it at DAG time.
package main

import (
	"encoding/json"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/kintsugi-hpc/kintsugi-go/internal/assign"
	"github.com/kintsugi-hpc/kintsugi-go/internal/cliutil"
	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
)

func main() {
	cliutil.Main(cliutil.NewApp("kintsugi-assign",
		"print the GPU-only SLURM placement of every cycle as JSON",
		`Reads the config (YAML or JSON; live availability per account from its
live_accounts key or --live-accounts) and prints, on stdout:
  {"cycles": {"<cycle>": {"account", "mode": "gpu", "partition"}}, "order": [...],
   "registration": {...}, "cpu": {...}, "jobs": <total GPU slots>, "slots": {...}, "source": ...}
Cycles fill GPU slots account by account; cycles beyond the total are dealt over
the slots in proportion to gpu_slots and wait in the SLURM queue. There is never
a CPU mode for a cycle; no account with GPU slots is an error.`,
		[]cli.Flag{
			&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Required: true, Usage: "config file (config.yaml, or the JSON the Snakefile writes)"},
			&cli.StringFlag{Name: "live-accounts", Usage: `live availability JSON, e.g. '[{"name":"a","gpu_avail":1}]' (overrides the config's live_accounts)`},
		},
		run))
}

func run(c *cli.Context) error {
	if _, err := cliutil.SetupLogging(c); err != nil {
		return err
	}
	cfg, err := config.Load(c.String("config"))
	if err != nil {
		return cliutil.AsUsage(err)
	}
	if s := c.String("live-accounts"); s != "" {
		if cfg.LiveAccounts, err = config.ParseLiveAccounts(s); err != nil {
			return cliutil.Usagef("--live-accounts: %w", err)
		}
	}
	plan, err := assign.Build(cfg)
	if err != nil {
		return cliutil.AsUsage(err)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(plan)
}
