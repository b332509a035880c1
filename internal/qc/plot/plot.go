// Package plot draws the QC report's figures with gonum.org/v1/plot (axes,
// tick labels, legends, colour bars) and renders them as PNG (for the HTML
// report) and as multi-page PDF (the original's *_summary_heatmaps.pdf and
// registration_qc_overlay_grid.pdf names).
//
// A Figure is a size and a Draw function that lays its panels out relative
// to the canvas it is given, so one figure renders the same way into a PNG
// of its own size and into a PDF page. Images are (y, x), row-major, x
// fastest; image panels put row 0 at the top, as a viewer does, with the
// axes in image px (y growing downwards).
//
// Colour maps: Viridis for values (monotonic luminance, readable in grey),
// NaN cells and pixels mid grey.
package plot

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"io"
	"math"
	"strconv"

	gplot "gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/palette"
	"gonum.org/v1/plot/palette/moreland"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgpdf"
)

// DPI of the PNG renderings (the HTML shows them at CSS width = W).
const DPI = 144

// NaNColor fills cells and pixels without a value.
var NaNColor = color.RGBA{160, 160, 160, 255}

// Figure is one figure: its size and how to draw it into a canvas.
type Figure struct {
	Name    string // short identifier (file-name safe), unique in a report
	Title   string // heading shown above the figure in the HTML
	Caption string // what is shown, with units
	W, H    vg.Length
	Draw    func(c draw.Canvas)
	// Data is the figure's numbers as plotted (tests compare it with the
	// metrics JSON): for heatmaps the values per panel, for line plots the
	// series, for images their ranges.
	Data any `json:"data"`
	// Photo marks a figure dominated by image content (overviews,
	// overlays): Raster encodes it as JPEG, which is a fraction of the PNG
	// size for noisy micrographs.
	Photo bool
}

// margin is the blank border around every figure.
const margin = 6

// Raster renders f at DPI: PNG, or JPEG (quality 90) for a Photo figure.
// It returns the encoded bytes and their MIME type.
func (f *Figure) Raster() ([]byte, string, error) {
	c := vgimg.NewWith(vgimg.UseWH(f.W, f.H), vgimg.UseDPI(DPI), vgimg.UseBackgroundColor(color.White))
	f.Draw(draw.Crop(draw.New(c), margin, -margin, margin, -margin))
	var b bytes.Buffer
	if f.Photo {
		if err := jpeg.Encode(&b, c.Image(), &jpeg.Options{Quality: 90}); err != nil {
			return nil, "", fmt.Errorf("plot %s: jpeg: %w", f.Name, err)
		}
		return b.Bytes(), "image/jpeg", nil
	}
	if err := png.Encode(&b, c.Image()); err != nil {
		return nil, "", fmt.Errorf("plot %s: png: %w", f.Name, err)
	}
	return b.Bytes(), "image/png", nil
}

// WritePDF writes figs as one PDF, one page per figure, every page the size
// of the largest figure (A4 landscape at least); each figure is drawn to
// fill its page.
func WritePDF(w io.Writer, figs []*Figure) error {
	pw, ph := 29.7*vg.Centimeter, 21*vg.Centimeter
	for _, f := range figs {
		pw, ph = max(pw, f.W), max(ph, f.H)
	}
	c := vgpdf.New(pw, ph)
	for i, f := range figs {
		if i > 0 {
			c.NextPage()
		}
		dc := draw.New(c)
		// Keep the figure's aspect ratio on the page, centred.
		s := min(float64(pw/f.W), float64(ph/f.H))
		fw, fh := vg.Length(s)*f.W, vg.Length(s)*f.H
		x0, y0 := (pw-fw)/2, (ph-fh)/2
		f.Draw(draw.Crop(dc, x0+margin, -(pw-fw-x0)-margin, y0+margin, -(ph-fh-y0)-margin))
	}
	if len(figs) == 0 {
		dc := draw.New(c)
		dc.FillText(textStyle(vg.Points(14)), vg.Point{X: pw / 10, Y: ph / 2}, "no figures: the stage's QC outputs are missing (see qc_plots/report.html)")
	}
	if _, err := c.WriteTo(w); err != nil {
		return fmt.Errorf("pdf: %w", err)
	}
	return nil
}

// Viridis is the viridis colour map (dark blue -> yellow).
func Viridis() palette.ColorMap {
	cm, err := moreland.NewLuminance([]color.Color{
		color.NRGBA{68, 1, 84, 255}, color.NRGBA{59, 82, 139, 255}, color.NRGBA{33, 145, 140, 255},
		color.NRGBA{94, 201, 98, 255}, color.NRGBA{253, 231, 37, 255}})
	if err != nil {
		panic("plot: viridis: " + err.Error())
	}
	return cm
}

// textStyle is black text of the default font at size.
func textStyle(size vg.Length) draw.TextStyle {
	return draw.TextStyle{Color: color.Black, Font: font.From(gplot.DefaultFont, size), Handler: gplot.DefaultTextHandler}
}

// newPlot returns a plot with the title and axis labels set in readable sizes.
func newPlot(title, x, y string) *gplot.Plot {
	p := gplot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(11)
	p.X.Label.Text = x
	p.Y.Label.Text = y
	for _, a := range []*gplot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font.Size = vg.Points(10)
		a.Tick.Label.Font.Size = vg.Points(9)
		a.Tick.Marker = Ticks{}
	}
	return p
}

// Ticks are gonum's default tick positions, labelled with as many digits
// as the step between major ticks needs (gonum's own labels can repeat,
// e.g. "1", "1" for 1.00 and 1.01), in e-notation from 10^5 up.
type Ticks struct{ Negate bool }

