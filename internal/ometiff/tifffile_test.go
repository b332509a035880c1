package ometiff

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The independent reader: Python's tifffile, as napari and MCMICRO use it.
// Without it the test fails (it does not skip): scripts/test-deps.sh
// installs python3-tifffile.

const python = "/usr/bin/python3"

func needTifffile(t *testing.T) {
	t.Helper()
	if out, err := exec.Command(python, "-c", "import tifffile, numpy").CombinedOutput(); err != nil {
		t.Fatalf("Python tifffile is needed to check the OME-TIFF (%s -c 'import tifffile, numpy': %v: %s); "+
			"install it with scripts/test-deps.sh or apt-get install python3-tifffile", python, err, strings.TrimSpace(string(out)))
	}
}

// pyCheck reads the OME-TIFF with tifffile and checks it against the raw
// full-resolution planes, computing the expected levels itself (numpy 2x2
// mean of the pixels that exist, rounded half up; ceil(w/2) x ceil(h/2);
// down to the first level whose longer side is < 1024). It prints one JSON
// line of what tifffile reports, then "ok", or raises.
const pyCheck = `
import sys, json, shutil, os, numpy as np, tifffile
from xml.etree import ElementTree as ET
path, raw, W, H, px_nm, names = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), json.loads(sys.argv[6])
C = len(names)
want = [np.fromfile(raw, '<u2').reshape(C, H, W)]

def down(a):
    c, h, w = a.shape
    s = np.zeros((c, h + h % 2, w + w % 2), np.uint32)
    n = np.zeros_like(s)
    s[:, :h, :w] = a
    n[:, :h, :w] = 1
    q = lambda v: v[:, 0::2, 0::2] + v[:, 1::2, 0::2] + v[:, 0::2, 1::2] + v[:, 1::2, 1::2]
    k = q(n)
    return ((q(s) + k // 2) // k).astype(np.uint16)

while max(want[-1].shape[1:]) >= 1024:
    want.append(down(want[-1]))

out = {'tifffile': tifffile.__version__}
with tifffile.TiffFile(path) as f:
    assert f.is_bigtiff, 'not BigTIFF'
    assert f.is_ome, 'tifffile does not see OME-TIFF'
    out['is_ome'] = f.is_ome
    out['series'] = len(f.series)
    s = f.series[0]
    out['axes'] = s.axes
    out['levels'] = [list(l.shape) for l in s.levels]
    assert s.axes == 'CYX', s.axes
    assert out['levels'] == [list(w.shape) for w in want], (out['levels'], [w.shape for w in want])
    root = ET.fromstring(f.ome_metadata)
    ns = {'o': 'http://www.openmicroscopy.org/Schemas/OME/2016-06'}
    pix = root.find('o:Image/o:Pixels', ns)
    out['names'] = [c.get('Name') for c in pix.findall('o:Channel', ns)]
    assert out['names'] == names, out['names']
    meta = tifffile.xml2dict(f.ome_metadata)['OME']['Image']['Pixels']
    out['PhysicalSizeX'] = meta['PhysicalSizeX']
    out['PhysicalSizeY'] = meta['PhysicalSizeY']
    out['unit'] = meta['PhysicalSizeXUnit']
    assert abs(meta['PhysicalSizeX'] - px_nm / 1000) < 1e-12 and abs(meta['PhysicalSizeY'] - px_nm / 1000) < 1e-12, meta
    assert meta['PhysicalSizeXUnit'] == 'µm' and meta['PhysicalSizeYUnit'] == 'µm', meta
    assert meta['DimensionOrder'] == 'XYCZT' and meta['Type'] == 'uint16' and meta['SizeC'] == C, meta
    p0 = f.pages[0]
    out['page0'] = {'compression': p0.compression.name, 'predictor': p0.predictor.name, 'tile': list(p0.tile),
                    'subifds': len(p0.subifds or []), 'subfiletype': int(p0.subfiletype)}
    assert p0.compression == 8 and p0.predictor == 2 and p0.tile == (512, 512), out['page0']
    out['reduced_subfiletype'] = [int(l.keyframe.subfiletype) for l in s.levels[1:]]
    assert out['reduced_subfiletype'] == [1] * (len(want) - 1), out['reduced_subfiletype']
    for k, lv in enumerate(s.levels):
        got = lv.asarray()
        bad = got != want[k]
        assert not bad.any(), 'level %d: %d pixels differ, first at %s' % (k, bad.sum(), np.argwhere(bad)[0])
    # napari's path: one level of the series by index
    assert (tifffile.imread(path, series=0, level=1) == want[1]).all()

# a renamed copy still resolves its planes (TiffData UUID = the document UUID)
other = os.path.join(os.path.dirname(path), 'renamed.tif')
shutil.copy(path, other)
with tifffile.TiffFile(other) as f:
    assert f.is_ome and (f.series[0].levels[-1].asarray() == want[-1]).all(), 'renamed copy'
print(json.dumps(out, ensure_ascii=False))
print('ok')
`

// TestTifffileReadsPyramid: tifffile reads the fixture as written by the
// tile encoder and with the Huffman-only tiles of a Coder (CPUCoder, the
// GPU's reference).
func TestTifffileReadsPyramid(t *testing.T) {
	needTifffile(t)
	for name, o := range map[string]Options{
		"encoder": {PixelSizeNM: fixPixelNM, Workers: 2},
		"coder":   {PixelSizeNM: fixPixelNM, Workers: 2, Coder: CPUCoder{Workers: 2}},
	} {
		t.Run(name, func(t *testing.T) { tifffileCheck(t, o) })
	}
}

func tifffileCheck(t *testing.T, o Options) {
	dir := t.TempDir()
	path := writeFixture(t, dir, "fixture.ome.tif", o)
	raw := filepath.Join(dir, "planes.raw")
	f, err := os.Create(raw)
	if err != nil {
		t.Fatal(err)
	}
	for c := range fixNames {
		if err := binary.Write(f, binary.LittleEndian, fixPlane(c).Pix); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	names, _ := json.Marshal(fixNames)
	out, err := exec.Command(python, "-c", pyCheck, path, raw, strconv.Itoa(fixW), strconv.Itoa(fixH),
		strconv.Itoa(fixPixelNM), string(names)).CombinedOutput()
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "\nok") {
		t.Fatalf("tifffile check failed: %v\n%s", err, out)
	}
	t.Logf("tifffile: %s", strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(string(out)), "ok")))
}
