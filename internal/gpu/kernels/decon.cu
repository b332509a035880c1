// Deconvolution (internal/decon): the original's Richardson-Lucy and
// Biggs-Andrews on a padded (z, y, x) float32 stack, x fastest, by direct
// convolution. Every tap is summed in the order of decon.Conv (kernel z, y,
// x ascending) by an explicit float32 FMA (__fmaf_rn: one rounding per tap,
// which decon.Conv emulates exactly), so a convolution is bit-identical to
// the CPU's; every other expression is unfused (nvcc -fmad=false), as Go. Sums for the stop rule and alpha are float64
// (atomics: order differs from the CPU). Percentiles by a three-pass radix
// selection on the float bits (12, 12, 8 bits).
#include "common.cuh"

#define CBX 32   // threads along x
#define CBY 8    // threads along y
#define CPT 4    // outputs per thread along x
#define MAXKX 64 // kernel width limit (registers of a row segment)

// mirror maps i onto [0, n) by numpy's 'symmetric' rule (decon.Mirror).
__device__ __forceinline__ int mirror(int i, int n)
{
    int p = 2 * n;
    i %= p;
    if (i < 0)
        i += p;
    if (i >= n)
        i = p - 1 - i;
    return i;
}

// decon_pad: dst (pn, ph, pw) = src (n, h, w) padded symmetrically, bz/by/bx before.
extern "C" __global__ void decon_pad(float* dst, const float* src, int n, int h, int w, int pn, int ph, int pw, int bz, int by, int bx)
{
    i64 total = (i64)pn * ph * pw;
    GRID_STRIDE(i, total)
    {
        int x = (int)(i % pw);
        i64 r = i / pw;
        int y = (int)(r % ph);
        int z = (int)(r / ph);
        int sz = mirror(z - bz, n), sy = mirror(y - by, h), sx = mirror(x - bx, w);
        dst[i] = src[((i64)sz * h + sy) * w + sx];
    }
}

// decon_check: max of the input as float bits (values >= 0 order like
// their bits) and the count of values that are negative, NaN or infinite.
extern "C" __global__ void decon_check(const float* src, i64 n, unsigned int* maxbits, unsigned long long* bad)
{
    unsigned int m = 0;
    unsigned long long b = 0;
    GRID_STRIDE(i, n)
    {
        float v = src[i];
        if (!(v >= 0.0f) || isinf(v))
            b++;
        else
            m = max(m, __float_as_uint(v));
    }
    for (int o = 16; o > 0; o >>= 1) {
        m = max(m, __shfl_down_sync(0xffffffffu, m, o));
        b += __shfl_down_sync(0xffffffffu, b, o);
    }
    if ((threadIdx.x & 31) == 0) {
        atomicMax(maxbits, m);
        if (b)
            atomicAdd(bad, b);
    }
}

// conv_out: a convolution's output s under mode 0 (s), 1 (aux / (s < eps ?
// eps : s): the RL ratio) or 2 (s * aux: the RL update), aux at index i.
__device__ __forceinline__ float conv_out(float s, int mode, const float* aux, i64 i, float eps)
{
    if (mode == 1) {
        float d = s < eps ? eps : s;
        return aux[i] / d;
    }
    if (mode == 2)
        return s * aux[i];
    return s;
}

// tap_range: the taps [*t0, *t1) of a kernel n long whose 'same'
// convolution at i reads a source sample in [lo, hi) (decon.tapRange).
__device__ __forceinline__ void tap_range(int i, int n, int lo, int hi, int* t0, int* t1)
{
    int c = n / 2;
    *t0 = max(0, i + c - hi + 1);
    *t1 = min(n, i + c - lo + 1);
}

