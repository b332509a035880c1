package regstage

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
	"github.com/kintsugi-hpc/kintsugi-go/internal/layout"
	"github.com/kintsugi-hpc/kintsugi-go/internal/ometiff"
	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
	"github.com/kintsugi-hpc/kintsugi-go/internal/tiffio"
)

// OMEName is the project's pyramidal multi-channel OME-TIFF in registered/.
const OMEName = "registered.ome.tif"

// omeTileSize is the OME-TIFF's tile side, px.
const omeTileSize = 512

// coderMaxWorkers: with fewer workers than this the OME-TIFF's tiles are
// coded by the backend when it can (ometiff.Coder: the GPU), from this many
// on by the writer's own encoder on the CPU. Measured on the H200 with 13
// cycles x 4 channels (README): 4 cpus 27.1 s with the GPU coding, 34.5 s
// without; 16 cpus 21.9 s with, 17.3 s without (the compression spreads
// over the cores while the GPU's coding waits on its one engine thread and
// the copies through its staging buffers). Measured before the planes
// moved to page-locked memory; with them, 4 cpus (GPU coding) 15.0 s and
// 16 cpus (CPU encoder) 8.4 s; the threshold was not measured again.
const coderMaxWorkers = 8

// omeCoder is the coder of the OME-TIFF's tiles for backend be and
// workers goroutines (nil: the writer's own encoder).
func omeCoder(be any, workers int) ometiff.Coder {
	c, ok := be.(ometiff.Coder)
	if !ok || workers >= coderMaxWorkers {
		return nil
	}
	return c
}

// writeOME writes registered.ome.tif (internal/ometiff) and markers.csv
// beside it: every cycle x channel of files (registered image names by
// cycle) in the order of Markers (cycle by cycle, the config's channel
// order), each channel named by its marker, pixel size xy_pixel_size nm,
// 512 px tiles, the planes' w x h px. Channels are read back one at a time from the registered
// images in dir, each into a plane of pl, so memory stays at two planes plus the writer's tiles;
// when ready is not nil, each image is read once ready(path) returned nil
// (the OME-TIFF written while the registration writes them). A coder (the
// GPU's, found on the backend) codes the tiles Huffman-only; nil: the
// writer's own encoder on the CPU.
func writeOME(ctx context.Context, cfg *config.Config, dir string, files map[int][]string, pl planes, workers int, coder ometiff.Coder, lg *slog.Logger, ready func(path string) error) error {
	t0 := time.Now()
	w, h := pl.w, pl.h
	list := Markers(cfg, files)
	var chans []ometiff.Channel
	for _, m := range list {
		path := filepath.Join(dir, layout.CycleName(m.Cycle), m.File)
		chans = append(chans, ometiff.Channel{Name: m.Name, Load: func() (*raster.Gray16, error) {
			if ready != nil {
				if err := ready(path); err != nil {
					return nil, err
				}
			}
			dst, err := raster.NewPlane(ctx, pl.be, w, h)
			if err != nil {
				return nil, err
			}
			g, err := tiffio.ReadGray16Into(path, dst)
			if err == nil && g != dst {
				err = fmt.Errorf("%s is %dx%d, the OME-TIFF %dx%d", path, g.W, g.H, w, h)
			}
			if err != nil {
				pl.free(dst)
				return nil, err
			}
			return g, nil
		}, Release: pl.free})
	}
	if len(chans) == 0 {
		return nil
	}
	out := filepath.Join(dir, OMEName)
	if err := ometiff.Write(ctx, out, w, h, chans, ometiff.Options{PixelSizeNM: cfg.XYPixelSize, TileSize: omeTileSize, Workers: workers, Coder: coder}); err != nil {
		return err
	}
	if err := writeMarkers(filepath.Join(dir, MarkersName), list); err != nil {
		return err
	}
	if lg != nil {
		names := make([]string, len(list))
		for i, m := range list {
			names[i] = m.Name
		}
		by := "cpu encoder"
		if coder != nil {
			by = "backend coder"
		}
		lg.Info("OME-TIFF written", "path", OMEName, "markers", MarkersName, "tiles", by, "channels", strings.Join(names, ","),
			"seconds", fmt.Sprintf("%.1f", time.Since(t0).Seconds()))
	}
	return nil
}

func marker(file string) string {
	return strings.TrimSuffix(strings.TrimSuffix(file, ".tif"), ".tiff")
}
