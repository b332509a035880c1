// Registration kernels (internal/register on the GPU): box downsampling,
// the full-resolution warp of every channel, and the block phase
// correlation (patch sampling through a mapping, mean and window, cross
// power, PCM peak). The arithmetic of the mapping, the field, the bilinear
// samples and the rounding is register's (transform.go, backend.go),
// operation for operation in double precision, so the warp matches the CPU
// rule count for count. Compiled with -fmad=false (see common.cuh).
#include "common.cuh"

// Field parameters (register.Field): nodes (y0 + i*step, x0 + j*step),
// ny x nx, bilinear inside, clamped beyond.
struct RegField {
    const float* dy;
    const float* dx;
    int ny, nx;
    double y0, x0, step;
};

__device__ __forceinline__ void reg_field_at(const RegField& f, double y, double x, double* oy, double* ox)
{
    double gy = (y - f.y0) / f.step;
    double gx = (x - f.x0) / f.step;
    gy = fmax(0.0, fmin((double)(f.ny - 1), gy));
    gx = fmax(0.0, fmin((double)(f.nx - 1), gx));
    int i0 = (int)gy;
    int j0 = (int)gx;
    i0 = min(i0, f.ny - 2);
    j0 = min(j0, f.nx - 2);
    if (f.ny == 1)
        i0 = 0;
    if (f.nx == 1)
        j0 = 0;
    double fy = gy - (double)i0;
    double fx = gx - (double)j0;
    int i1 = min(i0 + 1, f.ny - 1), j1 = min(j0 + 1, f.nx - 1);
    double w00 = (1 - fy) * (1 - fx);
    double w01 = (1 - fy) * fx;
    double w10 = fy * (1 - fx);
    double w11 = fy * fx;
    int k00 = i0 * f.nx + j0, k01 = i0 * f.nx + j1, k10 = i1 * f.nx + j0, k11 = i1 * f.nx + j1;
    *oy = w00 * (double)f.dy[k00] + w01 * (double)f.dy[k01] + w10 * (double)f.dy[k10] + w11 * (double)f.dy[k11];
    *ox = w00 * (double)f.dx[k00] + w01 * (double)f.dx[k01] + w10 * (double)f.dx[k10] + w11 * (double)f.dx[k11];
}

// reg_apply is register.applyAB: m = [a0 a1 a2 a3 b0 b1 hasField].
__device__ __forceinline__ void reg_apply(const double* m, const RegField& f, double y, double x, double* qy, double* qx)
{
    if (m[6] != 0.0) {
        double dy, dx;
        reg_field_at(f, y, x, &dy, &dx);
        y += dy;
        x += dx;
    }
    *qy = m[0] * y + m[1] * x + m[4];
    *qx = m[2] * y + m[3] * x + m[5];
}

// Downsample: out (oh x ow) = k x k box mean of in (h x w, uint16).
extern "C" __global__ void reg_downsample(float* out, const unsigned short* in, int w, int k, int oh, int ow, double inv)
{
    GRID_STRIDE(i, (i64)oh * ow)
    {
        int y = (int)(i / ow), x = (int)(i % ow);
        unsigned long long s = 0;
        for (int a = 0; a < k; a++) {
            const unsigned short* r = in + (i64)(y * k + a) * w + (i64)x * k;
            unsigned long long t = 0;
            for (int b = 0; b < k; b++)
                t += r[b];
            s += t;
        }
        out[i] = (float)((double)s * inv);
    }
}

// Warp: out (oh x ow) = bilinear(in (ih x iw), mapping(p)), 0 outside,
// rounded (register.WarpPixel, register.RoundCount).
extern "C" __global__ void reg_warp(unsigned short* out, const unsigned short* in, int iw, int ih, int ow, int oh,
    const double* m, const float* fdy, const float* fdx, int fny, int fnx, double fy0, double fx0, double fstep)
{
    RegField f = { fdy, fdx, fny, fnx, fy0, fx0, fstep };
    double mm[7];
    for (int t = 0; t < 7; t++)
        mm[t] = m[t];
    GRID_STRIDE(i, (i64)oh * ow)
    {
        int y = (int)(i / ow), x = (int)(i % ow);
        double qy, qx;
        reg_apply(mm, f, (double)y, (double)x, &qy, &qx);
        double v = 0;
        if (qy >= 0 && qy <= (double)(ih - 1) && qx >= 0 && qx <= (double)(iw - 1)) {
            int i0 = min((int)qy, ih - 2);
            int j0 = min((int)qx, iw - 2);
            double fy = qy - (double)i0;
            double fx = qx - (double)j0;
            const unsigned short* r0 = in + (i64)i0 * iw + j0;
            const unsigned short* r1 = in + (i64)(i0 + 1) * iw + j0;
            double top = (double)r0[0] + fx * ((double)r0[1] - (double)r0[0]);
            double bot = (double)r1[0] + fx * ((double)r1[1] - (double)r1[0]);
            v = top + fy * (bot - top);
        }
        v += 0.5;
        unsigned short o;
        if (!(v > 0))
            o = 0;
        else if (v >= 65535.0)
            o = 65535;
        else
            o = (unsigned short)v;
        out[i] = o;
    }
}