// free_correct: the free boundary's normalisation of c at padded voxel
// (z, y, x) (decon.FreeAlpha.At and FreeCorrect): c / alpha, or 0 where
// alpha < amin; alpha is the sum of flip(k) (kz, ky, kx) over the taps that
// reach the observed box [z0, z1) x [y0, y1) x [x0, x1), from the
// summed-area table sat ((kz+1) x (ky+1) x (kx+1), float64).
__device__ __forceinline__ float free_correct(float c, const double* sat, int kz, int ky, int kx, int z, int y, int x,
    int z0, int z1, int y0, int y1, int x0, int x1, float amin)
{
    int a0, a1, b0, b1, e0, e1;
    tap_range(z, kz, z0, z1, &a0, &a1);
    tap_range(y, ky, y0, y1, &b0, &b1);
    tap_range(x, kx, x0, x1, &e0, &e1);
    float al = 0.0f;
    if (a0 < a1 && b0 < b1 && e0 < e1) {
#define SAT(p, q, t) sat[((i64)(p) * (ky + 1) + (q)) * (kx + 1) + (t)]
        double s = SAT(a1, b1, e1) - SAT(a0, b1, e1) - SAT(a1, b0, e1) - SAT(a1, b1, e0);
        s = s + SAT(a0, b0, e1) + SAT(a0, b1, e0) + SAT(a1, b0, e0) - SAT(a0, b0, e0);
#undef SAT
        al = (float)s;
    }
    return al < amin ? 0.0f : c / al;
}

// decon_conv: s = convn(src, k, 'same') with zeros outside src (nz, ny, nx);
// dst = conv_out(s, mode) (modes 0-2).
// Block CBX x CBY threads, each CPT consecutive outputs along x; the source
// tile of one kernel plane lives in shared memory, the kernel in global
// memory read uniformly (broadcast). Dynamic shared memory:
// (CBY + ky - 1) * (CBX*CPT + kx - 1) floats.
extern "C" __global__ void decon_conv(float* __restrict__ dst, const float* __restrict__ src, const float* __restrict__ k,
    int kz, int ky, int kx, int nz, int ny, int nx, int mode, const float* __restrict__ aux, float eps)
{
    extern __shared__ float tile[];
    const int cz = kz / 2, cy = ky / 2, cx = kx / 2;
    const int TW = CBX * CPT + kx - 1, TH = CBY + ky - 1;
    const int x0 = blockIdx.x * CBX * CPT, y0 = blockIdx.y * CBY, z = blockIdx.z;
    const int lx = threadIdx.x, ly = threadIdx.y;
    const int tid = ly * CBX + lx;
    float s[CPT];
#pragma unroll
    for (int j = 0; j < CPT; j++)
        s[j] = 0.0f;
    for (int a = 0; a < kz; a++) {
        int sz = z + cz - a;
        if (sz < 0 || sz >= nz)
            continue; // uniform over the block
        __syncthreads();
        const float* plane = src + (i64)sz * ny * nx;
        for (int t = tid; t < TW * TH; t += CBX * CBY) {
            int ty = t / TW, tx = t % TW;
            int gy = y0 - cy + ty, gx = x0 - cx + tx;
            tile[t] = (gy >= 0 && gy < ny && gx >= 0 && gx < nx) ? plane[(i64)gy * nx + gx] : 0.0f;
        }
        __syncthreads();
        for (int b = 0; b < ky; b++) {
            // output (y, x0 + lx*CPT + j) takes src(y + cy - b, x + cx - c):
            // tile row ly + 2cy - b, tile column lx*CPT + j + 2cx - c.
            const float* row = tile + (ly + 2 * cy - b) * TW + lx * CPT;
            const float* kr = k + ((i64)a * ky + b) * kx;
            for (int c = 0; c < kx; c++) {
                float kv = __ldg(kr + c);
                int off = 2 * cx - c;
#pragma unroll
                for (int j = 0; j < CPT; j++)
                    s[j] = __fmaf_rn(kv, row[j + off], s[j]);
            }
        }
    }
    int y = y0 + ly;
    if (y >= ny)
        return;
#pragma unroll
    for (int j = 0; j < CPT; j++) {
        int x = x0 + lx * CPT + j;
        if (x >= nx)
            continue;
        i64 i = ((i64)z * ny + y) * nx + x;
        dst[i] = conv_out(s[j], mode, aux, i, eps);
    }
}

