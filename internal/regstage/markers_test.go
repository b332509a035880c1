package regstage

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/register"
	"github.com/kintsugi-hpc/kintsugi-go/internal/regstage/regtest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth"
)

// pyMarkers reads registered.ome.tif and markers.csv with Python's
// tifffile and csv (independent readers; MCMICRO reads both so), checks
// every channel's pixels against the registered image it was made from and
// the constraints MCMICRO's validation applies to an OME-TIFF (one pixel
// type in every page and level, PhysicalSizeX == PhysicalSizeY, one tile
// size in every page and level), and prints a JSON line: the OME-XML
// channel names, the markers.csv rows, and what it checked.
const pyMarkers = `
import sys, json, csv, os, numpy as np, tifffile
from xml.etree import ElementTree as ET
ome, mk, regdir, files = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
out = {}
with tifffile.TiffFile(ome) as f:
    assert f.is_ome, 'not an OME-TIFF'
    ns = {'o': 'http://www.openmicroscopy.org/Schemas/OME/2016-06'}
    pix = ET.fromstring(f.ome_metadata).find('o:Image/o:Pixels', ns)
    out['ome_names'] = [c.get('Name') for c in pix.findall('o:Channel', ns)]
    assert pix.get('PhysicalSizeX') == pix.get('PhysicalSizeY'), (pix.get('PhysicalSizeX'), pix.get('PhysicalSizeY'))
    assert pix.get('PhysicalSizeXUnit') == pix.get('PhysicalSizeYUnit')
    out['physical_size'] = [pix.get('PhysicalSizeX'), pix.get('PhysicalSizeXUnit')]
    s = f.series[0]
    dtypes, tiles = set(), set()
    for lv in s.levels:
        for p in lv.pages:
            dtypes.add(str(p.dtype)); tiles.add(tuple(p.tile or ()))
    out['dtypes'], out['tiles'] = sorted(dtypes), sorted(tiles)
    assert len(dtypes) == 1 and pix.get('Type') == list(dtypes)[0], (dtypes, pix.get('Type'))
    assert len(tiles) == 1 and len(list(tiles)[0]) == 2, tiles
    full = s.levels[0].asarray()
    assert full.shape[0] == len(files), (full.shape, len(files))
    for i, rel in enumerate(files):
        want = tifffile.imread(os.path.join(regdir, rel))
        assert (full[i] == want).all(), 'channel %d is not %s' % (i + 1, rel)
with open(mk, newline='') as fh:
    rows = list(csv.DictReader(fh))
out['csv_header'] = list(rows[0].keys())
out['csv'] = [[r['channel_number'], r['cycle_number'], r['marker_name'], r['background'], r['exposure'], r['remove']] for r in rows]
names = [r['marker_name'] for r in rows]
assert len(set(names)) == len(names), 'marker_name not unique'
assert [int(r['channel_number']) for r in rows] == list(range(1, len(rows) + 1))
print(json.dumps(out))
`

