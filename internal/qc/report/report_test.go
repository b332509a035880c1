package report

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/exectest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/qc"
	"github.com/kintsugi-hpc/kintsugi-go/internal/qc/plot"
)

// The fixture is a real project: the synthetic "tiny" preset with 2 cycles
// (2 channels, 2 x 3 tiles of 200 x 160 px, 5 z-planes) run through every
// stage's executable on the CPU, with the logs where the Snakefile writes
// them, then every stage's QC (qc.Run) and the report (Build, Write).
var fixture struct {
	once sync.Once
	dir  string
	cfg  *config.Config
	rep  *Report
	err  error
}

func project(t *testing.T) (*config.Config, *Report) {
	t.Helper()
	fixture.once.Do(func() { fixture.err = buildFixture(t) })
	if fixture.err != nil {
		t.Fatalf("fixture: %v", fixture.err)
	}
	return fixture.cfg, fixture.rep
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fixture.dir != "" {
		os.RemoveAll(fixture.dir)
	}
	os.Exit(code)
}

func buildFixture(t *testing.T) error {
	dir, err := os.MkdirTemp("", "qc-report-test-")
	if err != nil {
		return err
	}
	fixture.dir = dir
	proj := filepath.Join(dir, "project")
	bins := map[string]string{}
	for name, pkg := range map[string]string{"synth": "../../../cmd/kintsugi-synth", "stitch": "../../../wrappers/stitch",
		"decon": "../../../wrappers/decon", "edf": "../../../wrappers/edf", "register": "../../../wrappers/register"} {
		bins[name] = exectest.Build(t, "kintsugi-"+name, pkg)
	}
	if out, code := exectest.Run(t, bins["synth"], nil, "--preset", "tiny", "--ncycles", "2", "--out", proj, "--device", "cpu"); code != 0 {
		return fmt.Errorf("synth: exit %d\n%s", code, out)
	}
	cfgPath := filepath.Join(proj, "config.yaml")
	logs := layout.Logs(proj)
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return err
	}
	run := func(log, bin string, args ...string) error {
		out, code := exectest.Run(t, bin, []string{"cpus_per_task=2"}, append(args, "--log-format", "text")...)
		if err := os.WriteFile(filepath.Join(logs, log), out, 0o644); err != nil {
			return err
		}
		if code != 0 {
			return fmt.Errorf("%s: exit %d\n%s", log, code, out)
		}
		return nil
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return err
	}
	for _, st := range []struct{ bin, log string }{{"stitch", "stitch"}, {"decon", "decon"}, {"edf", "edf"}} {
		for _, c := range cfg.Cycles {
			if err := run(fmt.Sprintf("%s_%s.log", st.log, layout.CycleName(c)), bins[st.bin], "run", "--config", cfgPath, "--cycle", strconv.Itoa(c), "--device", "cpu"); err != nil {
				return err
			}
		}
	}
	if err := run("registration.log", bins["register"], "run", "--config", cfgPath, "--device", "cpu"); err != nil {
		return err
	}
	for _, st := range qc.Stages {
		if _, err := qc.Run(context.Background(), cfg, st, qc.Options{Workers: 2}); err != nil {
			return fmt.Errorf("qc %s: %w", st, err)
		}
	}
	rep, err := Build(context.Background(), cfg, Options{CropPx: 128})
	if err != nil {
		return err
	}
	if _, _, err := Write(rep, layout.QCDir(proj)); err != nil {
		return err
	}
	fixture.cfg, fixture.rep = cfg, rep
	return nil
}

// jsonDoc reads a JSON file as generic values (independently of the qc types).
func jsonDoc(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return m
}

func num(t *testing.T, v any) float64 {
	t.Helper()
	if v == nil {
		return math.NaN()
	}
	f, ok := v.(float64)
	if !ok {
		t.Fatalf("%v is not a number", v)
	}
	return f
}

func figure(t *testing.T, r *Report, name string) *plot.Figure {
	t.Helper()
	for _, s := range r.Sections {
		for _, f := range s.Figures {
			if f.Name == name {
				return f
			}
		}
	}
	t.Fatalf("no figure %q", name)
	return nil
}

// planeValue is the metrics JSON's value of one plane: stage, cycle, channel, z, key.
func planeValue(t *testing.T, proj, stage string, cycle, ch, z int, key string) (float64, bool) {
	t.Helper()
	m := jsonDoc(t, filepath.Join(layout.QCStage(proj, stage), layout.MetricsName(cycle)))
	for _, c := range m["channels"].([]any) {
		cm := c.(map[string]any)
		if int(num(t, cm["channel"])) != ch {
			continue
		}
		for _, p := range cm["planes"].([]any) {
			pm := p.(map[string]any)
			pz := 0
			if v, ok := pm["z"]; ok {
				pz = int(num(t, v))
			}
			if pz == z {
				return num(t, pm[key]), true
			}
		}
	}
	return 0, false
}

