// The OME-TIFF's Huffman-only tiles on the device (internal/ometiff's
// Coder; ometiff.CPUCoder is the reference, byte for byte): the predictor
// with each block's byte counts and Adler-32 sums, then the blocks' coded
// bits. The codes, headers and framing are made on the host between the
// two kernels.
#include "common.cuh"

// df_count: CUDA block i is deflate block i of the ts x ts tiles of the
// H x W uint16 image p (tilesX across, row-major; tile t = i / bpt): the
// bytes [b*BB, min((b+1)*BB, 2*ts*ts)) of the tile's predicted bytes, b =
// i % bpt. A tile sample (row r, column c; 0 outside the image) minus the
// sample left of it (c > 0), as uint16, goes little-endian to
// pred[t*2*ts*ts + 2*(r*ts + c)]; hist[256*i + x] counts the block's bytes
// and sums[2*i], sums[2*i+1] are its Adler sums s1 = sum x_j and
// s2 = sum (L - j + 1) x_j over its L bytes (exact). Blocks of 256
// threads, each a contiguous run of samples.
extern "C" __global__ void df_count(unsigned char* pred, unsigned int* hist, unsigned long long* sums,
                                    const unsigned short* p, int H, int W, int ts, int tilesX, int bpt, int BB)
{
    __shared__ unsigned int h[256];
    __shared__ unsigned long long s1, s2;
    for (int k = threadIdx.x; k < 256; k += blockDim.x)
        h[k] = 0;
    if (threadIdx.x == 0) {
        s1 = 0;
        s2 = 0;
    }
    __syncthreads();
    i64 i = blockIdx.x;
    int t = (int)(i / bpt), b = (int)(i % bpt);
    i64 TB = 2 * (i64)ts * ts;
    i64 o0 = (i64)b * BB, o1 = min(o0 + (i64)BB, TB);
    int ns = (int)((o1 - o0) / 2);
    int per = (ns + blockDim.x - 1) / blockDim.x;
    int k0 = min((int)threadIdx.x * per, ns), k1 = min(k0 + per, ns);
    int y0 = (t / tilesX) * ts, x0 = (t % tilesX) * ts;
    i64 first = o0 / 2;
    unsigned char* dst = pred + (i64)t * TB + o0;
    unsigned long long a1 = 0, a2 = 0;
    for (int k = k0; k < k1; k++) {
        i64 s = first + k;
        int r = (int)(s / ts), c = (int)(s % ts);
        int y = y0 + r, x = x0 + c;
        unsigned v = (y < H && x < W) ? (unsigned)p[(i64)y * W + x] : 0u;
        unsigned u = (c > 0 && y < H && x - 1 < W) ? (unsigned)p[(i64)y * W + x - 1] : 0u;
        unsigned d = (v - u) & 0xffffu;
        unsigned lo = d & 255u, hi = d >> 8;
        dst[2 * k] = (unsigned char)lo;
        dst[2 * k + 1] = (unsigned char)hi;
        atomicAdd(&h[lo], 1u);
        atomicAdd(&h[hi], 1u);
        a1 += lo;
        a2 += a1;
        a1 += hi;
        a2 += a1;
    }
    if (k1 > k0) {
        // the bytes after this run in the block weigh each of its bytes once more
        atomicAdd(&s1, a1);
        atomicAdd(&s2, a2 + (unsigned long long)(2 * (ns - k1)) * a1);
    }
    __syncthreads();
    for (int k = threadIdx.x; k < 256; k += blockDim.x)
        hist[256 * i + k] = h[k];
    if (threadIdx.x == 0) {
        sums[2 * i] = s1;
        sums[2 * i + 1] = s2;
    }
}

// df_code: CUDA block i codes deflate block i when at[i] >= 0: its bytes
// in pred (as df_count wrote them), byte x as lut[256*i + x] = code |
// length << 16 (the code bit-reversed, so sent LSB first), into the zeroed
// little-endian 32-bit words out from bit at[i]. Each of the 256 threads
// (blocks of exactly 256) codes a contiguous run of the block's bytes from
// the bit the runs before it end at; words shared with a neighbouring run,
// block or header are ORed atomically.
extern "C" __global__ void df_code(unsigned int* out, const unsigned char* pred, const unsigned int* lut,
                                   const i64* at, int ts, int bpt, int BB)
{
    __shared__ unsigned int code[256];
    __shared__ unsigned int bits[256];
    i64 i = blockIdx.x;
    i64 start = at[i];
    if (start < 0)
        return; // the same for the whole block
    code[threadIdx.x] = lut[256 * i + threadIdx.x];
    __syncthreads();
    int t = (int)(i / bpt), b = (int)(i % bpt);
    i64 TB = 2 * (i64)ts * ts;
    i64 o0 = (i64)b * BB, o1 = min(o0 + (i64)BB, TB);
    int L = (int)(o1 - o0);
    int per = (L + 255) / 256;
    int j0 = min((int)threadIdx.x * per, L), j1 = min(j0 + per, L);
    const unsigned char* src = pred + (i64)t * TB + o0;
    unsigned n = 0;
    for (int j = j0; j < j1; j++)
        n += code[src[j]] >> 16;
    bits[threadIdx.x] = n;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned acc = 0;
        for (int k = 0; k < 256; k++) {
            unsigned v = bits[k];
            bits[k] = acc;
            acc += v;
        }
    }
    __syncthreads();
    i64 pos = start + bits[threadIdx.x];
    i64 w = pos >> 5;
    unsigned long long acc = 0;
    unsigned nb = (unsigned)(pos & 31);
    for (int j = j0; j < j1; j++) {
        unsigned e = code[src[j]];
        acc |= (unsigned long long)(e & 0xffffu) << nb;
        nb += e >> 16;
        if (nb >= 32) {
            atomicOr(&out[w], (unsigned)acc);
            w++;
            acc >>= 32;
            nb -= 32;
        }
    }
    if (j1 > j0 && nb > 0)
        atomicOr(&out[w], (unsigned)acc);
}
