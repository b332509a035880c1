package badinput

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio/tiffiotest"
)

func mkfifo(t *testing.T, path string) {
	t.Helper()
	os.Remove(path)
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
}

// transformJSON is a rigid transform of the tiny project's 200 x 160 frame
// with one key replaced (or a field section added).
func transformJSON(key, value string) string {
	rigid := map[string]string{"theta_deg": "0", "theta_rad": "0", "scale": "1", "ty_px": "0", "tx_px": "0",
		"cy_px": "79.5", "cx_px": "99.5", "matrix_yx": "[[1,0,0],[0,1,0]]"}
	field := ""
	if strings.HasPrefix(key, "field.") {
		f := map[string]string{"ny": "5", "nx": "6", "y0_px": "0", "x0_px": "0", "step_px": "40", "dy_file": `"dy.tif"`, "dx_file": `"dx.tif"`}
		f[strings.TrimPrefix(key, "field.")] = value
		field = fmt.Sprintf(`,"field":{"ny":%s,"nx":%s,"y0_px":%s,"x0_px":%s,"step_px":%s,"dy_file":%s,"dx_file":%s}`,
			f["ny"], f["nx"], f["y0_px"], f["x0_px"], f["step_px"], f["dy_file"], f["dx_file"])
	} else {
		rigid[strings.TrimPrefix(key, "rigid.")] = value
	}
	return fmt.Sprintf(`{"version":1,"image_height":160,"image_width":200,"rigid":{"theta_deg":%s,"theta_rad":%s,"scale":%s,"ty_px":%s,"tx_px":%s,"cy_px":%s,"cx_px":%s,"matrix_yx":%s}%s}`,
		rigid["theta_deg"], rigid["theta_rad"], rigid["scale"], rigid["ty_px"], rigid["tx_px"], rigid["cy_px"], rigid["cx_px"], rigid["matrix_yx"], field)
}

// writeProfiles writes z-plane 1's BaSiC profiles for the tiny project's
// 200 x 160 tiles into dir, with pixel (5, 7) of one of them set to v.
func writeProfiles(t *testing.T, dir, which string, v float32) {
	t.Helper()
	os.MkdirAll(dir, 0o755)
	flat, dark := raster.NewFloat32(200, 160), raster.NewFloat32(200, 160)
	for i := range flat.Pix {
		flat.Pix[i], dark.Pix[i] = 1, 100
	}
	if which == "flat" {
		flat.Pix[5*200+7] = v
	} else {
		dark.Pix[5*200+7] = v
	}
	if err := tiffio.WriteFloat32(filepath.Join(dir, "01_flatfield.tif"), flat); err != nil {
		t.Fatal(err)
	}
	if err := tiffio.WriteFloat32(filepath.Join(dir, "01_darkfield.tif"), dark); err != nil {
		t.Fatal(err)
	}
}

