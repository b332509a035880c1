package regstage

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/ometiff"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// OMEName is the project's pyramidal multi-channel OME-TIFF in registered/.
const OMEName = "registered.ome.tif"

// omeTileSize is the OME-TIFF's tile side, px.
const omeTileSize = 512

// writeOME writes registered.ome.tif (internal/ometiff): every cycle x
// channel, in cycle order and each cycle's file order, as a channel named
// by its marker (the file name without .tif; " cycNN" is appended to a
// marker that occurs in several cycles, e.g. Blank), pixel size
// xy_pixel_size nm, 512 px tiles. Channels are read back one at a time
// from the registered images already written, so memory stays at one plane
// plus the writer's tiles.
func writeOME(ctx context.Context, cfg *config.Config, dir string, res *Result, workers int, lg *slog.Logger) error {
	t0 := time.Now()
	count := map[string]int{}
	for _, c := range res.Cycles {
		for _, f := range c.Files {
			count[marker(f)]++
		}
	}
	var chans []ometiff.Channel
	w, h := 0, 0
	for _, c := range res.Cycles {
		for _, f := range c.Files {
			name := marker(f)
			if count[name] > 1 {
				name += " " + config.CycleName(c.Cycle)
			}
			path := filepath.Join(dir, config.CycleName(c.Cycle), f)
			if w == 0 {
				info, err := tiffio.ReadInfo(path)
				if err != nil {
					return err
				}
				w, h = info.Width, info.Height
			}
			chans = append(chans, ometiff.Channel{Name: name, Load: func() (*raster.Gray16, error) {
				g, err := tiffio.ReadGray16(path)
				if err != nil {
					return nil, err
				}
				if g.W != w || g.H != h {
					return nil, fmt.Errorf("%s is %dx%d, the OME-TIFF %dx%d", path, g.W, g.H, w, h)
				}
				return g, nil
			}})
		}
	}
	if len(chans) == 0 {
		return nil
	}
	out := filepath.Join(dir, OMEName)
	if err := ometiff.Write(ctx, out, w, h, chans, ometiff.Options{PixelSizeNM: cfg.XYPixelSize, TileSize: omeTileSize, Workers: workers}); err != nil {
		return err
	}
	if lg != nil {
		lg.Info("OME-TIFF written", "path", OMEName, "channels", len(chans), "seconds", fmt.Sprintf("%.1f", time.Since(t0).Seconds()))
	}
	return nil
}

func marker(file string) string {
	return strings.TrimSuffix(strings.TrimSuffix(file, ".tif"), ".tiff")
}