// Ticks implements plot.Ticker.
func (t Ticks) Ticks(lo, hi float64) []gplot.Tick {
	ts := gplot.DefaultTicks{}.Ticks(lo, hi)
	var major []float64
	for _, x := range ts {
		if x.Label != "" {
			major = append(major, x.Value)
		}
	}
	top := max(math.Abs(lo), math.Abs(hi))
	if t.Negate {
		for i := range major {
			major[i] = -major[i]
		}
	}
	verb, digits := tickFormat(major, top)
	for i := range ts {
		if ts[i].Label == "" {
			continue
		}
		v := ts[i].Value
		if t.Negate {
			v = -v
		}
		ts[i].Label = tickText(v, verb, digits)
	}
	return ts
}

// tickFormat picks the verb ('f', or 'e' from 10^5 up) and the fewest
// digits that write every major tick value exactly (to 1e-6 of the step)
// and distinctly.
func tickFormat(major []float64, top float64) (byte, int) {
	verb := byte('f')
	if top >= 1e5 {
		verb = 'e'
	}
	step := math.Inf(1)
	for i := 1; i < len(major); i++ {
		step = min(step, math.Abs(major[i]-major[i-1]))
	}
	for d := 0; d < 8; d++ {
		ok, seen := true, map[string]bool{}
		for _, v := range major {
			s := tickText(v, verb, d)
			x, err := strconv.ParseFloat(s, 64)
			if err != nil || seen[s] || (!math.IsInf(step, 0) && math.Abs(x-v) > 1e-6*step) {
				ok = false
				break
			}
			seen[s] = true
		}
		if ok {
			return verb, d
		}
	}
	return verb, 8
}

func tickText(v float64, verb byte, digits int) string {
	if v == 0 {
		return "0"
	}
	return strconv.FormatFloat(v, verb, digits, 64)
}

// Range is a finite value range.
type Range struct{ Min, Max float64 }

// finiteRange is the range of the finite values of v; a constant (or empty)
// input gets a range of width 1 around its value so a colour map is defined.
func finiteRange(vs ...[]float64) (r Range, ok bool) {
	r = Range{math.Inf(1), math.Inf(-1)}
	for _, v := range vs {
		for _, x := range v {
			if !math.IsNaN(x) && !math.IsInf(x, 0) {
				r.Min, r.Max = min(r.Min, x), max(r.Max, x)
				ok = true
			}
		}
	}
	if !ok {
		return Range{0, 1}, false
	}
	return r, true
}

// scaleFor widens a degenerate range for a colour map.
func scaleFor(r Range) Range {
	if r.Max > r.Min {
		return r
	}
	d := max(math.Abs(r.Min)*1e-3, 1e-9)
	return Range{r.Min - d, r.Max + d}
}

// colourBar returns a vertical colour bar plot for cm over r, labelled unit.
func colourBar(cm palette.ColorMap, r Range, unit string) *gplot.Plot {
	r = scaleFor(r)
	cm.SetMin(r.Min)
	cm.SetMax(r.Max)
	p := newPlot("", "", unit)
	p.HideX()
	p.Add(&plotter.ColorBar{ColorMap: cm, Vertical: true})
	p.Y.Min, p.Y.Max = r.Min, r.Max
	return p
}

// grid returns a Draw function that lays n panels out in rows of perRow
// equal cells, the first row at the top, and draws panel k into its cell.
func grid(n, perRow int, panel func(c draw.Canvas, k int)) func(draw.Canvas) {
	perRow = max(1, perRow)
	nrows := (n + perRow - 1) / perRow
	return func(c draw.Canvas) {
		const gapX, gapY = 8, 4 // points
		w := (c.Max.X - c.Min.X - vg.Points(gapX)*vg.Length(perRow-1)) / vg.Length(perRow)
		h := (c.Max.Y - c.Min.Y - vg.Points(gapY)*vg.Length(nrows-1)) / vg.Length(max(1, nrows))
		for k := 0; k < n; k++ {
			x0 := c.Min.X + vg.Length(k%perRow)*(w+vg.Points(gapX))
			y1 := c.Max.Y - vg.Length(k/perRow)*(h+vg.Points(gapY))
			panel(draw.Canvas{Canvas: c.Canvas, Rectangle: vg.Rectangle{Min: vg.Point{X: x0, Y: y1 - h}, Max: vg.Point{X: x0 + w, Y: y1}}}, k)
		}
	}
}

// withBar draws main into c with a colour bar of width bw at its right.
func withBar(c draw.Canvas, main, bar *gplot.Plot) {
	bw := min(vg.Points(85), (c.Max.X-c.Min.X)/3)
	mc := c
	mc.Max.X -= bw
	bc := c
	bc.Min.X = c.Max.X - bw + vg.Points(6)
	// Align the bar with the main plot's data area vertically.
	da := main.DataCanvas(mc)
	bc.Min.Y, bc.Max.Y = da.Min.Y-vg.Points(4), da.Max.Y+vg.Points(4)
	main.Draw(mc)
	if bar != nil {
		bar.Draw(bc)
	}
}

// Colorize maps v (row-major, w x h) through cm over r; NaN is NaNColor.
func Colorize(v []float64, w, h int, cm palette.ColorMap, r Range) *image.RGBA {
	r = scaleFor(r)
	cm.SetMin(r.Min)
	cm.SetMax(r.Max)
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for i, x := range v {
		var c color.Color = NaNColor
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			if cc, err := cm.At(min(r.Max, max(r.Min, x))); err == nil {
				c = cc
			}
		}
		img.Set(i%w, i/w, c)
	}
	return img
}