// hostile are the kinds of issue 15: inputs that hung, exhausted memory,
// were read wrong or harmed data, and flag contracts (catalogue() appends
// them to the one table).
func hostile() []badCase {
	stitchEdit := func(fn func(t *testing.T, p *project)) func(*testing.T, *project) []string {
		return func(t *testing.T, p *project) []string { fn(t, p); return stitchRun(p) }
	}
	correct := func(p *project, extra ...string) []string {
		return append([]string{"correct", "-c", p.Cfg, "--cycle", "1", "--channel", "1", "--tile", "1"}, extra...)
	}
	nan := float32(0)
	nan = nan / nan
	apply := func(key, value string) func(*testing.T, *project) []string {
		return func(t *testing.T, p *project) []string {
			tr := filepath.Join(p.Dir, "t_transform.json")
			write(t, tr, []byte(transformJSON(key, value)))
			return []string{"apply", "--transform", tr, "--in", p.tile(1, 1, 1), "--out", filepath.Join(p.Dir, "warped.tif"), "--device", "cpu"}
		}
	}
	bomb := func(exe string) func(*testing.T, *project) []string {
		return func(t *testing.T, p *project) []string {
			in := filepath.Join(p.Dir, "bomb.tif")
			if exe == "register" {
				write(t, in, tiffiotest.SharedStrips(200, 160)) // the fixed image's size
			} else {
				write(t, in, tiffiotest.SharedStrips(4096, 4096))
			}
			out := filepath.Join(p.Dir, "out.tif")
			switch exe {
			case "decon":
				return []string{"tile", "-c", p.Cfg, "--channel", "1", "--in", in, "--out", out, "--device", "cpu"}
			case "register":
				return []string{"pair", "--fixed", p.tile(1, 1, 1), "--moving", in, "--out", filepath.Join(p.Dir, "pair"), "--device", "cpu"}
			}
			return []string{"tile", "--in", in, "--out", out, "--device", "cpu"}
		}
	}
	cases := []badCase{
		// configs that hung, exhausted memory or were read differently from the Snakefile
		{"stitch", "config larger than 1 MiB", stitchEdit(func(t *testing.T, p *project) {
			p.editConfig(t, "tile_rows: 2\n", "tile_rows: 2\n#"+strings.Repeat("x", 1<<20)+"\n")
		}), nil, "", 2, "1 MiB"},
		{"stitch", "config /dev/zero (endless)", func(_ *testing.T, p *project) []string {
			return []string{"run", "-c", "/dev/zero", "--cycle", "1", "--device", "cpu"}
		}, nil, "", 2, "not a regular file"},
		{"stitch", "config a FIFO (open would block)", func(t *testing.T, p *project) []string {
			mkfifo(t, p.Cfg)
			return stitchRun(p)
		}, nil, "", 2, "not a regular file"},
		{"stitch", "config with a YAML alias", stitchEdit(func(t *testing.T, p *project) {
			p.editConfig(t, "  - 2\noutput_format", "  - &two 2\noutput_format")
			p.editConfig(t, "tile_rows: 2", "tile_rows: *two")
		}), nil, "", 2, "anchor &two"},
		{"stitch", "config key given twice (as 1 and \"1\")", stitchEdit(func(t *testing.T, p *project) {
			p.editConfig(t, "channel_names:\n", "channel_names:\n  \"1\": [X, Y]\n")
		}), nil, "", 2, "duplicate key"},
		{"stitch", "config of two YAML documents", stitchEdit(func(t *testing.T, p *project) {
			p.editConfig(t, "pou: 0.5\n", "pou: 0.5\n---\npou: 0.9\n")
		}), nil, "", 2, "more than one YAML document"},
		{"stitch", "config mapping of 5000 keys (quadratic in yaml.v3)", stitchEdit(func(t *testing.T, p *project) {
			var b strings.Builder
			for i := range 5000 {
				fmt.Fprintf(&b, "  k%d: 1\n", i)
			}
			p.editConfig(t, "resources:\n", "resources:\n"+b.String())
		}), nil, "", 2, "keys in one mapping: at most 1024"},
		// raw tiles that hung or were read wrong
		{"stitch", "tile a FIFO (open would block)", stitchEdit(func(t *testing.T, p *project) { mkfifo(t, p.tile(3, 1, 1)) }), nil, "", 2, "named pipe"},
		{"stitch", "tile multi-page (read as its first page before)", stitchEdit(func(t *testing.T, p *project) {
			img, _ := tiffio.ReadGray16(p.tile(4, 1, 2))
			if err := tiffio.WriteGray16Pages(p.tile(4, 1, 2), []*raster.Gray16{img, img}); err != nil {
				t.Fatal(err)
			}
		}), nil, "", 2, "1_00004_Z001_CH2.tif: 2 pages"},
		{"stitch", "tile whose strips share one payload", stitchEdit(func(t *testing.T, p *project) {
			write(t, p.tile(2, 1, 1), tiffiotest.SharedStrips(200, 160))
		}), nil, "", 2, "overlap"},
		{"stitch", "z-planes with a gap (Z001, Z003 for n_zplanes 2)", stitchEdit(func(t *testing.T, p *project) {
			p.editConfig(t, "n_zplanes: 1", "n_zplanes: 2")
			for tl := 1; tl <= 6; tl++ {
				for ch := 1; ch <= 2; ch++ {
					b, _ := os.ReadFile(p.tile(tl, 1, ch))
					write(t, p.tile(tl, 3, ch), b)
				}
			}
		}), nil, "", 2, "1_00001_Z003_CH1.tif"},
		// numbers from files
		{"stitch", "correct --profiles with a NaN darkfield", func(t *testing.T, p *project) []string {
			writeProfiles(t, filepath.Join(p.Dir, "prof"), "dark", nan)
			return correct(p, "--profiles", filepath.Join(p.Dir, "prof"), "--out", filepath.Join(p.Dir, "c.tif"))
		}, nil, "", 2, "01_darkfield.tif: pixel (5, 7) is NaN"},
		{"stitch", "correct --profiles with a 1e30 darkfield", func(t *testing.T, p *project) []string {
			writeProfiles(t, filepath.Join(p.Dir, "prof"), "dark", 1e30)
			return correct(p, "--profiles", filepath.Join(p.Dir, "prof"), "--out", filepath.Join(p.Dir, "c.tif"))
		}, nil, "", 2, "01_darkfield.tif: pixel (5, 7)"},
		{"stitch", "correct --profiles with a zero flatfield value", func(t *testing.T, p *project) []string {
			writeProfiles(t, filepath.Join(p.Dir, "prof"), "flat", 0)
			return correct(p, "--profiles", filepath.Join(p.Dir, "prof"), "--out", filepath.Join(p.Dir, "c.tif"))
		}, nil, "", 2, "01_flatfield.tif: pixel (5, 7) is 0"},
		{"register", "apply: field of 1e8 x 1e8 nodes (panicked)", apply("field.ny", "100000000"), nil, "", 2, "key field.ny"},
		{"register", "apply: theta_deg 1e308", apply("rigid.theta_deg", "1e308"), nil, "", 2, "key rigid.theta_deg"},
		{"register", "apply: ty_px 1e300", apply("rigid.ty_px", "1e300"), nil, "", 2, "key rigid.ty_px"},
		{"register", "apply: scale -1", apply("rigid.scale", "-1"), nil, "", 2, "key rigid.scale"},
		{"register", "apply: step_px 1e-300", apply("field.step_px", "1e-300"), nil, "", 2, "key field.step_px"},
		// decodes bounded in every command that reads a TIFF
		{"edf", "tile: stack whose strips share one payload (32 MiB from 70 KB)", bomb("edf"), nil, "", 2, "overlap"},
		{"decon", "tile: stack whose strips share one payload", bomb("decon"), nil, "", 2, "overlap"},
		{"register", "pair: moving image whose strips share one payload", bomb("register"), nil, "", 2, "overlap"},
		// outputs that harmed data
		{"stitch", "correct --out a raw tile (the input)", func(_ *testing.T, p *project) []string {
			return correct(p, "--out", p.tile(1, 1, 1))
		}, nil, "", 2, "is the input"},
		{"edf", "tile --in X --out X", func(t *testing.T, p *project) []string {
			return []string{"tile", "--in", p.tile(1, 1, 1), "--out", p.tile(1, 1, 1), "--device", "cpu"}
		}, nil, "", 2, "is the input"},
		{"decon", "tile --out a hard link of --in", func(t *testing.T, p *project) []string {
			link := filepath.Join(p.Dir, "link.tif")
			if err := os.Link(p.tile(1, 1, 1), link); err != nil {
				t.Fatal(err)
			}
			return []string{"tile", "-c", p.Cfg, "--channel", "1", "--in", p.tile(1, 1, 1), "--out", link, "--device", "cpu"}
		}, nil, "", 2, "is the input"},
		{"edf", "tile --out a symlink to --in", func(t *testing.T, p *project) []string {
			link := filepath.Join(p.Dir, "link.tif")
			os.Symlink(p.tile(1, 1, 1), link)
			return []string{"tile", "--in", p.tile(1, 1, 1), "--out", link, "--device", "cpu"}
		}, nil, "", 2, "not a regular file"},
		{"register", "pair --out the moving image's directory (would replace it)", func(_ *testing.T, p *project) []string {
			return []string{"pair", "--fixed", p.tile(1, 1, 1), "--moving", p.tile(1, 1, 2), "--out", p.Raw, "--device", "cpu"}
		}, nil, "", 2, "is the input"},
		{"register", "apply --out a FIFO (would be replaced by a file)", func(t *testing.T, p *project) []string {
			args := apply("rigid.tx_px", "0")(t, p)
			mkfifo(t, args[len(args)-3])
			return args
		}, nil, "", 2, "not a regular file"},
		{"stitch", "output path holds a regular file (was replaced)", stitchEdit(func(t *testing.T, p *project) {
			os.MkdirAll(filepath.Dir(p.Out), 0o755)
			write(t, p.Out, []byte("user data"))
		}), nil, "", 1, "refusing to replace"},
		{"stitch", "output directories under umask 002 (were 0700)", stitchEdit(func(*testing.T, *project) {}), nil, "umask 002;", 0, "cycle stitched"},
		// flags and budgets
		{"stitch", "required flag missing (run without --cycle)", func(_ *testing.T, p *project) []string {
			return []string{"run", "-c", p.Cfg, "--device", "cpu"}
		}, nil, "", 2, `Required flag \"cycle\"`},
		{"stitch", "command unknown", func(*testing.T, *project) []string { return []string{"frobnicate"} }, nil, "", 2, "frobnicate"},
		{"decon", "required flag missing (tile without --in)", func(_ *testing.T, p *project) []string {
			return []string{"tile", "-c", p.Cfg, "--channel", "1", "--out", "x.tif"}
		}, nil, "", 2, `Required flag \"in\"`},
		{"edf", "required flag missing (tile without --in)", func(*testing.T, *project) []string {
			return []string{"tile", "--out", "x.tif"}
		}, nil, "", 2, `Required flag \"in\"`},
		{"register", "required flag missing (apply without --transform)", func(*testing.T, *project) []string {
			return []string{"apply", "--in", "a.tif", "--out", "b.tif"}
		}, nil, "", 2, `Required flag \"transform\"`},
		{"stitch", "--workers 1000000", func(_ *testing.T, p *project) []string {
			return stitchRun(p, "--workers", "1000000")
		}, nil, "", 2, "--workers 1000000"},
		{"decon", "--gpu-mem-cap 99999999999999 (overflowed)", func(_ *testing.T, p *project) []string {
			return []string{"run", "-c", p.Cfg, "--cycle", "1", "--gpu-mem-cap", "99999999999999"}
		}, nil, "", 2, "--gpu-mem-cap 99999999999999"},
		{"stitch", "--mem-budget 99999999999999 (capped, logged)", func(_ *testing.T, p *project) []string {
			return stitchRun(p, "--mem-budget", "99999999999999")
		}, nil, "", 0, "capped at the machine's"},
		{"stitch", "mem_mb above the machine's memory (capped, logged)", func(_ *testing.T, p *project) []string {
			return stitchRun(p)
		}, []string{"mem_mb=99999999"}, "", 0, "mem_mb, capped at the machine's"},
	}
	return cases
}