var cycleRow = regexp.MustCompile(`^cyc(\d+)`)

// TestFiguresMatchMetrics: every heatmap cell and z-profile point is the
// metrics JSON's value of its plane, the NCC bars are the QC's and the
// registration stage's numbers, and the field figure's extremes are the
// stage's displacement maximum and Jacobian minimum.
func TestFiguresMatchMetrics(t *testing.T) {
	cfg, r := project(t)
	proj := cfg.ProjectDir
	cells := 0
	for _, st := range []struct{ stage, key, fig string }{
		{"stitch", "mean", "stitch_mean_heatmap"}, {"stitch", "focus", "stitch_focus_heatmap"},
		{"decon", "mean", "decon_mean_heatmap"}, {"decon", "focus", "decon_focus_heatmap"},
		{"edf", "mean", "edf_mean_heatmap"}, {"edf", "focus", "edf_focus_heatmap"},
	} {
		panels := figure(t, r, st.fig).Data.([]plot.HeatPanel)
		if len(panels) != len(cfg.Channels) {
			t.Fatalf("%s: %d panels for %d channels", st.fig, len(panels), len(cfg.Channels))
		}
		for pi, p := range panels {
			ch := cfg.Channels[pi]
			if len(p.Rows) != len(cfg.Cycles) {
				t.Fatalf("%s CH%d: %d rows for %d cycles", st.fig, ch, len(p.Rows), len(cfg.Cycles))
			}
			for ri, row := range p.Rows {
				m := cycleRow.FindStringSubmatch(row)
				if m == nil {
					t.Fatalf("%s: row label %q names no cycle", st.fig, row)
				}
				cyc, _ := strconv.Atoi(m[1])
				for ci, col := range p.Cols {
					z := 0
					if col != "EDF" {
						z, _ = strconv.Atoi(strings.TrimPrefix(col, "z"))
					}
					want, ok := planeValue(t, proj, st.stage, cyc, ch, z, st.key)
					if !ok {
						t.Fatalf("%s %s %s: no such plane in the metrics", st.fig, row, col)
					}
					if got := p.Values[ri][ci]; got != want {
						t.Errorf("%s %s %s: %v, metrics JSON %v", st.fig, row, col, got, want)
					}
					if p.Range.Min > want || p.Range.Max < want {
						t.Errorf("%s %s %s: %v outside the colour bar %v", st.fig, row, col, want, p.Range)
					}
					cells++
				}
			}
		}
	}
	if want := 2 * len(cfg.Channels) * len(cfg.Cycles) * (2*5 + 1); cells != want {
		t.Errorf("%d heatmap cells checked, want %d", cells, want)
	}
	for _, fig := range []string{"stitch_focus_zprofile", "decon_mean_zprofile"} {
		stage, key := strings.Split(fig, "_")[0], strings.Split(fig, "_")[1]
		for pi, lp := range figure(t, r, fig).Data.([]plot.LinePanel) {
			for _, s := range lp.Series {
				cyc, _ := strconv.Atoi(cycleRow.FindStringSubmatch(s.Label)[1])
				for k := range s.X {
					want, _ := planeValue(t, proj, stage, cyc, cfg.Channels[pi], int(s.X[k]), key)
					if s.Y[k] != want {
						t.Errorf("%s %s z%v: %v, metrics %v", fig, s.Label, s.X[k], s.Y[k], want)
					}
				}
			}
		}
	}

	// NCC bars: QC file NCC and the stage's own, per non-reference cycle.
	bars := figure(t, r, "registration_ncc").Data.(map[string]any)
	cats := bars["categories"].([]string)
	groups := bars["groups"].([]plot.BarGroup)
	if len(cats) != len(cfg.Cycles)-1 {
		t.Fatalf("NCC bars for %v, want every cycle but the reference", cats)
	}
	for i, cat := range cats {
		qcm := jsonDoc(t, filepath.Join(layout.QCStage(proj, layout.Registration), cat+"_metrics.json"))["registration"].(map[string]any)
		stm := jsonDoc(t, filepath.Join(layout.Registered(proj), layout.RegisteredQCDir, cat+"_metrics.json"))["metrics"].(map[string]any)
		want := map[string]float64{"stage NCC before": num(t, stm["ncc_before"]), "stage NCC final": num(t, stm["ncc_final"]),
			"file NCC before (EDF)": num(t, qcm["ncc_edf"]), "file NCC after (registered)": num(t, qcm["ncc_registered"])}
		for _, g := range groups {
			if w, ok := want[g.Label]; !ok || g.Values[i] != w {
				t.Errorf("%s %q: bar %v, metrics JSON %v", cat, g.Label, g.Values[i], w)
			}
		}
		f := figure(t, r, "registration_"+cat+"_field").Data.(map[string]any)
		// The stage's figures are computed over the same nodes (register.Metrics): equal to
		// float32 rounding of the field written.
		if d := math.Abs(f["displacement_max_px"].(float64) - num(t, stm["displacement_max_px"])); d > 1e-5 {
			t.Errorf("%s: field figure |D| max %v, stage %v", cat, f["displacement_max_px"], stm["displacement_max_px"])
		}
		if d := math.Abs(f["jacobian_min"].(float64) - num(t, stm["jacobian_min"])); d > 1e-6 {
			t.Errorf("%s: field figure Jacobian min %v, stage %v", cat, f["jacobian_min"], stm["jacobian_min"])
		}
		if jm := f["jacobian_max"].(float64); jm < f["jacobian_min"].(float64) {
			t.Errorf("%s: Jacobian range %v..%v", cat, f["jacobian_min"], jm)
		}
	}

	// Focus maps: the decon metrics' best_z, block by block.
	for _, c := range cfg.Cycles {
		name := layout.CycleName(c)
		panels := figure(t, r, "edf_"+name+"_focusmap").Data.([]plot.ImagePanel)
		chans := jsonDoc(t, filepath.Join(layout.QCStage(proj, layout.Decon), name+"_metrics.json"))["channels"].([]any)
		if len(panels) != len(chans) {
			t.Fatalf("%s: %d focus map panels, %d channels", name, len(panels), len(chans))
		}
		for i, ch := range chans {
			fm := ch.(map[string]any)["focus_map"].(map[string]any)
			best := fm["best_z"].([]any)
			if p := panels[i]; p.VW != int(num(t, fm["nx"])) || p.VH != int(num(t, fm["ny"])) || len(p.Values) != len(best) {
				t.Fatalf("%s panel %d: %d x %d, metrics %v x %v", name, i, p.VW, p.VH, fm["nx"], fm["ny"])
			}
			for b, v := range best {
				if panels[i].Values[b] != num(t, v) {
					t.Fatalf("%s panel %d block %d: %v, metrics %v", name, i, b, panels[i].Values[b], v)
				}
			}
		}
	}

	// Seams: every grid neighbour pair scored, NCC in (0, 1] at the stitched positions.
	for _, c := range cfg.Cycles {
		d := figure(t, r, "stitch_"+layout.CycleName(c)+"_grid").Data.(map[string]any)
		seams := d["seams"].([]Seam)
		if want := cfg.TileRows*(cfg.TileCols-1) + (cfg.TileRows-1)*cfg.TileCols; len(seams) != want {
			t.Errorf("cycle %d: %d seams, want %d", c, len(seams), want)
		}
		for _, s := range seams {
			if !(s.NCC > 0.3 && s.NCC <= 1) {
				t.Errorf("cycle %d seam %d|%d: NCC %v, want a matching overlap (> 0.3)", c, s.A, s.B, s.NCC)
			}
		}
	}
}

