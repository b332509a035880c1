package project

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
)

var update = flag.Bool("update", false, "rewrite the golden configs in testdata/")

// makeProject copies testdata/<fixture>/meta into a new project directory and
// writes empty raw tile files (names only: ScanRaw reads no image) of
// tiles x nz x nch per cycle directory.
func makeProject(t *testing.T, fixture string, dirs map[int]string, tiles, nz, nch int) string {
	t.Helper()
	proj := t.TempDir()
	src := filepath.Join("testdata", fixture, "meta")
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatalf("fixture %s: %v", src, err)
	}
	os.MkdirAll(filepath.Join(proj, "meta"), 0o755)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(proj, "meta", e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range dirs {
		dir := filepath.Join(proj, "data", "raw", d)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for tile := 1; tile <= tiles; tile++ {
			for z := 1; z <= nz; z++ {
				for ch := 1; ch <= nch; ch++ {
					if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("1_%05d_Z%03d_CH%d.tif", tile, z, ch)), nil, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	return proj
}

var variants = map[int]string{1: "cyc001_reg001_20250101", 2: "cyc02", 3: "Cyc03"}

func TestInferKintsugiForm(t *testing.T) {
	proj := makeProject(t, "kintsugi", variants, 6, 5, 4)
	p, err := Infer(proj)
	if err != nil {
		t.Fatal(err)
	}
	if p.Experiment.Form != "KINTSUGI" || !slices.Equal(p.Cycles, []int{1, 2, 3}) || !slices.Equal(p.Channels, []int{1, 2, 3, 4}) || p.NZPlanes != 5 {
		t.Errorf("form %s, cycles %v, channels %v, n_zplanes %d", p.Experiment.Form, p.Cycles, p.Channels, p.NZPlanes)
	}
	if len(p.Notes) != 0 {
		t.Errorf("notes on a consistent project: %q", p.Notes)
	}
	want := map[int][]string{
		1: {"DAPI-01", "Blank_1a", "Blank_1b", "Blank_1c"},
		2: {"DAPI_cyc02", "CD31", "CD8", "CD45"},
		3: {"DAPI_cyc03", "CD4", "Blank_3b", "Ki67"},
	}
	if !reflect.DeepEqual(p.Names.Names, want) || p.Names.Form != "one name per line" {
		t.Errorf("names %v (%s), want %v", p.Names.Names, p.Names.Form, want)
	}
	dirs := []string{}
	for _, r := range p.Raw {
		dirs = append(dirs, r.Dir)
		if r.Tiles != 6 || len(r.Z) != 5 || r.Files != 120 {
			t.Errorf("%s: %d tiles, z %v, %d files", r.Dir, r.Tiles, r.Z, r.Files)
		}
	}
	if !slices.Equal(dirs, []string{"data/raw/cyc001_reg001_20250101", "data/raw/cyc02", "data/raw/Cyc03"}) {
		t.Errorf("raw dirs %v", dirs)
	}
	for k, v := range map[string]string{"cycles": "experiment.json n_cycles", "tile_rows": "experiment.json tile_rows", "wavelengths": "experiment.json wavelengths"} {
		if p.From[k] != v {
			t.Errorf("from[%s] = %q, want %q", k, p.From[k], v)
		}
	}
	text, cfg := render(t, p)
	checkLoaded(t, p, cfg)
	if got := cfg.EDFFileName(3, 3); got != "Blank_3b.tif" {
		t.Errorf("EDFFileName(3, 3) = %q", got)
	}
	if !strings.Contains(string(text), "\n  1: [DAPI-01, Blank_1a, Blank_1b, Blank_1c]  # as written: DAPI-01, Blank, Blank, Blank\n") {
		t.Errorf("channel_names line of cycle 1 missing or without the names as written:\n%s", text)
	}
}

func TestInferCodexForm(t *testing.T) {
	proj := makeProject(t, "codex", variants, 6, 5, 4)
	p, err := Infer(proj)
	if err != nil {
		t.Fatal(err)
	}
	e := p.Experiment
	if e.Form != "CODEX" || e.TileRows != 2 || e.TileCols != 3 || e.XYPixelSize != 377.4463 || e.ZStepSize != 1500 || e.NA != 0.75 || e.TileOverlap != 0.3 {
		t.Errorf("experiment %+v", e)
	}
	wantWL := map[int][2]float64{1: {358, 461}, 2: {753, 775}, 3: {560, 575}, 4: {648, 668}}
	if !reflect.DeepEqual(e.Wavelengths, wantWL) {
		t.Errorf("wavelengths %v, want %v (filter sets of 358, 750, 550, 650)", e.Wavelengths, wantWL)
	}
	for k, v := range map[string]string{
		"cycles": "experiment.json numCycles", "n_zplanes": "experiment.json numZPlanes", "tile_rows": "experiment.json regionHeight",
		"tile_cols": "experiment.json regionWidth", "channels": "experiment.json numChannels", "xy_pixel_size": "experiment.json xyResolution",
		"z_step_size": "experiment.json zPitch", "numerical_aperture": "experiment.json aperture", "tile_overlap": "experiment.json tileOverlapX",
		"tissue_refractive_index": defaultFrom, "signal_isolation.tissue_type": "experiment.json name",
	} {
		if p.From[k] != v {
			t.Errorf("from[%s] = %q, want %q", k, p.From[k], v)
		}
	}
	if p.TissueType != "lymph_node" {
		t.Errorf("tissue %q, want lymph_node (experiment.json name)", p.TissueType)
	}
	want := map[int][]string{
		1: {"DAPI", "Blank_1a", "Blank_1b", "Blank_1c"},
		2: {"DAPI_cyc02", "CD31", "CD8", "CD45_2c"},
		3: {"DAPI_cyc03", "CD45_3a", "Blank_3b", "Ki67"},
	}
	if !reflect.DeepEqual(p.Names.Names, want) || p.Names.Form != "one cycle per line" {
		t.Errorf("names %v (%s), want %v", p.Names.Names, p.Names.Form, want)
	}
	_, cfg := render(t, p)
	checkLoaded(t, p, cfg)
}

// The generated config of the CODEX fixture (no raw data) is the golden
// file; `go test ./internal/project -update` rewrites it.
func TestGoldenConfig(t *testing.T) {
	p, err := Infer(filepath.Join("testdata", "codex"))
	if err != nil {
		t.Fatal(err)
	}
	text, _ := render(t, p)
	got := strings.ReplaceAll(string(text), p.Dir, "/PROJECT")
	golden := filepath.Join("testdata", "codex", "config.golden.yaml")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/project -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("generated config differs from %s (-update rewrites it):\n%s", golden, got)
	}
}

func render(t *testing.T, p *Project) ([]byte, *config.Config) {
	t.Helper()
	text, cfg, err := p.Config("config.yaml", Options{KintsugiDir: "/opt/kintsugi-go",
		Accounts: []config.Account{{Name: "acct_a", GPUSlots: 3, PartitionGPU: "gpu", PartitionCPU: "cpu"}}, AccountsFrom: "the test"})
	if err != nil {
		t.Fatal(err)
	}
	return text, cfg
}

// checkLoaded: the project's own loader read back what Infer decided.
func checkLoaded(t *testing.T, p *Project, cfg *config.Config) {
	t.Helper()
	e := p.Experiment
	if cfg.ProjectDir != p.Dir || !slices.Equal(cfg.Cycles, p.Cycles) || !slices.Equal(cfg.Channels, p.Channels) || cfg.NZPlanes != p.NZPlanes ||
		cfg.TileRows != e.TileRows || cfg.TileCols != e.TileCols || cfg.TileOverlap != e.TileOverlap || cfg.XYPixelSize != e.XYPixelSize ||
		cfg.ZStepSize != e.ZStepSize || cfg.NumericalAperture != e.NA || cfg.TissueRefractiveIndex != e.RefractiveIndex {
		t.Errorf("loaded config differs from the inferred values: %+v", cfg)
	}
	for ch, wl := range e.Wavelengths {
		ex, em, err := cfg.Wavelength(ch)
		if err != nil || ex != wl[0] || em != wl[1] {
			t.Errorf("wavelength %d: %v %v %v, want %v", ch, ex, em, err, wl)
		}
	}
	for c, names := range p.Names.Names {
		if got := cfg.ChannelNames[fmt.Sprint(c)]; !slices.Equal(got, names) {
			t.Errorf("channel_names.%d = %v, want %v", c, got, names)
		}
	}
	if len(cfg.Renamed) != 0 || cfg.Decon != config.DefaultDecon() || cfg.QualityGate != config.DefaultQualityGate() ||
		!reflect.DeepEqual(cfg.Registration, config.DefaultRegistration()) || !reflect.DeepEqual(cfg.EDF, config.DefaultEDF()) {
		t.Errorf("renamed %v or stage defaults differ: %+v %+v %+v %+v", cfg.Renamed, cfg.Decon, cfg.QualityGate, cfg.Registration, cfg.EDF)
	}
	if cfg.Device != "gpu" || len(cfg.Resources.Accounts) != 1 || cfg.Resources.Accounts[0].GPUSlots != 3 {
		t.Errorf("device %q, accounts %+v", cfg.Device, cfg.Resources.Accounts)
	}
}

// writeFile writes text as CHANNELNAMES.txt in a fresh temporary
// directory and returns its path.
func writeFile(t *testing.T, text string) string {
	t.Helper()
	return writeTemp(t, "CHANNELNAMES.txt", text)
}

// writeTemp writes text as the file name in a fresh temporary directory and
// returns its path; an error is fatal.
func writeTemp(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadChannelNames(t *testing.T) {
	ok := []struct {
		name, text string
		n          int
		want       map[int][]string
	}{
		{"tab", "1\tDAPI\tBlank\tBlank\n2\tDAPI\tCD3\tCD4\n", 3,
			map[int][]string{1: {"DAPI", "Blank_1a", "Blank_1b"}, 2: {"DAPI_cyc02", "CD3", "CD4"}}},
		{"comma", "1,DAPI-01,CD3,CD4\n2,DAPI-02,CD8,CD20\n", 3,
			map[int][]string{1: {"DAPI-01", "CD3", "CD4"}, 2: {"DAPI_cyc02", "CD8", "CD20"}}},
		{"bare DAPI lines, comments, CRLF", "# markers\r\nDAPI\r\nCD3\r\n\r\nDAPI\r\nCD4\r\n", 2,
			map[int][]string{1: {"DAPI", "CD3"}, 2: {"DAPI_cyc02", "CD4"}}},
		{"DAPI_cycNN starts a cycle (the original missed it)", "DAPI-01\nCD3\nDAPI_cyc02\nCD4\n", 2,
			map[int][]string{1: {"DAPI-01", "CD3"}, 2: {"DAPI_cyc02", "CD4"}}},
		{"numbered DAPI skipping a cycle", "DAPI-01\nCD3\nDAPI-03\nCD4\n", 2,
			map[int][]string{1: {"DAPI-01", "CD3"}, 3: {"DAPI_cyc03", "CD4"}}},
		{"no DAPI lines: cut by channels", "Hoechst\nCD3\nHoechst\nCD4\n", 2,
			map[int][]string{1: {"Hoechst_1", "CD3"}, 2: {"Hoechst_2", "CD4"}}},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			cn, err := ReadChannelNames(writeFile(t, tc.text), tc.n)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(cn.Names, tc.want) {
				t.Errorf("got %v, want %v", cn.Names, tc.want)
			}
		})
	}
	bad := []struct{ name, text, want string }{
		{"name before the first DAPI", "CD3\nDAPI-01\nCD4\n", "line 1: \"CD3\" comes before the first DAPI line"},
		{"too many names", "DAPI-01\nCD3\nCD4\n", "line 3: \"CD4\": cycle 1 already has 2 names"},
		{"too few names", "1: DAPI, CD3\n2: DAPI\n", "line 2: cycle 2 has 1 names, want 2"},
		{"bad cycle", "1: DAPI, CD3\nx: DAPI, CD4\n", "line 2: \"x: DAPI, CD4\""},
		{"cycle twice", "1: DAPI, CD3\n1: DAPI, CD4\n", "line 2: cycle 1 listed twice (first at line 1)"},
		{"empty name", "1: DAPI, \n", "line 1: cycle 1 channel 2: empty name"},
		{"bad character", "DAPI-01\nCD3*\n", "line 2: cycle 1 channel 2: name \"CD3*\" has the character '*'"},
		{"cycles go down", "DAPI-02\nCD3\nDAPI-01\nCD4\n", "line 3: \"DAPI-01\" starts cycle 1 after cycle 2"},
		{"duplicate after the rule", "1: DAPI, Blank, Blank, Blank_1b\n", "line 1: cycle 1 channel 4 (\"Blank_1b\") is named \"Blank_1b\" after the duplicate rule, as cycle 1 channel 3 (line 1)"},
		{"only comments", "# nothing\n\n", "no channel names"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			n := 2
			if tc.name == "duplicate after the rule" {
				n = 4
			}
			p := writeFile(t, tc.text)
			_, err := ReadChannelNames(p, n)
			if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one naming %s and %q", err, p, tc.want)
			}
		})
	}
}

