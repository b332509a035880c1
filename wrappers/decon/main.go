// Command kintsugi-decon runs the deconvolution stage of one cycle (the
// original's light-sheet PSF and Richardson-Lucy per channel) or
// deconvolves one tile's z-stack with the same PSF and settings. The stage
// lives in internal/deconstage; this package holds the flags and the
// command functions (config, workers, engine choice).
package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kintsugi-hpc/kintsugi-go/internal/cliutil"
	"github.com/kintsugi-hpc/kintsugi-go/internal/cliutil/stagecli"
	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/deconstage"
	"github.com/kintsugi-hpc/kintsugi-go/internal/gpu"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

func main() {
	app := cliutil.NewApp("kintsugi-decon", "deconvolve one cycle of a CODEX/PhenoCycler project",
		`Commands:
  run   deconvolve every channel of one cycle: reads
        data/processed/stitched/cycNN/CH{c}/{z:02d}.tif (after the stitch
        sentinel), writes data/processed/deconvolved/cycNN/CH{c}/deconv_{k:03d}.tif,
        DECONV_parameters.txt and the sentinel, atomically.
  tile  deconvolve one tile's z-stack (a directory of planes or a multi-page
        TIFF) with the PSF and settings of --channel; writes a multi-page
        uint16 TIFF.
Settings: the decon: block of the config (psf_model lightsheet|widefield,
algorithm richardson_lucy|biggs_andrews|richardson_lucy_tv, iterations 25,
stop_criterion 5 %, damping 0, tv_lambda 0 = 0.002, boundary free|mirror,
hist_clip 0.01 %, slit_aperture 6.5 mm, f_cyl 1 mm,
memory_budget_mb 0 = automatic) and the microscope keys (xy_pixel_size,
z_step_size, numerical_aperture, tissue_refractive_index, wavelengths).
The device is the GPU unless --device cpu (or KINTSUGI_DEVICE_MODE=cpu) is
given; a GPU that cannot be used is an error, never a switch to the CPU.`, nil, nil)
	devFlags := stagecli.Flags(
		&cli.IntFlag{Name: "gpu-mem-cap", Usage: "GPU memory the deconvolution may use, MB (overrides decon.memory_budget_mb; 0 = the config's, automatic when 0 there); stacks whose iterates exceed it are streamed through the GPU in y-slabs with the same result"},
	)
	cfgFlag := &cli.StringFlag{Name: "config", Aliases: []string{"c"}, Required: true, Usage: "pipeline config.yaml"}
	app.Commands = []*cli.Command{
		{
			Name:  "run",
			Usage: "deconvolve one cycle",
			Flags: append([]cli.Flag{cfgFlag, &cli.IntFlag{Name: "cycle", Required: true, Usage: "cycle number"}}, devFlags...),
			Action: func(c *cli.Context) error {
				return withSetup(c, func(o opts) error { return runCommand(c.Context, o, c.Int("cycle")) })
			},
		},
		{
			Name:  "tile",
			Usage: "deconvolve one tile's z-stack",
			Flags: append([]cli.Flag{cfgFlag,
				&cli.StringFlag{Name: "in", Required: true, Usage: "z-stack: a directory of TIFF planes (name order) or a multi-page TIFF"},
				&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Required: true, Usage: "output multi-page uint16 TIFF, one page per z-plane"},
				&cli.IntFlag{Name: "channel", Required: true, Usage: "channel number (selects the wavelengths)"},
			}, devFlags...),
			Action: func(c *cli.Context) error {
				return withSetup(c, func(o opts) error {
					return tileCommand(c.Context, o, c.String("in"), c.String("out"), c.Int("channel"))
				})
			},
		},
	}
	cliutil.Main(app)
}

// The CUDA engine is the stage's engine with both richer forms.
var (
	_ deconstage.PlaneEngine  = (*gpu.Engine)(nil)
	_ deconstage.Gray16Engine = (*gpu.Engine)(nil)
)

type opts struct {
	stagecli.Opts
	configPath string
	memCapMB   int
}

