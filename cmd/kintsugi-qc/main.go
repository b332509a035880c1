// Command kintsugi-qc writes a stage's quality-control report (per-cycle
// metrics JSON, PNG overviews and heatmaps under qc_plots/<stage>/, and the
// original's sentinel qc_plots/.snakemake_complete_<stage>) on the CPU. The
// Snakefile's qc_* rules run it; the work is in internal/qc.
package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kintsugi-hpc/kintsugi-go/internal/cliutil"
	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/qc"
	"github.com/kintsugi-hpc/kintsugi-go/internal/qc/report"
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
rows, columns and values), then qc_plots/.snakemake_complete_<stage>.

kintsugi-qc report --config CONFIG

Writes <project>/qc_plots/report.html, one self-contained page (figures embedded, no
network) with the project summary (cycles, markers, stage timings and peak memory from
slurm/logs/snakemake/, warnings, registration scores) and every stage's figures, and the
original's PDFs qc_plots/{stitched,deconvolved,edf}_summary_heatmaps.pdf and
registration_qc_overlay_grid.pdf from the same figures. Missing inputs are notes in the
report, not errors. Prints the report's path.`, nil, nil)
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
	}, {
		Name:  "report",
		Usage: "write qc_plots/report.html and the original's PDF summaries from every stage's QC outputs and logs",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "config file (config.yaml, or the JSON the Snakefile writes); required"},
			&cli.IntFlag{Name: "crop-px", Value: 512, Usage: "side of the registration overlay crops, full-resolution px"},
		}, cliutil.LoggingFlags()...),
		Action:       runReport,
		OnUsageError: func(_ *cli.Context, err error, _ bool) error { return cliutil.AsUsage(err) },
	}}
	app.Action = func(c *cli.Context) error {
		if c.Args().Len() > 0 {
			return cliutil.Usagef("unknown command %q: want run or report", c.Args().First())
		}
		return cliutil.Usagef("missing command: kintsugi-qc run --stage STAGE --config CONFIG")
	}
	return app
}

// setup is both commands' start: logging, no arguments, --config given and
// loaded after check (the command's own flag checks) passes.
func setup(c *cli.Context, check func() error) (*slog.Logger, *config.Config, error) {
	lg, err := cliutil.SetupLogging(c)
	if err != nil {
		return nil, nil, err
	}
	if err := cliutil.NoArgs(c); err != nil {
		return nil, nil, err
	}
	if c.String("config") == "" {
		return nil, nil, cliutil.Usagef("missing --config")
	}
	if err := check(); err != nil {
		return nil, nil, err
	}
	cfg, err := cliutil.LoadConfig(c.String("config"))
	return lg, cfg, err
}

func run(c *cli.Context) error {
	lg, cfg, err := setup(c, func() error {
		if c.String("stage") == "" {
			return cliutil.Usagef("missing --stage (%s)", strings.Join(qc.Stages, ", "))
		}
		if c.Int("overview-px") < 16 {
			return cliutil.Usagef("--overview-px %d: want >= 16", c.Int("overview-px"))
		}
		return nil
	})
	if err != nil {
		return err
	}
	workers, from, err := cliutil.Workers(c.Int("workers"), os.Getenv)
	if err != nil {
		return err
	}
	lg.Info("qc", "stage", c.String("stage"), "workers", workers, "from", from)
	ctx, err := cliutil.LockContext(c.Context, cliutil.LockJob{Config: cfg, Stage: "qc-" + c.String("stage"),
		Sentinel: layout.QCSentinel(cfg.ProjectDir, c.String("stage"))}, nil, lg)
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

func runReport(c *cli.Context) error {
	lg, cfg, err := setup(c, func() error {
		if c.Int("crop-px") < 32 {
			return cliutil.Usagef("--crop-px %d: want >= 32", c.Int("crop-px"))
		}
		return nil
	})
	if err != nil {
		return err
	}
	t0 := time.Now()
	r, err := report.Build(c.Context, cfg, report.Options{CropPx: c.Int("crop-px")})
	if err != nil {
		return err
	}
	path, size, err := report.Write(r, layout.QCDir(cfg.ProjectDir))
	if err != nil {
		return err
	}
	figs := 0
	for _, s := range r.Sections {
		figs += len(s.Figures)
	}
	lg.Info("QC report written", "path", path, "bytes", size, "figures", figs, "seconds", fmt.Sprintf("%.1f", time.Since(t0).Seconds()))
	fmt.Fprintln(c.App.Writer, path)
	return nil
}
