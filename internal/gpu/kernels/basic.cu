// BaSiC inexact-ALM robust PCA with darkfield (basic/alm.go), batched: F
// fits advance together, one iteration per step, each with its own state.
// Everything is float64.
//
// Layout (all fits in one allocation each):
//   D, E, Y, WT   image-major per fit: element (f, j, i) at (noff[f]+j)*m + i
//   per-pixel     (f, i) at f*m + i      (S, VSUM, WHAT, WIDCT, AOFF, ...)
//   per-image     (f, j) at noff[f] + j  (COEFF, COEFFA, VALID, SIGN)
//   scalars       ST[f*NST + k]
//   masks         act[f] != 0: fit f takes part in this launch
// m = p*p pixels of the working grid, n = nn[f] images of fit f.
#include "common.cuh"

// Scalar slots, shared with basic.go (stXxx constants).
#define NST 32
#define ST_MU 0
#define ST_MUNEW 1
#define ST_MUBAR 2
#define ST_DNORM 3
#define ST_LAMF 4
#define ST_LAMD 5
#define ST_SUMC 6
#define ST_MEANW 7
#define ST_NHI 8
#define ST_NLO 9
#define ST_TOTAL 10
#define ST_ZSQ 11
#define ST_B1 12
#define ST_B1UP 13
#define ST_MEANCV 14
#define ST_K 15
#define ST_TH 16
#define ST_ITER 17
#define ST_DONE 18
#define ST_NORMTWO 19
#define ST_MADF 20
#define ST_FNUM 21
#define ST_FDEN 22
#define ST_DNUM 23
#define ST_DDEN 24
#define ST_DMIN 25
#define ST_DSQ 26
#define ST_D0MEAN 27

// Darkfield methods (basic.DarkfieldMethod).
#define DARK_ORIGINAL 0
#define DARK_DARKEST 1

#define RHO 1.5
#define ENT2 10.0
#define MU_COEF 12.5
#define MUBAR_COEF 1e7

// ---------------------------------------------------------------- prepare

// Per-pixel mean over the images, before sorting (AutoLambdaFlat's input):
// mean[f*m+i] = (sum_j d) / n, summed in image order like the CPU.
extern "C" __global__ void alm_mean_img(double* MEAN, const double* D, const int* nn, const int* noff, int m)
{
    int f = blockIdx.y;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= m)
        return;
    int n = nn[f];
    const double* d = D + (i64)noff[f] * m + i;
    double s = 0.0;
    for (int j = 0; j < n; j++)
        s += d[(i64)j * m];
    MEAN[(i64)f * m + i] = s / (double)n;
}

// Sorts every pixel's values along the image axis (ascending, insertion
// sort in place) and stores the row sums in the sorted order.
extern "C" __global__ void alm_sort(double* D, double* ROWSUM, const int* nn, const int* noff, int m)
{
    int f = blockIdx.y;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= m)
        return;
    int n = nn[f];
    double* d = D + (i64)noff[f] * m + i;
    for (int j = 1; j < n; j++) {
        double v = d[(i64)j * m];
        int k = j - 1;
        while (k >= 0 && d[(i64)k * m] > v) {
            d[(i64)(k + 1) * m] = d[(i64)k * m];
            k--;
        }
        d[(i64)(k + 1) * m] = v;
    }
    double s = 0.0;
    for (int j = 0; j < n; j++)
        s += d[(i64)j * m];
    ROWSUM[(i64)f * m + i] = s;
}

// Sum of squares, minimum and the mean of the darkest image (first sorted)
// of each fit's data. One block per fit.
extern "C" __global__ void alm_norms(double* ST, const double* D, const int* nn, const int* noff, int m)
{
    __shared__ double scr[32];
    int f = blockIdx.x;
    i64 len = (i64)nn[f] * m;
    const double* d = D + (i64)noff[f] * m;
    double ss = 0.0, mn = 1.0 / 0.0;
    for (i64 k = threadIdx.x; k < len; k += blockDim.x) {
        double v = d[k];
        ss += v * v;
        mn = fmin(mn, v);
    }
    double d0 = 0.0; // the darkest image: the first after the per-pixel sort
    for (int i = threadIdx.x; i < m; i += blockDim.x)
        d0 += d[i];
    ss = block_sum(ss, scr);
    mn = block_min(mn, scr);
    d0 = block_sum(d0, scr);
    if (threadIdx.x == 0) {
        ST[f * NST + ST_DSQ] = ss;
        ST[f * NST + ST_DNORM] = sqrt(ss);
        ST[f * NST + ST_DMIN] = mn;
        ST[f * NST + ST_D0MEAN] = d0 / (double)m;
    }
}

