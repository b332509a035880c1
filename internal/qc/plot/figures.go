package plot

import (
	"fmt"
	"image"
	"image/color"
	"math"

	gplot "gonum.org/v1/plot"
	"gonum.org/v1/plot/palette"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// HeatPanel is one heatmap: Values[row][col] (NaN: no value), one colour
// scale (its own) labelled Unit.
type HeatPanel struct {
	Title  string      `json:"title"`
	Rows   []string    `json:"rows"` // top to bottom
	Cols   []string    `json:"cols"` // left to right
	Values [][]float64 `json:"values"`
	Unit   string      `json:"unit"`
	XLabel string      `json:"x_label"`
	YLabel string      `json:"y_label"`
	Range  Range       `json:"range"` // finite min and max of Values (set by Heatmaps)
}

// heatGrid is a HeatPanel as gonum's GridXYZ (row 0 of Values at the top).
type heatGrid struct{ p *HeatPanel }

func (g heatGrid) Dims() (c, r int) { return len(g.p.Cols), len(g.p.Rows) }
func (g heatGrid) Z(c, r int) float64 {
	row := g.p.Values[len(g.p.Rows)-1-r]
	if c < len(row) {
		return row[c]
	}
	return math.NaN()
}
func (g heatGrid) X(c int) float64 { return float64(c) }
func (g heatGrid) Y(r int) float64 { return float64(r) }

// cellLabels writes each cell's value into its centre.
type cellLabels struct {
	p    *HeatPanel
	cm   palette.ColorMap
	size vg.Length
}

func (l cellLabels) Plot(c draw.Canvas, plt *gplot.Plot) {
	tx, ty := plt.Transforms(&c)
	for ri, row := range l.p.Values {
		for ci, v := range row {
			if math.IsNaN(v) {
				continue
			}
			st := textStyle(l.size)
			st.XAlign, st.YAlign = draw.XCenter, draw.YCenter
			if cc, err := l.cm.At(min(l.cm.Max(), max(l.cm.Min(), v))); err == nil && luminance(cc) > 0.55 {
				st.Color = color.Black
			} else {
				st.Color = color.White
			}
			c.FillText(st, vg.Point{X: tx(float64(ci)), Y: ty(float64(len(l.p.Rows) - 1 - ri))}, Short(v))
		}
	}
}

func luminance(c color.Color) float64 {
	r, g, b, _ := c.RGBA()
	return (0.2126*float64(r) + 0.7152*float64(g) + 0.0722*float64(b)) / 65535
}

// Short formats v in at most 4 significant digits.
func Short(v float64) string {
	a := math.Abs(v)
	switch {
	case v == 0:
		return "0"
	case a >= 1e5 || a < 1e-3:
		return fmt.Sprintf("%.2e", v)
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 1:
		return fmt.Sprintf("%.3g", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

// Heatmaps is a figure of heatmap panels side by side (at most perRow per
// row), each with its own colour bar; cells are labelled with their value
// when a panel has at most 80 cells.
func Heatmaps(name, title, caption string, panels []HeatPanel, perRow int) *Figure {
	perRow = max(1, min(perRow, len(panels)))
	nrows := (len(panels) + perRow - 1) / perRow
	maxR, maxC := 1, 1
	for i := range panels {
		p := &panels[i]
		p.Range, _ = finiteRange(p.Values...)
		maxR, maxC = max(maxR, len(p.Rows)), max(maxC, len(p.Cols))
	}
	cellW := vg.Points(max(22, min(60, 420/float64(maxC))))
	cellH := vg.Points(max(14, min(30, 300/float64(maxR))))
	pw := max(cellW*vg.Length(maxC)+vg.Points(170), vg.Points(330))
	ph := cellH*vg.Length(maxR) + vg.Points(90)
	f := &Figure{Name: name, Title: title, Caption: caption, W: pw * vg.Length(perRow), H: ph * vg.Length(nrows), Data: panels}
	f.Draw = grid(len(panels), perRow, func(c draw.Canvas, k int) { drawHeat(c, &panels[k]) })
	return f
}

func drawHeat(c draw.Canvas, hp *HeatPanel) {
	cm := Viridis()
	r := scaleFor(hp.Range)
	cm.SetMin(r.Min)
	cm.SetMax(r.Max)
	p := newPlot(hp.Title, hp.XLabel, hp.YLabel)
	if len(hp.Rows) == 0 || len(hp.Cols) == 0 {
		p.Title.Text += " (no values)"
		p.Draw(c)
		return
	}
	h := plotter.NewHeatMap(heatGrid{hp}, cm.Palette(256))
	h.Min, h.Max = r.Min, r.Max
	h.NaN = NaNColor
	p.Add(h)
	if len(hp.Rows)*len(hp.Cols) <= 80 {
		p.Add(cellLabels{hp, cm, vg.Points(8)})
	}
	xt := make([]gplot.Tick, len(hp.Cols))
	for i, s := range hp.Cols {
		xt[i] = gplot.Tick{Value: float64(i), Label: s}
	}
	yt := make([]gplot.Tick, len(hp.Rows))
	for i, s := range hp.Rows {
		yt[i] = gplot.Tick{Value: float64(len(hp.Rows) - 1 - i), Label: s}
	}
	p.X.Tick.Marker = gplot.ConstantTicks(xt)
	p.Y.Tick.Marker = gplot.ConstantTicks(yt)
	withBar(c, p, colourBar(Viridis(), hp.Range, hp.Unit))
}

// Series is one line of a line plot.
type Series struct {
	Label string    `json:"label"`
	X     []float64 `json:"x"`
	Y     []float64 `json:"y"` // NaN: gap
}

// LinePanel is one line plot.
type LinePanel struct {
	Title  string   `json:"title"`
	XLabel string   `json:"x_label"`
	YLabel string   `json:"y_label"`
	Series []Series `json:"series"`
	XTicks []string `json:"x_ticks,omitempty"` // labels at x = 0, 1, ... (categorical x)
}

// Lines is a figure of line-plot panels side by side, each with a legend.
func Lines(name, title, caption string, panels []LinePanel, perRow int) *Figure {
	perRow = max(1, min(perRow, len(panels)))
	nrows := (len(panels) + perRow - 1) / perRow
	pw, ph := vg.Points(330), vg.Points(230)
	f := &Figure{Name: name, Title: title, Caption: caption, W: pw * vg.Length(perRow), H: ph * vg.Length(nrows), Data: panels}
	f.Draw = grid(len(panels), perRow, func(c draw.Canvas, k int) { drawLines(c, &panels[k]) })
	return f
}

// seriesColours are distinguishable line colours (Okabe-Ito).
var seriesColours = []color.Color{
	color.RGBA{0, 114, 178, 255}, color.RGBA{213, 94, 0, 255}, color.RGBA{0, 158, 115, 255},
	color.RGBA{204, 121, 167, 255}, color.RGBA{230, 159, 0, 255}, color.RGBA{86, 180, 233, 255},
	color.RGBA{0, 0, 0, 255}, color.RGBA{240, 228, 66, 255},
}

func drawLines(c draw.Canvas, lp *LinePanel) {
	p := newPlot(lp.Title, lp.XLabel, lp.YLabel)
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range lp.Series {
		for _, y := range s.Y {
			if !math.IsNaN(y) && !math.IsInf(y, 0) {
				lo, hi = min(lo, y), max(hi, y)
			}
		}
	}
	if hi > lo {
		// Head room above the data for the legend, ticks only over the data.
		p.Y.Min, p.Y.Max = lo, hi+(hi-lo)*0.09*float64(len(lp.Series)+1)
		p.Y.Tick.Marker = gplot.ConstantTicks(Ticks{}.Ticks(lo, hi))
	}
	for i, s := range lp.Series {
		xy := make(plotter.XYs, 0, len(s.X))
		for k := range s.X {
			if k < len(s.Y) && !math.IsNaN(s.Y[k]) && !math.IsInf(s.Y[k], 0) {
				xy = append(xy, plotter.XY{X: s.X[k], Y: s.Y[k]})
			}
		}
		if len(xy) == 0 {
			continue
		}
		l, pts, err := plotter.NewLinePoints(xy)
		if err != nil {
			continue
		}
		col := seriesColours[i%len(seriesColours)]
		l.Color, pts.Color = col, col
		l.Width = vg.Points(1.5)
		if i >= len(seriesColours) {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
		}
		pts.Shape = draw.CircleGlyph{}
		pts.Radius = vg.Points(2.5)
		p.Add(l, pts)
		p.Legend.Add(s.Label, l, pts)
	}
	if len(lp.XTicks) > 0 {
		t := make([]gplot.Tick, len(lp.XTicks))
		for i, s := range lp.XTicks {
			t[i] = gplot.Tick{Value: float64(i), Label: s}
		}
		p.X.Tick.Marker = gplot.ConstantTicks(t)
		p.X.Min, p.X.Max = -0.3, float64(len(lp.XTicks))-0.7
	}
	p.Draw(c)
}

// Rect is a rectangle in image px (y down), drawn as an outline.
type Rect struct {
	X0, Y0, X1, Y1 float64
	Colour         color.Color
	Width          float64 // points
}

// Label is a text drawn at image px (X, Y).
type Label struct {
	X, Y   float64
	Text   string
	Colour color.Color
}

// ImagePanel is an image shown in image px coordinates (row 0 at the top).
// With a Values image the colour bar shows Range in Unit; with RGB (an
// already-coloured image) there is no colour bar.
type ImagePanel struct {
	Title  string      `json:"title"`
	W, H   float64     `json:"-"` // extent in image px (full resolution) of the displayed image
	X0, Y0 float64     `json:"-"` // image px of the image's top-left corner (a crop's offset)
	Values []float64   `json:"-"` // row-major, VW x VH
	VW, VH int         `json:"-"`
	RGB    image.Image `json:"-"`
	Unit   string      `json:"unit,omitempty"`
	Range  Range       `json:"range"` // colour bar range (Values); set from the finite values when zero
	Rects  []Rect      `json:"-"`
	Labels []Label     `json:"-"`
	XLabel string      `json:"-"`
	YLabel string      `json:"-"`
}

// Images is a figure of image panels side by side.
func Images(name, title, caption string, panels []ImagePanel, perRow int, panelW vg.Length) *Figure {
	perRow = max(1, min(perRow, len(panels)))
	nrows := (len(panels) + perRow - 1) / perRow
	aspect := 1.0
	for i := range panels {
		p := &panels[i]
		if p.W > 0 {
			aspect = p.H / p.W
		}
		if p.Values != nil && p.Range == (Range{}) {
			p.Range, _ = finiteRange(p.Values)
		}
	}
	if panelW <= 0 {
		panelW = vg.Points(330)
	}
	bar := vg.Length(0)
	for _, p := range panels {
		if p.Values != nil {
			bar = vg.Points(70)
		}
	}
	ph := (panelW-vg.Points(50))*vg.Length(min(aspect, 1.6)) + vg.Points(60)
	f := &Figure{Name: name, Title: title, Caption: caption, W: (panelW + bar) * vg.Length(perRow), H: ph * vg.Length(nrows), Data: panels}
	f.Photo = true // micrographs and smooth maps: JPEG is a fraction of PNG's size
	f.Draw = grid(len(panels), perRow, func(c draw.Canvas, k int) { drawImage(c, &panels[k]) })
	return f
}

// overlay draws rectangles and labels in image px.
type overlay struct{ ip *ImagePanel }

func (o overlay) Plot(c draw.Canvas, plt *gplot.Plot) {
	tx, ty := plt.Transforms(&c)
	for _, r := range o.ip.Rects {
		st := draw.LineStyle{Color: r.Colour, Width: vg.Points(max(0.5, r.Width))}
		pts := []vg.Point{{X: tx(r.X0), Y: ty(-r.Y0)}, {X: tx(r.X1), Y: ty(-r.Y0)}, {X: tx(r.X1), Y: ty(-r.Y1)}, {X: tx(r.X0), Y: ty(-r.Y1)}, {X: tx(r.X0), Y: ty(-r.Y0)}}
		c.StrokeLines(st, c.ClipLinesXY(pts)...)
	}
	for _, l := range o.ip.Labels {
		st := textStyle(vg.Points(7))
		st.Color = l.Colour
		st.XAlign, st.YAlign = draw.XCenter, draw.YCenter
		p := vg.Point{X: tx(l.X), Y: ty(-l.Y)}
		if c.Contains(p) {
			c.FillText(st, p, l.Text)
		}
	}
}

func drawImage(c draw.Canvas, ip *ImagePanel) {
	p := newPlot(ip.Title, ip.XLabel, ip.YLabel)
	if ip.XLabel == "" {
		p.X.Label.Text = "x, px"
	}
	if ip.YLabel == "" {
		p.Y.Label.Text = "y, px (down)"
	}
	img := ip.RGB
	var bar *gplot.Plot
	if ip.Values != nil {
		img = Colorize(ip.Values, ip.VW, ip.VH, Viridis(), ip.Range)
		bar = colourBar(Viridis(), ip.Range, ip.Unit)
	}
	if img == nil {
		p.Title.Text += " (no image)"
		p.Draw(c)
		return
	}
	// y axis: -y so that row 0 is at the top; tick labels show +y.
	p.Add(plotter.NewImage(img, ip.X0, -(ip.Y0 + ip.H), ip.X0+ip.W, -ip.Y0))
	p.Y.Tick.Marker = Ticks{Negate: true}
	if len(ip.Rects)+len(ip.Labels) > 0 {
		p.Add(overlay{ip})
	}
	p.X.Min, p.X.Max = ip.X0, ip.X0+ip.W
	p.Y.Min, p.Y.Max = -(ip.Y0 + ip.H), -ip.Y0
	// Equal scale in x and y: shrink the canvas to the image's aspect.
	cw, ch := c.Max.X-c.Min.X, c.Max.Y-c.Min.Y
	bw := vg.Length(0)
	if bar != nil {
		bw = min(vg.Points(70), cw/3)
	}
	const padX, padY = 50, 45 // points for axes and title
	aw, ah := cw-bw-vg.Points(padX), ch-vg.Points(padY)
	if ip.W > 0 && ip.H > 0 && aw > 0 && ah > 0 {
		s := min(float64(aw)/ip.W, float64(ah)/ip.H)
		nw, nh := vg.Length(s*ip.W)+vg.Points(padX)+bw, vg.Length(s*ip.H)+vg.Points(padY)
		c.Max.X = c.Min.X + nw
		c.Min.Y = c.Max.Y - nh
	}
	if bar != nil {
		withBar(c, p, bar)
		return
	}
	p.Draw(c)
}

// BarGroup is one set of bars (one colour), one value per category.
type BarGroup struct {
	Label  string    `json:"label"`
	Values []float64 `json:"values"`
}

// Bars is a grouped bar chart: categories on x, one bar per group.
func Bars(name, title, caption, xlabel, ylabel string, cats []string, groups []BarGroup, yr *Range) *Figure {
	w := vg.Points(max(360, 40*float64(len(cats)*max(1, len(groups)))+140))
	f := &Figure{Name: name, Title: title, Caption: caption, W: w, H: vg.Points(260),
		Data: map[string]any{"categories": cats, "groups": groups}}
	f.Draw = func(c draw.Canvas) {
		p := newPlot("", xlabel, ylabel)
		p.Add(plotter.NewGrid())
		p.Legend.Top = true
		p.Legend.Left = true
		p.Legend.TextStyle.Font.Size = vg.Points(9)
		bw := vg.Points(min(28, 300/float64(max(1, len(cats)*len(groups)))))
		for i, g := range groups {
			vals := make(plotter.Values, len(cats))
			for k := range vals {
				if k < len(g.Values) && !math.IsNaN(g.Values[k]) {
					vals[k] = g.Values[k]
				}
			}
			b, err := plotter.NewBarChart(vals, bw)
			if err != nil {
				continue
			}
			b.Color = seriesColours[i%len(seriesColours)]
			b.LineStyle.Width = 0
			b.Offset = bw * vg.Length(float64(i)-float64(len(groups)-1)/2)
			p.Add(b)
			p.Legend.Add(g.Label, b)
		}
		p.NominalX(cats...)
		if yr != nil {
			// Head room above the bars for the legend.
			p.Y.Min, p.Y.Max = yr.Min, yr.Max+0.12*float64(len(groups))*(yr.Max-yr.Min)
			// Ticks only over the values' range, not the legend's head room.
			ticks := Ticks{}.Ticks(yr.Min, yr.Max)
			p.Y.Tick.Marker = gplot.ConstantTicks(ticks)
		}
		p.Draw(c)
	}
	return f
}

// Message is a figure that only says why it is empty.
func Message(name, title, text string) *Figure {
	return &Figure{Name: name, Title: title, Caption: text, W: vg.Points(400), H: vg.Points(60), Draw: func(c draw.Canvas) {
		st := textStyle(vg.Points(10))
		c.FillText(st, vg.Point{X: c.Min.X + vg.Points(10), Y: (c.Min.Y + c.Max.Y) / 2}, text)
	}}
}
