// Package synth writes a synthetic CODEX project with known ground truth, so
// that every stage (BaSiC, alignment, blending, later deconvolution, EDF and
// registration) can be scored against the answer.
//
// # What is written
//
//	<out>/data/raw/cycNN/1_{tile:05d}_Z{z:03d}_CH{c}.tif   uint16 counts, tile 1-based, snake order
//	<out>/ground_truth/truth.json                         schema below (Truth)
//	<out>/ground_truth/flatfield_CH{c}.tif                float32, mean 1, tile size (H, W)
//	<out>/ground_truth/darkfield_CH{c}.tif                float32 counts, tile size (H, W)
//	<out>/ground_truth/cycNN/tile_positions.csv           tile,row,col,y_pos,x_pos (true, min 0)
//	<out>/ground_truth/cycNN/scene_CH{c}_Z{z:02d}.tif     float32 counts, mosaic size, true scene at the reference z
//	<out>/ground_truth/cycNN/scene_CH{c}_focus.tif        float32 counts, mosaic size, all in focus (optional)
//	<out>/config.yaml                                     project config (WriteConfig)
//
// # Model
//
// Units: positions and lengths in pixels (px) unless a name says nm; z in
// plane indices; intensities in detector counts. Planes are (y, x), row-major,
// x fastest (raster conventions).
//
// The scene is a continuous function of scene coordinates (y, x) in px: a
// smooth background (off-tissue level plus tissue autofluorescence times a
// tissue mask) plus a list of elliptical Gaussian blobs (nuclei with
// chromocentres in channel 1, membrane rings or cytoplasm blobs of marker
// channels, faint autofluorescence texture in every channel). Every blob has
// its own focal plane zf(y, x) taken from a smooth focus surface (tilt plus a
// broad bump); in plane z it is blurred by a Gaussian of variance
// psf² + (blur·(z − zf))² (integral kept), which is exact for Gaussian blobs, so
// tiles are rendered analytically at their sub-pixel positions with no
// resampling. The background is smooth on scales far beyond the blur and is
// not blurred.
//
// Tile t of cycle k has position p = nominal grid position + stage jitter,
// shifted so that the minimum over the cycle's tiles is 0 (mosaic
// coordinates, px, of the tile's pixel (0, 0)). With the cycle shift
// s = (dy, dx) (zero for cycle 1), tile pixel (i, j) shows the scene at
// (p.Y + i − dy, p.X + j − dx): the content of cycle k appears moved by
// (+dy, +dx) in its own mosaic relative to cycle 1. The truth scene of cycle k
// holds scene(m − s) at every integer mosaic pixel m, over
// (round(max p.Y) + H, round(max p.X) + W), the blender's mosaic size.
//
// Raw counts = clip(round(scene·flat + dark + noise), 0, 65535), with
// flat and dark per channel (the same for all cycles and planes) and noise
// Gaussian with variance gain·max(scene·flat, 0) + read² (shot plus read
// noise).
//
// # Determinism and cost
//
// Every random quantity comes from its own PCG stream keyed by (seed, purpose,
// cycle, channel, tile, z), so a seed gives identical files whatever the
// worker count or the subset of channels and cycles generated. Work runs per
// (cycle, channel) in parallel over tiles; memory is a few tile-sized buffers
// per worker plus the blob lists, and one mosaic-sized float32 plane while a
// truth scene is written.
package synth