// conv_fixed is decon_conv for a kernel KX wide (compile time), each thread
// computing CPT2 contiguous outputs along x in RY consecutive rows of ZB
// consecutive planes, from register copies of its tile row segments (vector
// loads); each source plane's tile is loaded once for the ZB output planes,
// each kernel weight once for the RY rows. Every output gets the same sums
// in the same order as decon.Conv (kernel plane a ascending, i.e. source
// plane descending, then rows, then columns), one FMA per tap. Modes 0-2 as
// decon_conv; mode 3 is mode 2 plus the stop rule's sum sums[0] +=
// w[z]*(aux - dst)^2 (RL without windows: cur = y = aux); mode 4 is mode 3
// after the free boundary's division by alpha (free_correct; sat, box: its
// table and the observed box z0, z1, y0, y1, x0, x1; amin), the sum taken
// over the box only: decon_free, decon_tv (no TV, no damping) and
// decon_sums of one window in one pass.
#define CPT2 8
// CONV_RY: output rows per thread; two for one-plane kernels (the tile's
// halo rows and the weights serve twice the outputs), one for 3D kernels,
// whose ZB = 4 planes of accumulators already fill the registers
// (gpu.deconFixedTile mirrors it).
#define CONV_RY(ZB) ((ZB) == 1 ? 2 : 1)
template <int KX, int ZB, int RY>
__device__ __forceinline__ void conv_fixed(float* __restrict__ dst, const float* __restrict__ src, const float* __restrict__ k,
    int kz, int ky, int nz, int ny, int nx, int mode, const float* __restrict__ aux, float eps, const double* __restrict__ wz, double* sums,
    const double* __restrict__ sat, const int* __restrict__ box, float amin)
{
    extern __shared__ float4 smem4[];
    float* tile = (float*)smem4;
    const int cz = kz / 2, cy = ky / 2, cx = KX / 2;
    const int NR = CPT2 + KX - 1;     // row values a thread needs
    const int NV = (NR + 3) / 4;      // float4 loads
    const int TW = CBX * CPT2 + 4 * NV - CPT2; // >= CBX*CPT2 + KX - 1, multiple of 4
    const int TH = CBY * RY + ky - 1;
    const int x0 = blockIdx.x * CBX * CPT2, y0 = blockIdx.y * CBY * RY, z0 = blockIdx.z * ZB;
    const int lx = threadIdx.x, ly = threadIdx.y;
    // thread (lx, ly) computes rows y0 + ly*RY + q (q < RY), columns
    // x0 + lx*CPT2 + j (j < CPT2), planes z0 + o (o < ZB)
    float s[ZB][RY][CPT2];
#pragma unroll
    for (int o = 0; o < ZB; o++)
#pragma unroll
        for (int q = 0; q < RY; q++)
#pragma unroll
            for (int j = 0; j < CPT2; j++)
                s[o][q][j] = 0.0f;
    // source planes from the highest (a = 0 of the last output plane) down
    for (int sz = z0 + ZB - 1 + cz; sz >= z0 - cz; sz--) {
        if (sz < 0 || sz >= nz)
            continue; // uniform over the block
        __syncthreads();
        const float* plane = src + (i64)sz * ny * nx;
        // a warp loads a tile row at a time (coalesced, no division)
        for (int ty = ly; ty < TH; ty += CBY) {
            int gy = y0 - cy + ty;
            bool in = gy >= 0 && gy < ny;
            const float* srow = plane + (i64)gy * nx;
            float* trow = tile + ty * TW;
#pragma unroll
            for (int tx = lx; tx < TW; tx += CBX) {
                int gx = x0 - cx + tx;
                trow[tx] = (in && gx >= 0 && gx < nx) ? srow[gx] : 0.0f;
            }
        }
        __syncthreads();
        for (int b = 0; b < ky; b++) {
            // output row ly*RY + q takes tile row ly*RY + q + 2cy - b
            float r[RY][4 * NV];
#pragma unroll
            for (int q = 0; q < RY; q++) {
                const float4* row4 = (const float4*)(tile + (ly * RY + q + 2 * cy - b) * TW + lx * CPT2);
#pragma unroll
                for (int v = 0; v < NV; v++) {
                    float4 f = row4[v];
                    r[q][4 * v] = f.x;
                    r[q][4 * v + 1] = f.y;
                    r[q][4 * v + 2] = f.z;
                    r[q][4 * v + 3] = f.w;
                }
            }
#pragma unroll
            for (int o = 0; o < ZB; o++) {
                int a = z0 + o + cz - sz;
                if (a < 0 || a >= kz)
                    continue;
                const float* kr = k + ((i64)a * ky + b) * KX;
#pragma unroll
                for (int c = 0; c < KX; c++) {
                    float kv = __ldg(kr + c);
#pragma unroll
                    for (int q = 0; q < RY; q++)
#pragma unroll
                        for (int j = 0; j < CPT2; j++)
                            s[o][q][j] = __fmaf_rn(kv, r[q][j + 2 * cx - c], s[o][q][j]);
                }
            }
        }
    }
    double part = 0;
    int bz0 = 0, bz1 = nz, by0 = 0, by1 = ny, bx0 = 0, bx1 = nx; // the sum's box
    if (mode == 4) {
        bz0 = box[0], bz1 = box[1], by0 = box[2], by1 = box[3], bx0 = box[4], bx1 = box[5];
    }
#pragma unroll
    for (int o = 0; o < ZB; o++) {
        int z = z0 + o;
        if (z >= nz)
            continue;
        double wv = mode >= 3 ? wz[z] : 0.0;
#pragma unroll
        for (int q = 0; q < RY; q++) {
            int y = y0 + ly * RY + q;
            if (y >= ny)
                continue;
#pragma unroll
            for (int j = 0; j < CPT2; j++) {
                int x = x0 + lx * CPT2 + j;
                if (x >= nx)
                    continue;
                i64 i = ((i64)z * ny + y) * nx + x;
                float v = s[o][q][j];
                if (mode < 3) {
                    dst[i] = conv_out(v, mode, aux, i, eps);
                    continue;
                }
                if (mode == 4)
                    v = free_correct(v, sat, kz, ky, KX, z, y, x, bz0, bz1, by0, by1, bx0, bx1, amin);
                float c0 = aux[i];
                v = v * c0;
                if (z >= bz0 && z < bz1 && y >= by0 && y < by1 && x >= bx0 && x < bx1) {
                    double d = (double)c0 - (double)v;
                    part += wv * (d * d);
                }
                dst[i] = v;
            }
        }
    }
    if (mode >= 3) {
        __shared__ double scratch[32];
        int t = threadIdx.y * blockDim.x + threadIdx.x;
        for (int o = 16; o > 0; o >>= 1)
            part += __shfl_down_sync(0xffffffffu, part, o);
        __syncthreads();
        if ((t & 31) == 0)
            scratch[t >> 5] = part;
        __syncthreads();
        if (t == 0) {
            double tot = 0;
            for (int w = 0; w < (CBX * CBY) / 32; w++)
                tot += scratch[w];
            atomicAdd(&sums[0], tot);
        }
    }
}