func writeExperiment(t *testing.T, text string) string {
	t.Helper()
	return writeTemp(t, "experiment.json", text)
}

func TestReadExperiment(t *testing.T) {
	e, err := ReadExperiment(writeExperiment(t, `{"numCycles": 2, "numZPlanes": 3, "n_cycles": 4, "tileOverlapX": 30, "tileOverlapY": 25,
		"wavelengths": [[1, [358, 461]], [2, [488, 525]]]}`))
	if err != nil {
		t.Fatal(err)
	}
	if e.NCycles != 4 || e.From["n_cycles"] != "experiment.json n_cycles" || e.Form != "KINTSUGI and CODEX" {
		t.Errorf("the original's key must win: n_cycles %d from %q, form %s", e.NCycles, e.From["n_cycles"], e.Form)
	}
	if e.TileOverlap != 0.3 || len(e.Notes) != 2 || !strings.Contains(e.Notes[0], "tileOverlapY 25") || !strings.Contains(e.Notes[1], "percent") {
		t.Errorf("overlap %v, notes %q", e.TileOverlap, e.Notes)
	}
	if !reflect.DeepEqual(e.Wavelengths, map[int][2]float64{1: {358, 461}, 2: {488, 525}}) {
		t.Errorf("pairs form: %v", e.Wavelengths)
	}
	if e.TileRows != 5 || e.From["tile_rows"] != defaultFrom || e.RefractiveIndex != 1.44 {
		t.Errorf("defaults: rows %d (%s), RI %v", e.TileRows, e.From["tile_rows"], e.RefractiveIndex)
	}
	// Within 10 nm of a filter set.
	if p, ok := FilterSet(745); !ok || p != [2]float64{753, 775} {
		t.Errorf("FilterSet(745) = %v %v", p, ok)
	}
	if _, ok := FilterSet(600); ok {
		t.Error("FilterSet(600) matched")
	}
	bad := []struct{ text, want string }{
		{`{"numCycles": 2.5}`, "key numCycles: 2.5: want a whole number"},
		{`{"numCycles": "3"}`, "key numCycles: 3 (string): want a number"},
		{`{"zPitch": -1}`, "key zPitch: -1: want a positive number"},
		{`{"tileOverlapX": 0}`, "key tileOverlapX: 0: want a positive number"},
		{`{"tile_overlap": 150}`, "key tile_overlap: 150: want a fraction in (0, 1)"},
		{`{"wavelengths": [358, 600]}`, "key wavelengths[1]: excitation 600 nm matches no CODEX filter set"},
		{`{"wavelengths": {"1": [358]}}`, "key wavelengths.1: [358]: want [excitation, emission]"},
		{`{"wavelengths": {"01": [358, 461]}}`, "key wavelengths.01: want a channel number"},
		{`{"wavelengths": "358"}`, "key wavelengths: 358: want"},
		{`[1, 2]`, "invalid JSON"},
		{`{"a": 1} {}`, "text after the JSON object"},
	}
	for _, tc := range bad {
		p := writeExperiment(t, tc.text)
		if _, err := ReadExperiment(p); err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming the file and %q", tc.text, err, tc.want)
		}
	}
}

