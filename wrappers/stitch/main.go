// Command kintsugi-stitch runs the stitch stage of one cycle (BaSiC per
// channel x z-plane, tile alignment, blending) or corrects one tile's z-stack
// with the BaSiC profiles a stitch run saved. The stage lives in
// internal/stitch; this file parses flags (the device's, as every stage
// command's, from stagecli) and command.go loads the config, opens the
// engine through stagecli and calls the stage.
package main

import (
	"github.com/urfave/cli/v2"

	"github.com/kintsugi-hpc/kintsugi-go/internal/cliutil"
	"github.com/kintsugi-hpc/kintsugi-go/internal/cliutil/stagecli"
)

func main() {
	app := cliutil.NewApp("kintsugi-stitch", "stitch one cycle of a CODEX/PhenoCycler project",
		`Commands:
  run      stitch one cycle: a fresh BaSiC fit (500 iterations, tol 1e-6, 25
           reweighting rounds, tol 1e-3, darkfield on) for every channel x
           z-plane, tile alignment on the first channel's middle z-plane,
           sigmoid blending; writes data/processed/stitched/cycNN/ atomically.
  correct  correct one tile's z-stack with the profiles a run saved
           (stitched/cycNN/CH{c}/basic/), for trying parameters outside Snakemake.
The device is the GPU unless --device cpu (or KINTSUGI_DEVICE_MODE=cpu) is
given; a GPU that cannot be used is an error, never a switch to the CPU.`, nil, nil)
	configFlag := &cli.StringFlag{Name: "config", Aliases: []string{"c"}, Required: true, Usage: "pipeline config.yaml"}
	cycleFlag := &cli.IntFlag{Name: "cycle", Required: true, Usage: "cycle number"}
	common := []cli.Flag{configFlag, cycleFlag, cliutil.WorkersFlag(), cliutil.MemBudgetFlag()}
	common = append(common, cliutil.LoggingFlags()...)
	app.Commands = []*cli.Command{
		{
			Name:  "run",
			Usage: "stitch one cycle",
			Flags: append([]cli.Flag{configFlag, cycleFlag}, stagecli.Flags(
				&cli.IntFlag{Name: "batch", Usage: "planes read and fitted together (0: workers on the CPU, 8 on the GPU)"},
			)...),
			Action: func(c *cli.Context) error {
				return withSetup(c, func(o commandOptions) error {
					return runCommand(c.Context, o, runOptions{Batch: c.Int("batch")})
				})
			},
		},
		{
			Name:  "correct",
			Usage: "correct one tile's z-stack with saved BaSiC profiles",
			Flags: append(append([]cli.Flag{}, common...),
				&cli.IntFlag{Name: "channel", Value: 1, Usage: "channel number"},
				&cli.IntFlag{Name: "tile", Required: true, Usage: "tile number (1-based, acquisition order)"},
				&cli.StringFlag{Name: "profiles", Usage: "directory of {z:02d}_flatfield.tif / {z:02d}_darkfield.tif (default: the run's stitched/cycNN/CH{c}/basic)"},
				&cli.Float64Flag{Name: "flatfield-min", Usage: "flatfield floor (default: the config's basic_flatfield_min)"},
				&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Required: true, Usage: "output multi-page uint16 TIFF, one page per z-plane"},
			),
			Action: func(c *cli.Context) error {
				return withSetup(c, func(o commandOptions) error {
					return correctCommand(c.Context, o, correctOptions{
						Channel: c.Int("channel"), Tile: c.Int("tile"), Profiles: c.String("profiles"),
						FlatfieldMin: c.Float64("flatfield-min"), Out: c.String("out")})
				})
			},
		},
	}
	cliutil.Main(app)
}

// withSetup sets up what both commands share (stagecli.Setup: logging,
// the memory budget, the flags of the workers and, for run, the device).
func withSetup(c *cli.Context, fn func(commandOptions) error) error {
	so, err := stagecli.Setup(c, false)
	if err != nil {
		return err
	}
	return fn(commandOptions{Opts: so, ConfigPath: c.String("config"), Cycle: c.Int("cycle")})
}
