package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kintsugi-hpc/kintsugi-go/internal/assign"
	"github.com/kintsugi-hpc/kintsugi-go/internal/atomicfile"
	"github.com/kintsugi-hpc/kintsugi-go/internal/cliutil"
	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/project"
)

// slurmTimeout bounds every sacctmgr/sinfo call (they hang while the
// controller or slurmdbd is down).
const slurmTimeout = 60 * time.Second

// initCommand is the init command; run executes the SLURM commands of
// --accounts-from-slurm.
func initCommand(run assign.Runner) *cli.Command {
	return &cli.Command{
		Name:  "init",
		Usage: "write a complete config.yaml for a KINTSUGI project directory",
		Description: `Reads, in the project directory:
  meta/experiment.json   the original's keys (n_cycles, n_zplanes, tile_rows, tile_cols, tile_overlap,
                         xy_pixel_size, z_step_size, numerical_aperture, tissue_refractive_index,
                         channels_per_cycle, wavelengths) or the CODEX instrument's (numCycles,
                         numZPlanes, regionHeight, regionWidth, tileOverlapX, xyResolution, zPitch,
                         aperture, numChannels; a flat list of excitations maps to filter sets:
                         358 -> 358/461, 488 -> 488/525, 550 -> 560/575, 650 -> 648/668,
                         750 -> 753/775 nm, within 10 nm); the original's key wins where both are given
  meta/CHANNELNAMES.txt  one marker per line (a cycle starts at each DAPI line) or one cycle per line
                         ("1: DAPI, Blank, Blank, Blank"); duplicate names become unique by the
                         original's rule (Blank -> Blank_1a, Blank_1b, ...; DAPI of later cycles
                         -> DAPI_cycNN); also channelnames.txt, channel_names.txt, channel_names.csv,
                         channels.txt, markers.txt
  data/raw/              the cycle directories the stitch stage reads (cyc001_*, cyc01_*, Cyc01_*,
                         cyc001, cyc01, Cyc01): cycles, z-planes and channels where experiment.json
                         is silent, and a check of everything else against the tile names
and writes every key the original's ` + "`kintsugi workflow config`" + ` writes, with its defaults
and a comment saying where each value came from. It prints what it inferred (stdout) and
the disagreements it found (stderr), loads the written config as every executable does
and refuses to overwrite an existing file without --force. The write is atomic.

Accounts: --accounts-from-slurm runs the discovery of ` + "`kintsugi-assign discover`" + ` (sacctmgr;
partitions from sinfo unless given; burst accounts ending in -b are left out, as the
original does); or --account NAME:GPU_SLOTS, repeated; else resources.accounts is empty
and the workflow stops at its first step until you fill it in.`,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "project", Aliases: []string{"p"}, Usage: "KINTSUGI project directory (meta/, data/raw/); required"},
			&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Usage: "config file to write (default: <project>/config.yaml)"},
			&cli.BoolFlag{Name: "force", Usage: "overwrite an existing --out"},
			&cli.BoolFlag{Name: "accounts-from-slurm", Usage: "resources.accounts from sacctmgr (kintsugi-assign discover)"},
			&cli.StringFlag{Name: "user", Usage: "SLURM user of --accounts-from-slurm (default: $USER)"},
			&cli.StringFlag{Name: "cluster", Usage: "cluster of --accounts-from-slurm, when your associations span several"},
			&cli.StringSliceFlag{Name: "account", Usage: "NAME:GPU_SLOTS of resources.accounts, repeatable (instead of --accounts-from-slurm)"},
			&cli.StringFlag{Name: "partition-gpu", Usage: "partition_gpu of every account (default: from sinfo with --accounts-from-slurm, else the loader's hpg-b200,hpg-turin)"},
			&cli.StringFlag{Name: "partition-cpu", Usage: "partition_cpu of every account (default: as --partition-gpu; hpg-default)"},
			&cli.StringFlag{Name: "kintsugi-dir", Usage: "kintsugi_dir: the checkout whose bin/ holds the executables (default: the parent of this executable's bin/)"},
			&cli.StringFlag{Name: "device", Usage: "device key: gpu (default) or cpu (the reference path; tests)"},
			&cli.StringSliceFlag{Name: "resource", Usage: "KEY=VALUE of resources (e.g. mem_stitch=1500), repeatable; checked by the schema"},
		}, cliutil.LoggingFlags()...),
		Action: func(c *cli.Context) error { return initAction(c, run) },
	}
}