// TestSummary: the summary reads what the logs print (timings, peak
// memory, BaSiC refits, EDF planes used) and names both NCC measures.
func TestSummary(t *testing.T) {
	cfg, r := project(t)
	text := tablesText(r.Summary)
	for _, want := range []string{"stitch_cyc01.log", "decon_cyc02.log", "registration.log", "MiB", "stage NCC", "file NCC"} {
		if !strings.Contains(text, want) {
			t.Errorf("summary lacks %q", want)
		}
	}
	logs, err := ReadLogs(layout.Logs(cfg.ProjectDir))
	if err != nil {
		t.Fatal(err)
	}
	peaks := 0
	for _, l := range logs {
		if l.PeakMiB > 0 {
			peaks++
		}
		if l.Rule == "edf" {
			if l.find("channel done") == nil {
				t.Errorf("%s: no channel done line parsed", l.File)
			}
		}
	}
	if peaks < 2*len(cfg.Cycles)+1 { // decon, edf per cycle and registration log their peak
		t.Errorf("peak memory parsed from %d logs, want >= %d", peaks, 2*len(cfg.Cycles)+1)
	}
	var edfRow []string
	for _, tb := range r.Summary {
		if strings.HasPrefix(tb.Caption, "Per cycle: BaSiC refits") {
			edfRow = tb.Rows[0]
		}
	}
	// 5 valid planes: the quality gate's z bounds keep planes 2-4 (the original drops the
	// first and last of more than 4 valid planes), so 2 planes per channel are dropped.
	if len(edfRow) != 5 || !strings.Contains(edfRow[3], "CH1 3/5 (z 2-4)") || edfRow[4] != "4" {
		t.Errorf("per-cycle row %q: want EDF planes used 3/5 per channel and 4 dropped", edfRow)
	}
}

