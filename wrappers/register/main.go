// Command kintsugi-register registers every cycle of a project to the
// reference cycle on DAPI (rigid, then a smooth non-rigid field) and warps
// every channel, or registers one image to another, or re-applies a saved
// transform. The stage lives in internal/regstage and the algorithm in
// internal/register; this package holds the flags and the command
// functions (config, workers, engine choice).
package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/kintsugi-hpc/kintsugi-go/internal/cliutil"
	"github.com/kintsugi-hpc/kintsugi-go/internal/cliutil/stagecli"
	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/gpu"
	"github.com/kintsugi-hpc/kintsugi-go/internal/register"
	"github.com/kintsugi-hpc/kintsugi-go/internal/regstage"
)

func main() {
	app := cliutil.NewApp("kintsugi-register", "register the cycles of a CODEX/PhenoCycler project",
		`Commands:
  run    register every cycle to registration.reference_cycle on channel
         registration.reference_channel (default 1, DAPI) of
         data/processed/edf/cycNN/ (every cycle's EDF sentinel required),
         warp every channel, and write
         data/processed/registered/cycNN/<same name>.tif, the transforms
         (registration_data/), QC metrics and overlays (qc/) and the
         sentinel, atomically. Sizes that differ are zero-padded at the
         bottom/right to the largest (at most max(64 px, 2 %) per side).
  pair   register --moving to --fixed and write the warped image, the
         transform, metrics.json and overlay.png into --out.
  apply  warp one image with a saved transform (cycNN_transform.json).
Method: rigid (rotation search on a <= 1024 px thumbnail, then block phase
correlation at registration.max_image_dim) and, unless rigid_only, a
displacement field from overlapping blocks at non_rigid.max_dim, smoothed
with sigma = non_rigid.sigma_ratio x the working size, fold-free. A cycle
whose DAPI agrees worse with the reference after registration than before
is an error (exit 2), never a silent copy.
The device is the GPU unless --device cpu (or KINTSUGI_DEVICE_MODE=cpu) is
given; a GPU that cannot be used is an error, never a switch to the CPU.`, nil, nil)
	devFlags := stagecli.Flags()
	app.Commands = []*cli.Command{
		{
			Name:  "run",
			Usage: "register every cycle of the project",
			Flags: append([]cli.Flag{&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Required: true, Usage: "pipeline config.yaml"}}, devFlags...),
			Action: func(c *cli.Context) error {
				return withSetup(c, func(o opts) error { return runCommand(c.Context, o, c.String("config")) })
			},
		},
		{
			Name:  "pair",
			Usage: "register one image to another",
			Flags: append([]cli.Flag{
				&cli.StringFlag{Name: "fixed", Required: true, Usage: "reference image (uint16 TIFF)"},
				&cli.StringFlag{Name: "moving", Required: true, Usage: "image to register (uint16 TIFF)"},
				&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Required: true, Usage: "output directory"},
				&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "take the registration settings from this config.yaml (default: the original's)"},
				&cli.BoolFlag{Name: "rigid-only", Usage: "skip the non-rigid step"},
			}, devFlags...),
			Action: func(c *cli.Context) error {
				return withSetup(c, func(o opts) error {
					return pairCommand(c.Context, o, c.String("config"), c.String("fixed"), c.String("moving"), c.String("out"), c.Bool("rigid-only"))
				})
			},
		},
		{
			Name:  "apply",
			Usage: "warp one image with a saved transform",
			Flags: append([]cli.Flag{
				&cli.StringFlag{Name: "transform", Aliases: []string{"t"}, Required: true, Usage: "registration_data/cycNN_transform.json (or a pair's transform.json)"},
				&cli.StringFlag{Name: "in", Required: true, Usage: "image to warp (uint16 TIFF)"},
				&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Required: true, Usage: "output uint16 TIFF"},
			}, devFlags...),
			Action: func(c *cli.Context) error {
				return withSetup(c, func(o opts) error {
					return applyCommand(c.Context, o, c.String("transform"), c.String("in"), c.String("out"))
				})
			},
		},
	}
	cliutil.Main(app)
}