func initAction(c *cli.Context, run assign.Runner) error {
	lg, err := cliutil.SetupLogging(c)
	if err != nil {
		return err
	}
	if c.NArg() > 0 {
		return cliutil.Usagef("init: unexpected arguments %v (the project is --project DIR)", c.Args().Slice())
	}
	dir := c.String("project")
	if dir == "" {
		return cliutil.Usagef("init: missing --project DIR")
	}
	out := c.String("out")
	if out == "" {
		out = filepath.Join(dir, "config.yaml")
	}
	if _, err := os.Lstat(out); err == nil && !c.Bool("force") {
		return cliutil.Usagef("init: %s exists: not overwritten (pass --force to replace it)", out)
	}
	o, err := initOptions(c, lg, run)
	if err != nil {
		return err
	}
	p, err := project.Infer(dir)
	if err != nil {
		return cliutil.AsUsage(err)
	}
	text, cfg, err := p.Config(out, o)
	if err != nil {
		return cliutil.AsUsage(err)
	}
	report(os.Stdout, p, o)
	for _, n := range p.Notes {
		lg.Warn(n)
	}
	if len(o.Accounts) == 0 {
		lg.Warn("resources.accounts is empty: add your accounts (kintsugi-assign discover) before running the workflow")
	}
	if err := atomicfile.WriteBytes(out, text, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	fmt.Fprintf(os.Stdout, "wrote %s (%d cycles x %d channels; check it with kintsugi-config check %s)\n", out, len(cfg.Cycles), len(cfg.Channels), out)
	return nil
}

// initOptions reads the flags that do not come from the project directory.
func initOptions(c *cli.Context, lg *slog.Logger, run assign.Runner) (project.Options, error) {
	o := project.Options{Header: "written by kintsugi-config init, " + time.Now().UTC().Format(time.RFC3339)}
	if d := c.String("kintsugi-dir"); d != "" {
		abs, err := filepath.Abs(d)
		if err != nil {
			return o, cliutil.Usagef("--kintsugi-dir %q: %w", d, err)
		}
		o.KintsugiDir = abs
	} else {
		d, err := checkoutDir()
		if err != nil {
			return o, err
		}
		o.KintsugiDir = d
	}
	if d := c.String("device"); d != "" {
		dev, err := cliutil.ParseDevice(d)
		if err != nil {
			return o, err
		}
		o.Device = string(dev)
	}
	for _, kv := range c.StringSlice("resource") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return o, cliutil.Usagef("--resource %q: want KEY=VALUE, e.g. mem_stitch=8000", kv)
		}
		o.Resources = append(o.Resources, project.Override{Key: k, Value: v})
	}
	pg, pc := c.String("partition-gpu"), c.String("partition-cpu")
	accts := c.StringSlice("account")
	switch {
	case c.Bool("accounts-from-slurm") && len(accts) > 0:
		return o, cliutil.Usagef("--accounts-from-slurm and --account: give one of them")
	case c.Bool("accounts-from-slurm"):
		user, err := assign.UserName(c.String("user"))
		if err != nil {
			return o, cliutil.AsUsage(err)
		}
		d, err := assign.Discover(c.Context, run, user, c.String("cluster"))
		if err != nil {
			if assign.IsUsage(err) {
				return o, cliutil.AsUsage(err)
			}
			return o, err
		}
		if pg == "" || pc == "" {
			sg, sc, err := assign.DiscoverPartitions(c.Context, run)
			if err != nil {
				return o, fmt.Errorf("%w (or pass --partition-gpu and --partition-cpu)", err)
			}
			if pg == "" {
				pg = sg
			}
			if pc == "" {
				pc = sc
			}
		}
		for _, a := range d.Accounts {
			switch {
			case strings.HasSuffix(a.Name, "-b"):
				lg.Info("burst account left out (as the original does)", "account", a.Name)
			case a.GPUs < 0:
				lg.Warn("account without a GPU limit: not listed", "account", a.Name, "why", a.Note)
			default:
				o.Accounts = append(o.Accounts, config.Account{Name: a.Name, GPUSlots: a.GPUs, PartitionGPU: pg, PartitionCPU: pc})
			}
		}
		o.AccountsFrom = fmt.Sprintf("sacctmgr for user %s on cluster %s (kintsugi-assign discover); partitions from %s", user, d.Cluster,
			map[bool]string{true: "the flags", false: "sinfo"}[c.IsSet("partition-gpu") && c.IsSet("partition-cpu")])
	case len(accts) > 0:
		for _, s := range accts {
			name, slots, ok := strings.Cut(s, ":")
			n, err := strconv.Atoi(slots)
			if !ok || name == "" || err != nil || n < 0 {
				return o, cliutil.Usagef("--account %q: want NAME:GPU_SLOTS, e.g. maigan:2", s)
			}
			o.Accounts = append(o.Accounts, config.Account{Name: name, GPUSlots: n, PartitionGPU: pg, PartitionCPU: pc})
		}
		o.AccountsFrom = "--account"
	}
	return o, nil
}