#define CONV_FIXED(KX, ZB)                                                                                                      \
    extern "C" __global__ void __launch_bounds__(CBX * CBY) decon_conv_k##KX##_z##ZB(float* dst, const float* src,         \
        const float* k, int kz, int ky, int nz, int ny, int nx, int mode, const float* aux, float eps, const double* wz,      \
        double* sums, const double* sat, const int* box, float amin)                                                            \
    {                                                                                                                           \
        conv_fixed<KX, ZB, CONV_RY(ZB)>(dst, src, k, kz, ky, nz, ny, nx, mode, aux, eps, wz, sums, sat, box, amin);             \
    }
#define CONV_FIXED_Z(KX) CONV_FIXED(KX, 1) CONV_FIXED(KX, 4)
CONV_FIXED_Z(1)
CONV_FIXED_Z(3)
CONV_FIXED_Z(5)
CONV_FIXED_Z(7)
CONV_FIXED_Z(9)
CONV_FIXED_Z(11)
CONV_FIXED_Z(13)
CONV_FIXED_Z(15)

// decon_damp: a = oml*(a*y) + l*b (the damped update; oml = 1 - l in float32).
extern "C" __global__ void decon_damp(float* a, const float* y, const float* b, float oml, float l, i64 n)
{
    GRID_STRIDE(i, n)
    {
        float u = a[i] * y[i];
        a[i] = oml * u + l * b[i];
    }
}

// voxel_zyx splits a linear index of an (nz, ny, nx) volume, x fastest.
__device__ __forceinline__ void voxel_zyx(i64 i, int ny, int nx, int* z, int* y, int* x)
{
    *x = (int)(i % nx);
    i64 r = i / nx;
    *y = (int)(r % ny);
    *z = (int)(r / ny);
}

