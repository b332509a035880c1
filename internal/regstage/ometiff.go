package regstage

import (
	"context"
	"log/slog"

	"github.com/kintsugi-hpc/kintsugi-go/internal/config"
)

// writeOME writes registered.ome.tif, the pyramidal multi-channel
// OME-TIFF of every cycle x channel.
//
// TODO(ometiff): internal/ometiff (another helper's pyramidal OME-TIFF
// writer, ometiff.Write(ctx, path, width, height, channels, options)) does
// not exist yet; call it here once it does, with one ometiff.Channel per
// res.Cycles[i].Files[j] named by its marker (the file name without .tif),
// Load reading dir/cycNN/<file>, PixelSizeNM = 1000·cfg.XYPixelSize (µm),
// TileSize 512, Workers workers. Until then no OME-TIFF is written and the
// stage logs so.
func writeOME(_ context.Context, cfg *config.Config, dir string, res *Result, workers int, lg *slog.Logger) error {
	_, _, _, _ = cfg, dir, res, workers
	if lg != nil {
		lg.Warn("registered.ome.tif not written: internal/ometiff is not available in this build (TODO)")
	}
	return nil
}