// Gram matrix G[f][a][c] = sum_i D[f][a][i] D[f][c][i] for a <= c (upper
// triangle, ldg = nmax). Grid (nmax*nmax, F), one entry per block.
extern "C" __global__ void alm_gram(double* G, const double* D, const int* nn, const int* noff, int m, int nmax)
{
    __shared__ double scr[32];
    int f = blockIdx.y;
    int a = blockIdx.x / nmax, c = blockIdx.x % nmax;
    int n = nn[f];
    if (a >= n || c >= n || a > c)
        return;
    const double* da = D + (i64)(noff[f] + a) * m;
    const double* dc = D + (i64)(noff[f] + c) * m;
    double s = 0.0;
    for (int i = threadIdx.x; i < m; i += blockDim.x)
        s += da[i] * dc[i];
    s = block_sum(s, scr);
    if (threadIdx.x == 0)
        G[((i64)f * nmax + a) * nmax + c] = s;
}

// ------------------------------------------------------------ solve start

// Resets the state of the fits in act for a new solve (basic solver.solve's
// preamble). Per-pixel part: grid (ceil(m/256), F).
extern "C" __global__ void alm_reset_pix(double* S, double* VSUM, double* WHAT, double* WIDCT, double* AOFF,
    const double* ROWSUM, const int* act, int m)
{
    int f = blockIdx.y;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (!act[f] || i >= m)
        return;
    i64 k = (i64)f * m + i;
    S[k] = ROWSUM[k];
    VSUM[k] = 0.0;
    WHAT[k] = 0.0;
    WIDCT[k] = 0.0;
    AOFF[k] = 0.0;
}

// Per-element part (E = Y = 0): grid-stride over all fits' elements; elem2fit
// is avoided by one launch per fit range: grid (blocks, F).
extern "C" __global__ void alm_reset_elem(double* E, double* Y, const int* nn, const int* noff, const int* act, int m)
{
    int f = blockIdx.y;
    if (!act[f])
        return;
    i64 len = (i64)nn[f] * m;
    i64 base = (i64)noff[f] * m;
    for (i64 k = (i64)blockIdx.x * blockDim.x + threadIdx.x; k < len; k += (i64)blockDim.x * gridDim.x) {
        E[base + k] = 0.0;
        Y[base + k] = 0.0;
    }
}

// Scalars and per-image state. One block per fit.
extern "C" __global__ void alm_reset_scalars(double* ST, double* COEFF, int* VALID, const int* nn, const int* noff, const int* act)
{
    int f = blockIdx.x;
    if (!act[f])
        return;
    int n = nn[f];
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        COEFF[noff[f] + j] = 1.0;
        VALID[noff[f] + j] = 0;
    }
    if (threadIdx.x == 0) {
        double* st = ST + f * NST;
        double mu = MU_COEF / st[ST_NORMTWO];
        st[ST_MU] = mu;
        st[ST_MUBAR] = MUBAR_COEF * mu;
        st[ST_B1] = 0.0;
        st[ST_B1UP] = st[ST_DMIN];
        double sc = 0.0;
        for (int j = 0; j < n; j++)
            sc += 1.0;
        st[ST_SUMC] = sc;
        st[ST_ITER] = 0.0;
        st[ST_DONE] = 0.0;
    }
}

// --------------------------------------------------------------- one step

// tmp = (S - WIDCT*sumCoeff - n*AOFF) / n. Grid (ceil(m/256), F).
extern "C" __global__ void alm_flat_in(double* TMP, const double* S, const double* WIDCT, const double* AOFF,
    const double* ST, const int* nn, const int* act, int m)
{
    int f = blockIdx.y;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (!act[f] || i >= m)
        return;
    i64 k = (i64)f * m + i;
    double nf = (double)nn[f];
    TMP[k] = (S[k] - WIDCT[k] * ST[f * NST + ST_SUMC] - nf * AOFF[k]) / nf;
}

