// Package dataset finds and checks one cycle of a raw CODEX/PhenoCycler
// project: the cycle directory (the original's name variants), the tile files
// `{region}_{tile:05d}_Z{z:03d}_CH{c}.tif`, the z-planes and channels, and the
// snake (serpentine) acquisition order of the tile grid. It refuses anything
// the stitch stage could not process completely (missing, extra or duplicated
// tiles, tiles of different sizes, non-16-bit data, no z-planes) before any
// output is written, with errors that name the file.
//
// Tiles are numbered 1..rows*cols in acquisition order; Grid maps a tile to its
// (row, col). Z-planes are the 1-based numbers found in the file names.
package dataset

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/par"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// ErrInput marks errors caused by the input data (as opposed to I/O failures
// of a valid dataset); callers map it to the usage exit code.
var ErrInput = errors.New("bad input")

func inputErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInput, fmt.Sprintf(format, args...))
}

// ResolveCycleDir finds the raw directory of cycle n under <project>/data/raw,
// trying the original's variants in order (layout.ResolveRawCycleDir):
// cyc{n:03d}_*, cyc{n:02d}_*, Cyc{n:02d}_* (first sorted match), then exactly
// cyc{n:03d}, cyc{n:02d}, Cyc{n:02d}.
func ResolveCycleDir(project string, n int) (string, error) {
	if d, ok := layout.ResolveRawCycleDir(project, n); ok {
		return d, nil
	}
	return "", inputErr("cycle %d: no raw directory under %s (tried %s)",
		n, layout.RawDir(project), strings.Join(append(layout.RawCycleGlobs(n), layout.RawCycleNames(n)...), ", "))
}

// tileName matches raw tile files; z may have 2 or 3 digits (the original
// globs _Z{z:03d}_ with a _Z{z:02d}_ fallback).
var tileName = regexp.MustCompile(`^(\d+)_(\d+)_Z(\d+)_CH(\d+)\.tiff?$`)

// ParseTileName reads the region, tile, z-plane and channel numbers of a raw
// tile file name ({region}_{tile:05d}_Z{z:03d}_CH{c}.tif, z of 2 or 3
// digits); ok is false for any other name.
func ParseTileName(name string) (region, tile, z, ch int, ok bool) {
	m := tileName.FindStringSubmatch(name)
	if m == nil {
		return 0, 0, 0, 0, false
	}
	n := [4]int{}
	for i := range n {
		v, err := strconv.Atoi(m[i+1])
		if err != nil {
			return 0, 0, 0, 0, false // more digits than an int holds
		}
		n[i] = v
	}
	return n[0], n[1], n[2], n[3], true
}

// Cycle is one discovered and checked raw cycle.
type Cycle struct {
	Number     int
	Dir        string
	Region     int
	Rows, Cols int
	W, H       int   // tile size, px
	Z          []int // z-plane numbers, ascending (1-based, from the file names)
	Channels   []int
	files      map[key]string
}

type key struct{ tile, z, ch int }

// Tiles is the number of tiles (rows*cols).
func (c *Cycle) Tiles() int { return c.Rows * c.Cols }

// Path returns the file of tile (1-based), z-plane and channel.
func (c *Cycle) Path(tile, z, ch int) string { return c.files[key{tile, z, ch}] }

// Grid returns the (row, col) of tile k (0-based index in acquisition order)
// in snake order: even rows left to right, odd rows right to left.
func Grid(k, cols int) (row, col int) {
	row, col = k/cols, k%cols
	if row%2 == 1 {
		col = cols - 1 - col
	}
	return row, col
}

// Options say what to expect.
type Options struct {
	Rows, Cols int
	Channels   []int
	NZPlanes   int // 0: accept what is found; otherwise it must match
	Workers    int // parallel header reads
}

// Discover finds cycle n of project and checks every tile file's presence,
// uniqueness, size and pixel format (headers only).
func Discover(ctx context.Context, project string, n int, o Options) (*Cycle, error) {
	dir, err := ResolveCycleDir(project, n)
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("cycle %d: read %s: %w", n, dir, err)
	}
	c := &Cycle{Number: n, Dir: dir, Rows: o.Rows, Cols: o.Cols, Channels: append([]int(nil), o.Channels...), files: map[key]string{}}
	want := map[int]bool{}
	for _, ch := range o.Channels {
		want[ch] = true
	}
	regions := map[int]bool{}
	zs := map[int]bool{}
	var extra []string
	for _, e := range ents {
		region, tile, z, ch, ok := ParseTileName(e.Name())
		if !ok || e.IsDir() {
			continue
		}
		if !want[ch] {
			continue // a channel this run does not process
		}
		regions[region] = true
		if tile < 1 || tile > c.Tiles() {
			extra = append(extra, e.Name())
			continue
		}
		k := key{tile, z, ch}
		p := filepath.Join(dir, e.Name())
		if prev, dup := c.files[k]; dup {
			return nil, inputErr("cycle %d: duplicated tile %d z %d CH%d: %s and %s", n, tile, z, ch, prev, p)
		}
		c.files[k] = p
		zs[z] = true
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		return nil, inputErr("cycle %d: %d extra tile file(s) beyond the %dx%d grid in %s: %s", n, len(extra), o.Rows, o.Cols, dir, list(extra))
	}
	if len(regions) > 1 {
		return nil, inputErr("cycle %d: tiles of several regions in %s (%v); one region per cycle directory", n, dir, slices.Sorted(maps.Keys(regions)))
	}
	for r := range regions {
		c.Region = r
	}
	if len(zs) == 0 {
		return nil, inputErr("cycle %d: no z-planes: no files named like 1_00001_Z001_CH%d.tif in %s", n, o.Channels[0], dir)
	}
	c.Z = slices.Sorted(maps.Keys(zs))
	if err := c.checkZ(o.NZPlanes); err != nil {
		return nil, err
	}
	if o.NZPlanes > 0 && len(c.Z) != o.NZPlanes {
		return nil, inputErr("cycle %d: found %d z-planes %v in %s, config n_zplanes is %d", n, len(c.Z), c.Z, dir, o.NZPlanes)
	}
	var missing []string
	for _, ch := range o.Channels {
		for z := 1; z <= len(c.Z); z++ { // checkZ: every plane is in 1..len(c.Z), so a gap is missing files
			for t := 1; t <= c.Tiles(); t++ {
				if _, ok := c.files[key{t, z, ch}]; !ok {
					missing = append(missing, fmt.Sprintf("%d_%05d_Z%03d_CH%d.tif", c.Region, t, z, ch))
				}
			}
		}
	}
	if len(missing) > 0 {
		return nil, inputErr("cycle %d: %d missing tile file(s) in %s: %s", n, len(missing), dir, list(missing))
	}
	if err := c.checkHeaders(ctx, o.Workers); err != nil {
		return nil, err
	}
	return c, nil
}