// tv_norm: the normalised gradient n = grad u / sqrt(|grad u|^2 + eps2) at
// (y, x) of one plane (ny, nx) of u: forward differences, 0 at the last
// column/row (decon.TVFactor's norm, the same float32 expressions).
__device__ __forceinline__ void tv_norm(const float* pl, int y, int x, int ny, int nx, float eps2, float* gx, float* gy)
{
    float c = pl[(i64)y * nx + x];
    float dx = 0.0f, dy = 0.0f;
    if (x + 1 < nx)
        dx = pl[(i64)y * nx + x + 1] - c;
    if (y + 1 < ny)
        dy = pl[(i64)(y + 1) * nx + x] - c;
    float s = dx * dx;
    s = s + dy * dy;
    s = s + eps2;
    float m = sqrtf(s);
    *gx = dx / m;
    *gy = dy / m;
}

// decon_tv: the RL-TV update of Dey et al. on a window (nz, ny, nx):
// a = a*y / (1 - lambda*div(grad y/|grad y|)) per plane (decon.TVFactor),
// then, when damp, a = oml*a + l*b (b = conv(y, R)). a holds conv(obs /
// conv(y, k), flip k) on entry (divided by the free boundary's alpha).
// lambda = 0 (the free boundary without TV) skips the TV factor.
extern "C" __global__ void decon_tv(float* a, const float* y, const float* b, int nz, int ny, int nx, float lambda, float eps2,
    int damp, float oml, float l)
{
    i64 total = (i64)nz * ny * nx;
    GRID_STRIDE(i, total)
    {
        int z, yy, x;
        voxel_zyx(i, ny, nx, &z, &yy, &x);
        float u = a[i] * y[i];
        if (lambda != 0.0f) { // without TV (the free boundary alone) the factor is 1
            const float* pl = y + (i64)z * ny * nx;
            float gx, gy, lx = 0.0f, uy = 0.0f, t;
            tv_norm(pl, yy, x, ny, nx, eps2, &gx, &gy);
            if (x > 0)
                tv_norm(pl, yy, x - 1, ny, nx, eps2, &lx, &t);
            if (yy > 0)
                tv_norm(pl, yy - 1, x, ny, nx, eps2, &t, &uy);
            float d = gx - lx;
            d = d + gy;
            d = d - uy;
            float q = lambda * d;
            float den = 1.0f - q;
            u = u / den;
        }
        if (damp) {
            float v = oml * u;
            float w = l * b[i];
            u = v + w;
        }
        a[i] = u;
    }
}

// decon_free: the free boundary's normalisation (free_correct) of a window
// (nz, wh, nx) starting at padded row lo.
extern "C" __global__ void decon_free(float* a, const double* sat, int kz, int ky, int kx, int nz, int wh, int nx, int lo,
    int z0, int z1, int y0, int y1, int x0, int x1, float amin)
{
    i64 total = (i64)nz * wh * nx;
    GRID_STRIDE(i, total)
    {
        int z, yy, x;
        voxel_zyx(i, wh, nx, &z, &yy, &x);
        a[i] = free_correct(a[i], sat, kz, ky, kx, z, lo + yy, x, z0, z1, y0, y1, x0, x1, amin);
    }
}

// decon_box_zero: s (nz, ny, nx) = 0 outside the box [z0, z1) x [y0, y1) x
// [x0, x1) (decon.ZeroOutside: the free boundary fits observed voxels only).
extern "C" __global__ void decon_box_zero(float* s, int nz, int ny, int nx, int z0, int z1, int y0, int y1, int x0, int x1)
{
    i64 total = (i64)nz * ny * nx;
    GRID_STRIDE(i, total)
    {
        int z, y, x;
        voxel_zyx(i, ny, nx, &z, &y, &x);
        if (!(z >= z0 && z < z1 && y >= y0 && y < y1 && x >= x0 && x < x1))
            s[i] = 0.0f;
    }
}

// decon_predict: y = max(x + alpha*(x - xp), 0) (Biggs-Andrews prediction).
extern "C" __global__ void decon_predict(float* y, const float* x, const float* xp, float alpha, i64 n)
{
    GRID_STRIDE(i, n)
    {
        float v = x[i];
        float t = v - xp[i];
        float u = alpha * t;
        float r = v + u;
        y[i] = r > 0.0f ? r : 0.0f;
    }
}

