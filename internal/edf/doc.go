// Package edf computes the extended-depth-of-field (EDF) plane of a z-stack:
// one in-focus image per channel, the input of registration.
//
// # Data conventions
//
// A stack is a list of planes in z order (index 0 = first deconvolved
// slice), each a raster.Gray16 of W x H detector counts, (y, x), row-major,
// x fastest. The output is a raster.Gray16 of the same size in counts; the
// index (height) map is one uint16 per pixel, (y, x), holding the 0-based
// index into the planes given of the slice each output pixel comes from.
//
// # Quality gate (the original's, quality_gate in config.yaml)
//
// A slice is excluded when more than MaxZeroFrac of its pixels are 0 or
// more than MaxSatFrac are >= SatLevel (64000 counts). When more than 4
// slices are valid, the first and the last valid slice are dropped as well
// (the original's z_start = 2, z_end = n - 1 on the valid slices). Fewer
// than MinValid valid slices fail the channel (ErrTooFewSlices; the stage
// reports it as bad input, exit 2, and writes nothing for the cycle).
//
// # Variance method (method: variance; the original's algorithm)
//
// For every used slice, on the whole plane (no tiles):
//
//	s   = gaussian(slice, Sigma)          separable, truncate 4.0, boundary reflect
//	var = mean_w(s^2) - mean_w(s)^2       box window (2*RadiusY+1) x (2*RadiusX+1), reflect
//	k   = argmax_z var                    first maximum on ties (numpy argmax)
//	k   = clip(round(gaussian(k, ZSmoothSigma)), 0, n-1)   if ZSmoothSigma > 0; round half to even
//	out = slice_k                         per pixel
//
// Arithmetic, defined once here and reproduced exactly by the CUDA engine
// (internal/gpu, kernels/edf.cu, compiled with -fmad=false): every Gaussian
// pass is scipy.ndimage.correlate1d's: float64 accumulation in the order
// centre, then the pairs (x[i-j] + x[i+j])·w[j] for j = R..1, the result
// rounded to float32; the y pass runs first, then the x pass (scipy's axis
// order), with a float32 intermediate. Weights are scipy's
// _gaussian_kernel1d: exp(-j²/(2σ²)) normalised to sum 1, radius
// R = int(4σ + 0.5). The variance is computed in float64 as the centred sum
// mean_w((s - mean_w(s))²) over the window in row-major order: the same
// quantity as the original's uniform(s²) - uniform(s)², without its float32
// cancellation (with counts up to 65535, s² ~ 4e9 and the original's
// float32 difference carries rounding noise of hundreds of counts² in flat
// regions). Reflect is scipy's 'reflect' (d c b a | a b c d | d c b a),
// applied repeatedly for planes smaller than the filter.
//
// Differences from the original, on purpose: the original splits the plane
// into 3 x 3 tiles processed independently (filters see the tile edges)
// and blends them with raised-cosine ramps whose first sample is 0, so its
// outermost image row and column come out 0. Here the plane is one image:
// the result equals the whole-plane computation exactly, with no seams and
// no zero border; tiles and blend_depth are accepted and ignored. Memory is
// bounded by processing horizontal strips with filter-sized halos (the
// Gaussian radius on the input, the variance radius on s, the smoothing
// radius on the index map); strips give bit-identical results to one
// whole-plane strip (tested).
//
// # Wavelet method (method: wavelet)
//
// See wavelet.go: a stationary (undecimated, à trous) B3-spline wavelet
// transform per slice, per-level selection of the coefficient with the
// largest magnitude across z, a 5 x 5 majority filter on every level's
// selection map (Forster et al. 2004's consistency check), synthesis of the
// selected detail coefficients plus the z-mean of the coarse residual. The
// CUDA engine runs it with the same arithmetic (height map exact).
//
// # Validation
//
// scipy_test.go holds index maps computed by scipy (the float64 form of the
// original's formula) and requires them exactly; the original's float32
// arithmetic agrees with them at 99.7 % of the pixels. edftest.Run holds
// every implementation to the CPU reference (exact index maps), to depth
// recovery on stacks with a known depth map (synth.MakeEDFStack), to the
// gate's rules, ties (first slice) and the border fix.
package edf
