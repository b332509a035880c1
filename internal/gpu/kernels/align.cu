// Pair translations (internal/align's CPU algorithm): windowed crops packed
// two real images to one complex plane, cuFFT Z2Z (float64), the cross
// power spectrum unpacked from the packed transform, the largest local
// maxima of the phase-correlation matrix, and NCC sums over tile overlaps.
#include "common.cuh"

// Mean of each crop: one block per (pair, side). which = 0: A crop at
// (ay, ax); 1: B crop at (by, bx). crops[p] = {a, b, ay, ax, by, bx} ints.
extern "C" __global__ void crop_means(double* means, const float* tiles, const int* crops, int H, int W, int ch, int cw)
{
    __shared__ double scr[32];
    int p = blockIdx.x, side = blockIdx.y;
    const int* c = crops + 6 * p;
    int t = c[side], oy = c[2 + 2 * side], ox = c[3 + 2 * side];
    const float* img = tiles + (i64)t * H * W;
    double s = 0.0;
    i64 n = (i64)ch * cw;
    for (i64 k = threadIdx.x; k < n; k += blockDim.x) {
        int y = (int)(k / cw), x = (int)(k % cw);
        s += (double)img[(i64)(oy + y) * W + ox + x];
    }
    s = block_sum(s, scr);
    if (threadIdx.x == 0)
        means[2 * p + side] = s / (double)n;
}

// Packs the windowed, mean-free crops: Z[p][y][x] = ((a-ma)*w, (b-mb)*w),
// w = winY[y]*winX[x]. Grid (ceil(ch*cw/256), npairs).
extern "C" __global__ void crop_pack(double2* Z, const float* tiles, const int* crops, const double* means,
    const double* winY, const double* winX, int H, int W, int ch, int cw)
{
    int p = blockIdx.y;
    i64 n = (i64)ch * cw;
    i64 k = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= n)
        return;
    const int* c = crops + 6 * p;
    int y = (int)(k / cw), x = (int)(k % cw);
    const float* A = tiles + (i64)c[0] * H * W;
    const float* B = tiles + (i64)c[1] * H * W;
    double wt = winY[y] * winX[x];
    double va = (double)A[(i64)(c[2] + y) * W + c[3] + x];
    double vb = (double)B[(i64)(c[4] + y) * W + c[5] + x];
    Z[(i64)p * n + k] = make_double2((va - means[2 * p]) * wt, (vb - means[2 * p + 1]) * wt);
}

// Normalised cross power A·conj(B)/|A·conj(B)| from the packed transform
// Z = F(a + i b): 2A(k) = Z(k) + conj(Z(-k)), 2iB(k) = Z(k) - conj(Z(-k)),
// times the PCM blur lpY[u]·lpX[v] (align.crossPower). Out of place; the
// mirror frequency gets exactly the conjugate. Grid (ceil(ch*cw/256), npairs).
extern "C" __global__ void cross_power(double2* R, const double2* Z, const double* lpY, const double* lpX, int ch, int cw)
{
    int p = blockIdx.y;
    i64 n = (i64)ch * cw;
    i64 k = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= n)
        return;
    int u = (int)(k / cw), v = (int)(k % cw);
    int nu = u > 0 ? ch - u : 0, nv = v > 0 ? cw - v : 0;
    const double2* z = Z + (i64)p * n;
    double2 zk = z[k], zm = z[(i64)nu * cw + nv];
    // fa = zk + conj(zm); d = zk - conj(zm)
    double far = zk.x + zm.x, fai = zk.y - zm.y;
    double dr = zk.x - zm.x, di = zk.y + zm.y;
    // c = fa * conj(d), then times i
    double cr = far * dr - fai * (-di);
    double ci = far * (-di) + fai * dr;
    double rr = -ci, ri = cr;
    double mag = rr * rr + ri * ri;
    double2 o;
    if (mag > 0.0) {
        double s = lpY[u] / sqrt(mag);
        s *= lpX[v];
        o = make_double2(rr * s, ri * s);
    } else {
        o = make_double2(0.0, 0.0);
    }
    R[(i64)p * n + k] = o;
}

#define NPK 4    // peaks kept (align.NPeaks)
#define PKT 256  // threads per block

struct pk {
    double v;
    int i;
};

// a before b: larger value first, then smaller raster index.
__device__ __forceinline__ bool pk_before(pk a, pk b) { return a.v > b.v || (a.v == b.v && a.i < b.i); }