// decon_rows: copy rows [lo, lo+wh) of every plane of src (nz, ph, nx) into
// dst (nz, wh, nx) (dir 0), or the core rows back: dst (nz, ph, nx) rows
// [c0, c1) from src (nz, wh, nx) at row c - lo (dir 1).
extern "C" __global__ void decon_rows(float* dst, const float* src, int nz, int ph, int nx, int lo, int wh, int c0, int c1, int dir)
{
    int rows = dir == 0 ? wh : c1 - c0;
    i64 total = (i64)nz * rows * nx;
    GRID_STRIDE(i, total)
    {
        int x = (int)(i % nx);
        i64 r = i / nx;
        int yy = (int)(r % rows);
        int z = (int)(r / rows);
        if (dir == 0)
            dst[((i64)z * wh + yy) * nx + x] = src[((i64)z * ph + lo + yy) * nx + x];
        else
            dst[((i64)z * ph + c0 + yy) * nx + x] = src[((i64)z * wh + c0 - lo + yy) * nx + x];
    }
}

// decon_sums over the core rows [c0, c1) of a window (nz, wh, nx) starting
// at padded row lo: sums[0] += w[z]*(cur - nw)^2; for Biggs (g != 0) also
// G = nw - y is written to g (padded layout, ph rows) and, when gp != 0,
// sums[1] += w[z]*G*Gp, sums[2] += w[z]*Gp^2. The sums take only the voxels
// whose plane, padded row (row0 + c0 + core row) and column lie in the box
// [bz0, bz1) x [by0, by1) x [bx0, bx1) (the observed voxels of the free
// boundary; the whole window otherwise). w: plane weights (the
// multiplicity of a plane in the padded z axis; 1 when planes are padded or
// the boundary is free).
extern "C" __global__ void decon_sums(const float* cur, const float* nw, const float* y, float* g, const float* gp,
    const double* w, int nz, int ph, int nx, int lo, int wh, int c0, int c1, double* sums,
    int row0, int bz0, int bz1, int by0, int by1, int bx0, int bx1)
{
    __shared__ double scratch[32];
    int rows = c1 - c0;
    i64 total = (i64)nz * rows * nx;
    double s0 = 0, s1 = 0, s2 = 0;
    GRID_STRIDE(i, total)
    {
        int x = (int)(i % nx);
        i64 r = i / nx;
        int yy = (int)(r % rows);
        int z = (int)(r / rows);
        i64 li = ((i64)z * wh + c0 - lo + yy) * nx + x;
        double wz = w[z];
        double d = (double)cur[li] - (double)nw[li];
        int py = row0 + c0 + yy;
        bool in = z >= bz0 && z < bz1 && py >= by0 && py < by1 && x >= bx0 && x < bx1;
        if (in)
            s0 += wz * (d * d);
        if (g) {
            float gv = nw[li] - y[li];
            i64 gi = ((i64)z * ph + c0 + yy) * nx + x;
            if (gp && in) {
                double q = (double)gp[gi];
                s1 += wz * ((double)gv * q);
                s2 += wz * (q * q);
            }
            g[gi] = gv;
        }
    }
    s0 = block_sum(s0, scratch);
    s1 = block_sum(s1, scratch);
    s2 = block_sum(s2, scratch);
    if (threadIdx.x == 0) {
        atomicAdd(&sums[0], s0);
        if (g) {
            atomicAdd(&sums[1], s1);
            atomicAdd(&sums[2], s2);
        }
    }
}

// cropped index i of (n, h, w) -> padded index (bz, by, bx before).
__device__ __forceinline__ i64 padded_index(i64 i, int h, int w, int ph, int pw, int bz, int by, int bx)
{
    int x = (int)(i % w);
    i64 r = i / w;
    int y = (int)(r % h);
    int z = (int)(r / h);
    return ((i64)(z + bz) * ph + y + by) * pw + x + bx;
}