func tablesText(ts []Table) string {
	var b strings.Builder
	for _, t := range ts {
		b.WriteString(t.Caption + "\n" + strings.Join(t.Head, "|") + "\n")
		for _, r := range t.Rows {
			b.WriteString(strings.Join(r, "|") + "\n")
		}
	}
	return b.String()
}

func TestParseLogLine(t *testing.T) {
	l, ok := parseLine(`2026-12-01 19:38:06 WRN BaSiC fit with the darkest-image darkfield rule did not converge; refitted with the original rule channel=1 z=2 rounds=1 stalled=true`)
	if !ok || l.Level != "WRN" || l.Msg != "BaSiC fit with the darkest-image darkfield rule did not converge; refitted with the original rule" ||
		l.Attrs["channel"] != "1" || l.Attrs["z"] != "2" || l.Attrs["stalled"] != "true" {
		t.Errorf("text line: %+v %v", l, ok)
	}
	l, ok = parseLine(`2026-12-01 19:38:07 INF memory plan cycle=1 budget="46.88 GiB (mem_mb)" mosaic="2163x1370 px, 6 MiB" batch=4`)
	if !ok || l.Attrs["budget"] != "46.88 GiB (mem_mb)" || l.Attrs["mosaic"] != "2163x1370 px, 6 MiB" || l.Attrs["batch"] != "4" {
		t.Errorf("quoted values: %+v", l.Attrs)
	}
	l, ok = parseLine(`{"time":"2026-12-01T19:39:07.1Z","level":"INFO","msg":"peak host memory","vmhwm_mib":"1553"}`)
	if !ok || l.Msg != "peak host memory" || l.Attrs["vmhwm_mib"] != "1553" || l.Time.IsZero() {
		t.Errorf("json line: %+v", l)
	}
	if _, ok := parseLine("Traceback (most recent call last):"); ok {
		t.Error("a non-log line parsed")
	}
	for s, want := range map[string]int{"1-3": 3, "2-5,7": 5, "4": 1} {
		if n, ok := sliceCount(s); !ok || n != want {
			t.Errorf("sliceCount(%q) = %d, %v; want %d", s, n, ok, want)
		}
	}
	if _, ok := sliceCount("x"); ok {
		t.Error("sliceCount accepted garbage")
	}
}

// TestMissingInputs: a project with nothing but its config gets a report
// with notes, not an error, and every PDF.
func TestMissingInputs(t *testing.T) {
	dir := t.TempDir()
	cfg, err := config.Parse("c.yaml", []byte(fmt.Sprintf("project_dir: %s\ncycles: [1, 2]\nchannels: [1, 2]\ntile_rows: 2\ntile_cols: 2\ntile_overlap: 0.3\nncc_threshold: 0.078\npou: 0.5\nresources: {accounts: [{name: a, gpu_slots: 1}]}\n", dir)))
	if err != nil {
		t.Fatal(err)
	}
	r, err := Build(context.Background(), cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	path, size, err := Write(r, layout.QCDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if len(b) != size {
		t.Errorf("size %d, file %d bytes", size, len(b))
	}
	for _, want := range []string{"no stage logs", "no QC metrics for cycle(s) 1, 2", "qc_plots/stitch/cycNN_metrics.json missing"} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("report lacks the note %q", want)
		}
	}
	for _, n := range PDFNames {
		if b, err := os.ReadFile(filepath.Join(layout.QCDir(dir), n)); err != nil || !bytes.HasPrefix(b, []byte("%PDF-")) {
			t.Errorf("%s: %v (%d bytes)", n, err, len(b))
		}
	}
}

// TestPDFs: the original's PDF names, one page per figure of the section.
func TestPDFs(t *testing.T) {
	cfg, r := project(t)
	for _, s := range r.Sections {
		b, err := os.ReadFile(filepath.Join(layout.QCDir(cfg.ProjectDir), PDFNames[s.ID]))
		if err != nil {
			t.Fatal(err)
		}
		pages := len(regexp.MustCompile(`/Type\s*/Page[^s]`).FindAll(b, -1))
		if pages != len(s.Figures) {
			t.Errorf("%s: %d pages, %d figures", PDFNames[s.ID], pages, len(s.Figures))
		}
	}
}