// Where the sources disagree, the config follows experiment.json (as the
// original) and the notes say what the stage will meet; where
// experiment.json is silent, the raw tiles decide.
func TestInferDisagreements(t *testing.T) {
	proj := makeProject(t, "kintsugi", map[int]string{1: "cyc01", 2: "cyc02", 4: "cyc04", 5: "Cyc005"}, 4, 3, 4)
	p, err := Infer(proj)
	if err != nil {
		t.Fatal(err)
	}
	notes := strings.Join(p.Notes, "\n")
	for _, want := range []string{
		"data/raw/Cyc005: the stitch stage does not look for this name for cycle 5: not used",
		"cycles [3] have no raw directory",
		"raw cycle directories [4] are beyond n_cycles 3",
		"n_zplanes 5 (experiment.json n_zplanes), but data/raw/cyc01 has 3 z-planes",
		"data/raw/cyc01 has 4 tiles, tile_rows x tile_cols is 2 x 3 = 6",
	} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
	// experiment.json without cycles, z-planes or channels: the raw tiles give them.
	proj = makeProject(t, "kintsugi", map[int]string{1: "cyc01", 2: "cyc02"}, 6, 3, 2)
	os.WriteFile(ExperimentFile(proj), []byte(`{"regionHeight": 2, "regionWidth": 3}`), 0o644)
	os.Remove(filepath.Join(proj, "meta", "CHANNELNAMES.txt"))
	p, err = Infer(proj)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.Cycles, []int{1, 2}) || !slices.Equal(p.Channels, []int{1, 2}) || p.NZPlanes != 3 || !strings.HasPrefix(p.From["n_zplanes"], "data/raw") {
		t.Errorf("cycles %v, channels %v, n_zplanes %d (%s)", p.Cycles, p.Channels, p.NZPlanes, p.From["n_zplanes"])
	}
	if p.Names != nil || !strings.Contains(strings.Join(p.Notes, "\n"), "no channel-names file") {
		t.Errorf("names %v, notes %q", p.Names, p.Notes)
	}
	if _, cfg, err := p.Config("c.yaml", Options{KintsugiDir: "/k"}); err != nil || len(cfg.ChannelNames) != 0 || len(cfg.Resources.Accounts) != 0 {
		t.Errorf("config without names or accounts: %v", err)
	}
	// Nothing to count from: an error naming the file.
	os.RemoveAll(filepath.Join(proj, "data"))
	if _, err := Infer(proj); err == nil || !strings.Contains(err.Error(), "numCycles") {
		t.Errorf("no cycles anywhere: %v", err)
	}
	os.Remove(ExperimentFile(proj))
	if _, err := Infer(proj); err == nil || !strings.Contains(err.Error(), "experiment.json: missing") {
		t.Errorf("no experiment.json: %v", err)
	}
}

