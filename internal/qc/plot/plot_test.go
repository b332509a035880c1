package plot

import (
	"bytes"
	"image"
	_ "image/jpeg"
	_ "image/png"
	"math"
	"regexp"
	"strconv"
	"testing"

	"gonum.org/v1/plot/vg"
)

// TestTicks: labels are distinct and read back as the tick values, on the
// ranges that gonum's own labels repeat on (1.00/1.01) and on large counts.
func TestTicks(t *testing.T) {
	for _, r := range [][2]float64{{0.975, 1.017}, {0, 1}, {3196, 3296}, {2210, 327000}, {1.07e7, 1.37e7}, {-0.5, 0.25}} {
		seen := map[string]bool{}
		n := 0
		for _, tk := range (Ticks{}).Ticks(r[0], r[1]) {
			if tk.Label == "" {
				continue
			}
			n++
			if seen[tk.Label] {
				t.Errorf("range %v: label %q twice", r, tk.Label)
			}
			seen[tk.Label] = true
			v, err := strconv.ParseFloat(tk.Label, 64)
			if err != nil || math.Abs(v-tk.Value) > 1e-6*math.Max(1, math.Abs(tk.Value)) {
				t.Errorf("range %v: label %q for tick %v", r, tk.Label, tk.Value)
			}
		}
		if n < 2 {
			t.Errorf("range %v: %d labelled ticks", r, n)
		}
	}
	// Image y axes are negated: labels show the positive row.
	for _, tk := range (Ticks{Negate: true}).Ticks(-1370, 0) {
		if v, err := strconv.ParseFloat(tk.Label, 64); tk.Label != "" && (err != nil || v != -tk.Value) {
			t.Errorf("negated tick %v labelled %q", tk.Value, tk.Label)
		}
	}
}

// TestRender: a heatmap renders as a PNG of the figure's size at DPI, an
// image figure as a JPEG, and a PDF has one page per figure.
func TestRender(t *testing.T) {
	h := Heatmaps("h", "t", "c", []HeatPanel{{Title: "CH1", Rows: []string{"cyc01", "cyc02"}, Cols: []string{"z01", "z02"},
		Values: [][]float64{{1, 2}, {3, math.NaN()}}, Unit: "counts"}}, 1)
	if p := h.Data.([]HeatPanel)[0]; p.Range != (Range{1, 3}) {
		t.Errorf("heatmap range %v, want the finite values' 1..3", p.Range)
	}
	v := []float64{0, 1, 2, 3, 4, 5}
	im := Images("i", "t", "c", []ImagePanel{{Title: "map", W: 30, H: 20, Values: v, VW: 3, VH: 2, Unit: "px"}}, 1, vg.Points(200))
	for _, tc := range []struct {
		f    *Figure
		mime string
	}{{h, "image/png"}, {im, "image/jpeg"}} {
		b, mime, err := tc.f.Raster()
		if err != nil || mime != tc.mime {
			t.Fatalf("%s: %s, %v; want %s", tc.f.Name, mime, err, tc.mime)
		}
		cfg, _, err := image.DecodeConfig(bytes.NewReader(b))
		wantW, wantH := int(math.Ceil(float64(tc.f.W)/72*DPI)), int(math.Ceil(float64(tc.f.H)/72*DPI))
		if err != nil || abs(cfg.Width-wantW) > 1 || abs(cfg.Height-wantH) > 1 {
			t.Errorf("%s: %dx%d (%v), want %dx%d", tc.f.Name, cfg.Width, cfg.Height, err, wantW, wantH)
		}
	}
	var b bytes.Buffer
	if err := WritePDF(&b, []*Figure{h, im, Message("m", "t", "nothing")}); err != nil {
		t.Fatal(err)
	}
	if n := len(regexp.MustCompile(`/Type\s*/Page[^s]`).FindAll(b.Bytes(), -1)); !bytes.HasPrefix(b.Bytes(), []byte("%PDF-")) || n != 3 {
		t.Errorf("PDF: %d pages, want 3", n)
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
