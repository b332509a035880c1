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

// One output of a symmetric Gaussian pass (scipy correlate1d's order):
// v(0)·w[0], then + (v(-j) + v(j))·w[j] for j = R..1; v(j) is the source
// value j taps away, as float64.
template <typename V>
__device__ __forceinline__ double edf_taps(V v, const double* __restrict__ w, int R)
{
    double acc = v(0) * w[0];
    for (int j = R; j >= 1; j--) {
        double a = v(-j);
        double b = v(j);
        acc = acc + (a + b) * w[j];
    }
    return acc;
}

// Centred variance of a (2ry+1) x (2rx+1) window (edf.WindowVar: mean
// first, then the squared deviations, row-major); v(dy, dx) is the value at
// window row dy and column dx, both from 0, as float64.
template <typename V>
__device__ __forceinline__ double edf_window_var(V v, int ry, int rx)
{
    double n = (double)((2 * ry + 1) * (2 * rx + 1));
    double sum = 0.0;
    for (int dy = 0; dy <= 2 * ry; dy++)
        for (int dx = 0; dx <= 2 * rx; dx++)
            sum = sum + v(dy, dx);
    double m = sum / n;
    double acc = 0.0;
    for (int dy = 0; dy <= 2 * ry; dy++)
        for (int dx = 0; dx <= 2 * rx; dx++) {
            double d = v(dy, dx) - m;
            acc = acc + d * d;
        }
    return acc / n;
}

// The running argmax over z at pixel p: slice k's variance v replaces the
// best when strictly larger (first maximum wins); k == 0 starts from -inf.
__device__ __forceinline__ void edf_argmax(double* __restrict__ best, unsigned short* __restrict__ idx, i64 p, double v, int k)
{
    double b = k == 0 ? -1.0 / 0.0 : best[p];
    unsigned short id = k == 0 ? 0 : idx[p];
    if (v > b) {
        b = v;
        id = (unsigned short)k;
    }
    best[p] = b;
    idx[p] = id;
}

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
    dst[(i64)y * W + x] = (float)edf_taps([&](int j) { return edf_val(src[(i64)edf_reflect(y + j, H) * W + x]); }, w, R);
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
    dst[(i64)y * W + x] = (float)edf_taps([&](int j) { return (double)row[edf_reflect(x + j, W)]; }, w, R);
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
    double v = edf_window_var([&](int dy, int dx) {
        return (double)s[(i64)edf_reflect(y - ry + dy, H) * W + edf_reflect(x - rx + dx, W)];
    }, ry, rx);
    edf_argmax(best, idx, (i64)y * W + x, v, k);
}

// ---- Tiled forms of the three passes above, for the planes of production
// size: the same arithmetic in the same order (bit-identical results), but
// each source value is read and converted to float64 once per block, into
// shared memory, instead of once per tap (a tap of the Gaussian of sigma 10
// cost one conversion, the card's slowest float64 operation, 81 per pixel).
// The caller (edf.go, edfTiles) takes them when the tile fits the block's
// shared memory, else the forms above.

// Rows of output per block of the tiled y pass, columns per block of the
// tiled x pass, and the side of the tiled window variance's output tile.
#define EDF_TY 64
#define EDF_TX 256
#define EDF_VT 32

// Tiled Gaussian y pass: block (32, 8) makes 32 columns x EDF_TY rows from
// a column strip of EDF_TY + 2R rows. Dynamic shared memory: R + 1 weights
// and (EDF_TY + 2R) x 32 values, float64. Grid (ceil(W/32), ceil(H/EDF_TY)).
template <typename T>
__device__ void gauss_y_tile(float* __restrict__ dst, const T* __restrict__ src, int H, int W, const double* __restrict__ w, int R)
{
    extern __shared__ double sh[];
    double* ws = sh;
    double* strip = sh + (R + 1);
    int tid = threadIdx.y * blockDim.x + threadIdx.x;
    int x0 = blockIdx.x * 32, y0 = blockIdx.y * EDF_TY;
    for (int j = tid; j <= R; j += 256)
        ws[j] = w[j];
    int n = (EDF_TY + 2 * R) * 32;
    for (int i = tid; i < n; i += 256) {
        int x = x0 + (i & 31);
        strip[i] = x < W ? edf_val(src[(i64)edf_reflect(y0 - R + (i >> 5), H) * W + x]) : 0.0;
    }
    __syncthreads();
    int x = x0 + threadIdx.x;
    if (x >= W)
        return;
    for (int k = threadIdx.y; k < EDF_TY; k += 8) {
        int y = y0 + k;
        if (y >= H)
            break;
        const double* c = strip + (k + R) * 32 + threadIdx.x;
        dst[(i64)y * W + x] = (float)edf_taps([&](int j) { return c[j * 32]; }, ws, R);
    }
}

