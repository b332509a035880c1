// Extended depth of field (internal/edf, variance method): quality-gate
// counts, the separable Gaussian (scipy correlate1d arithmetic: float64
// accumulation, centre then pairs j = R..1, float32 result; y pass, then x
// pass), the centred window variance in float64 with a running argmax over
// z, the index-map smoothing with round half to even, and the gather. The
// arithmetic is edf.GaussY / edf.GaussX / edf.WindowVar / edf.RoundIndex
// operation for operation (-fmad=false), so index maps equal the CPU's
// exactly. Planes are (y, x), x fastest; a stack is (z, y, x).
#include "common.cuh"

// reflect is edf.Reflect: scipy's 'reflect' boundary, repeated.
__device__ __forceinline__ int edf_reflect(int i, int n)
{
    if (i >= 0 && i < n)
        return i;
    int p = 2 * n;
    int m = i % p;
    if (m < 0)
        m += p;
    if (m >= n)
        m = p - 1 - m;
    return m;
}

__device__ __forceinline__ double edf_val(unsigned short v) { return (double)v; }
__device__ __forceinline__ double edf_val(float v) { return (double)v; }

// Gate counts of n planes: counts[2z] += zeros, counts[2z+1] += pixels >=
// sat. Grid (g, n), 256 threads.
template <typename T>
__device__ void gate(unsigned long long* counts, const T* stack, i64 plane, float sat)
{
    const T* s = stack + (i64)blockIdx.y * plane;
    unsigned long long z = 0, h = 0;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < plane; i += (i64)blockDim.x * gridDim.x) {
        float v = (float)s[i];
        z += (v == 0.0f);
        h += (v >= sat);
    }
    for (int o = 16; o > 0; o >>= 1) {
        z += __shfl_down_sync(0xffffffffu, z, o);
        h += __shfl_down_sync(0xffffffffu, h, o);
    }
    if ((threadIdx.x & 31) == 0) {
        atomicAdd(&counts[2 * blockIdx.y], z);
        atomicAdd(&counts[2 * blockIdx.y + 1], h);
    }
}

extern "C" __global__ void edf_gate_u16(unsigned long long* counts, const unsigned short* stack, i64 plane, float sat)
{
    gate<unsigned short>(counts, stack, plane, sat);
}

extern "C" __global__ void edf_gate_f32(unsigned long long* counts, const float* stack, i64 plane, float sat)
{
    gate<float>(counts, stack, plane, sat);
}

// Gaussian y pass: dst[y][x] = float32(src[y][x]·w0 + sum_{j=R..1}
// (src[y-j][x] + src[y+j][x])·w[j]). Grid (ceil(W/32), ceil(H/8)), block (32, 8).
template <typename T>
__device__ void gauss_y(float* __restrict__ dst, const T* __restrict__ src, int H, int W, const double* __restrict__ w, int R)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= W || y >= H)
        return;
    double acc = edf_val(src[(i64)y * W + x]) * w[0];
    for (int j = R; j >= 1; j--) {
        double a = edf_val(src[(i64)edf_reflect(y - j, H) * W + x]);
        double b = edf_val(src[(i64)edf_reflect(y + j, H) * W + x]);
        acc = acc + (a + b) * w[j];
    }
    dst[(i64)y * W + x] = (float)acc;
}

extern "C" __global__ void edf_gauss_y_u16(float* dst, const unsigned short* src, int H, int W, const double* w, int R)
{
    gauss_y<unsigned short>(dst, src, H, W, w, R);
}

extern "C" __global__ void edf_gauss_y_f32(float* dst, const float* src, int H, int W, const double* w, int R)
{
    gauss_y<float>(dst, src, H, W, w, R);
}

// Gaussian x pass on float32 planes. Grid (ceil(W/32), ceil(H/8)), block (32, 8).
extern "C" __global__ void edf_gauss_x(float* __restrict__ dst, const float* __restrict__ src, int H, int W,
    const double* __restrict__ w, int R)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= W || y >= H)
        return;
    const float* row = src + (i64)y * W;
    double acc = (double)row[x] * w[0];
    for (int j = R; j >= 1; j--) {
        double a = (double)row[edf_reflect(x - j, W)];
        double b = (double)row[edf_reflect(x + j, W)];
        acc = acc + (a + b) * w[j];
    }
    dst[(i64)y * W + x] = (float)acc;
}

// Window variance of s at every pixel (edf.WindowVar: centred, float64,
// row-major window order, reflect) and the running argmax over z: slice k
// replaces the best when its variance is strictly larger (first maximum
// wins); k == 0 starts from -inf. Grid (ceil(W/32), ceil(H/8)), block (32, 8).
extern "C" __global__ void edf_var_argmax(double* __restrict__ best, unsigned short* __restrict__ idx,
    const float* __restrict__ s, int H, int W, int ry, int rx, int k)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= W || y >= H)
        return;
    double n = (double)((2 * ry + 1) * (2 * rx + 1));
    double sum = 0.0;
    for (int dy = -ry; dy <= ry; dy++) {
        const float* row = s + (i64)edf_reflect(y + dy, H) * W;
        for (int dx = -rx; dx <= rx; dx++)
            sum = sum + (double)row[edf_reflect(x + dx, W)];
    }
    double m = sum / n;
    double acc = 0.0;
    for (int dy = -ry; dy <= ry; dy++) {
        const float* row = s + (i64)edf_reflect(y + dy, H) * W;
        for (int dx = -rx; dx <= rx; dx++) {
            double d = (double)row[edf_reflect(x + dx, W)] - m;
            acc = acc + d * d;
        }
    }
    double v = acc / n;
    i64 p = (i64)y * W + x;
    double b = k == 0 ? -1.0 / 0.0 : best[p];
    unsigned short id = k == 0 ? 0 : idx[p];
    if (v > b) {
        b = v;
        id = (unsigned short)k;
    }
    best[p] = b;
    idx[p] = id;
}

// Final index (edf.RoundIndex of the smoothed map f, or the raw index when
// f is null) mapped to the stack slice used[k], and the gather
// out[p] = stack[used[k]][p]. Grid-stride over the plane.
template <typename T>
__device__ void gather(T* __restrict__ out, unsigned short* __restrict__ outIdx, const float* __restrict__ f,
    const unsigned short* __restrict__ raw, const T* __restrict__ stack, const int* __restrict__ used, int n, i64 plane)
{
    GRID_STRIDE(p, plane)
    {
        int k;
        if (f) {
            double r = rint((double)f[p]);
            if (!(r > 0.0))
                k = 0;
            else if (r > (double)(n - 1))
                k = n - 1;
            else
                k = (int)r;
        } else {
            k = raw[p];
        }
        int z = used[k];
        out[p] = stack[(i64)z * plane + p];
        if (outIdx)
            outIdx[p] = (unsigned short)z;
    }
}

extern "C" __global__ void edf_gather_u16(unsigned short* out, unsigned short* outIdx, const float* f,
    const unsigned short* raw, const unsigned short* stack, const int* used, int n, i64 plane)
{
    gather<unsigned short>(out, outIdx, f, raw, stack, used, n, plane);
}

extern "C" __global__ void edf_gather_f32(float* out, unsigned short* outIdx, const float* f,
    const unsigned short* raw, const float* stack, const int* used, int n, i64 plane)
{
    gather<float>(out, outIdx, f, raw, stack, used, n, plane);
}
