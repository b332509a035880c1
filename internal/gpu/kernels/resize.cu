// Separable resize of basic/resize.go (skimage resize, order 1, symmetric
// boundary, Gaussian anti-aliasing when shrinking), as two sparse passes
// with the weights the host builds: rows first (along y), then columns.
// Sums run over the taps in the same order as the CPU code, in float64, so
// the results are bit-identical to basic.ResizeToWorking / ResizeProfile.
#include "common.cuh"

// Pass along y for a batch of images (blockIdx.z): tmp[z][i][x] =
// sum_k w[off[i]+k] * src[z][start[i]+k][x]. Grid (ceil(sw/256), dh, nimg).
template <typename T>
__device__ void resize_y(double* __restrict__ tmp, const T* __restrict__ src, int sw, int dh,
    const int* __restrict__ start, const int* __restrict__ cnt, const int* __restrict__ off,
    const double* __restrict__ w, float scale, i64 srcStride, i64 tmpStride)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y;
    if (x >= sw || i >= dh)
        return;
    const T* s = src + (i64)blockIdx.z * srcStride;
    int y0 = start[i], nk = cnt[i];
    const double* wk = w + off[i];
    double acc = 0.0;
    for (int k = 0; k < nk; k++) {
        T v = s[(i64)(y0 + k) * sw + x];
        double dv;
        if (sizeof(T) == 2)
            dv = (double)((float)v * scale); // raster.Normalize16, then float64
        else
            dv = (double)v;
        acc += wk[k] * dv;
    }
    tmp[(i64)blockIdx.z * tmpStride + (i64)i * sw + x] = acc;
}

extern "C" __global__ void resize_y_u16(double* tmp, const unsigned short* src, int sw, int dh,
    const int* start, const int* cnt, const int* off, const double* w, float scale, i64 srcStride, i64 tmpStride)
{
    resize_y<unsigned short>(tmp, src, sw, dh, start, cnt, off, w, scale, srcStride, tmpStride);
}

extern "C" __global__ void resize_y_f32(double* tmp, const float* src, int sw, int dh,
    const int* start, const int* cnt, const int* off, const double* w, float scale, i64 srcStride, i64 tmpStride)
{
    resize_y<float>(tmp, src, sw, dh, start, cnt, off, w, scale, srcStride, tmpStride);
}

extern "C" __global__ void resize_y_f64(double* tmp, const double* src, int sw, int dh,
    const int* start, const int* cnt, const int* off, const double* w, float scale, i64 srcStride, i64 tmpStride)
{
    resize_y<double>(tmp, src, sw, dh, start, cnt, off, w, scale, srcStride, tmpStride);
}

// Pass along x: dst[z][i][j] = sum_k w[off[j]+k] * tmp[z][i][start[j]+k].
// Grid (ceil(dw/256), dh, nimg).
template <typename O>
__device__ void resize_x(O* __restrict__ dst, const double* __restrict__ tmp, int sw, int dh, int dw,
    const int* __restrict__ start, const int* __restrict__ cnt, const int* __restrict__ off,
    const double* __restrict__ w, i64 tmpStride, i64 dstStride)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y;
    if (j >= dw || i >= dh)
        return;
    const double* t = tmp + (i64)blockIdx.z * tmpStride + (i64)i * sw + start[j];
    const double* wk = w + off[j];
    int nk = cnt[j];
    double acc = 0.0;
    for (int k = 0; k < nk; k++)
        acc += wk[k] * t[k];
    dst[(i64)blockIdx.z * dstStride + (i64)i * dw + j] = (O)acc;
}

extern "C" __global__ void resize_x_f64(double* dst, const double* tmp, int sw, int dh, int dw,
    const int* start, const int* cnt, const int* off, const double* w, i64 tmpStride, i64 dstStride)
{
    resize_x<double>(dst, tmp, sw, dh, dw, start, cnt, off, w, tmpStride, dstStride);
}

extern "C" __global__ void resize_x_f32(float* dst, const double* tmp, int sw, int dh, int dw,
    const int* start, const int* cnt, const int* off, const double* w, i64 tmpStride, i64 dstStride)
{
    resize_x<float>(dst, tmp, sw, dh, dw, start, cnt, off, w, tmpStride, dstStride);
}
