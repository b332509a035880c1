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

// ---- Wavelet method (edf/wavelet.go): stationary B3-spline transform,
// per-level max-magnitude selection, 5 x 5 majority filter, synthesis.
// Same arithmetic as the CPU, operation for operation.

// Slice to float32. Grid-stride.
extern "C" __global__ void edf_wl_load_u16(float* dst, const unsigned short* src, i64 n)
{
    GRID_STRIDE(i, n)
    dst[i] = (float)src[i];
}

extern "C" __global__ void edf_wl_load_f32(float* dst, const float* src, i64 n)
{
    GRID_STRIDE(i, n)
    dst[i] = src[i];
}

#define B3_0 (6.0 / 16)
#define B3_1 (4.0 / 16)
#define B3_2 (1.0 / 16)

// Dilated B3 filter along y (taps at 0, ±step, ±2 step). Grid (ceil(W/32), ceil(H/8)), block (32, 8).
extern "C" __global__ void edf_wl_atrous_y(float* __restrict__ dst, const float* __restrict__ src, int H, int W, int step)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= W || y >= H)
        return;
    double c = (double)src[(i64)y * W + x];
    double u1 = (double)src[(i64)edf_reflect(y - step, H) * W + x], d1 = (double)src[(i64)edf_reflect(y + step, H) * W + x];
    double u2 = (double)src[(i64)edf_reflect(y - 2 * step, H) * W + x], d2 = (double)src[(i64)edf_reflect(y + 2 * step, H) * W + x];
    double acc = c * B3_0;
    acc = acc + (u2 + d2) * B3_2;
    acc = acc + (u1 + d1) * B3_1;
    dst[(i64)y * W + x] = (float)acc;
}

// Dilated B3 filter along x.
extern "C" __global__ void edf_wl_atrous_x(float* __restrict__ dst, const float* __restrict__ src, int H, int W, int step)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= W || y >= H)
        return;
    const float* r = src + (i64)y * W;
    double acc = (double)r[x] * B3_0;
    acc = acc + ((double)r[edf_reflect(x - 2 * step, W)] + (double)r[edf_reflect(x + 2 * step, W)]) * B3_2;
    acc = acc + ((double)r[edf_reflect(x - step, W)] + (double)r[edf_reflect(x + step, W)]) * B3_1;
    dst[(i64)y * W + x] = (float)acc;
}

// Level update for slice k: d = prev - next; the level's best |d| and
// selection (slice 0 initialises); the detail energy sum over levels
// (level 1 starts it at 0). Grid-stride.
extern "C" __global__ void edf_wl_select(float* bestAbs, unsigned short* sel, double* energy, const float* prev,
    const float* next, i64 n, int k, int level)
{
    GRID_STRIDE(i, n)
    {
        float d = prev[i] - next[i];
        float a = fabsf(d);
        if (k == 0 || a > bestAbs[i]) {
            bestAbs[i] = a;
            sel[i] = (unsigned short)k;
        }
        double e = level == 1 ? 0.0 : energy[i];
        energy[i] = e + (double)d * (double)d;
    }
}

// After slice k's transform: residual sum and the energy argmax.
extern "C" __global__ void edf_wl_low(double* low, double* bestE, unsigned short* height, const float* cl,
    const double* energy, i64 n, int k)
{
    GRID_STRIDE(i, n)
    {
        double l = k == 0 ? 0.0 : low[i];
        low[i] = l + (double)cl[i];
        double e = energy[i];
        if (k == 0 || e > bestE[i]) {
            bestE[i] = e;
            height[i] = (unsigned short)k;
        }
    }
}

// 5 x 5 mode filter (edf majority: ties keep the centre if it is among the
// most frequent, else the smallest value), reflect boundary.
extern "C" __global__ void edf_wl_majority(unsigned short* __restrict__ dst, const unsigned short* __restrict__ src, int H, int W)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= W || y >= H)
        return;
    unsigned short v[25];
    int m = 0;
    for (int dy = -2; dy <= 2; dy++) {
        const unsigned short* row = src + (i64)edf_reflect(y + dy, H) * W;
        for (int dx = -2; dx <= 2; dx++)
            v[m++] = row[edf_reflect(x + dx, W)];
    }
    unsigned short centre = src[(i64)y * W + x];
    int bc = 0, cc = 0;
    for (int i = 0; i < 25; i++) {
        int c = 0;
        for (int j = 0; j < 25; j++)
            c += v[j] == v[i];
        bc = max(bc, c);
        if (v[i] == centre)
            cc = c;
    }
    unsigned short best = centre;
    if (cc < bc) {
        best = 0xffff;
        for (int i = 0; i < 25; i++) {
            int c = 0;
            for (int j = 0; j < 25; j++)
                c += v[j] == v[i];
            if (c == bc && v[i] < best)
                best = v[i];
        }
    }
    dst[(i64)y * W + x] = best;
}

// comp = low * inv (the residuals' z-mean).
extern "C" __global__ void edf_wl_comp_init(double* comp, const double* low, i64 n, double inv)
{
    GRID_STRIDE(i, n)
    comp[i] = low[i] * inv;
}

// Synthesis for slice k at one level: add the detail where it was selected.
extern "C" __global__ void edf_wl_synth(double* comp, const unsigned short* sel, const float* prev, const float* next, i64 n, int k)
{
    GRID_STRIDE(i, n)
    {
        if (sel[i] == k)
            comp[i] = comp[i] + (double)(prev[i] - next[i]);
    }
}

// Counts: round half away from zero (Go's math.Round), clipped to 0..65535.
extern "C" __global__ void edf_wl_out_u16(unsigned short* out, const double* comp, i64 n)
{
    GRID_STRIDE(i, n)
    {
        double r = round(comp[i]);
        unsigned short o;
        if (!(r > 0.0))
            o = 0;
        else if (r >= 65535.0)
            o = 65535;
        else
            o = (unsigned short)r;
        out[i] = o;
    }
}

// Height map (relative to the used slices) to stack indices.
extern "C" __global__ void edf_wl_map_index(unsigned short* outIdx, const unsigned short* rel, const int* used, i64 n)
{
    GRID_STRIDE(i, n)
    outIdx[i] = (unsigned short)used[rel[i]];
}

// Composite as float32 (device float32 stacks).
extern "C" __global__ void edf_wl_out_f32(float* out, const double* comp, i64 n)
{
    GRID_STRIDE(i, n)
    out[i] = (float)comp[i];
}