type opts = stagecli.Opts

func withSetup(c *cli.Context, fn func(opts) error) error {
	o, err := stagecli.Setup(c, true)
	if err != nil {
		return err
	}
	return fn(o)
}

// backend decides the workers and opens the engine; close releases it.
func backend(o opts) (be register.Backend, workers int, dev cliutil.Device, close func() error, err error) {
	n, dev, err := o.Resolve()
	if err != nil {
		return nil, 0, "", nil, err
	}
	be, close, err = stagecli.Open(o, dev,
		func() register.Backend { return register.CPU{Workers: n} },
		func(e *gpu.Engine) register.Backend { return e.Registrar() })
	if err != nil {
		return nil, 0, "", nil, err
	}
	return be, n, dev, close, nil
}

func asExit(err error) error { return stagecli.InputAsUsage(err, regstage.ErrInput) }

func runCommand(ctx context.Context, o opts, cfgPath string) error {
	cfg, err := cliutil.LoadConfig(cfgPath)
	if err != nil {
		return err
	}
	be, workers, dev, closeBE, err := backend(o)
	if err != nil {
		return err
	}
	defer closeBE()
	if ctx, err = cliutil.LockContext(ctx, cliutil.LockJob{Config: cfg, Stage: "registration", Device: dev}, nil, o.Logger); err != nil {
		return err
	}
	_, err = regstage.Run(ctx, regstage.Options{Config: cfg, Engine: be, Workers: workers, Logger: o.Logger,
		MemBudget: o.MemBudget, MemBudgetSource: o.MemBudgetSource})
	return asExit(err)
}

// pairParams returns the registration settings: the config's, else the
// original's defaults.
func pairParams(cfgPath string, rigidOnly bool) (register.Params, error) {
	r := config.DefaultRegistration()
	if cfgPath != "" {
		cfg, err := cliutil.LoadConfig(cfgPath)
		if err != nil {
			return register.Params{}, err
		}
		r = cfg.Registration
	}
	p := register.ParamsFromConfig(r)
	if rigidOnly {
		p.RigidOnly = true
	}
	return p, nil
}

func pairCommand(ctx context.Context, o opts, cfgPath, fixed, moving, out string, rigidOnly bool) error {
	// Pair writes these into --out; none may be an input (--out the moving
	// image's own directory would replace it).
	for _, name := range []string{filepath.Base(moving), "transform.json", "field_dy.tif", "field_dx.tif", "metrics.json", "overlay.png"} {
		if err := cliutil.CheckOutput("--out", filepath.Join(out, name), fixed, moving, cfgPath); err != nil {
			return err
		}
	}
	p, err := pairParams(cfgPath, rigidOnly)
	if err != nil {
		return err
	}
	be, workers, _, closeBE, err := backend(o)
	if err != nil {
		return err
	}
	defer closeBE()
	p.Workers = workers
	t0 := time.Now()
	r, err := regstage.Pair(ctx, be, p, fixed, moving, out)
	if err != nil {
		return asExit(err)
	}
	m := r.Metrics
	o.Logger.Info("pair registered", "fixed", fixed, "moving", moving, "out", out, "mapping", regstage.Describe(&r.Mapping),
		"ncc", fmt.Sprintf("%.4f -> %.4f -> %.4f", m.NCCBefore, m.NCCRigid, m.NCCNonRigid), "seconds", fmt.Sprintf("%.2f", time.Since(t0).Seconds()))
	return nil
}

func applyCommand(ctx context.Context, o opts, transform, in, out string) error {
	if err := cliutil.CheckOutput("--out", out, in, transform); err != nil {
		return err
	}
	be, _, _, closeBE, err := backend(o)
	if err != nil {
		return err
	}
	defer closeBE()
	m, err := regstage.Apply(ctx, be, transform, in, out)
	if err != nil {
		return asExit(err)
	}
	o.Logger.Info("transform applied", "in", in, "out", out, "mapping", regstage.Describe(m))
	return nil
}