// checkZ requires the z-planes to be exactly Z001..Z<n> (n = nz, or the
// number of planes found when nz is 0): a plane numbered 0 or above n is an
// error naming its files (a gap below n then shows as missing files). The
// stitch stage writes planes 01..n, and decon reads exactly those.
func (c *Cycle) checkZ(nz int) error {
	n, what := nz, fmt.Sprintf("config n_zplanes is %d", nz)
	if nz <= 0 {
		n, what = len(c.Z), fmt.Sprintf("%d z-planes found, so Z001..Z%03d", len(c.Z), len(c.Z))
	}
	var bad []string
	for k, p := range c.files {
		if k.z < 1 || k.z > n {
			bad = append(bad, filepath.Base(p))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	sort.Strings(bad)
	return inputErr("cycle %d: z-planes must be exactly Z001..Z%03d (%s); found %v in %s: %d file(s) outside: %s",
		c.Number, n, what, c.Z, c.Dir, len(bad), list(bad))
}

// checkHeaders reads every file's header: same size, 16-bit unsigned, one
// sample per pixel.
func (c *Cycle) checkHeaders(ctx context.Context, workers int) error {
	paths := make([]string, 0, len(c.files))
	for _, p := range c.files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	infos := make([]tiffio.Info, len(paths))
	err := par.ForEach(ctx, len(paths), workers, func(i int) error {
		info, err := tiffio.ReadInfo(paths[i])
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInput, err)
		}
		if info.BitsPerSample != 16 || info.SampleFormat != 1 || info.SamplesPerPixel != 1 {
			return inputErr("%s: %d-bit, sample format %d, %d sample(s) per pixel: want 16-bit unsigned grayscale",
				paths[i], info.BitsPerSample, info.SampleFormat, info.SamplesPerPixel)
		}
		if info.Pages != 1 {
			return inputErr("%s: %d pages: a raw tile is one plane (one file per z-plane, _Z{z:03d}_ in the name)", paths[i], info.Pages)
		}
		infos[i] = info
		return nil
	})
	if err != nil {
		return err
	}
	c.W, c.H = infos[0].Width, infos[0].Height
	for i, info := range infos {
		if info.Width != c.W || info.Height != c.H {
			return inputErr("%s: %dx%d px, but %s is %dx%d: all tiles must have one size",
				paths[i], info.Width, info.Height, paths[0], c.W, c.H)
		}
	}
	return nil
}

// ReadPlane reads the raw tiles of (z, ch) in acquisition order (counts).
func (c *Cycle) ReadPlane(ctx context.Context, z, ch, workers int) ([]*raster.Gray16, error) {
	tiles := make([]*raster.Gray16, c.Tiles())
	if err := c.ReadPlaneInto(ctx, z, ch, workers, tiles); err != nil {
		return nil, err
	}
	return tiles, nil
}

// ReadPlaneInto is ReadPlane into tiles (len Tiles()): a tile that is a W x
// H plane is read into (every pixel overwritten, so its memory need not be
// zeroed), a nil one is replaced by a new plane.
func (c *Cycle) ReadPlaneInto(ctx context.Context, z, ch, workers int, tiles []*raster.Gray16) error {
	if len(tiles) != c.Tiles() {
		return fmt.Errorf("dataset: %d tile buffers for %d tiles", len(tiles), c.Tiles())
	}
	return par.ForEach(ctx, c.Tiles(), workers, func(i int) error {
		p := c.Path(i+1, z, ch)
		img, err := tiffio.ReadGray16Into(p, tiles[i])
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInput, err)
		}
		if img.W != c.W || img.H != c.H {
			return inputErr("%s: %dx%d px, want %dx%d", p, img.W, img.H, c.W, c.H)
		}
		tiles[i] = img
		return nil
	})
}

// list shows at most 10 names.
func list(names []string) string {
	if len(names) <= 10 {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:10], ", ") + fmt.Sprintf(", ... (%d more)", len(names)-10)
}