// decon_hist: histogram of the bits of |x| over the cropped region: the
// value's bits u count in bin (u >> shift) & mask when all = 1 or
// (u >> mshift) == match. bins: global, nbins <= 4096, privatised in shared memory.
extern "C" __global__ void decon_hist(unsigned long long* bins, const float* x, i64 n, int h, int w, int ph, int pw,
    int bz, int by, int bx, int shift, int mask, int all, int mshift, unsigned int match)
{
    __shared__ unsigned int hs[4096];
    int nb = mask + 1;
    for (int t = threadIdx.x; t < nb; t += blockDim.x)
        hs[t] = 0;
    __syncthreads();
    GRID_STRIDE(i, n)
    {
        unsigned int u = __float_as_uint(fabsf(x[padded_index(i, h, w, ph, pw, bz, by, bx)]));
        if (all || (u >> mshift) == match)
            atomicAdd(&hs[(u >> shift) & mask], 1u);
    }
    __syncthreads();
    for (int t = threadIdx.x; t < nb; t += blockDim.x)
        if (hs[t])
            atomicAdd(&bins[t], (unsigned long long)hs[t]);
}

// decon_scale: out (n, h, w) = (clip(|x|, lo, hi) - lo)/(hi - lo)*rawMax in
// float64 (decon.Rescale), or |x| when scale = 0 (decon.Crop).
extern "C" __global__ void decon_scale(float* out, const float* x, i64 n, int h, int w, int ph, int pw, int bz, int by, int bx,
    int scale, double lo, double hi, double rawMax)
{
    GRID_STRIDE(i, n)
    {
        float r = fabsf(x[padded_index(i, h, w, ph, pw, bz, by, bx)]);
        if (!scale) {
            out[i] = r;
            continue;
        }
        if (!(hi > lo)) {
            out[i] = 0.0f;
            continue;
        }
        double v = fmax(lo, fmin(hi, (double)r));
        double t = v - lo;
        double d = hi - lo;
        out[i] = (float)(t / d * rawMax);
    }
}

// decon_quantize: dst = round-half-up clip(src, 0, 65535) (decon.Quantize).
extern "C" __global__ void decon_quantize(unsigned short* dst, const float* src, i64 n)
{
    GRID_STRIDE(i, n)
    {
        double c = (double)src[i] + 0.5;
        unsigned short v;
        if (!(c > 0.0))
            v = 0;
        else if (c >= 65535.0)
            v = 65535;
        else
            v = (unsigned short)c;
        dst[i] = v;
    }
}

// ---- FFT convolution (PSFs too large for the direct kernels) ----
// A window (nz, ny, nx) is zero-padded to (fz, fy, fx) >= its size plus the
// kernel's minus one, so the circular convolution of the padded arrays is
// the linear one; 'same' takes it at offset (cz, cy, cx).

// decon_fft_place: dst (fz, fy, fx) = src (nz, ny, nx) at the origin, zero elsewhere.
extern "C" __global__ void decon_fft_place(float* dst, const float* src, int nz, int ny, int nx, int fz, int fy, int fx)
{
    i64 total = (i64)fz * fy * fx;
    GRID_STRIDE(i, total)
    {
        int x = (int)(i % fx);
        i64 r = i / fx;
        int y = (int)(r % fy);
        int z = (int)(r / fy);
        dst[i] = (z < nz && y < ny && x < nx) ? src[((i64)z * ny + y) * nx + x] : 0.0f;
    }
}

// decon_fft_mul: s = s * k * scale (complex, interleaved), n values.
extern "C" __global__ void decon_fft_mul(float2* s, const float2* k, float scale, i64 n)
{
    GRID_STRIDE(i, n)
    {
        float2 a = s[i], b = k[i];
        float re = a.x * b.x - a.y * b.y;
        float im = a.x * b.y + a.y * b.x;
        s[i] = make_float2(re * scale, im * scale);
    }
}

// decon_fft_take: v = src (fz, fy, fx) at (z+cz, y+cy, x+cx); dst (nz, ny, nx)
// gets v, aux/max(v, eps) (mode 1) or v*aux (mode 2), as decon_conv.
extern "C" __global__ void decon_fft_take(float* dst, const float* src, int nz, int ny, int nx, int fy, int fx,
    int cz, int cy, int cx, int mode, const float* aux, float eps)
{
    i64 total = (i64)nz * ny * nx;
    GRID_STRIDE(i, total)
    {
        int x = (int)(i % nx);
        i64 r = i / nx;
        int y = (int)(r % ny);
        int z = (int)(r / ny);
        dst[i] = conv_out(src[((i64)(z + cz) * fy + y + cy) * fx + x + cx], mode, aux, i, eps);
    }
}