// register.SampleLevel: bilinear with clamped coordinates.
__device__ __forceinline__ double reg_sample(const float* img, int h, int w, double y, double x)
{
    y = fmax(0.0, fmin((double)(h - 1), y));
    x = fmax(0.0, fmin((double)(w - 1), x));
    int i0 = min((int)y, h - 2);
    int j0 = min((int)x, w - 2);
    double fy = y - (double)i0;
    double fx = x - (double)j0;
    const float* r0 = img + (i64)i0 * w + j0;
    const float* r1 = img + (i64)(i0 + 1) * w + j0;
    double top = (double)r0[0] + fx * ((double)r0[1] - (double)r0[0]);
    double bot = (double)r1[0] + fx * ((double)r1[1] - (double)r1[0]);
    return top + fy * (bot - top);
}

// Block sampling: Z[b][y][x] = (moving through maps[blocks[b].map],
// fixed) for block b's pixels (level factor k). blocks: (y0, x0, map)
// triples. Grid (ceil(bh*bw/256), nblocks).
extern "C" __global__ void reg_block_sample(double2* Z, const float* F, int fw, const float* M, int mh, int mw,
    const int* blocks, const double* maps, const float* fdy, const float* fdx, int fny, int fnx, double fy0, double fx0, double fstep,
    int k, int bh, int bw)
{
    int b = blockIdx.y;
    int n = bh * bw;
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n)
        return;
    RegField f = { fdy, fdx, fny, fnx, fy0, fx0, fstep };
    int y0 = blocks[3 * b], x0 = blocks[3 * b + 1];
    const double* m = maps + 7 * blocks[3 * b + 2];
    int y = t / bw, x = t % bw;
    double h = (double)(k - 1) / 2;
    double kf = (double)k;
    double qy, qx;
    reg_apply(m, f, kf * (double)(y0 + y) + h, kf * (double)(x0 + x) + h, &qy, &qx);
    qy = (qy - h) / kf;
    qx = (qx - h) / kf;
    double mv = reg_sample(M, mh, mw, qy, qx);
    double fv = (double)F[(i64)(y0 + y) * fw + x0 + x];
    Z[(i64)b * n + t] = make_double2(mv, fv);
}

// Per block (one CUDA block each): subtract each part's mean and apply the
// separable window.
extern "C" __global__ void reg_block_window(double2* Z, const double* wy, const double* wx, int bh, int bw)
{
    __shared__ double scratch[32];
    int n = bh * bw;
    double2* z = Z + (i64)blockIdx.x * n;
    double sm = 0, sf = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        sm += z[i].x;
        sf += z[i].y;
    }
    sm = block_sum(sm, scratch) / (double)n;
    sf = block_sum(sf, scratch) / (double)n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        double wt = wy[i / bw] * wx[i % bw];
        z[i] = make_double2((z[i].x - sm) * wt, (z[i].y - sf) * wt);
    }
}

// register.CrossPower on every block: M conj(F)/|M conj(F)| · ly[u] lx[v]
// from Z = DFT(m + i f). Grid (ceil(bh*bw/256), nblocks).
extern "C" __global__ void reg_cross_power(double2* Z, const double* ly, const double* lx, int bh, int bw)
{
    int n = bh * bw;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    double2* z = Z + (i64)blockIdx.y * n;
    int u = i / bw, v = i % bw;
    int nu = u > 0 ? bh - u : 0;
    int nv = v > 0 ? bw - v : 0;
    int j = nu * bw + nv;
    if (j < i)
        return;
    double2 zk = z[i], zm = z[j];
    // fa = zk + conj(zm), d = zk - conj(zm)
    double far = zk.x + zm.x, fai = zk.y - zm.y;
    double dr = zk.x - zm.x, di = zk.y + zm.y;
    // p = fa * conj(d)
    double pr = far * dr - fai * (-di);
    double pi = far * (-di) + fai * dr;
    // times i
    double cr = -pi, ci = pr;
    double mag = cr * cr + ci * ci;
    double2 c = make_double2(0, 0);
    if (mag > 0) {
        double s = (ly[u] * lx[v]) / sqrt(mag);
        c = make_double2(cr * s, ci * s);
    }
    z[i] = c;
    z[j] = make_double2(c.x, -c.y);
}

// PCM peak per block (one CUDA block each): the maximum of the real part
// (lowest index on ties) and its circular 3x3 neighbourhood. out: 11
// doubles per block: max, index, f[0][0] .. f[2][2].
extern "C" __global__ void reg_pcm_peak(double* out, const double2* Z, int bh, int bw)
{
    __shared__ double sv[256];
    __shared__ int si[256];
    int n = bh * bw;
    const double2* z = Z + (i64)blockIdx.x * n;
    double best = -1.0 / 0.0;
    int bi = 0x7fffffff;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        double v = z[i].x;
        if (v > best || (v == best && i < bi)) {
            best = v;
            bi = i;
        }
    }
    sv[threadIdx.x] = best;
    si[threadIdx.x] = bi;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            double v = sv[threadIdx.x + s];
            int j = si[threadIdx.x + s];
            if (v > sv[threadIdx.x] || (v == sv[threadIdx.x] && j < si[threadIdx.x])) {
                sv[threadIdx.x] = v;
                si[threadIdx.x] = j;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        int p = si[0];
        int py = p / bw, px = p % bw;
        double* o = out + (i64)blockIdx.x * 11;
        o[0] = sv[0];
        o[1] = (double)p;
        for (int a = -1; a <= 1; a++)
            for (int b = -1; b <= 1; b++)
                o[2 + (a + 1) * 3 + (b + 1)] = z[((py + a + bh) % bh) * bw + (px + b + bw) % bw].x;
    }
}
