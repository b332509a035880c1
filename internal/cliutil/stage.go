package cliutil

import (
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
// key) is a usage error naming the file or key.
func LoadConfig(path string) (*config.Config, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return nil, AsUsage(err)
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
