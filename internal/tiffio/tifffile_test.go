package tiffio

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// Cross-checks against independent implementations: Python's tifffile (and,
// through ctypes, the system libtiff for LZW, PackBits and the
// floating-point predictor, which tifffile cannot encode without
// imagecodecs).

const python = "/usr/bin/python3"

func needTifffile(t *testing.T) {
	t.Helper()
	if err := exec.Command(python, "-c", "import tifffile, numpy").Run(); err != nil {
		t.Skipf("skipping: Python tifffile is not available (%s -c 'import tifffile, numpy': %v)", python, err)
	}
}

// pyWrite writes every variant from the raw little-endian inputs and prints
// one line per file: name, source, libtiff-or-tifffile.
const pyWrite = `
import sys, ctypes, numpy as np, tifffile
d, W, H, N = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
u16 = np.fromfile(d + '/u16.raw', '<u2').reshape(H, W)
f32 = np.fromfile(d + '/f32.raw', '<f4').reshape(H, W)
stack = np.fromfile(d + '/stack.raw', '<u2').reshape(N, H, W)

def tf(name, src, arr, **kw):
    tifffile.imwrite(d + '/' + name + '.tif', arr, photometric='minisblack', **kw)
    print(name, src)

tf('u16_none', 'u16', u16)
tf('u16_be', 'u16', u16, byteorder='>')
tf('u16_zlib8', 'u16', u16, compression='zlib')
tf('u16_deflate32946', 'u16', u16, compression='deflate')
tf('u16_zlib_pred', 'u16', u16, compression='zlib', predictor=True)
tf('u16_be_zlib_pred', 'u16', u16, compression='zlib', predictor=True, byteorder='>')
tf('u16_rps5', 'u16', u16, rowsperstrip=5)
tf('u16_rps7_zlib', 'u16', u16, rowsperstrip=7, compression='zlib')
tf('u16_tiled', 'u16', u16, tile=(32, 16))
tf('u16_tiled_zlib_pred_be_big', 'u16', u16, tile=(16, 48), compression='zlib', predictor=True, byteorder='>', bigtiff=True)
tf('u16_bigtiff', 'u16', u16, bigtiff=True)
tf('u16_bigtiff_be', 'u16', u16, bigtiff=True, byteorder='>')
tf('f32_none', 'f32', f32)
tf('f32_be', 'f32', f32, byteorder='>')
tf('f32_zlib', 'f32', f32, compression='zlib')
tf('f32_tiled_big_be', 'f32', f32, tile=(16, 16), bigtiff=True, byteorder='>')
tf('stack_u16', 'stack', stack)
tf('stack_u16_big_be_zlib', 'stack', stack, bigtiff=True, byteorder='>', compression='zlib')
tf('u8_zlib_pred', 'u8', (u16 & 255).astype(np.uint8), compression='zlib', predictor=True)
tf('i16_be', 'i16', u16.view(np.int16), byteorder='>')
tf('i32_zlib_pred', 'i32', u16.astype(np.int32) - 30000, compression='zlib', predictor=True)
tf('u32', 'u32', u16.astype(np.uint32) * 65537)
tf('f64_be_tiled', 'f64', f32.astype(np.float64), tile=(16, 16), byteorder='>')

lt = ctypes.CDLL('libtiff.so.6')
lt.TIFFOpen.restype = ctypes.c_void_p
lt.TIFFOpen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
lt.TIFFWriteEncodedStrip.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_ssize_t]
lt.TIFFWriteEncodedStrip.restype = ctypes.c_ssize_t
lt.TIFFWriteTile.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint16]
lt.TIFFWriteDirectory.argtypes = [ctypes.c_void_p]
lt.TIFFClose.argtypes = [ctypes.c_void_p]

def lib(name, src, arr, mode, comp, pred=1, rps=0, tile=None):
    # No big-endian files with predictor 3 here: this libtiff writes their
    # byte planes least significant first, against TIFF technote 3 (and
    # tifffile/imagecodecs), and cannot read them back itself.
    pages = arr if arr.ndim == 3 else arr[None]
    t = lt.TIFFOpen((d + '/' + name + '.tif').encode(), mode.encode())
    assert t
    for p in pages:
        h, w = p.shape
        sf = 3 if p.dtype.kind == 'f' else 1
        tags = [(256, w), (257, h), (258, p.dtype.itemsize * 8), (277, 1), (262, 1), (284, 1), (339, sf), (259, comp)]
        tags += [(317, pred)] if comp in (5, 8) else []
        tags += [(322, tile[1]), (323, tile[0])] if tile else [(278, rps or h)]
        for tag, v in tags:
            assert lt.TIFFSetField(ctypes.c_void_p(t), ctypes.c_uint32(tag), ctypes.c_int(v)) == 1, (name, tag)
        if tile:
            th, tw = tile
            for y in range(0, h, th):
                for x in range(0, w, tw):
                    buf = np.zeros((th, tw), p.dtype)
                    blk = p[y:y + th, x:x + tw]
                    buf[:blk.shape[0], :blk.shape[1]] = blk
                    assert lt.TIFFWriteTile(ctypes.c_void_p(t), buf.ctypes.data, x, y, 0, 0) > 0
        else:
            r = rps or h
            for s, y in enumerate(range(0, h, r)):
                buf = p[y:y + r].copy()  # libtiff may modify the buffer in place
                assert lt.TIFFWriteEncodedStrip(ctypes.c_void_p(t), s, buf.ctypes.data, buf.nbytes) == buf.nbytes
        assert lt.TIFFWriteDirectory(ctypes.c_void_p(t)) == 1
    lt.TIFFClose(ctypes.c_void_p(t))
    print(name, src)

lib('lib_u16_lzw', 'u16', u16, 'wl', 5, rps=9)
lib('lib_u16_lzw_pred_be', 'u16', u16, 'wb', 5, pred=2, rps=16)
lib('lib_u16_lzw_tiled_big', 'u16', u16, 'wl8', 5, tile=(16, 32))
lib('lib_u16_packbits', 'u16', u16, 'wl', 32773, rps=10)
lib('lib_u16_packbits_be_tiled', 'u16', u16, 'wb', 32773, tile=(32, 16))
lib('lib_f32_lzw', 'f32', f32, 'wl', 5, rps=8)
lib('lib_f32_lzw_fpred', 'f32', f32, 'wl', 5, pred=3, rps=8)
lib('lib_f32_deflate_fpred_tiled_big', 'f32', f32, 'wl8', 8, pred=3, tile=(16, 16))
lib('lib_f64_lzw_fpred', 'f64', f32.astype(np.float64), 'wl', 5, pred=3, rps=4)
lib('lib_stack_lzw_pred', 'stack', stack, 'wl', 5, pred=2, rps=6)
lib('lib_smooth_lzw', 'smooth', (np.arange(H * W, dtype=np.uint32) // 7 % 65536).astype(np.uint16).reshape(H, W), 'wl', 5)
`

