// Command kintsugi-qc writes a stage's quality-control report (per-cycle
// metrics JSON, PNG overviews and heatmaps under qc_plots/<stage>/, and the
// original's sentinel qc_plots/.snakemake_complete_<stage>) on the CPU. The
// Snakefile's qc_* rules run it; the work is in internal/qc.
package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/kintsugi-hpc/kintsugi-go/internal/cliutil"
	"github.com/kintsugi-hpc/kintsugi-go/internal/qc"
)

func main() { cliutil.Main(newApp()) }

func newApp() *cli.App {
	app := cliutil.NewApp("kintsugi-qc", "quality-control reports of the pipeline's stages (CPU only)",
		`kintsugi-qc run --stage stitch|decon|edf|registration --config CONFIG

Writes <project>/qc_plots/<stage>/: cycNN_metrics.json (intensity statistics per channel
and z: mean, std, min, max, 1/50/99 % percentiles, zero and saturation (>= 64000) fractions,
focus = variance of the Laplacian; registration: NCC with the reference cycle before and
after, and the registration stage's own scores), cycNN_CH{c}_overview.png (downsampled
mosaic), registration cycNN_overlay.png, *_heatmap.png and summary.json (the heatmaps'
rows, columns and values), then qc_plots/.snakemake_complete_<stage>.`, nil, nil)
	app.Commands = []*cli.Command{{
		Name:  "run",
		Usage: "write the QC report of one stage for every cycle of the config",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "config file (config.yaml, or the JSON the Snakefile writes); required"},
			&cli.StringFlag{Name: "stage", Usage: "stitch, decon, edf or registration; required"},
			&cli.IntFlag{Name: "overview-px", Value: 512, Usage: "longest side of overview PNGs, px"},
			cliutil.WorkersFlag(),
		}, cliutil.LoggingFlags()...),
		Action:       run,
		OnUsageError: func(_ *cli.Context, err error, _ bool) error { return cliutil.AsUsage(err) },
	}}
	app.Action = func(c *cli.Context) error {
		if c.Args().Len() > 0 {
			return cliutil.Usagef("unknown command %q: want run", c.Args().First())
		}
		return cliutil.Usagef("missing command: kintsugi-qc run --stage STAGE --config CONFIG")
	}
	return app
}

func run(c *cli.Context) error {
	lg, err := cliutil.SetupLogging(c)
	if err != nil {
		return err
	}
	if err := cliutil.NoArgs(c); err != nil {
		return err
	}
	if c.String("config") == "" {
		return cliutil.Usagef("missing --config")
	}
	if c.String("stage") == "" {
		return cliutil.Usagef("missing --stage (%s)", strings.Join(qc.Stages, ", "))
	}
	if c.Int("overview-px") < 16 {
		return cliutil.Usagef("--overview-px %d: want >= 16", c.Int("overview-px"))
	}
	cfg, err := cliutil.LoadConfig(c.String("config"))
	if err != nil {
		return err
	}
	workers, from, err := cliutil.Workers(c.Int("workers"), os.Getenv)
	if err != nil {
		return err
	}
	lg.Info("qc", "stage", c.String("stage"), "workers", workers, "from", from)
	ctx, err := cliutil.LockContext(c.Context, cliutil.LockJob{Config: cfg, Stage: "qc-" + c.String("stage"),
		Sentinel: filepath.Join(cfg.ProjectDir, "qc_plots", ".snakemake_complete_"+c.String("stage"))}, nil, lg)
	if err != nil {
		return err
	}
	_, err = qc.Run(ctx, cfg, c.String("stage"), qc.Options{Workers: workers, OverviewPx: c.Int("overview-px"),
		Logger: lg, Environment: fmt.Sprintf("%d (%s)", workers, from)})
	if errors.Is(err, qc.ErrInput) {
		return cliutil.AsUsage(err)
	}
	return err
}
