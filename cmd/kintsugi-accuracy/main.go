// Command kintsugi-accuracy scores a synthetic project's stitch outputs
// against its ground truth (flatfield, darkfield, tile positions, scene NCC)
// and prints a table or JSON. See internal/accuracy for the metrics.
package main

import (
	"errors"
	"io"
	"os"
	"runtime"

	"github.com/urfave/cli/v2"

	"github.com/kintsugi-hpc/kintsugi-go/internal/accuracy"
	"github.com/kintsugi-hpc/kintsugi-go/internal/cliutil"
	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/decon"
	"github.com/kintsugi-hpc/kintsugi-go/internal/edf"
	"github.com/kintsugi-hpc/kintsugi-go/internal/edfstage"
	"github.com/kintsugi-hpc/kintsugi-go/internal/register"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth"
)

func main() {
	cliutil.Main(cliutil.NewApp("kintsugi-accuracy",
		"score stitch outputs of a synthetic project against its ground truth",
		`Reads <project>/ground_truth/ (written by kintsugi-synth) and the stitch outputs of
the cycle under <project>/data/processed/stitched/cycNN/ (basic/{z:02d}_flatfield.tif,
basic/{z:02d}_darkfield.tif per channel, tile_positions.csv, the reference plane) and
prints, per channel, the flatfield RMS error of mean-1 profiles (mean and max over
planes, and the uncorrected baseline), the darkfield mean and RMS error in counts, the
NCC of the stitched reference plane with the true scene, and the tile-position RMS and
max error after removing the global offset with the count of neighbour pairs whose
relative translation is within 1 px and 2 px of the truth. Missing outputs are listed;
no outputs at all is an error.`,
		[]cli.Flag{
			&cli.StringFlag{Name: "project", Aliases: []string{"p"}, Usage: "project directory (required unless --edf)"},
			&cli.IntFlag{Name: "cycle", Value: 1, Usage: "cycle to score"},
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON"},
			&cli.BoolFlag{Name: "planes", Usage: "table: add one row per (channel, z)"},
			&cli.BoolFlag{Name: "edf", Usage: "EDF report instead: variance, wavelet, max projection and best slice on synthetic z-stacks with a known depth map (CPU; no project needed)"},
			&cli.IntFlag{Name: "edf-seeds", Value: 3, Usage: "--edf: stacks averaged"},
			&cli.BoolFlag{Name: "decon", Usage: "deconvolution report instead: relative RMS error vs the sharp truth before and after Richardson-Lucy, Biggs-Andrews and RL-TV (richardson_lucy_tv at RL's iterations) for the light-sheet and widefield PSFs, the iterations Biggs-Andrews needs to reach RL's error, and RL / RL-TV / Biggs-Andrews by content (spots, nuclei, fibres, membranes) (CPU; no project needed)"},
			&cli.IntSliceFlag{Name: "decon-size", Value: cli.NewIntSlice(6, 128, 128), Usage: "--decon: synthetic stack size z,y,x"},
			&cli.BoolFlag{Name: "registration", Usage: "registration report instead: synthetic cycles with known rigid (translations up to 100 px, rotations up to 1 degree) and non-rigid (up to 5 px) warps registered to cycle 1; RMS error of the mapping over tissue per cycle beside the error before registration (CPU; no project needed)"},
			&cli.IntFlag{Name: "registration-cycles", Value: 4, Usage: "--registration: cycles including the reference"},
		},
		run))
}

func run(c *cli.Context) error {
	if _, err := cliutil.SetupLogging(c); err != nil {
		return err
	}
	if err := cliutil.NoArgs(c); err != nil {
		return err
	}
	if c.Bool("edf") {
		return edfReport(c)
	}
	if c.Bool("decon") {
		return deconReport(c)
	}
	if c.Bool("registration") {
		return registrationReport(c)
	}
	if c.String("project") == "" {
		return cliutil.Usagef("--project is required (unless --edf)")
	}
	r, err := accuracy.Evaluate(c.String("project"), c.Int("cycle"))
	if errors.Is(err, accuracy.ErrBadInput) {
		return cliutil.AsUsage(err)
	}
	return output(c, r, err, func(w io.Writer, r accuracy.Report) error { return accuracy.WriteTable(w, r, c.Bool("planes")) })
}

// output prints a mode's report r on stdout (unless err): indented JSON with
// --json, else table's text.
func output[R any](c *cli.Context, r R, err error, table func(io.Writer, R) error) error {
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return accuracy.WriteJSON(os.Stdout, r)
	}
	return table(os.Stdout, r)
}

// edfReport is --edf: the EDF methods on synthetic stacks (internal/accuracy.EvaluateEDF).
func edfReport(c *cli.Context) error {
	if c.Int("edf-seeds") < 1 {
		return cliutil.Usagef("--edf-seeds %d: want >= 1", c.Int("edf-seeds"))
	}
	seeds := make([]uint64, c.Int("edf-seeds"))
	for i := range seeds {
		seeds[i] = uint64(i + 1)
	}
	r, err := accuracy.EvaluateEDF(c.Context, synth.DefaultEDFStack(), seeds, edf.DefaultParams(),
		edfstage.Gate(config.DefaultQualityGate()), runtime.NumCPU())
	return output(c, r, err, accuracy.WriteEDFTable)
}

// deconReport is --decon: internal/accuracy.EvaluateDecon and
// EvaluateDeconContent (RL, RL-TV and Biggs-Andrews by content) with the
// CPU reference.
func deconReport(c *cli.Context) error {
	sz := c.IntSlice("decon-size")
	if len(sz) != 3 || sz[0] < 1 || sz[1] < 8 || sz[2] < 8 {
		return cliutil.Usagef("--decon-size %v: want z,y,x with z >= 1 and y, x >= 8", sz)
	}
	r, err := accuracy.EvaluateDecon(c.Context, decon.CPU{}, sz[0], sz[1], sz[2], 3, runtime.NumCPU())
	if err == nil {
		r.Content, err = accuracy.EvaluateDeconContent(c.Context, decon.CPU{}, nil, sz[0], sz[1], sz[2], 3, runtime.NumCPU())
	}
	return output(c, r, err, accuracy.WriteDeconTable)
}

// registrationReport is --registration: internal/accuracy.EvaluateRegistration
// with the CPU reference.
func registrationReport(c *cli.Context) error {
	o := accuracy.DefaultRegOptions()
	o.Cycles = c.Int("registration-cycles")
	if o.Cycles < 2 {
		return cliutil.Usagef("--registration-cycles %d: want >= 2", o.Cycles)
	}
	o.Workers = runtime.NumCPU()
	o.Params.Workers = o.Workers
	rep, err := accuracy.EvaluateRegistration(c.Context, register.CPU{Workers: o.Workers}, o)
	return output(c, rep, err, accuracy.WriteRegTable)
}