// checkoutDir is the default kintsugi_dir: the parent of the directory of
// this executable when that is named bin (a `make` build), else the working
// directory.
func checkoutDir() (string, error) {
	exe, err := os.Executable()
	if err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil && filepath.Base(filepath.Dir(exe)) == "bin" {
			return filepath.Dir(filepath.Dir(exe)), nil
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", errors.New("no kintsugi_dir: pass --kintsugi-dir")
	}
	return wd, nil
}

// report prints what was inferred and where from.
func report(w io.Writer, p *project.Project, o project.Options) {
	e := p.Experiment
	fmt.Fprintf(w, "project %s\n", p.Dir)
	fmt.Fprintf(w, "  experiment.json  %s form\n", e.Form)
	if p.Names != nil {
		fmt.Fprintf(w, "  channel names    %s (%s)\n", p.Names.Path, p.Names.Form)
	}
	for _, r := range p.Raw {
		fmt.Fprintf(w, "  raw cycle %-6d %s: %d tiles, %d z-planes, channels %v\n", r.Number, r.Dir, r.Tiles, len(r.Z), r.Channels)
	}
	rows := []struct{ key, value string }{
		{"cycles", fmt.Sprint(p.Cycles)}, {"channels", fmt.Sprint(p.Channels)}, {"n_zplanes", strconv.Itoa(p.NZPlanes)},
		{"tile_rows", strconv.Itoa(e.TileRows)}, {"tile_cols", strconv.Itoa(e.TileCols)}, {"tile_overlap", fmt.Sprint(e.TileOverlap)},
		{"xy_pixel_size", fmt.Sprint(e.XYPixelSize)}, {"z_step_size", fmt.Sprint(e.ZStepSize)},
		{"numerical_aperture", fmt.Sprint(e.NA)}, {"tissue_refractive_index", fmt.Sprint(e.RefractiveIndex)},
		{"wavelengths", wavelengths(e.Wavelengths)}, {"signal_isolation.tissue_type", p.TissueType},
	}
	for _, r := range rows {
		fmt.Fprintf(w, "  %-29s %-28s from %s\n", r.key, r.value, p.From[r.key])
	}
	if p.Names != nil {
		for _, c := range slices.Sorted(maps.Keys(p.Names.Names)) {
			fmt.Fprintf(w, "  channel_names.%-15d %s\n", c, strings.Join(p.Names.Names[c], ", "))
		}
		for _, r := range p.Names.Renamed {
			fmt.Fprintf(w, "  renamed  cycle %d channel %d: %s -> %s (the original's duplicate rule)\n", r.Cycle, r.Channel, r.From, r.To)
		}
	}
	for _, a := range o.Accounts {
		fmt.Fprintf(w, "  account %s: gpu_slots %d (from %s)\n", a.Name, a.GPUSlots, o.AccountsFrom)
	}
	fmt.Fprintf(w, "  kintsugi_dir %s\n", o.KintsugiDir)
}

func wavelengths(m map[int][2]float64) string {
	chs := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(chs))
	for i, c := range chs {
		parts[i] = fmt.Sprintf("%d:%g/%g", c, m[c][0], m[c][1])
	}
	return strings.Join(parts, " ")
}
