package stitch

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/kintsugi-hpc/kintsugi-go/internal/atomicfile"
	"github.com/kintsugi-hpc/kintsugi-go/internal/dataset"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

func mkdirFor(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o777); err != nil {
		return fmt.Errorf("output directory %s: %w", filepath.Dir(path), err)
	}
	return nil
}

func writeGray16(path string, img *raster.Gray16) error {
	if err := mkdirFor(path); err != nil {
		return err
	}
	return tiffio.WriteGray16(path, img)
}

func writeFloat32(path string, img *raster.Float32) error {
	if err := mkdirFor(path); err != nil {
		return err
	}
	return tiffio.WriteFloat32(path, img)
}

func writeText(path, text string) error {
	return atomicfile.WriteBytes(path, []byte(text), 0o666)
}

// writePositions writes tile_positions.csv: tile (1-based, acquisition
// order), grid row and col, and the position (y_pos, x_pos) in px of the
// tile's pixel (0,0) in the mosaic (the original's result_df columns).
func writePositions(path string, cyc *dataset.Cycle, pos []raster.Point) error {
	var b bytes.Buffer
	b.WriteString("tile,row,col,y_pos,x_pos\n")
	for k, p := range pos {
		r, c := dataset.Grid(k, cyc.Cols)
		fmt.Fprintf(&b, "%d,%d,%d,%.3f,%.3f\n", k+1, r, c, p.Y, p.X)
	}
	return writeText(path, b.String())
}
