// Command kintsugi-edf runs the extended-depth-of-field stage of one cycle
// (per channel: the original's variance method, or a stationary-wavelet
// method after Forster et al. 2004) or fuses one z-stack. The stage lives in internal/edfstage
// and the algorithm in internal/edf; this package holds the flags and the
// command functions (config, workers, engine choice).
package main

import (
	"github.com/urfave/cli/v2"

	"github.com/kintsugi-hpc/kintsugi-go/internal/cliutil"
	"github.com/kintsugi-hpc/kintsugi-go/internal/cliutil/stagecli"
)

func main() {
	app := cliutil.NewApp("kintsugi-edf", "extended depth of field for one cycle of a CODEX/PhenoCycler project",
		`Commands:
  run   one in-focus plane per channel of one cycle: reads
        data/processed/deconvolved/cycNN/CH{c}/deconv_*.tif (sorted; needs the
        decon sentinel), applies the quality gate, writes
        data/processed/edf/cycNN/<marker>.tif (uint16; channel_names with '/'
        and ' ' replaced by '_', else CH{c}_edf.tif) and the sentinel,
        atomically.
  tile  fuse one z-stack (a directory of TIFF planes in name order, or a
        multi-page TIFF) into one uint16 TIFF.
Settings: the edf: block of the config (method variance|wavelet, sigma 10,
radius_x/radius_y 2, z_smooth_sigma 1, wavelet_levels 0 = automatic; tiles
and blend_depth are accepted and ignored: the plane is processed whole) and
quality_gate: (max_zero_pct 0.10, max_sat_pct 0.05, min_valid_slices 3). A
channel that fails the gate fails the cycle (exit 2, nothing written).
The device is the GPU unless --device cpu (or KINTSUGI_DEVICE_MODE=cpu) is
given; a GPU that cannot be used is an error, never a switch to the CPU.
Both methods run on either device with the same results (index maps equal).`, nil, nil)
	devFlags := stagecli.Flags()
	app.Commands = []*cli.Command{
		{
			Name:  "run",
			Usage: "EDF of every channel of one cycle",
			Flags: append([]cli.Flag{
				&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Required: true, Usage: "pipeline config.yaml"},
				&cli.IntFlag{Name: "cycle", Required: true, Usage: "cycle number"},
			}, devFlags...),
			Action: func(c *cli.Context) error {
				return withSetup(c, func(o opts) error { return runCommand(c.Context, o, c.Int("cycle")) })
			},
		},
		{
			Name:  "tile",
			Usage: "EDF of one z-stack",
			Flags: append([]cli.Flag{
				&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "pipeline config.yaml (edf: and quality_gate:; default: the original's settings)"},
				&cli.StringFlag{Name: "in", Required: true, Usage: "z-stack: a directory of TIFF planes (name order) or a multi-page TIFF"},
				&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Required: true, Usage: "output uint16 TIFF"},
			}, devFlags...),
			Action: func(c *cli.Context) error {
				return withSetup(c, func(o opts) error { return tileCommand(c.Context, o, c.String("in"), c.String("out")) })
			},
		},
	}
	cliutil.Main(app)
}