// WHAT = soft(WHAT + TMP, lamFlat/mu).
extern "C" __global__ void alm_flat_shrink(double* WHAT, const double* TMP, const double* ST, const int* act, int m)
{
    int f = blockIdx.y;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (!act[f] || i >= m)
        return;
    i64 k = (i64)f * m + i;
    double th = ST[f * NST + ST_LAMF] / ST[f * NST + ST_MU];
    WHAT[k] = soft(WHAT[k] + TMP[k], th);
}

// One block per fit: mean of W_idct, darkfield masks and their counts,
// coeffA = coeff, aOffA = aOff, muNew.
extern "C" __global__ void alm_masks(unsigned char* HI, unsigned char* LO, const double* WIDCT,
    const double* COEFF, double* COEFFA, const double* AOFF, double* AOFFA, double* ST,
    const int* nn, const int* noff, const int* act, int m, int darkfield)
{
    __shared__ double scr[32];
    int f = blockIdx.x;
    if (!act[f])
        return;
    double* st = ST + f * NST;
    const double* w = WIDCT + (i64)f * m;
    if (darkfield) {
        double s = 0.0;
        for (int i = threadIdx.x; i < m; i += blockDim.x)
            s += w[i];
        double meanW = block_sum(s, scr) / (double)m;
        double nh = 0.0, nl = 0.0;
        for (int i = threadIdx.x; i < m; i += blockDim.x) {
            unsigned char h = w[i] > meanW - 1e-6;
            unsigned char l = w[i] < meanW + 1e-6;
            HI[(i64)f * m + i] = h;
            LO[(i64)f * m + i] = l;
            nh += h;
            nl += l;
        }
        nh = block_sum(nh, scr);
        nl = block_sum(nl, scr);
        if (threadIdx.x == 0) {
            st[ST_MEANW] = meanW;
            st[ST_NHI] = nh;
            st[ST_NLO] = nl;
        }
    }
    int n = nn[f];
    for (int j = threadIdx.x; j < n; j += blockDim.x)
        COEFFA[noff[f] + j] = COEFF[noff[f] + j];
    for (int i = threadIdx.x; i < m; i += blockDim.x)
        AOFFA[(i64)f * m + i] = AOFF[(i64)f * m + i];
    if (threadIdx.x == 0)
        st[ST_MUNEW] = fmin(st[ST_MU] * RHO, st[ST_MUBAR]);
}

// The fused element pass (solver.pass). Grid (m/256, F), 256 threads, one
// pixel per thread looping over the images. Per-image sums of R = D - E
// (all, inside HI, inside LO) and the block's sum of z^2 go to
// PART[(f*nblk + b)*(3*nmax+1) + ...]. Dynamic shared memory:
// 8 warps * 3*nmax doubles.
extern "C" __global__ void alm_pass(double* E, double* Y, double* S, double* VSUM, double* PART,
    const double* D, const double* WT, const double* WIDCT, const double* AOFF, const double* COEFF,
    const int* VALID, const unsigned char* HI, const unsigned char* LO, const double* ST,
    const int* nn, const int* noff, const int* act, int m, int nmax, int darkfield)
{
    extern __shared__ double sh[]; // [8][3*nmax]
    __shared__ double scr[32];
    int f = blockIdx.y;
    if (!act[f])
        return;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    bool in = i < m;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int n = nn[f];
    int stride = 3 * nmax;
    const double* st = ST + f * NST;
    double mu = st[ST_MU], muNew = st[ST_MUNEW];
    double inv = 1.0 / mu, invNew = 1.0 / muNew;
    i64 pk = (i64)f * m + i;
    double w = in ? WIDCT[pk] : 0.0, ao = in ? AOFF[pk] : 0.0;
    bool hi = in && darkfield && HI[pk], lo = in && darkfield && LO[pk];
    double sacc = 0.0, vacc = 0.0, zsq = 0.0;
    i64 base = (i64)noff[f] * m + i;
    for (int j = 0; j < n; j++) {
        double r = 0.0;
        if (in) {
            i64 k = base + (i64)j * m;
            double dv = D[k], yv = Y[k], wt = WT[k];
            double c = COEFF[noff[f] + j];
            double a = w * c + ao;
            double t = dv - a + yv * inv;
            double ev = soft(t, wt * inv);
            E[k] = ev;
            double z = dv - a - ev;
            double yn = yv + mu * z;
            Y[k] = yn;
            zsq += z * z;
            r = dv - ev;
            sacc += r + yn * invNew;
            if (darkfield && VALID[noff[f] + j])
                vacc += dv - ev;
        }
        double rc = warp_sum(r);
        double rh = warp_sum(hi ? r : 0.0);
        double rl = warp_sum(lo ? r : 0.0);
        if (lane == 0) {
            sh[warp * stride + 3 * j] = rc;
            sh[warp * stride + 3 * j + 1] = rh;
            sh[warp * stride + 3 * j + 2] = rl;
        }
    }
    if (in) {
        S[pk] = sacc;
        if (darkfield)
            VSUM[pk] = vacc;
    }
    zsq = block_sum(zsq, scr); // also syncs the shared partials
    int nw = blockDim.x >> 5;
    double* out = PART + ((i64)f * gridDim.x + blockIdx.x) * (stride + 1);
    for (int q = threadIdx.x; q < 3 * n; q += blockDim.x) {
        double s = 0.0;
        for (int k = 0; k < nw; k++)
            s += sh[k * stride + q];
        out[q] = s;
    }
    if (threadIdx.x == 0)
        out[stride] = zsq;
}