// checkScript, appended to a copy of the page, writes every image's load
// state and the amount of visible text into the DOM for --dump-dom. An
// image counts as loaded when it decoded, is laid out, and its bottom
// twentieth is opaque when drawn on a canvas (every figure has an opaque
// background; a truncated PNG or JPEG still reports its size but leaves the
// rows it lacks transparent).
const checkScript = `<script>
window.addEventListener('load', function () {
  var imgs = document.images, ok = 0, bad = [];
  for (var i = 0; i < imgs.length; i++) {
    var im = imgs[i], good = im.complete && im.naturalWidth > 0 && im.getBoundingClientRect().width > 0;
    if (good) {
      var c = document.createElement('canvas');
      c.width = im.naturalWidth; c.height = im.naturalHeight;
      var g = c.getContext('2d');
      g.drawImage(im, 0, 0);
      var rows = Math.max(1, Math.floor(im.naturalHeight / 20));
      var d = g.getImageData(0, im.naturalHeight - rows, im.naturalWidth, rows).data;
      for (var k = 3; k < d.length; k += 4) { if (d[k] < 255) { good = false; break; } }
    }
    if (good) { ok++; } else { bad.push(im.alt); }
  }
  var p = document.createElement('pre');
  p.id = 'kintsugi-check';
  p.textContent = 'CHECK images=' + imgs.length + ' loaded=' + ok + ' text=' + document.body.innerText.length + ' bad=' + JSON.stringify(bad);
  document.body.appendChild(p);
});
</script>`

var checkLine = regexp.MustCompile(`CHECK images=(\d+) loaded=(\d+) text=(\d+) bad=(.*)`)

func chromium(t *testing.T, args ...string) []byte {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium not found (Debian package chromium; scripts/test-deps.sh installs it): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=20000"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, stderr.String())
	}
	return out
}

// TestChromiumRenders opens the report in headless Chromium: every image
// loads and is laid out, the page has text, and a screenshot of its top is
// not blank (many colours, the header's colour present).
func TestChromiumRenders(t *testing.T) {
	cfg, r := project(t)
	page := filepath.Join(layout.QCDir(cfg.ProjectDir), HTMLName)
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("<script")) || bytes.Contains(b, []byte("http://")) || bytes.Contains(b, []byte("https://")) {
		t.Error("the report has a script or a network reference")
	}
	figs := 0
	for _, s := range r.Sections {
		figs += len(s.Figures)
	}
	check := filepath.Join(t.TempDir(), "check.html")
	if err := os.WriteFile(check, bytes.Replace(b, []byte("</body>"), []byte(checkScript+"</body>"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	dom := chromium(t, "--dump-dom", "file://"+check)
	m := checkLine.FindSubmatch(dom)
	if m == nil {
		t.Fatalf("no check line in the DOM (%d bytes)", len(dom))
	}
	imgs, _ := strconv.Atoi(string(m[1]))
	loaded, _ := strconv.Atoi(string(m[2]))
	text, _ := strconv.Atoi(string(m[3]))
	if imgs != figs || loaded != imgs {
		t.Errorf("%d images in the page, %d loaded, %d figures; not loaded: %s", imgs, loaded, figs, m[4])
	}
	if text < 2000 {
		t.Errorf("visible text %d characters", text)
	}
	shot := filepath.Join(t.TempDir(), "shot.png")
	chromium(t, "--window-size=1400,2400", "--screenshot="+shot, "file://"+page)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	colours := map[uint32]bool{}
	header := false
	nonWhite, n := 0, 0
	bd := img.Bounds()
	for y := bd.Min.Y; y < bd.Max.Y; y += 2 {
		for x := bd.Min.X; x < bd.Max.X; x += 2 {
			r, g, b, _ := img.At(x, y).RGBA()
			r, g, b = r>>8, g>>8, b>>8
			colours[r<<16|g<<8|b] = true
			if r == 0x23 && g == 0x39 && b == 0x5b {
				header = true
			}
			if r < 240 || g < 240 || b < 240 {
				nonWhite++
			}
			n++
		}
	}
	if len(colours) < 200 || !header || nonWhite < n/20 {
		t.Errorf("screenshot %v: %d colours, header colour %v, %d of %d sampled pixels not white", bd, len(colours), header, nonWhite, n)
	}
	if dst := os.Getenv("KINTSUGI_REPORT_SCREENSHOT"); dst != "" {
		b, _ := os.ReadFile(shot)
		_ = os.WriteFile(dst, b, 0o644)
	}
}