func withSetup(c *cli.Context, fn func(opts) error) error {
	so, err := stagecli.Setup(c, false)
	if err != nil {
		return err
	}
	return fn(opts{Opts: so, configPath: c.String("config"), memCapMB: c.Int("gpu-mem-cap")})
}

// setup loads the config, decides the workers and the device and opens
// the engine; release frees it.
func setup(o opts) (cfg *config.Config, workers int, eng deconstage.Engine, dev cliutil.Device, release func() error, err error) {
	if cfg, err = cliutil.LoadConfig(o.configPath); err != nil {
		return nil, 0, nil, "", nil, err
	}
	n, dev, err := o.Resolve()
	if err != nil {
		return nil, 0, nil, "", nil, err
	}
	if o.memCapMB < 0 || o.memCapMB > maxGPUMemCapMB {
		return nil, 0, nil, "", nil, cliutil.Usagef("--gpu-mem-cap %d: want 0..%d MB", o.memCapMB, maxGPUMemCapMB)
	}
	if o.memCapMB > 0 {
		if dev == cliutil.DeviceCPU {
			return nil, 0, nil, "", nil, cliutil.Usagef("--gpu-mem-cap applies to the GPU; with --device cpu set decon.memory_budget_mb")
		}
		cfg.Decon.MemoryBudgetMB = o.memCapMB
		o.Logger.Info("GPU memory cap", "MB", o.memCapMB, "source", "--gpu-mem-cap")
	}
	eng, release, err = stagecli.Open(o.Opts, dev,
		func() deconstage.Engine { return deconstage.CPUEngine{Workers: n} },
		func(e *gpu.Engine) deconstage.Engine { return e })
	if err != nil {
		return nil, 0, nil, "", nil, err
	}
	return cfg, n, eng, dev, release, nil
}

// maxGPUMemCapMB bounds --gpu-mem-cap (1 TiB, far above any GPU) so the
// byte count cannot overflow.
const maxGPUMemCapMB = 1 << 20

func asExit(err error) error { return stagecli.InputAsUsage(err, deconstage.ErrInput) }

func runCommand(ctx context.Context, o opts, cycle int) error {
	cfg, workers, eng, dev, release, err := setup(o)
	if err != nil {
		return err
	}
	defer release()
	if err := cliutil.CheckCycle(cfg, cycle); err != nil {
		return err
	}
	if ctx, err = cliutil.LockContext(ctx, cliutil.LockJob{Config: cfg, Stage: "decon", Cycle: cycle, Device: dev}, nil, o.Logger); err != nil {
		return err
	}
	_, err = deconstage.Run(ctx, deconstage.Options{Config: cfg, Cycle: cycle, Engine: eng, Workers: workers, Logger: o.Logger,
		MemBudget: o.MemBudget, MemBudgetSource: o.MemBudgetSource})
	return asExit(err)
}

func tileCommand(ctx context.Context, o opts, in, out string, ch int) error {
	if err := cliutil.CheckOutput("--out", out, in, o.configPath); err != nil {
		return err
	}
	cfg, workers, eng, _, release, err := setup(o)
	if err != nil {
		return err
	}
	defer release()
	if !slices.Contains(cfg.Channels, ch) {
		return cliutil.Usagef("--channel %d: not in the config's channels %v", ch, cfg.Channels)
	}
	st, err := deconstage.ReadTileStack(in)
	if err != nil {
		return asExit(err)
	}
	t0 := time.Now()
	res, s, k, _, err := deconstage.Deconvolve(ctx, eng, cfg, ch, st, workers)
	if err != nil {
		return asExit(fmt.Errorf("--in %s: %w", in, err))
	}
	if err := tiffio.WriteGray16Pages(out, deconstage.ToPages(res)); err != nil {
		return err
	}
	o.Logger.Info("tile deconvolved", "in", in, "out", out, "channel", ch, "z", st.N, "size", fmt.Sprintf("%dx%d", st.W, st.H),
		"psf", k.String()+" (x,y,z)", "iterations", s.Iterations, "seconds", fmt.Sprintf("%.2f", time.Since(t0).Seconds()))
	return nil
}