// Per-fit control after the pass (one block per fit, 256 threads): combine
// the block partials, new coeff, validity changes (SIGN), the darkfield
// level B1 by the selected method (darkStep's scalars), sum of coeff, mu,
// iteration count and the stop test. DACT[f] says whether the darkfield
// smoothing runs this step.
extern "C" __global__ void alm_control(double* ST, double* COEFF, int* VALID, int* SIGN, int* DACT,
    const double* PART, const double* D, const double* WIDCT, const int* nn, const int* noff, const int* act,
    int nblk, int nmax, int m, int darkfield, int method, double tol, int maxIter)
{
    extern __shared__ double red[]; // [3*nmax+1]
    __shared__ double scr[32];
    int f = blockIdx.x;
    if (!act[f]) {
        if (threadIdx.x == 0)
            DACT[f] = 0;
        return;
    }
    int n = nn[f];
    int stride = 3 * nmax + 1;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    double* st = ST + f * NST;
    const double* part = PART + (i64)f * nblk * stride;
    // Each warp reduces some of the values over the blocks, in a fixed order.
    for (int q = warp; q < 3 * n + 1; q += nw) {
        int qq = q < 3 * n ? q : 3 * nmax; // the last value is z^2
        double s = 0.0;
        for (int b = lane; b < nblk; b += 32)
            s += part[(i64)b * stride + qq];
        s = warp_sum(s);
        if (lane == 0)
            red[q] = s;
    }
    // DarkfieldDarkest: regression of the darkest image on W across pixels.
    double cov = 0.0, vw = 0.0;
    if (darkfield && method == DARK_DARKEST) {
        const double* d0 = D + (i64)noff[f] * m;
        const double* w = WIDCT + (i64)f * m;
        double d0m = st[ST_D0MEAN], mw = st[ST_MEANW];
        for (int i = threadIdx.x; i < m; i += blockDim.x) {
            double dw = w[i] - mw;
            cov += (d0[i] - d0m) * dw;
            vw += dw * dw;
        }
        cov = block_sum(cov, scr);
        vw = block_sum(vw, scr);
    }
    __syncthreads();
    if (threadIdx.x != 0)
        return;
    double nf = (double)n;
    double zsq = red[3 * n];
    double total = 0.0;
    for (int j = 0; j < n; j++)
        total += red[3 * j];
    for (int j = 0; j < n; j++)
        COEFF[noff[f] + j] = fmax(0.0, red[3 * j] * nf / total);
    double mu = st[ST_MU];
    int dact = 0;
    if (darkfield) {
        double meanR = total / ((double)m * nf);
        int k = 0;
        double t1 = 0, t2 = 0, t3 = 0, t4 = 0, sumCv = 0;
        double nHi = st[ST_NHI], nLo = st[ST_NLO];
        for (int j = 0; j < n; j++) {
            double c = COEFF[noff[f] + j];
            int v = c < 1.0;
            int old = VALID[noff[f] + j];
            SIGN[noff[f] + j] = v == old ? 0 : (v ? 1 : -1);
            VALID[noff[f] + j] = v;
            if (!v)
                continue;
            k++;
            sumCv += c;
            if (method == DARK_ORIGINAL) {
                double b1c = (red[3 * j + 1] / nHi - red[3 * j + 2] / nLo) / meanR;
                t1 += c * c;
                t2 += c;
                t3 += b1c;
                t4 += c * b1c;
            }
        }
        st[ST_K] = (double)k;
        if (k > 0) {
            double meanW = st[ST_MEANW];
            double b1 = 0.0;
            if (method == DARK_DARKEST) {
                double beta = vw > 0.0 ? cov / vw : 0.0;
                b1 = (st[ST_D0MEAN] - beta * meanW) / meanW;
            } else {
                double t5 = t2 * t3 - (double)k * t4;
                if (t5 != 0.0)
                    b1 = (t1 * t3 - t2 * t4) / t5;
            }
            b1 = fmax(b1, 0.0);
            b1 = fmin(b1, st[ST_B1UP] / meanW);
            st[ST_B1] = b1;
            st[ST_MEANCV] = sumCv / (double)k;
            st[ST_TH] = st[ST_LAMD] / (ENT2 * mu);
            dact = 1;
        }
    }
    DACT[f] = dact;
    double sc = 0.0;
    for (int j = 0; j < n; j++)
        sc += COEFF[noff[f] + j];
    st[ST_SUMC] = sc;
    st[ST_TOTAL] = total;
    st[ST_ZSQ] = zsq;
    st[ST_MU] = st[ST_MUNEW];
    double it = st[ST_ITER] + 1.0;
    st[ST_ITER] = it;
    st[ST_DONE] = (sqrt(zsq) / st[ST_DNORM] < tol || it >= (double)maxIter) ? 1.0 : 0.0;
}

