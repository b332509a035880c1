// Correction and blending (internal/blend, basic.Transform, the stitch
// stage's correction): tiles are placed at integer positions and weighted
// by separable tapers w = ty[y]*tx[x] (blend.Taper); the mosaic pixel is
// sum(tile*w) / sum(w), 0 where no tile covers it, accumulated in float64 in
// tile order like blend.CPU (a gather: one thread per mosaic pixel,
// deterministic).
#include "common.cuh"

#define MAXT 1024 // tiles per launch

// correct returns clip((raw*scale - dark) / max(flat, flatMin), 0, 1) in
// float32, as raster.Normalize16 + basic.Transform + the stage's clip at 1.
__device__ __forceinline__ float correct(unsigned short raw, float scale, float flat, float dark, float flatMin)
{
    float v = (float)raw * scale;
    float r = (v - dark) / fmaxf(flat, flatMin);
    if (!(r > 0.0f))
        r = 0.0f;
    if (r > 1.0f)
        r = 1.0f;
    return r;
}

// Correction of a stack of raw tiles into float32 (n, H, W).
extern "C" __global__ void correct_u16(float* dst, const unsigned short* src, const float* flat, const float* dark,
    i64 plane, i64 n, float scale, float flatMin)
{
    GRID_STRIDE(k, n)
    {
        i64 p = k % plane;
        dst[k] = correct(src[k], scale, flat[p], dark[p], flatMin);
    }
}

// Float32 to counts (raster.Quantize16).
extern "C" __global__ void quantize_f32(unsigned short* dst, const float* src, i64 n)
{
    GRID_STRIDE(k, n)
    dst[k] = quantize16(src[k]);
}

// Counts to float32 intensities (raster.Normalize16).
extern "C" __global__ void normalize_u16(float* dst, const unsigned short* src, i64 n, float scale)
{
    GRID_STRIDE(k, n)
    dst[k] = (float)src[k] * scale;
}

// Block (32 x 8 mosaic pixels): the tiles that touch it, in tile order.
__device__ int block_tiles(int* list, int ntiles, int H, int W, const int* py, const int* px, int outH, int outW)
{
    __shared__ unsigned char hit[MAXT];
    __shared__ int cnt;
    int tid = threadIdx.y * blockDim.x + threadIdx.x, nthr = blockDim.x * blockDim.y;
    int bx0 = blockIdx.x * blockDim.x, by0 = blockIdx.y * blockDim.y;
    int bx1 = min(bx0 + (int)blockDim.x, outW), by1 = min(by0 + (int)blockDim.y, outH); // exclusive
    for (int t = tid; t < ntiles; t += nthr) {
        int y0 = py[t], x0 = px[t];
        hit[t] = (y0 < by1 && y0 + H > by0 && x0 < bx1 && x0 + W > bx0) ? 1 : 0;
    }
    __syncthreads();
    if (tid == 0) {
        int c = 0;
        for (int t = 0; t < ntiles; t++)
            if (hit[t])
                list[c++] = t;
        cnt = c;
    }
    __syncthreads();
    return cnt;
}

template <bool RAW>
__device__ void blend_body(float* outF, unsigned short* outU, const void* tiles, const float* flat, const float* dark,
    float scale, float flatMin, int ntiles, int H, int W, int outH, int outW, const int* py, const int* px,
    const double* ty, const double* tx)
{
    __shared__ int list[MAXT];
    int nc = block_tiles(list, ntiles, H, W, py, px, outH, outW);
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= outW || y >= outH)
        return;
    double acc = 0.0, ws = 0.0;
    i64 plane = (i64)H * W;
    for (int c = 0; c < nc; c++) {
        int t = list[c];
        int ly = y - py[t], lx = x - px[t];
        if (ly < 0 || ly >= H || lx < 0 || lx >= W)
            continue;
        i64 p = (i64)ly * W + lx;
        float v;
        if (RAW)
            v = correct(((const unsigned short*)tiles)[t * plane + p], scale, flat[p], dark[p], flatMin);
        else
            v = ((const float*)tiles)[t * plane + p];
        double w = ty[ly] * tx[lx];
        acc += w * (double)v;
        ws += w;
    }
    float r = ws > 0.0 ? (float)(acc / ws) : 0.0f;
    i64 o = (i64)y * outW + x;
    if (outF)
        outF[o] = r;
    if (outU)
        outU[o] = quantize16(r);
}

// Blend float32 tiles (n, H, W). Grid (ceil(outW/32), ceil(outH/8)), block (32, 8).
extern "C" __global__ void blend_f32(float* outF, unsigned short* outU, const float* tiles, int ntiles, int H, int W,
    int outH, int outW, const int* py, const int* px, const double* ty, const double* tx)
{
    blend_body<false>(outF, outU, tiles, 0, 0, 1.0f, 0.0f, ntiles, H, W, outH, outW, py, px, ty, tx);
}

// Correct raw tiles (n, H, W counts) with flat/dark and blend them.
extern "C" __global__ void correct_blend_u16(float* outF, unsigned short* outU, const unsigned short* tiles,
    const float* flat, const float* dark, float scale, float flatMin, int ntiles, int H, int W, int outH, int outW,
    const int* py, const int* px, const double* ty, const double* tx)
{
    blend_body<true>(outF, outU, tiles, flat, dark, scale, flatMin, ntiles, H, W, outH, outW, py, px, ty, tx);
}
