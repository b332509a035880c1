// The QC's plane measures on the device (internal/planestats: the same
// integers as planestats.Of): a uint16 plane's histogram, its 4-neighbour
// Laplacian's moments per block, and the pixelwise maximum over planes.
#include "common.cuh"

// ps_hist adds the n-pixel uint16 plane p to hist (65536 bins). The lanes
// of a warp holding the same value add once (warp-aggregated), so a
// constant background costs one atomic per warp. 1-D grid, blocks of a
// multiple of 32 threads (the loop's base is warp-uniform).
extern "C" __global__ void ps_hist(unsigned long long* hist, const unsigned short* p, i64 n)
{
    int lane = threadIdx.x & 31;
    i64 stride = (i64)blockDim.x * gridDim.x;
    for (i64 base = (i64)blockIdx.x * blockDim.x + threadIdx.x - lane; base < n; base += stride) {
        i64 i = base + lane;
        unsigned v = i < n ? (unsigned)p[i] : 0x10000u;
        unsigned peers = __match_any_sync(0xffffffffu, v);
        if (v < 0x10000u && lane == __ffs(peers) - 1)
            atomicAdd(&hist[v], (unsigned long long)__popc(peers));
    }
}

// ps_lap_moments: block (bx, by) = (blockIdx.x, blockIdx.y) of B x B px of
// the H x W plane p; mom[3*(by*gridDim.x+bx) + {0,1,2}] = the count, sum
// and sum of squares of L = 4 p(y,x) - p(y-1,x) - p(y+1,x) - p(y,x-1) -
// p(y,x+1) over the block's interior pixels (1 <= y < H-1, 1 <= x < W-1).
// Integer sums: exact, in any order. Blocks of 256 threads.
extern "C" __global__ void ps_lap_moments(long long* mom, const unsigned short* p, int H, int W, int B)
{
    __shared__ long long ss[32];
    __shared__ unsigned long long ss2[32];
    int x0 = max(1, (int)blockIdx.x * B), x1 = min(W - 1, ((int)blockIdx.x + 1) * B);
    int y0 = max(1, (int)blockIdx.y * B), y1 = min(H - 1, ((int)blockIdx.y + 1) * B);
    int bw = max(0, x1 - x0), bh = max(0, y1 - y0);
    i64 cnt = (i64)bw * bh;
    long long s = 0;
    unsigned long long s2 = 0;
    for (i64 t = threadIdx.x; t < cnt; t += blockDim.x) {
        int y = y0 + (int)(t / bw), x = x0 + (int)(t % bw);
        i64 o = (i64)y * W + x;
        long long l = 4 * (long long)p[o] - (long long)p[o - W] - (long long)p[o + W] - (long long)p[o - 1] - (long long)p[o + 1];
        s += l;
        s2 += (unsigned long long)(l * l);
    }
    for (int o = 16; o > 0; o >>= 1) {
        s += __shfl_down_sync(0xffffffffu, s, o);
        s2 += __shfl_down_sync(0xffffffffu, s2, o);
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    if (lane == 0) {
        ss[warp] = s;
        ss2[warp] = s2;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        long long ts = 0;
        unsigned long long ts2 = 0;
        for (int k = 0; k < nw; k++) {
            ts += ss[k];
            ts2 += ss2[k];
        }
        i64 b = 3 * ((i64)blockIdx.y * gridDim.x + blockIdx.x);
        mom[b] = cnt;
        mom[b + 1] = ts;
        mom[b + 2] = (long long)ts2;
    }
}

// ps_max_u16: dst[i] = max(dst[i], src[i]) for i < n.
extern "C" __global__ void ps_max_u16(unsigned short* dst, const unsigned short* src, i64 n)
{
    GRID_STRIDE(i, n)
    {
        unsigned short v = src[i];
        if (v > dst[i])
            dst[i] = v;
    }
}