__device__ void pk_insert(pk* l, pk c)
{
    if (!pk_before(c, l[NPK - 1]))
        return;
    int j = NPK - 1;
    while (j > 0 && pk_before(c, l[j - 1])) {
        l[j] = l[j - 1];
        j--;
    }
    l[j] = c;
}

// The NPK largest local maxima (>= their 8 circular neighbours) of the real
// part of each PCM, ordered by value then raster index. One block per pair.
// out[p*NPK + q] = {index, or -1}; outv the values.
extern "C" __global__ void pcm_peaks(int* out, double* outv, const double2* P, int ch, int cw)
{
    __shared__ pk all[PKT * NPK];
    int p = blockIdx.x;
    i64 n = (i64)ch * cw;
    const double2* z = P + (i64)p * n;
    pk l[NPK];
    for (int q = 0; q < NPK; q++)
        l[q] = pk{-1.0 / 0.0, 0x7fffffff};
    for (i64 k = threadIdx.x; k < n; k += PKT) {
        int y = (int)(k / cw), x = (int)(k % cw);
        double v = z[k].x;
        pk c = pk{v, (int)k};
        if (!pk_before(c, l[NPK - 1]))
            continue;
        int ym = (y + ch - 1) % ch, yp = (y + 1) % ch, xm = (x + cw - 1) % cw, xp = (x + 1) % cw;
        if (z[(i64)ym * cw + xm].x > v || z[(i64)ym * cw + x].x > v || z[(i64)ym * cw + xp].x > v ||
            z[(i64)y * cw + xm].x > v || z[(i64)y * cw + xp].x > v ||
            z[(i64)yp * cw + xm].x > v || z[(i64)yp * cw + x].x > v || z[(i64)yp * cw + xp].x > v)
            continue;
        pk_insert(l, c);
    }
    for (int q = 0; q < NPK; q++)
        all[threadIdx.x * NPK + q] = l[q];
    __syncthreads();
    for (int s = PKT / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            pk* a = all + threadIdx.x * NPK;
            pk* b = all + (threadIdx.x + s) * NPK;
            for (int q = 0; q < NPK; q++)
                pk_insert(a, b[q]);
        }
        __syncthreads();
    }
    if (threadIdx.x < NPK) {
        pk r = all[threadIdx.x];
        out[p * NPK + threadIdx.x] = (r.i == 0x7fffffff) ? -1 : r.i;
        outv[p * NPK + threadIdx.x] = r.v;
    }
}

// NCC sums of candidates: cand[c] = {a, b, dy, dx}; b(y, x) is compared
// with a(y+dy, x+dx) over the overlap. sums[c*5..] = Σa, Σb, Σa², Σb², Σab
// (float64). One block per candidate.
extern "C" __global__ void ncc_sums(double* sums, const float* tiles, const int* cand, int H, int W)
{
    __shared__ double scr[32];
    int c = blockIdx.x;
    const int* q = cand + 4 * c;
    int dy = q[2], dx = q[3];
    int y0 = max(0, dy), y1 = min(H, H + dy), x0 = max(0, dx), x1 = min(W, W + dx);
    double sa = 0, sb = 0, saa = 0, sbb = 0, sab = 0;
    if (y1 > y0 && x1 > x0) {
        const float* A = tiles + (i64)q[0] * H * W;
        const float* B = tiles + (i64)q[1] * H * W;
        int ow = x1 - x0;
        i64 n = (i64)(y1 - y0) * ow;
        for (i64 k = threadIdx.x; k < n; k += blockDim.x) {
            int y = y0 + (int)(k / ow), x = x0 + (int)(k % ow);
            double va = (double)A[(i64)y * W + x];
            double vb = (double)B[(i64)(y - dy) * W + (x - dx)];
            sa += va;
            sb += vb;
            saa += va * va;
            sbb += vb * vb;
            sab += va * vb;
        }
    }
    sa = block_sum(sa, scr);
    sb = block_sum(sb, scr);
    saa = block_sum(saa, scr);
    sbb = block_sum(sbb, scr);
    sab = block_sum(sab, scr);
    if (threadIdx.x == 0) {
        double* o = sums + 5 * c;
        o[0] = sa;
        o[1] = sb;
        o[2] = saa;
        o[3] = sbb;
        o[4] = sab;
    }
}
