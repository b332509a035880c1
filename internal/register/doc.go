// Package register aligns the cycles of a multiplex image to a reference
// cycle: a rigid transform (rotation, translation, optional uniform scale)
// found on downsampled DAPI images, then a smooth, fold-free displacement
// field, applied at full resolution to every channel.
//
// # Conventions
//
// Images are planes (y, x), row-major, x fastest (raster). Coordinates are
// full-resolution pixels, (y, x), +y down, pixel (i, j) centred at (i, j).
// Intensities are detector counts (uint16 on input and output, float32 in
// downsampled levels). Angles are radians in the API and degrees in JSON.
//
// A Mapping takes a point p of the fixed (reference) image to the point
// q = Rigid(p + D(p)) of the moving image that shows the same tissue, where
// D is the displacement field (full-resolution px, zero without non-rigid)
// and Rigid(p) = c + s·R(θ)·(p − c) + t about the image centre c. The
// registered image is moving(Mapping(p)) sampled bilinearly, 0 outside the
// moving image.
//
// A level of factor k is the k x k box average of the full image, size
// floor(H/k) x floor(W/k); level pixel (i, j) is centred at full-resolution
// (k·i + (k−1)/2, k·j + (k−1)/2).
//
// # Pipeline (Register)
//
//  1. Coarse: at a level of at most CoarseDim px, phase correlation of the
//     whole fixed image with the moving image rotated by each angle of a
//     grid (±MaxAngleDeg); the best PCM peak gives angle and translation.
//  2. Rigid refinement at the rigid working level (at most max_image_dim
//     px): phase correlation of blocks of the fixed image with the moving
//     image sampled through the current transform, sub-pixel peaks
//     (align.QuadPeak), a robust least-squares fit of a small rigid update,
//     composed with the transform; repeated until the update is negligible.
//     Near convergence the measured shifts are close to 0, where the peak
//     fit is unbiased.
//  3. Non-rigid at the non-rigid working level (at most non_rigid.max_dim
//     px): overlapping blocks, same measurement through the current
//     mapping, outliers rejected (peak height, texture, vector median of the
//     neighbours), gaps filled and the field smoothed by a normalised
//     Gaussian convolution (sigma = sigma_ratio x the working level's long
//     side, the original's rule), added to the field; repeated. The field's
//     Jacobian determinant is checked on every grid cell and enforced to
//     stay above MinJacobian by extra smoothing (then scaling).
//  4. Metrics: NCC of the fixed and warped moving DAPI at the non-rigid
//     working level before registration, after the rigid step and after the
//     non-rigid step. A field that lowers the NCC below the rigid one is
//     dropped (reported); the caller refuses a cycle whose final NCC is
//     below the NCC before registration.
//
// The heavy steps (box downsampling, block phase correlation, the
// full-resolution warp) are behind Backend, with a CPU reference here and a
// CUDA implementation in internal/gpu, both held to registertest.Run.
package register
