package project

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"

	"github.com/kintsugi-hpc/kintsugi-go/internal/dataset"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
)

// RawCycle is one raw cycle directory: the one the stitch stage will read
// for that cycle number (dataset.ResolveCycleDir), with what its file names
// say (no image is opened).
type RawCycle struct {
	Number   int
	Dir      string // relative to the project directory, e.g. data/raw/cyc001_reg001_20250101
	Tiles    int    // distinct tile numbers
	Z        []int  // z-plane numbers, ascending
	Channels []int  // channel numbers, ascending
	Regions  []int
	Files    int // tile files
}

// rawDirName matches the original's cycle directory names: cyc001_*,
// cyc01_*, Cyc01_*, cyc001, cyc01, Cyc01 (and Cyc001, which the original's
// stitch does not find: reported, not used).
var rawDirName = regexp.MustCompile(`^[cC]yc(\d{2,3})(?:_.*)?$`)

// ScanRaw lists the raw cycle directories under <project>/data/raw, in cycle
// order, and what it ignored (with why). No data/raw is not an error (nil
// cycles).
func ScanRaw(project string) (cycles []RawCycle, ignored []string, err error) {
	raw := layout.RawDir(project)
	ents, err := os.ReadDir(raw)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", raw, err)
	}
	seen := map[int]bool{}
	for _, e := range ents {
		m := rawDirName.FindStringSubmatch(e.Name())
		if m == nil || !e.IsDir() {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		if n < 1 {
			ignored = append(ignored, e.Name()+": cycle 0")
			continue
		}
		dir, rerr := dataset.ResolveCycleDir(project, n)
		if rerr != nil {
			ignored = append(ignored, fmt.Sprintf("%s: the stitch stage does not look for this name for cycle %d", e.Name(), n))
			continue
		}
		if filepath.Base(dir) != e.Name() {
			ignored = append(ignored, fmt.Sprintf("%s: cycle %d is read from %s", e.Name(), n, filepath.Base(dir)))
			continue
		}
		if seen[n] {
			continue
		}
		seen[n] = true
		c, err := scanCycle(project, dir, n)
		if err != nil {
			return nil, nil, err
		}
		cycles = append(cycles, c)
	}
	sort.Slice(cycles, func(i, j int) bool { return cycles[i].Number < cycles[j].Number })
	return cycles, ignored, nil
}

func scanCycle(project, dir string, n int) (RawCycle, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return RawCycle{}, fmt.Errorf("cycle %d: read %s: %w", n, dir, err)
	}
	rel, err := filepath.Rel(project, dir)
	if err != nil {
		rel = dir
	}
	c := RawCycle{Number: n, Dir: rel}
	tiles, zs, chs, regions := map[int]bool{}, map[int]bool{}, map[int]bool{}, map[int]bool{}
	for _, e := range ents {
		region, tile, z, ch, ok := dataset.ParseTileName(e.Name())
		if !ok || e.IsDir() {
			continue
		}
		c.Files++
		tiles[tile], zs[z], chs[ch], regions[region] = true, true, true, true
	}
	c.Tiles, c.Z, c.Channels, c.Regions = len(tiles), slices.Sorted(maps.Keys(zs)), slices.Sorted(maps.Keys(chs)), slices.Sorted(maps.Keys(regions))
	return c, nil
}
