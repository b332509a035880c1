// Command kintsugi-synth writes a synthetic CODEX project with ground truth
// (raw tiles, true flat/dark fields, tile positions, cycle shifts, focus and
// scenes) and its config.yaml. See internal/synth for the model and layout.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/kintsugi-hpc/kintsugi-go/internal/cliutil"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth"
)

func main() {
	cliutil.Main(cliutil.NewApp("kintsugi-synth",
		"write a synthetic CODEX project with known ground truth",
		`Writes <out>/data/raw/cycNN/1_{tile:05d}_Z{z:03d}_CH{c}.tif (uint16), the truth in
<out>/ground_truth/ (truth.json, flatfield_CH{c}.tif, darkfield_CH{c}.tif, per cycle
tile_positions.csv and the true scene of the reference z at mosaic size) and
<out>/config.yaml; with --meta also <out>/meta/experiment.json (CODEX form) and
<out>/meta/CHANNELNAMES.txt, from which kintsugi-config init writes the config.
A preset gives every field; each flag overrides one.
The same seed gives identical files, whatever --workers is.

Presets:
   tiny        2x3 tiles of 160x200 px, 5 z, 2 channels, 3 cycles (CI)
   example     5x6 tiles of 360x480 px at 1508 nm, 3 z, 2 channels, 2 cycles: the production
               acquisition with 4x4 camera binning (make example, the end-to-end test)
   small       3x3 tiles of 360x480 px, 7 z, 4 channels, 2 cycles
   production  7x9 tiles of 1440x1920 px, 20 z, 4 channels, 1 cycle (about 28 GB)`,
		flags(), run))
}

func flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "preset", Value: "tiny", Usage: "base settings: " + strings.Join(synth.PresetNames, ", ")},
		&cli.StringFlag{Name: "out", Aliases: []string{"o"}, Required: true, Usage: "project directory to write"},
		&cli.Uint64Flag{Name: "seed", Usage: "random seed (preset: 1)"},
		&cli.IntFlag{Name: "rows", Usage: "tile rows"},
		&cli.IntFlag{Name: "cols", Usage: "tile columns"},
		&cli.IntFlag{Name: "tile-height", Usage: "tile height, px"},
		&cli.IntFlag{Name: "tile-width", Usage: "tile width, px"},
		&cli.Float64Flag{Name: "overlap", Usage: "overlap fraction of neighbouring tiles, (0, 0.5)"},
		&cli.IntFlag{Name: "zplanes", Usage: "z-planes per tile"},
		&cli.IntFlag{Name: "nchannels", Usage: "channels per cycle in the experiment"},
		&cli.IntFlag{Name: "ncycles", Usage: "cycles in the experiment"},
		&cli.StringFlag{Name: "channels", Usage: `channels to write, e.g. "1" or "1-2,4" (default: all)`},
		&cli.StringFlag{Name: "cycles", Usage: `cycles to write, e.g. "1-3" (default: all)`},
		&cli.Float64Flag{Name: "pixel-size", Usage: "xy pixel size, nm"},
		&cli.Float64Flag{Name: "z-step", Usage: "z step, nm"},
		&cli.Float64Flag{Name: "na", Usage: "numerical aperture"},
		&cli.Float64Flag{Name: "refractive-index", Usage: "tissue refractive index"},
		&cli.Float64Flag{Name: "blur-per-plane", Usage: "defocus blur sigma per plane, px (0: from the optics)"},
		&cli.Float64Flag{Name: "focus-range", Usage: "the focal plane varies by about ± this many planes"},
		&cli.Float64Flag{Name: "jitter", Usage: "stage jitter standard deviation, px"},
		&cli.Float64Flag{Name: "cycle-shift", Usage: "maximum per-axis cycle shift, px"},
		&cli.Float64Flag{Name: "cell-spacing", Usage: "spacing of the cell grid, px"},
		&cli.Float64Flag{Name: "nucleus-sigma", Usage: "mean nucleus Gaussian sigma, px"},
		&cli.IntFlag{Name: "empty-tiles", Usage: "border tiles whose centre is off tissue"},
		&cli.BoolFlag{Name: "blank-first-cycle", Usage: "channels 2.. of cycle 1 are blanks (preset: true)"},
		&cli.Float64Flag{Name: "gain", Usage: "shot noise, counts per photoelectron (0: none)"},
		&cli.Float64Flag{Name: "read-noise", Usage: "read noise, counts rms"},
		&cli.Float64Flag{Name: "dark", Usage: "darkfield mean of channel 1, counts"},
		&cli.BoolFlag{Name: "truth-scene", Usage: "write the true scene of the reference z (preset: true)"},
		&cli.BoolFlag{Name: "focus-scene", Usage: "also write the all-in-focus scene (preset: false)"},
		&cli.BoolFlag{Name: "meta", Usage: "also write <out>/meta/experiment.json (the CODEX instrument's form) and meta/CHANNELNAMES.txt, for kintsugi-config init"},
		&cli.StringFlag{Name: "config", Usage: `config file to write (default <out>/config.yaml; "none" to skip)`},
		&cli.StringFlag{Name: "kintsugi-dir", Usage: "kintsugi_dir of the written config: the checkout whose bin/ holds the executables (default: the project dir)"},
		&cli.StringFlag{Name: "device", Usage: "device key of the written config: gpu or cpu (default: not written, i.e. gpu)"},
		cliutil.WorkersFlag(),
	}
}

