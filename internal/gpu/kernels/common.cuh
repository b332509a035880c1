// Shared device helpers for the kernels of internal/gpu. Compiled into each
// module by `make ptx` (nvcc -ptx -arch=compute_75 -fmad=false).
//
// -fmad=false: no contraction of a*b+c into FMA, so float/double expressions
// round exactly as the Go CPU reference (amd64 Go does not fuse either); the
// resize and the correction then give bit-identical results.
#pragma once

typedef long long i64;

// Grid-stride loop over [0, n).
#define GRID_STRIDE(i, n) \
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (i64)blockDim.x * gridDim.x)

__device__ __forceinline__ double warp_sum(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}

// block_sum returns the sum of v over the block to every thread (fixed
// reduction order: deterministic). scratch holds at least 32 doubles.
__device__ double block_sum(double v, double* scratch)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int nw = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0)
        scratch[warp] = v;
    __syncthreads();
    if (warp == 0) {
        double s = lane < nw ? scratch[lane] : 0.0;
        s = warp_sum(s);
        if (lane == 0)
            scratch[0] = s;
    }
    __syncthreads();
    double r = scratch[0];
    __syncthreads();
    return r;
}

__device__ double block_min(double v, double* scratch)
{
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int nw = (blockDim.x + 31) >> 5;
    for (int o = 16; o > 0; o >>= 1)
        v = fmin(v, __shfl_down_sync(0xffffffffu, v, o));
    __syncthreads();
    if (lane == 0)
        scratch[warp] = v;
    __syncthreads();
    if (warp == 0) {
        double s = lane < nw ? scratch[lane] : 1.0 / 0.0;
        for (int o = 16; o > 0; o >>= 1)
            s = fmin(s, __shfl_down_sync(0xffffffffu, s, o));
        if (lane == 0)
            scratch[0] = s;
    }
    __syncthreads();
    double r = scratch[0];
    __syncthreads();
    return r;
}

// soft is the soft threshold of basic.softThreshold.
__device__ __forceinline__ double soft(double v, double t)
{
    if (v > t)
        return v - t;
    if (v < -t)
        return v + t;
    return 0.0;
}

// quantize16 is raster.Quantize16 for one value: round to nearest count,
// clip to [0, 65535], NaN to 0.
__device__ __forceinline__ unsigned short quantize16(float v)
{
    double c = (double)v * 65535.0 + 0.5;
    if (!(c > 0.0))
        return 0;
    if (c >= 65535.0)
        return 65535;
    return (unsigned short)c;
}
