package align

import (
	"context"

	"github.com/kintsugi-hpc/kintsugi-go/internal/raster"
)

// TranslateWhole measures pairs like CPU.Translate but correlates whole
// tiles, as the original does (used to check that cropping changes nothing).
func TranslateWhole(ctx context.Context, tiles []*raster.Float32, pairs []Pair, p Params, workers int) ([]Translation, error) {
	return translateAll(ctx, tiles, pairs, p, workers, false)
}