// Darkfield offset, first half (one block per fit, 1024 threads): fix up
// VSUM for the images whose validity changed (always, when darkfield is on),
// then, when DACT, A1 = VSUM/k - meanCv*W_idct, minus its mean twice, minus
// B_offset, into TMP.
extern "C" __global__ void alm_dark_a1(double* TMP, double* VSUM, const double* D, const double* E,
    const double* WIDCT, const int* SIGN, const double* ST, const int* nn, const int* noff,
    const int* act, const int* DACT, int m)
{
    __shared__ double scr[32];
    int f = blockIdx.x;
    if (!act[f])
        return;
    int n = nn[f];
    const int* sg = SIGN + noff[f];
    i64 pb = (i64)f * m;
    i64 eb = (i64)noff[f] * m;
    for (int i = threadIdx.x; i < m; i += blockDim.x) {
        double v = VSUM[pb + i];
        for (int j = 0; j < n; j++) {
            int s = sg[j];
            if (s == 0)
                continue;
            i64 k = eb + (i64)j * m + i;
            v += (double)s * (D[k] - E[k]);
        }
        VSUM[pb + i] = v;
    }
    if (!DACT[f])
        return;
    const double* st = ST + f * NST;
    double kf = st[ST_K], meanCv = st[ST_MEANCV], b1 = st[ST_B1], meanW = st[ST_MEANW];
    double s = 0.0;
    for (int i = threadIdx.x; i < m; i += blockDim.x) {
        double a = VSUM[pb + i] / kf - meanCv * WIDCT[pb + i];
        TMP[pb + i] = a;
        s += a;
    }
    double ma = block_sum(s, scr) / (double)m;
    s = 0.0;
    for (int i = threadIdx.x; i < m; i += blockDim.x) {
        double a = TMP[pb + i] - ma;
        TMP[pb + i] = a;
        s += a;
    }
    double ma2 = block_sum(s, scr) / (double)m;
    for (int i = threadIdx.x; i < m; i += blockDim.x) {
        double bOff = b1 * meanW - b1 * WIDCT[pb + i];
        TMP[pb + i] = TMP[pb + i] - ma2 - bOff;
    }
}

// X = soft(X, th) for the fits in DACT.
extern "C" __global__ void alm_dark_soft(double* X, const double* ST, const int* DACT, int m)
{
    int f = blockIdx.y;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (!DACT[f] || i >= m)
        return;
    i64 k = (i64)f * m + i;
    X[k] = soft(X[k], ST[f * NST + ST_TH]);
}

// AOFF = soft(X, th) + B_offset for the fits in DACT (X = idct of the
// shrunk coefficients).
extern "C" __global__ void alm_dark_out(double* AOFF, const double* X, const double* WIDCT, const double* ST,
    const int* DACT, int m)
{
    int f = blockIdx.y;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (!DACT[f] || i >= m)
        return;
    i64 k = (i64)f * m + i;
    const double* st = ST + f * NST;
    double b1 = st[ST_B1];
    double bOff = b1 * st[ST_MEANW] - b1 * WIDCT[k];
    AOFF[k] = soft(X[k], st[ST_TH]) + bOff;
}