// The OME-TIFF lists the channels cycle by cycle in the config's order
// (cycle 1 is the original's example, DAPI-01 and three blanks, named
// Blank_1a, Blank_1b, Blank_1c by the config's duplicate rule: not name
// order), markers.csv beside it has the same names in the same order with
// MCMICRO's columns (each marker's background the blank of its channel),
// the file meets MCMICRO's constraints, and a rerun writes both byte for
// byte again.
func TestMarkersOrder(t *testing.T) {
	cfg, _ := regtest.WriteProjectChannels(t, t.TempDir(), 3, 4, regConfig,
		synth.RegOptions{H: testH, W: testW, Seed: 5, MaxShift: 30, MaxRotDeg: 1, WarpPx: 3, Workers: 2})
	if got := cfg.ChannelMarker(1, 2); got != "Blank_1a" {
		t.Fatalf("fixture: cycle 1 channel 2 is %q, want Blank_1a (config order differs from name order)", got)
	}
	if _, err := run(cfg, register.CPU{Workers: 2}); err != nil {
		t.Fatal(err)
	}
	// The expected list, from the config alone.
	var names, files []string
	var rows [][]string
	n := 0
	for _, c := range cfg.Cycles {
		for _, ch := range cfg.Channels {
			n++
			name := cfg.ChannelMarker(c, ch)
			names = append(names, name)
			files = append(files, filepath.Join(layout.CycleName(c), cfg.EDFFileName(c, ch)))
			bg, rm := "", ""
			switch {
			case c == 1 && ch > 1:
				rm = "TRUE"
			case ch > 1:
				bg = cfg.ChannelMarker(1, ch) // the blank acquired in this channel (cycle 1)
			}
			rows = append(rows, []string{itoa(n), itoa(c), name, bg, "", rm})
		}
	}
	if names[0] != "DAPI-01" || names[1] != "Blank_1a" || names[3] != "Blank_1c" {
		t.Fatalf("fixture: names %v", names)
	}
	out := OutDir(cfg.ProjectDir)
	ome, mk := filepath.Join(out, OMEName), filepath.Join(out, MarkersName)
	fj, _ := json.Marshal(files)
	b, err := exec.Command("/usr/bin/python3", "-c", pyMarkers, ome, mk, out, string(fj)).CombinedOutput()
	if err != nil {
		t.Fatalf("tifffile/csv check (needs python3-tifffile: scripts/test-deps.sh): %v\n%s", err, b)
	}
	var got struct {
		OMENames  []string   `json:"ome_names"`
		CSVHeader []string   `json:"csv_header"`
		CSV       [][]string `json:"csv"`
		Dtypes    []string   `json:"dtypes"`
		Tiles     [][]int    `json:"tiles"`
		Physical  []string   `json:"physical_size"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(b), &got); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	t.Logf("tifffile: OME-XML channels %q; pixel types %v, tiles %v, PhysicalSizeX = PhysicalSizeY = %v", got.OMENames, got.Dtypes, got.Tiles, got.Physical)
	t.Logf("markers.csv: %q %q", got.CSVHeader, got.CSV)
	if strings.Join(got.OMENames, "|") != strings.Join(names, "|") {
		t.Errorf("OME-XML channel names %q, want config order %q", got.OMENames, names)
	}
	if strings.Join(got.CSVHeader, ",") != "channel_number,cycle_number,marker_name,background,exposure,remove" {
		t.Errorf("markers.csv header %q", got.CSVHeader)
	}
	if gj, wj := jsonOf(got.CSV), jsonOf(rows); gj != wj {
		t.Errorf("markers.csv rows\n %s\nwant\n %s", gj, wj)
	}
	// A rerun writes the same bytes.
	first := [][]byte{mustRead(t, ome), mustRead(t, mk)}
	if err := os.RemoveAll(out); err != nil {
		t.Fatal(err)
	}
	if _, err := run(cfg, register.CPU{Workers: 2}); err != nil {
		t.Fatal(err)
	}
	for i, p := range []string{ome, mk} {
		if !bytes.Equal(first[i], mustRead(t, p)) {
			t.Errorf("%s differs between two runs", filepath.Base(p))
		}
	}
}

func itoa(v int) string { b, _ := json.Marshal(v); return string(b) }

func jsonOf(v any) string { b, _ := json.Marshal(v); return string(b) }

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Markers: a name left duplicate across cycles gets _cycNN, images the
// config does not name follow the configured ones, and each marker's
// background is the first blank of its channel number.
func TestMarkersList(t *testing.T) {
	cfg := &config.Config{Cycles: []int{1, 2, 3}, Channels: []int{1, 2, 3}, ChannelNames: map[string][]string{
		"1": {"DAPI", "Blank", "blank3"}, "2": {"DAPI", "CD3", "CD8"}, "3": {"DAPI", "Blank", "CD20"}}}
	files := map[int][]string{
		1: {"blank3.tif", "DAPI.tif", "Blank.tif"},
		2: {"extra.tif", "CD8.tif", "DAPI.tif", "CD3.tif"},
		3: {"CD20.tif", "DAPI.tif", "Blank.tif"}}
	var got []string
	for _, m := range Markers(cfg, files) {
		got = append(got, strings.Join([]string{itoa(m.Number), itoa(m.Cycle), m.Name, m.Background, map[bool]string{true: "TRUE"}[m.Remove]}, ":"))
	}
	want := []string{"1:1:DAPI_cyc01::", "2:1:Blank_cyc01::TRUE", "3:1:blank3::TRUE",
		"4:2:DAPI_cyc02::", "5:2:CD3:Blank_cyc01:", "6:2:CD8:blank3:", "7:2:extra::",
		"8:3:DAPI_cyc03::", "9:3:Blank_cyc03::TRUE", "10:3:CD20:blank3:"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("Markers:\n got %v\nwant %v", got, want)
	}
}