extern "C" __global__ void edf_gauss_y_tile_u16(float* dst, const unsigned short* src, int H, int W, const double* w, int R)
{
    gauss_y_tile<unsigned short>(dst, src, H, W, w, R);
}

extern "C" __global__ void edf_gauss_y_tile_f32(float* dst, const float* src, int H, int W, const double* w, int R)
{
    gauss_y_tile<float>(dst, src, H, W, w, R);
}

// Tiled Gaussian x pass: block (32, 8) makes 8 rows x EDF_TX columns, each
// row from EDF_TX + 2R values. Dynamic shared memory: R + 1 weights and
// 8 x (EDF_TX + 2R) values, float64. Grid (ceil(W/EDF_TX), ceil(H/8)).
extern "C" __global__ void edf_gauss_x_tile(float* __restrict__ dst, const float* __restrict__ src, int H, int W,
    const double* __restrict__ w, int R)
{
    extern __shared__ double sh[];
    double* ws = sh;
    int n = EDF_TX + 2 * R;
    double* row = sh + (R + 1) + threadIdx.y * n;
    int tid = threadIdx.y * blockDim.x + threadIdx.x;
    for (int j = tid; j <= R; j += 256)
        ws[j] = w[j];
    int x0 = blockIdx.x * EDF_TX, y = blockIdx.y * 8 + threadIdx.y;
    if (y < H) {
        const float* s = src + (i64)y * W;
        for (int c = threadIdx.x; c < n; c += 32)
            row[c] = (double)s[edf_reflect(x0 - R + c, W)];
    }
    __syncthreads();
    if (y >= H)
        return;
    for (int k = threadIdx.x; k < EDF_TX; k += 32) {
        int x = x0 + k;
        if (x >= W)
            break;
        const double* c = row + k + R;
        dst[(i64)y * W + x] = (float)edf_taps([&](int j) { return c[j]; }, ws, R);
    }
}

// Tiled window variance and running argmax (edf_var_argmax): block (32, 8)
// makes an EDF_VT x EDF_VT tile from (EDF_VT + 2ry) x (EDF_VT + 2rx) values
// (float64, dynamic shared memory). Grid (ceil(W/EDF_VT), ceil(H/EDF_VT)).
extern "C" __global__ void edf_var_argmax_tile(double* __restrict__ best, unsigned short* __restrict__ idx,
    const float* __restrict__ s, int H, int W, int ry, int rx, int k)
{
    extern __shared__ double sh[];
    int tw = EDF_VT + 2 * rx, th = EDF_VT + 2 * ry;
    int x0 = blockIdx.x * EDF_VT, y0 = blockIdx.y * EDF_VT;
    int tid = threadIdx.y * blockDim.x + threadIdx.x;
    for (int i = tid; i < tw * th; i += 256) {
        int r = i / tw, c = i - r * tw;
        sh[i] = (double)s[(i64)edf_reflect(y0 - ry + r, H) * W + edf_reflect(x0 - rx + c, W)];
    }
    __syncthreads();
    int x = x0 + threadIdx.x;
    if (x >= W)
        return;
    for (int q = threadIdx.y; q < EDF_VT; q += 8) {
        int y = y0 + q;
        if (y >= H)
            break;
        const double* win = sh + q * tw + threadIdx.x; // the window's first row and column
        double v = edf_window_var([&](int dy, int dx) { return win[dy * tw + dx]; }, ry, rx);
        edf_argmax(best, idx, (i64)y * W + x, v, k);
    }
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