// pyVerify reads files written by this package and compares them with raw
// dumps of the same data; it prints "ok name" or "FAIL name: reason".
const pyVerify = `
import sys, numpy as np, tifffile
for spec in sys.argv[1:]:
    path, raw, dt, n, h, w, big = spec.split(',')
    n, h, w = int(n), int(h), int(w)
    want = np.fromfile(raw, dt).reshape(n, h, w)
    try:
        with tifffile.TiffFile(path) as f:
            assert len(f.pages) == n, 'pages %d' % len(f.pages)
            assert f.is_bigtiff == (big == '1'), 'bigtiff %s' % f.is_bigtiff
            got = np.stack([p.asarray() for p in f.pages])
            p = f.pages[0]
            assert p.compression == 1 and p.photometric == 1 and p.samplesperpixel == 1, 'tags'
            assert got.dtype == want.dtype, 'dtype %s' % got.dtype
            assert got.shape == want.shape, 'shape %s' % (got.shape,)
            bad = got.view(np.uint8) != want.view(np.uint8)
            assert not bad.any(), '%d bytes differ' % bad.sum()
        print('ok', path)
    except Exception as e:
        print('FAIL', path + ':', e)
`

func runPython(t *testing.T, script string, args ...string) string {
	t.Helper()
	out, err := exec.Command(python, append([]string{"-c", script}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	return string(out)
}

func writeRaw(t *testing.T, path string, data any) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := binary.Write(f, binary.LittleEndian, data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// crossFloat32 builds a plane of finite and special values that survive
// conversion to float64 and back (NaN compared as NaN, see sameish).
func crossFloat32(rng *rand.Rand, w, h int) *raster.Float32 {
	f := raster.NewFloat32(w, h)
	for i := range f.Pix {
		switch rng.IntN(20) {
		case 0:
			f.Pix[i] = float32(math.Inf(1 - 2*rng.IntN(2)))
		case 1:
			f.Pix[i] = float32(math.Copysign(0, -1))
		case 2:
			f.Pix[i] = math.SmallestNonzeroFloat32 * float32(rng.IntN(100))
		default:
			f.Pix[i] = float32(rng.NormFloat64() * 1000)
		}
	}
	return f
}

func TestTifffileWritesWeRead(t *testing.T) {
	needTifffile(t)
	const w, h, n = 97, 61, 3 // odd sizes: partial last strips and edge tiles
	rng := rand.New(rand.NewPCG(1, 4))
	u16 := randGray16(rng, w, h)
	f32 := crossFloat32(rng, w, h)
	stack := make([]*raster.Gray16, n)
	var stackPix []uint16
	for i := range stack {
		stack[i] = randGray16(rng, w, h)
		stackPix = append(stackPix, stack[i].Pix...)
	}
	dir := t.TempDir()
	writeRaw(t, filepath.Join(dir, "u16.raw"), u16.Pix)
	writeRaw(t, filepath.Join(dir, "f32.raw"), f32.Pix)
	writeRaw(t, filepath.Join(dir, "stack.raw"), stackPix)
	out := runPython(t, pyWrite, dir, strconv.Itoa(w), strconv.Itoa(h), strconv.Itoa(n))

	// expected float values for each source
	conv := func(fn func(i int) float32) *raster.Float32 {
		f := raster.NewFloat32(w, h)
		for i := range f.Pix {
			f.Pix[i] = fn(i)
		}
		return f
	}
	smooth := raster.NewGray16(w, h)
	for i := range smooth.Pix {
		smooth.Pix[i] = uint16(i / 7 % 65536)
	}
	wantF := map[string]*raster.Float32{
		"u16":    conv(func(i int) float32 { return float32(u16.Pix[i]) }),
		"f32":    f32,
		"f64":    f32,
		"u8":     conv(func(i int) float32 { return float32(u16.Pix[i] & 255) }),
		"i16":    conv(func(i int) float32 { return float32(int16(u16.Pix[i])) }),
		"i32":    conv(func(i int) float32 { return float32(int32(u16.Pix[i]) - 30000) }),
		"u32":    conv(func(i int) float32 { return float32(uint32(u16.Pix[i]) * 65537) }),
		"smooth": conv(func(i int) float32 { return float32(smooth.Pix[i]) }),
	}
	wantG := map[string]*raster.Gray16{"u16": u16, "smooth": smooth}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 30 {
		t.Fatalf("python wrote only %d files:\n%s", len(lines), out)
	}
	for _, line := range lines {
		name, src, _ := strings.Cut(line, " ")
		path := filepath.Join(dir, name+".tif")
		if src == "stack" {
			got, err := ReadGray16Pages(path)
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			if len(got) != n {
				t.Errorf("%s: %d pages, want %d", name, len(got), n)
				continue
			}
			for i := range got {
				sameGray16(t, name, got[i], stack[i])
			}
			info, err := ReadInfo(path)
			if err != nil || info.Pages != n {
				t.Errorf("%s: info %+v, %v", name, info, err)
			}
			continue
		}
		if g, ok := wantG[src]; ok {
			got, err := ReadGray16(path)
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			sameGray16(t, name, got, g)
		} else if _, err := ReadGray16(path); err == nil {
			t.Errorf("%s: ReadGray16 of %s data gave no error", name, src)
		} else {
			t.Logf("%s: ReadGray16: %v", name, err)
		}
		got, err := ReadFloat32(path)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if src == "f32" {
			sameFloat32(t, name, got, f32) // bit-exact, -0 included
		} else {
			sameish(t, name, got, wantF[src])
		}
		info, err := ReadInfo(path)
		if err != nil {
			t.Errorf("%s: %v", name, err)
		} else if info.Width != w || info.Height != h || info.Pages != 1 || info.BigTIFF != strings.Contains(name, "big") {
			t.Errorf("%s: info %+v", name, info)
		}
	}
}

// sameish compares values with ==, counting NaN equal to NaN.
func sameish(t *testing.T, what string, got, want *raster.Float32) {
	t.Helper()
	for i, v := range want.Pix {
		g := got.Pix[i]
		if g != v && !(g != g && v != v) {
			t.Errorf("%s: pixel (y=%d, x=%d) = %g, want %g", what, i/want.W, i%want.W, g, v)
			return
		}
	}
}

func TestWeWriteTifffileReads(t *testing.T) {
	needTifffile(t)
	rng := rand.New(rand.NewPCG(1, 5))
	dir := t.TempDir()
	var specs []string
	add := func(name, dt string, n, h, w int, data any, write func(path string) error, big bool) {
		path := filepath.Join(dir, name+".tif")
		raw := filepath.Join(dir, name+".raw")
		writeRaw(t, raw, data)
		if err := write(path); err != nil {
			t.Fatal(err)
		}
		b := "0"
		if big {
			b = "1"
		}
		specs = append(specs, strings.Join([]string{path, raw, dt, strconv.Itoa(n), strconv.Itoa(h), strconv.Itoa(w), b}, ","))
	}
	for _, sz := range [][2]int{{1, 1}, {5, 3}, {1001, 777}} {
		w, h := sz[0], sz[1]
		g := randGray16(rng, w, h)
		f := randFloat32(rng, w, h)
		id := strconv.Itoa(w) + "x" + strconv.Itoa(h)
		add("g"+id, "<u2", 1, h, w, g.Pix, func(p string) error { return WriteGray16(p, g) }, false)
		add("f"+id, "<f4", 1, h, w, f.Pix, func(p string) error { return WriteFloat32(p, f) }, false)
	}
	var pages []*raster.Gray16
	var pix []uint16
	var fpages []*raster.Float32
	var fpix []float32
	for range 4 {
		g := randGray16(rng, 211, 163)
		pages = append(pages, g)
		pix = append(pix, g.Pix...)
		f := randFloat32(rng, 211, 163)
		fpages = append(fpages, f)
		fpix = append(fpix, f.Pix...)
	}
	add("stack", "<u2", 4, 163, 211, pix, func(p string) error { return WriteGray16Pages(p, pages) }, false)
	add("fstack", "<f4", 4, 163, 211, fpix, func(p string) error { return WriteFloat32Pages(p, fpages) }, false)
	big := writeOptions{bigTIFF: true}
	add("stackbig", "<u2", 4, 163, 211, pix, func(p string) error { return writeGray16Pages(p, pages, big) }, true)
	add("fbig", "<f4", 1, 163, 211, fpages[0].Pix, func(p string) error { return writeFloat32Pages(p, fpages[:1], big) }, true)
	out := runPython(t, pyVerify, specs...)
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasPrefix(line, "ok ") {
			t.Errorf("tifffile: %s", line)
		}
	}
	if n := strings.Count(out, "ok "); n != len(specs) {
		t.Errorf("tifffile verified %d of %d files:\n%s", n, len(specs), out)
	}
}