// hostileAfter checks what a case must leave behind (data intact, modes),
// by executable/kind.
var hostileAfter = map[string]func(t *testing.T, p *project){
	"stitch/output path holds a regular file (was replaced)": func(t *testing.T, p *project) {
		if b, err := os.ReadFile(p.Out); err != nil || string(b) != "user data" {
			t.Errorf("the file at %s was not left alone: %q %v", p.Out, b, err)
		}
	},
	"stitch/correct --out a raw tile (the input)": func(t *testing.T, p *project) {
		if _, err := tiffio.ReadGray16(p.tile(1, 1, 1)); err != nil {
			t.Errorf("input harmed: %v", err)
		}
	},
	"register/apply --out a FIFO (would be replaced by a file)": func(t *testing.T, p *project) {
		if st, err := os.Lstat(filepath.Join(p.Dir, "warped.tif")); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
			t.Errorf("the FIFO at --out was replaced: %v", err)
		}
	},
	"stitch/output directories under umask 002 (were 0700)": func(t *testing.T, p *project) {
		for _, d := range []string{p.Out, filepath.Join(p.Out, "CH1"), filepath.Join(p.Out, "CH1", "basic")} {
			if st, err := os.Stat(d); err != nil || st.Mode().Perm() != 0o775 {
				t.Errorf("%s: mode %v (%v), want 0775 under umask 002", d, st.Mode().Perm(), err)
			}
		}
		for _, f := range []string{filepath.Join(p.Out, "CH1", "01.tif"), layout.Sentinel(p.Out)} {
			if st, err := os.Stat(f); err != nil || st.Mode().Perm() != 0o664 {
				t.Errorf("%s: mode %v (%v), want 0664 under umask 002", f, st.Mode().Perm(), err)
			}
		}
	},
}
