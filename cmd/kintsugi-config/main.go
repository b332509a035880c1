// Command kintsugi-config checks a pipeline config and writes one for a
// KINTSUGI project directory, as the original's `kintsugi workflow config`
// does.
//
//	kintsugi-config check FILE            load + validate; print the resolved channel names as JSON
//	kintsugi-config check --raw FILE...   syntax-level checks of the raw files only
//	kintsugi-config init --project DIR    write DIR/config.yaml from meta/ and data/raw/
package main

import (
	"encoding/json"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/kintsugi-hpc/kintsugi-go/internal/assign"
	"github.com/kintsugi-hpc/kintsugi-go/internal/cliutil"
	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
)

func main() { cliutil.Main(newApp(assign.ExecRunner(slurmTimeout))) }

// newApp builds the command; run executes the SLURM commands of init
// --accounts-from-slurm (sacctmgr, sinfo): assign.ExecRunner in production,
// recorded outputs in tests.
func newApp(run assign.Runner) *cli.App {
	app := cliutil.NewApp("kintsugi-config",
		"check a pipeline config.yaml, or write one for a KINTSUGI project",
		`  kintsugi-config check FILE            load and validate a config (schema, every channel-name
                                        rule); print its resolved channel names as JSON
  kintsugi-config check --raw FILE...   syntax-level checks of raw config files only
  kintsugi-config init --project DIR    write a complete config.yaml from DIR/meta/experiment.json,
                                        DIR/meta/CHANNELNAMES.txt and DIR/data/raw/`,
		nil, nil)
	app.Commands = []*cli.Command{checkCommand(), initCommand(run)}
	return app
}

func checkCommand() *cli.Command {
	return &cli.Command{
		Name:      "check",
		Usage:     "validate a config; print its channel names, EDF file names and renames as JSON",
		ArgsUsage: "FILE | --raw FILE...",
		Description: `Loads FILE as every executable does: the schema, the rules a schema cannot express and
every channel-name rule (characters, empty names, file-name length, duplicates). Duplicate
names are made unique by the original's rule (cycle 1 [DAPI-01, Blank, Blank, Blank] becomes
[DAPI-01, Blank_1a, Blank_1b, Blank_1c]; DAPI of a later cycle that repeats a name becomes
DAPI_cycNN). Prints on stdout:
  {"channel_names": {"<cycle>": [resolved names in config order]},
   "edf_files": {"<cycle>": ["DAPI-01.tif", ...]},
   "renamed": [{"cycle": 1, "channel": 3, "from": "Blank", "to": "Blank_1b"}, ...]}
channel_names has every cycle of the config's channel_names; edf_files every cycle of
cycles, one file per channel of channels (CH{c}_edf.tif where a cycle has no names);
channel is 1-based. An invalid config prints nothing on stdout and exits 2, naming the
file and key (e.g. channel_names.1[2]).

With --raw, each FILE is only parsed: at most 1 MiB, one YAML document, no anchors or
aliases, no duplicate keys, at most 1000 keys per mapping, nested at most 64 deep.`,
		Flags: append([]cli.Flag{
			&cli.BoolFlag{Name: "raw", Usage: "syntax-level checks only (size, aliases, duplicate keys, keys per mapping); any number of files"},
		}, cliutil.LoggingFlags()...),
		Action: check,
	}
}

func check(c *cli.Context) error {
	lg, err := cliutil.SetupLogging(c)
	if err != nil {
		return err
	}
	files := c.Args().Slice()
	if c.Bool("raw") {
		if len(files) == 0 {
			return cliutil.Usagef("check --raw: no files given")
		}
		for _, f := range files {
			if err := config.CheckRaw(f); err != nil {
				return cliutil.AsUsage(err)
			}
			lg.Info("raw syntax ok", "file", f)
		}
		return nil
	}
	if len(files) != 1 {
		return cliutil.Usagef("check: want exactly one config file, got %d (check --raw takes several)", len(files))
	}
	cfg, err := cliutil.LoadConfig(files[0])
	if err != nil {
		return err
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(cfg.Names())
}