func TestConfigOptions(t *testing.T) {
	p, err := Infer(filepath.Join("testdata", "kintsugi"))
	if err != nil {
		t.Fatal(err)
	}
	text, cfg, err := p.Config("c.yaml", Options{KintsugiDir: "/k", Device: "cpu",
		Accounts: []config.Account{{Name: "a", GPUSlots: 3, CPUSlots: 8}, {Name: "b", GPUSlots: 2}}, AccountsFrom: "test",
		Resources: []Override{{"mem_stitch", "1500"}, {"cpu_utilization_cap", "0.5"}, {"qos", "yes"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"  total_gpu_slots: 5", "  total_slots: 13", "  mem_stitch: 1500", "  cpu_utilization_cap: 0.5", `  qos: "yes"`, "device: cpu"} {
		if !strings.Contains(string(text), want+" ") && !strings.Contains(string(text), want+"\n") {
			t.Errorf("config lacks %q", want)
		}
	}
	if cfg.Device != "cpu" || len(cfg.Resources.Accounts) != 2 || cfg.Resources.Accounts[1].PartitionGPU != config.DefaultPartitionGPU {
		t.Errorf("device %s, accounts %+v", cfg.Device, cfg.Resources.Accounts)
	}
	for _, ov := range []Override{{"bogus", "1"}, {"mem_stitch", "-5"}, {"mem_stitch", "lots"}} {
		if _, _, err := p.Config("c.yaml", Options{KintsugiDir: "/k", Resources: []Override{ov}}); err == nil || !strings.Contains(err.Error(), "resources") {
			t.Errorf("--resource %s=%s: err %v, want a schema error naming resources", ov.Key, ov.Value, err)
		}
	}
}

func TestScalars(t *testing.T) {
	for in, want := range map[float64]string{15: "15.0", 1e-6: "1.0e-06", 0.01: "0.01", 377.4463: "377.4463", 1e21: "1.0e+21", 2.5e-7: "2.5e-07"} {
		if got := num(in); got != want {
			t.Errorf("num(%v) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{"Blank_1a": "Blank_1a", "CD3 x": `"CD3 x"`, "yes": `"yes"`, "1": `"1"`, "/data/p": "/data/p", "a,b": `"a,b"`, "Ki-67": "Ki-67", "CD8α": `"CD8α"`} {
		if got := str(in); got != want {
			t.Errorf("str(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestResourceKeysUseTheSchemaDefaults: kintsugi-config init writes every
// job resource the schema has a default for, with that default (value ""),
// and a literal value (the original's) only for keys without one, so a
// default added to the schema or to init alone fails here.
func TestResourceKeysUseTheSchemaDefaults(t *testing.T) {
	defaults := config.ResourceDefaults()
	if len(defaults) < 15 {
		t.Fatalf("config.ResourceDefaults: %d keys; the schema's job resources are missing", len(defaults))
	}
	var schema struct {
		Properties struct {
			Resources struct {
				Properties map[string]map[string]any `json:"properties"`
			} `json:"resources"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(config.SchemaJSON(), &schema); err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, r := range resourceKeys {
		listed[r.key] = true
		_, hasDef := schema.Properties.Resources.Properties[r.key]["default"]
		switch {
		case r.value == "" && !hasDef:
			t.Errorf("resourceKeys %s: value from the schema, which has no default", r.key)
		case r.value != "" && hasDef:
			t.Errorf("resourceKeys %s: literal %s, but the schema's default is the one home (value \"\")", r.key, r.value)
		}
	}
	for k := range defaults {
		if !listed[k] {
			t.Errorf("the schema's job resource %s (default %d) is not written by kintsugi-config init (resourceKeys)", k, defaults[k])
		}
	}
	p, err := Infer(filepath.Join("testdata", "codex"))
	if err != nil {
		t.Fatal(err)
	}
	text, _ := render(t, p)
	lines := map[string]bool{}
	for _, l := range strings.Split(string(text), "\n") {
		l, _, _ = strings.Cut(l, "#")
		lines[strings.TrimRight(l, " ")] = true
	}
	for k, v := range defaults {
		if want := fmt.Sprintf("  %s: %d", k, v); !lines[want] {
			t.Errorf("rendered config lacks %q", want)
		}
	}
}
