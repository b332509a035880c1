package cliutil

import (
	"log/slog"
	"slices"

	"github.com/urfave/cli/v2"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
)

// NoArgs is a usage error when c has positional arguments (the commands
// take flags only).
func NoArgs(c *cli.Context) error {
	if c.NArg() > 0 {
		return Usagef("unexpected arguments %v", c.Args().Slice())
	}
	return nil
}

// LoadConfig loads the pipeline config; any error (unreadable file, bad
// key, bad channel name) is a usage error naming the file or key. Channel
// names that the duplicate rule changed are logged in one record.
func LoadConfig(path string) (*config.Config, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return nil, AsUsage(err)
	}
	if len(cfg.Renamed) > 0 {
		slog.Info("duplicate channel names made unique (the original's rule; output files use the new names)",
			"config", cfg.Path, "renamed", config.RenamedText(cfg.Renamed))
	}
	return cfg, nil
}

// CheckCycle is a usage error unless cycle is one of the config's cycles.
func CheckCycle(cfg *config.Config, cycle int) error {
	if !slices.Contains(cfg.Cycles, cycle) {
		return Usagef("--cycle %d: not in the config's cycles %v", cycle, cfg.Cycles)
	}
	return nil
}
