// Package badinput is the catalogue of bad inputs across the executables:
// every kind is run through the built executable the way Snakemake and users
// run it, and must give its exit code, a message naming the file, key or
// flag, and no partial output (no output directory, staging directory or
// lock left). README "Bad input" lists the same table (go test
// ./tests/badinput -run TestBadInputs -v -badinput.markdown prints it).
package badinput

import (
	"bytes"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/exectest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/staging"
	"github.com/kintsugi-hpc/kintsugi-go/internal/synth/synthtest"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

var markdown = flag.Bool("badinput.markdown", false, "print the catalogue as the README's markdown table")

// project is one copy of the tiny synthetic project (1 cycle, 2 channels,
// 1 z-plane, 2 x 3 tiles of 160 x 200 px).
type project struct {
	Dir, Cfg, Raw, Out string
	release            func() // set by a setup that holds the output's lock
}

func (p *project) tile(tile, z, ch int) string {
	return filepath.Join(p.Raw, fmt.Sprintf("1_%05d_Z%03d_CH%d.tif", tile, z, ch))
}

// editConfig replaces old by new in config.yaml (old must occur).
func (p *project) editConfig(t *testing.T, old, new string) {
	t.Helper()
	b, err := os.ReadFile(p.Cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(old)) {
		t.Fatalf("config.yaml lacks %q", old)
	}
	if err := os.WriteFile(p.Cfg, bytes.Replace(b, []byte(old), []byte(new), 1), 0o644); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

type badCase struct {
	exe   string // wrapper: stitch, decon, edf, register
	kind  string
	setup func(t *testing.T, p *project) []string // mutates the project, returns the arguments
	env   []string
	shell string // run through sh -c with this prefix (e.g. "ulimit -f 64;")
	code  int
	want  string // message fragment (the file, key or flag)
}

func stitchRun(p *project, extra ...string) []string {
	return append([]string{"run", "-c", p.Cfg, "--cycle", "1", "--device", "cpu", "--workers", "2"}, extra...)
}

func catalogue() []badCase {
	run := func(extra ...string) func(*testing.T, *project) []string {
		return func(_ *testing.T, p *project) []string { return stitchRun(p, extra...) }
	}
	cfgEdit := func(old, new string) func(*testing.T, *project) []string {
		return func(t *testing.T, p *project) []string { p.editConfig(t, old, new); return stitchRun(p) }
	}
	tileEdit := func(fn func(t *testing.T, p *project)) func(*testing.T, *project) []string {
		return func(t *testing.T, p *project) []string { fn(t, p); return stitchRun(p) }
	}
	cases := []badCase{
		// config
		{"stitch", "config file missing", func(_ *testing.T, p *project) []string {
			return []string{"run", "-c", p.Dir + "/nope.yaml", "--cycle", "1", "--device", "cpu"}
		}, nil, "", 2, "nope.yaml"},
		{"stitch", "config not YAML", tileEdit(func(t *testing.T, p *project) { write(t, p.Cfg, []byte("cycles: [1\n  channels: {")) }), nil, "", 2, "config.yaml"},
		{"stitch", "config key unknown", cfgEdit("tile_overlap:", "tile_overlapp:"), nil, "", 2, "tile_overlapp"},
		{"stitch", "config key missing", cfgEdit("tile_rows: 2\n", ""), nil, "", 2, "tile_rows"},
		{"stitch", "config value out of range", cfgEdit("tile_overlap: 0.3", "tile_overlap: 1.3"), nil, "", 2, "tile_overlap"},
		{"stitch", "config value of the wrong type", cfgEdit("tile_rows: 2", "tile_rows: two"), nil, "", 2, "tile_rows"},
		{"stitch", "config grid smaller than the tiles", cfgEdit("tile_cols: 3", "tile_cols: 2"), nil, "", 2, "extra tile file"},
		{"stitch", "cycle not in the config", func(_ *testing.T, p *project) []string {
			return []string{"run", "-c", p.Cfg, "--cycle", "9", "--device", "cpu"}
		}, nil, "", 2, "--cycle 9"},
		{"stitch", "n_zplanes disagrees with the files", cfgEdit("n_zplanes: 1", "n_zplanes: 3"), nil, "", 2, "n_zplanes is 3"},
		// tiles
		{"stitch", "raw cycle directory missing", tileEdit(func(t *testing.T, p *project) { os.RemoveAll(p.Raw) }), nil, "", 2, "no raw directory"},
		{"stitch", "tile missing", tileEdit(func(t *testing.T, p *project) { os.Remove(p.tile(4, 1, 2)) }), nil, "", 2, "1_00004_Z001_CH2.tif"},
		{"stitch", "tile beyond the grid", tileEdit(func(t *testing.T, p *project) {
			b, _ := os.ReadFile(p.tile(1, 1, 1))
			write(t, p.tile(7, 1, 1), b)
		}), nil, "", 2, "1_00007_Z001_CH1.tif"},
		{"stitch", "tile duplicated under another name", tileEdit(func(t *testing.T, p *project) {
			b, _ := os.ReadFile(p.tile(2, 1, 1))
			write(t, filepath.Join(p.Raw, "1_0002_Z001_CH1.tif"), b)
		}), nil, "", 2, "duplicated tile 2"},
		{"stitch", "tile of another size", tileEdit(func(t *testing.T, p *project) {
			if err := tiffio.WriteGray16(p.tile(3, 1, 1), raster.NewGray16(150, 200)); err != nil {
				t.Fatal(err)
			}
		}), nil, "", 2, "1_00003_Z001_CH1.tif"},
		{"stitch", "tile of another bit depth (float32)", tileEdit(func(t *testing.T, p *project) {
			if err := tiffio.WriteFloat32(p.tile(5, 1, 2), raster.NewFloat32(200, 160)); err != nil {
				t.Fatal(err)
			}
		}), nil, "", 2, "32-bit"},
		{"stitch", "tile of another bit depth (8-bit)", tileEdit(func(t *testing.T, p *project) {
			write(t, p.tile(5, 1, 1), classicTIFF(binary.LittleEndian, 200, 160, 8, make([]byte, 200*160)))
		}), nil, "", 2, "8-bit"},
		{"stitch", "tile truncated", tileEdit(func(t *testing.T, p *project) {
			b, _ := os.ReadFile(p.tile(2, 1, 2))
			write(t, p.tile(2, 1, 2), b[:len(b)/2])
		}), nil, "", 2, "1_00002_Z001_CH2.tif"},
		{"stitch", "tile corrupt (IFD overwritten)", tileEdit(func(t *testing.T, p *project) {
			b, _ := os.ReadFile(p.tile(6, 1, 1))
			off := binary.LittleEndian.Uint32(b[4:])
			for i := range 14 {
				b[int(off)+i] = 0xff
			}
			write(t, p.tile(6, 1, 1), b)
		}), nil, "", 2, "1_00006_Z001_CH1.tif"},
		{"stitch", "tile not a TIFF", tileEdit(func(t *testing.T, p *project) { write(t, p.tile(1, 1, 2), []byte("<html>not found</html>")) }), nil, "", 2, "not a tiff"},
		{"stitch", "tile empty (0 bytes)", tileEdit(func(t *testing.T, p *project) { write(t, p.tile(1, 1, 1), nil) }), nil, "", 2, "1_00001_Z001_CH1.tif"},
		// flags and environment
		{"stitch", "--device unknown", run("--device", "tpu"), nil, "", 2, "--device"},
		{"stitch", "no GPU (binary without CUDA)", func(_ *testing.T, p *project) []string {
			return []string{"run", "-c", p.Cfg, "--cycle", "1"}
		}, nil, "", 2, "built without CUDA support"},
		{"stitch", "--gpu negative", func(_ *testing.T, p *project) []string {
			return []string{"run", "-c", p.Cfg, "--cycle", "1", "--gpu", "-1"}
		}, nil, "", 2, "--gpu -1"},
		{"stitch", "--workers negative", run("--workers", "-3"), nil, "", 2, "--workers"},
		{"stitch", "SLURM_CPUS_PER_TASK malformed", func(_ *testing.T, p *project) []string {
			return []string{"run", "-c", p.Cfg, "--cycle", "1", "--device", "cpu"}
		}, []string{"SLURM_CPUS_PER_TASK=many"}, "", 2, "SLURM_CPUS_PER_TASK"},
		{"stitch", "--log-level unknown", run("--log-level", "loud"), nil, "", 2, "--log-level"},
		{"stitch", "flag unknown", run("--frobnicate"), nil, "", 2, "frobnicate"},
		// output
		{"stitch", "output directory not writable (a file in its place)", tileEdit(func(t *testing.T, p *project) {
			os.MkdirAll(layout.ProcessedDir(p.Dir), 0o755)
			write(t, filepath.Dir(p.Out), []byte("not a directory"))
		}), nil, "", 1, "stitched"},
		{"stitch", "output file system full (file size limit)", run(), nil, "ulimit -f 64;", 1, "file too large"},
		{"stitch", "output locked by a running job", func(t *testing.T, p *project) []string {
			d, err := staging.NewWithOptions(p.Out, staging.Options{Stage: "stitch cycle 1 (test holder)"})
			if err != nil {
				t.Fatal(err)
			}
			p.release = d.Abort
			return stitchRun(p)
		}, []string{"SLURM_JOB_ID="}, "", 4, fmt.Sprintf("pid %d", os.Getpid())},
		// variants that are not bad: read and stitched
		{"stitch", "big-endian (ImageJ) and BigTIFF tiles (accepted)", tileEdit(func(t *testing.T, p *project) {
			for k, tl := range []int{2, 5} {
				path := p.tile(tl, 1, 1)
				img, err := tiffio.ReadGray16(path)
				if err != nil {
					t.Fatal(err)
				}
				px := make([]byte, 2*len(img.Pix))
				var b []byte
				if k == 0 {
					for i, v := range img.Pix {
						binary.BigEndian.PutUint16(px[2*i:], v)
					}
					b = classicTIFF(binary.BigEndian, img.W, img.H, 16, px)
				} else {
					for i, v := range img.Pix {
						binary.LittleEndian.PutUint16(px[2*i:], v)
					}
					b = bigTIFF(img.W, img.H, px)
				}
				write(t, path, b)
				back, err := tiffio.ReadGray16(path)
				if err != nil || !slices.Equal(back.Pix, img.Pix) {
					t.Fatalf("rewritten tile %s does not read back: %v", path, err)
				}
			}
		}), nil, "", 0, "cycle stitched"},
	}
	// The other stages: what every wrapper shares.
	for _, exe := range []string{"decon", "edf", "register", "cycle"} {
		cycle := []string{"--cycle", "1"}
		if exe == "register" {
			cycle = nil
		}
		args := func(p *project, extra ...string) []string {
			return append(append([]string{"run", "-c", p.Cfg}, cycle...), extra...)
		}
		cases = append(cases,
			badCase{exe, "config file missing", func(_ *testing.T, p *project) []string {
				return append(append([]string{"run", "-c", p.Dir + "/nope.yaml"}, cycle...), "--device", "cpu")
			}, nil, "", 2, "nope.yaml"},
			badCase{exe, "--device unknown", func(_ *testing.T, p *project) []string { return args(p, "--device", "tpu") }, nil, "", 2, "--device"},
			badCase{exe, "no GPU (binary without CUDA)", func(_ *testing.T, p *project) []string { return args(p) }, nil, "", 2, "built without CUDA support"},
			badCase{exe, "flag unknown", func(_ *testing.T, p *project) []string { return args(p, "--frobnicate") }, nil, "", 2, "frobnicate"},
		)
	}
	// The fused cycle on the stitch stage's input, and its own budget key.
	cycleRun := func(p *project, extra ...string) []string {
		return append([]string{"run", "-c", p.Cfg, "--cycle", "1", "--device", "cpu", "--workers", "2"}, extra...)
	}
	cases = append(cases,
		badCase{"cycle", "tile missing", func(t *testing.T, p *project) []string {
			os.Remove(p.tile(4, 1, 2))
			return cycleRun(p)
		}, nil, "", 2, "1_00004_Z001_CH2.tif"},
		badCase{"cycle", "tile truncated", func(t *testing.T, p *project) []string {
			os.Truncate(p.tile(2, 1, 2), 300)
			return cycleRun(p)
		}, nil, "", 2, "1_00002_Z001_CH2.tif"},
		badCase{"cycle", "memory budget below the three stages' need", func(_ *testing.T, p *project) []string {
			return cycleRun(p, "--mem-budget", "20")
		}, nil, "", 2, "resources.mem_cycle"},
	)
	return append(cases, hostile()...)
}

// classicTIFF is one uncompressed grayscale strip, built byte by byte in the
// given byte order (ImageJ's layout for big-endian: no Compression tag).
func classicTIFF(bo binary.ByteOrder, w, h, bps int, px []byte) []byte {
	var b bytes.Buffer
	if bo == binary.BigEndian {
		b.WriteString("MM")
	} else {
		b.WriteString("II")
	}
	binary.Write(&b, bo, uint16(42))
	binary.Write(&b, bo, uint32(8))
	type ent struct {
		tag, typ uint16
		val      uint32
	}
	ents := []ent{{256, 4, uint32(w)}, {257, 4, uint32(h)}, {258, 3, uint32(bps)}, {262, 3, 1},
		{273, 4, 0}, {277, 3, 1}, {278, 4, uint32(h)}, {279, 4, uint32(len(px))}}
	ents[4].val = uint32(8 + 2 + 12*len(ents) + 4)
	binary.Write(&b, bo, uint16(len(ents)))
	for _, e := range ents {
		binary.Write(&b, bo, e.tag)
		binary.Write(&b, bo, e.typ)
		binary.Write(&b, bo, uint32(1))
		if e.typ == 3 {
			binary.Write(&b, bo, uint16(e.val))
			binary.Write(&b, bo, uint16(0))
		} else {
			binary.Write(&b, bo, e.val)
		}
	}
	binary.Write(&b, bo, uint32(0))
	b.Write(px)
	return b.Bytes()
}

// bigTIFF is one uncompressed little-endian uint16 strip in BigTIFF form.
func bigTIFF(w, h int, px []byte) []byte {
	le := binary.LittleEndian
	var b bytes.Buffer
	b.WriteString("II")
	binary.Write(&b, le, uint16(43))
	binary.Write(&b, le, uint16(8))
	binary.Write(&b, le, uint16(0))
	binary.Write(&b, le, uint64(16))
	type ent struct {
		tag, typ uint16
		val      uint64
	}
	ents := []ent{{256, 4, uint64(w)}, {257, 4, uint64(h)}, {258, 3, 16}, {259, 3, 1}, {262, 3, 1},
		{273, 16, 0}, {277, 3, 1}, {278, 4, uint64(h)}, {279, 16, uint64(len(px))}}
	ents[5].val = uint64(16 + 8 + 20*len(ents) + 8)
	binary.Write(&b, le, uint64(len(ents)))
	for _, e := range ents {
		binary.Write(&b, le, e.tag)
		binary.Write(&b, le, e.typ)
		binary.Write(&b, le, uint64(1))
		binary.Write(&b, le, e.val) // left-justified little-endian: the value's low bytes come first
	}
	binary.Write(&b, le, uint64(0))
	b.Write(px)
	return b.Bytes()
}

// leftovers lists what a run left in the output's parent besides want.
func leftovers(t *testing.T, p *project, code int) []string {
	parent := filepath.Dir(p.Out)
	ents, err := os.ReadDir(parent)
	if err != nil {
		return nil // no output directory at all
	}
	var left []string
	for _, e := range ents {
		if code == 0 && e.Name() == filepath.Base(p.Out) {
			continue
		}
		left = append(left, e.Name())
	}
	return left
}

// TestBadInputs runs the catalogue.
func TestBadInputs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every executable")
	}
	root := t.TempDir()
	bins := map[string]string{}
	for _, w := range []string{"stitch", "decon", "edf", "register", "cycle"} {
		if _, err := os.Stat(filepath.Join("..", "..", "wrappers", w, "main.go")); err != nil {
			continue // a stage not written yet
		}
		bins[w] = exectest.Build(t, "kintsugi-"+w, "../../wrappers/"+w)
	}
	tmpl := filepath.Join(root, "template")
	o := synthtest.Tiny(t)
	o.OutDir, o.NCycles, o.NZ = tmpl, 1, 1
	synthtest.Generate(t, o)
	cases := catalogue()
	var table strings.Builder
	table.WriteString("| executable | bad input | exit | message names |\n|---|---|---|---|\n")
	for i, tc := range cases {
		show := "`" + tc.want + "`"
		if tc.code == 4 {
			show = "`pid <holder's pid>`, its SLURM job, host and lock file"
		}
		fmt.Fprintf(&table, "| kintsugi-%s | %s | %d | %s |\n", tc.exe, tc.kind, tc.code, show)
		bin, ok := bins[tc.exe]
		if !ok {
			continue
		}
		t.Run(tc.exe+"/"+tc.kind, func(t *testing.T) {
			dir := filepath.Join(root, fmt.Sprintf("p%02d", i))
			if out, err := exec.Command("cp", "-a", tmpl, dir).CombinedOutput(); err != nil {
				t.Fatalf("cp: %v %s", err, out)
			}
			p := &project{Dir: dir, Cfg: filepath.Join(dir, "config.yaml"), Raw: filepath.Join(dir, "data", "raw", "cyc01"),
				Out: layout.Stitched(dir, 1)}
			p.editConfig(t, "project_dir: "+tmpl, "project_dir: "+dir)
			args := tc.setup(t, p)
			// A run that hangs (a FIFO opened for reading, an endless file)
			// is killed and fails the case.
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, args...)
			if tc.shell != "" {
				cmd = exec.CommandContext(ctx, "sh", "-c", tc.shell+` exec "$0" "$@"`, bin)
				cmd.Args = append(cmd.Args, args...)
			}
			cmd.Env = exectest.Env(append([]string{"KINTSUGI_LOG_FORMAT=text"}, tc.env...)...)
			msg, code := exectest.Output(t, cmd)
			if err := exectest.Check(msg, code, tc.code, tc.want); err != nil {
				t.Error(err)
			}
			if ctx.Err() != nil {
				t.Errorf("hung: killed after 90 s")
			}
			if bytes.Contains(msg, []byte("panic:")) || bytes.Contains(msg, []byte("goroutine ")) {
				t.Errorf("panicked:\n%s", msg)
			}
			if after := hostileAfter[tc.exe+"/"+tc.kind]; after != nil {
				after(t, p)
			}
			if p.release != nil {
				p.release()
			}
			if tc.exe == "cycle" { // the three stages' outputs: none of them, nor a staging directory or lock
				for _, out := range []string{p.Out, layout.Deconvolved(p.Dir, 1), layout.EDFOut(p.Dir, 1)} {
					q := *p
					q.Out = out
					if left := leftovers(t, &q, tc.code); len(left) > 0 {
						t.Errorf("left in %s: %v", filepath.Dir(out), left)
					}
				}
				return
			}
			if tc.exe != "stitch" {
				return
			}
			if left := leftovers(t, p, tc.code); len(left) > 0 && tc.kind != "output directory not writable (a file in its place)" && tc.kind != "output path holds a regular file (was replaced)" {
				t.Errorf("left in %s: %v", filepath.Dir(p.Out), left)
			}
			if tc.code == 0 {
				if _, err := os.Stat(layout.Sentinel(p.Out)); err != nil {
					t.Errorf("accepted input: no sentinel: %v", err)
				}
			}
		})
	}
	if *markdown {
		fmt.Print(table.String())
	}
}