// ------------------------------------------------------------- solve end

// After a solve (fits in act): OFFSET = AOFF + b1*W_idct; the means of
// W_idct, A_offsetA and coeffA for the reweighting and the flatfield.
// One block per fit.
extern "C" __global__ void alm_end_offset(double* OFFSET, double* ST, const double* AOFF, const double* AOFFA,
    const double* WIDCT, const double* COEFFA, const int* nn, const int* noff, const int* act, int m)
{
    __shared__ double scr[32];
    int f = blockIdx.x;
    if (!act[f])
        return;
    double* st = ST + f * NST;
    i64 pb = (i64)f * m;
    double b1 = st[ST_B1];
    double sw = 0.0, so = 0.0;
    for (int i = threadIdx.x; i < m; i += blockDim.x) {
        OFFSET[pb + i] = AOFF[pb + i] + b1 * WIDCT[pb + i];
        sw += WIDCT[pb + i];
        so += AOFFA[pb + i];
    }
    sw = block_sum(sw, scr);
    so = block_sum(so, scr);
    if (threadIdx.x == 0) {
        int n = nn[f];
        double mc = 0.0;
        for (int j = 0; j < n; j++)
            mc += COEFFA[noff[f] + j];
        st[ST_MEANW] = sw / (double)m; // mw of reweight
        st[ST_TOTAL] = so / (double)m; // mo of reweight
        st[ST_MEANCV] = mc / (double)n; // mc of the flatfield
    }
}

// Reweighting, first pass: WT = 1/(|E*inv| + eps) with inv = 1/(mw*coeffA[j]
// + mo + 1e-6); per-block sums into PART[f*nblk + b]. Grid (nblk, F).
extern "C" __global__ void alm_reweight(double* WT, double* PART, const double* E, const double* COEFFA,
    const double* ST, const int* nn, const int* noff, const int* act, int m, double eps)
{
    __shared__ double scr[32];
    int f = blockIdx.y;
    if (!act[f])
        return;
    const double* st = ST + f * NST;
    double mw = st[ST_MEANW], mo = st[ST_TOTAL];
    i64 len = (i64)nn[f] * m;
    i64 base = (i64)noff[f] * m;
    double s = 0.0;
    for (i64 k = (i64)blockIdx.x * blockDim.x + threadIdx.x; k < len; k += (i64)blockDim.x * gridDim.x) {
        int j = (int)(k / m);
        double inv = 1.0 / (mw * COEFFA[noff[f] + j] + mo + 1e-6);
        double v = 1.0 / (fabs(E[base + k] * inv) + eps);
        WT[base + k] = v;
        s += v;
    }
    s = block_sum(s, scr);
    if (threadIdx.x == 0)
        PART[(i64)f * gridDim.x + blockIdx.x] = s;
}

// Reweighting, second pass: WT *= m*n / sum. Grid (nblk, F); every block
// sums the nblk partials in the same order.
extern "C" __global__ void alm_reweight_scale(double* WT, const double* PART, const int* nn, const int* noff,
    const int* act, int m)
{
    __shared__ double scale;
    int f = blockIdx.y;
    if (!act[f])
        return;
    if (threadIdx.x == 0) {
        double s = 0.0;
        for (int b = 0; b < gridDim.x; b++)
            s += PART[(i64)f * gridDim.x + b];
        scale = (double)nn[f] * (double)m / s;
    }
    __syncthreads();
    i64 len = (i64)nn[f] * m;
    i64 base = (i64)noff[f] * m;
    for (i64 k = (i64)blockIdx.x * blockDim.x + threadIdx.x; k < len; k += (i64)blockDim.x * gridDim.x)
        WT[base + k] *= scale;
}

