package accuracy

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteJSON writes a report (Report, EDFReport, DeconReport, *RegReport) as
// indented JSON.
func WriteJSON(w io.Writer, r any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the report as aligned text tables; perPlane adds one row
// per (channel, z).
func WriteTable(w io.Writer, r Report, perPlane bool) error {
	fmt.Fprintf(w, "accuracy of %s, cycle %d\n", r.ProjectDir, r.Cycle)
	newTab := func() *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight) }
	if len(r.Channels) > 0 {
		fmt.Fprintln(w, "\nillumination profiles (flatfield: RMS of mean-1 profiles; darkfield: counts)")
		tw := newTab()
		fmt.Fprintln(tw, "channel\tplanes\tflat rms mean\tflat rms max (z)\tuncorrected\tdark true\tdark fit mean\tdark rms mean\tdark rms max (z)\tscene ncc (z)\t")
		for _, c := range r.Channels {
			ncc := "-"
			if c.SceneNCC != nil {
				ncc = fmt.Sprintf("%.4f (%d)", *c.SceneNCC, c.SceneZ)
			}
			if len(c.Planes) == 0 {
				fmt.Fprintf(tw, "CH%d\t0\t-\t-\t%.4f\t%.1f\t-\t-\t-\t%s\t\n", c.Channel, c.FlatBaselineRMS, c.DarkTrueMean, ncc)
				continue
			}
			fmt.Fprintf(tw, "CH%d\t%d\t%.4f\t%.4f (%d)\t%.4f\t%.1f\t%.1f\t%.2f\t%.2f (%d)\t%s\t\n",
				c.Channel, len(c.Planes), c.FlatRMSMean, c.FlatRMSMax, c.FlatRMSMaxZ, c.FlatBaselineRMS,
				c.DarkTrueMean, c.DarkFitMean, c.DarkRMSMean, c.DarkRMSMax, c.DarkRMSMaxZ, ncc)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if perPlane {
			fmt.Fprintln(w)
			tw := newTab()
			fmt.Fprintln(tw, "channel\tz\tflat rms\tdark mean\tdark rms\t")
			for _, c := range r.Channels {
				for _, p := range c.Planes {
					fmt.Fprintf(tw, "CH%d\t%d\t%.4f\t%.1f\t%.2f\t\n", c.Channel, p.Z, p.FlatRMS, p.DarkMean, p.DarkRMS)
				}
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
	}
	if p := r.Positions; p != nil {
		fmt.Fprintln(w, "\ntile positions (px, after removing the global offset; pairs: grid neighbours)")
		tw := newTab()
		fmt.Fprintln(tw, "tiles\toffset y\toffset x\trms\tmax (tile)\tpairs\t<= 0.5 px\t<= 1 px\t<= 2 px\tpair rms\tpair max (tiles)\t")
		fmt.Fprintf(tw, "%d\t%.2f\t%.2f\t%.3f\t%.3f (%d)\t%d\t%d\t%d\t%d\t%.3f\t%.3f (%d-%d)\t\n",
			p.Tiles, p.OffsetY, p.OffsetX, p.RMS, p.Max, p.MaxTile, p.Pairs, p.Within05, p.Within1, p.Within2, p.PairRMS, p.PairMax, p.WorstPair[0], p.WorstPair[1])
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(r.Missing) > 0 {
		fmt.Fprintf(w, "\nmissing (%d):\n", len(r.Missing))
		for i, m := range r.Missing {
			if i == 20 {
				fmt.Fprintf(w, "  ... and %d more\n", len(r.Missing)-20)
				break
			}
			fmt.Fprintf(w, "  %s\n", m)
		}
	}
	return nil
}