func run(c *cli.Context) error {
	log, err := cliutil.SetupLogging(c)
	if err != nil {
		return err
	}
	o, err := options(c)
	if err != nil {
		return cliutil.AsUsage(err)
	}
	o.Logger = log
	if err := o.Validate(); err != nil {
		return cliutil.AsUsage(err)
	}
	if err := synth.Generate(c.Context, o); err != nil {
		return err
	}
	if c.Bool("meta") {
		if err := synth.WriteMeta(o); err != nil {
			return err
		}
		log.Info("metadata written", "dir", synth.MetaDir(o.OutDir))
	}
	cfg := c.String("config")
	if cfg == "none" {
		return nil
	}
	if cfg == "" {
		cfg = synth.ConfigPath(o.OutDir)
	}
	extra := map[string]any{}
	if d := c.String("kintsugi-dir"); d != "" {
		abs, err := filepath.Abs(d)
		if err != nil {
			return cliutil.Usagef("--kintsugi-dir %q: %w", d, err)
		}
		extra["kintsugi_dir"] = abs
	}
	if d := c.String("device"); d != "" {
		dev, err := cliutil.ParseDevice(d)
		if err != nil {
			return err
		}
		extra["device"] = string(dev)
	}
	if err := synth.WriteConfig(cfg, o, extra); err != nil {
		return err
	}
	log.Info("config written", "path", cfg)
	return nil
}

// options starts from the preset and applies every flag that was given.
func options(c *cli.Context) (synth.Options, error) {
	o, err := synth.Preset(c.String("preset"))
	if err != nil {
		return o, err
	}
	o.OutDir = c.String("out")
	ints := map[string]*int{
		"rows": &o.Rows, "cols": &o.Cols, "tile-height": &o.TileH, "tile-width": &o.TileW,
		"zplanes": &o.NZ, "nchannels": &o.NChannels, "ncycles": &o.NCycles, "empty-tiles": &o.EmptyTiles,
	}
	floats := map[string]*float64{
		"overlap": &o.Overlap, "pixel-size": &o.PixelSizeNM, "z-step": &o.ZStepNM, "na": &o.NA,
		"refractive-index": &o.RefractiveIndex, "blur-per-plane": &o.BlurPerPlane, "focus-range": &o.FocusRange,
		"jitter": &o.StageJitterPx, "cycle-shift": &o.CycleShiftPx, "gain": &o.Gain, "read-noise": &o.ReadNoise,
		"dark": &o.DarkfieldBase, "cell-spacing": &o.CellSpacingPx, "nucleus-sigma": &o.NucleusSigmaPx,
	}
	bools := map[string]*bool{
		"blank-first-cycle": &o.BlankFirstCycle, "truth-scene": &o.WriteTruthScene, "focus-scene": &o.WriteFocusScene,
	}
	for k, p := range ints {
		if c.IsSet(k) {
			*p = c.Int(k)
		}
	}
	for k, p := range floats {
		if c.IsSet(k) {
			*p = c.Float64(k)
		}
	}
	for k, p := range bools {
		if c.IsSet(k) {
			*p = c.Bool(k)
		}
	}
	if c.IsSet("seed") {
		o.Seed = c.Uint64("seed")
	}
	if o.Channels, err = synth.ParseIntList(c.String("channels")); err != nil {
		return o, fmt.Errorf("--channels: %w", err)
	}
	if o.Cycles, err = synth.ParseIntList(c.String("cycles")); err != nil {
		return o, fmt.Errorf("--cycles: %w", err)
	}
	w, _, err := cliutil.Workers(c.Int("workers"), os.Getenv)
	if err != nil {
		return o, err
	}
	o.Workers = w
	return o, nil
}