// Flatfield of the round and the convergence sums (one block per fit):
// FLATCUR = W_idct*mc + A_offsetA - OFFSET, divided by its mean; the sums of
// |flat - flatLast|, |flatLast|, |offset - darkLast|, |darkLast|; then
// FLATLAST = FLATCUR, DARKLAST = OFFSET.
extern "C" __global__ void alm_end_flat(double* FLATLAST, double* DARKLAST, double* FLATCUR, double* ST,
    const double* WIDCT, const double* AOFFA, const double* OFFSET, const int* act, int m)
{
    __shared__ double scr[32];
    int f = blockIdx.x;
    if (!act[f])
        return;
    double* st = ST + f * NST;
    double mc = st[ST_MEANCV];
    i64 pb = (i64)f * m;
    double s = 0.0;
    for (int i = threadIdx.x; i < m; i += blockDim.x) {
        double v = WIDCT[pb + i] * mc + AOFFA[pb + i] - OFFSET[pb + i];
        FLATCUR[pb + i] = v;
        s += v;
    }
    double mf = block_sum(s, scr) / (double)m;
    double fn = 0, fd = 0, dn = 0, dd = 0;
    for (int i = threadIdx.x; i < m; i += blockDim.x) {
        double v = FLATCUR[pb + i] / mf;
        double fl = FLATLAST[pb + i], dl = DARKLAST[pb + i], o = OFFSET[pb + i];
        fn += fabs(v - fl);
        fd += fabs(fl);
        dn += fabs(o - dl);
        dd += fabs(dl);
        FLATLAST[pb + i] = v;
        DARKLAST[pb + i] = o;
    }
    fn = block_sum(fn, scr);
    fd = block_sum(fd, scr);
    dn = block_sum(dn, scr);
    dd = block_sum(dd, scr);
    if (threadIdx.x == 0) {
        st[ST_FNUM] = fn;
        st[ST_FDEN] = fd;
        st[ST_DNUM] = dn;
        st[ST_DDEN] = dd;
    }
}

// Fills n doubles with v (grid-stride).
extern "C" __global__ void fill_f64(double* x, double v, i64 n)
{
    GRID_STRIDE(k, n)
    x[k] = v;
}

// ------------------------------------------------------------------- DCT

// One pass of the separable 2-D transform for the fits in act: out[f][v][y] =
// sum_x M[v][x] * in[f][y][x] (rows transformed, written transposed). Two
// passes with M = C give the orthonormal DCT-II, two with M = C^T its
// inverse. Grid (ceil(p/32), ceil(p/32), F), block (32, 32).
extern "C" __global__ void dct_pass(double* out, const double* in, const double* M, int p, const int* act)
{
    __shared__ double Ms[32][33];
    __shared__ double Is[32][33];
    int f = blockIdx.z;
    if (!act[f])
        return;
    int tx = threadIdx.x, ty = threadIdx.y;
    int y0 = blockIdx.x * 32, v0 = blockIdx.y * 32;
    const double* src = in + (i64)f * p * p;
    double acc = 0.0;
    for (int x0 = 0; x0 < p; x0 += 32) {
        int x = x0 + tx;
        Ms[ty][tx] = (v0 + ty < p && x < p) ? M[(i64)(v0 + ty) * p + x] : 0.0;
        Is[ty][tx] = (y0 + ty < p && x < p) ? src[(i64)(y0 + ty) * p + x] : 0.0;
        __syncthreads();
        for (int k = 0; k < 32; k++)
            acc += Ms[ty][k] * Is[tx][k];
        __syncthreads();
    }
    int y = y0 + tx, v = v0 + ty;
    if (y < p && v < p)
        out[(i64)f * p * p + (i64)v * p + y] = acc;
}

// ------------------------------------------------------------ profiles

// Flatfield normalisation (basic.fitOne's end), one block per profile:
// mean over the float32 values in float64; if any value is < 0 (or NaN) or
// the mean is not > 0, the flatfield becomes ones (and OK[f] = 0), else
// flat = float32(flat/mean).
extern "C" __global__ void flat_normalise(float* FLAT, int* OK, i64 len)
{
    __shared__ double scr[32];
    int f = blockIdx.x;
    float* x = FLAT + (i64)f * len;
    double s = 0.0, bad = 0.0;
    for (i64 k = threadIdx.x; k < len; k += blockDim.x) {
        float v = x[k];
        s += (double)v;
        if (!(v >= 0.0f))
            bad += 1.0;
    }
    s = block_sum(s, scr);
    bad = block_sum(bad, scr);
    double mean = s / (double)len;
    bool ok = bad == 0.0 && mean > 0.0;
    for (i64 k = threadIdx.x; k < len; k += blockDim.x)
        x[k] = ok ? (float)((double)x[k] / mean) : 1.0f;
    if (threadIdx.x == 0)
        OK[f] = ok;
}
