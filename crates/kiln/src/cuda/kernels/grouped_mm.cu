// Grouped GEMM, torch._grouped_mm's 2-D × 3-D form: out[r, :] = a[r, :] · b[g] for the rows
// r of group g, [offs[g − 1], offs[g]) (int32 cumulative ends, offs[−1] = 0). The ends are
// read here, on the device, so a mixture-of-experts layer sizes its groups without a host
// sync. Rows past the last end come out zero, as on the CPU backend. Ends that go
// backwards or past M, which the CPU backend refuses, are clamped (each end is the running
// maximum of the ends so far, at most M), so no row is written twice.
//
// A block computes a 64×64 tile of one group's rows, four warps of 32×32, K in steps of 32
// through shared memory: bf16 / f16 on mma.sync m16n8k16 with f32 accumulation, f32 on
// FMAs. Both operands are stored k-contiguous with rows padded to 40 elements (20 words
// for 16-bit types): a warp's fragment reads (8 rows × 4 words) then fall in 32 banks. Any strides are read, so views
// (a transposed `[G, N, K]` weight, as F.linear stores experts) need no copy; loads follow
// whichever of b's K or N strides is 1.
//
// grid.x covers the row tiles of every group, at most ceil(M/64) + G + 1 (a group boundary
// adds at most one partial tile; group G is the zero rows past the last end). A block finds
// its group by a block-wide scan of the ends; blocks past the last tile exit.

#define GM_BM 64
#define GM_BN 64
#define GM_BK 32
#define GM_PAD 40
#define GM_THREADS 128

template <typename T> __device__ void gm_mma(float* d, const unsigned* a, const unsigned* b);
#define KILN_GM_MMA(T, P)                                                                                 \
    template <> __device__ __forceinline__ void gm_mma<T>(float* d, const unsigned* a, const unsigned* b) { \
        asm("mma.sync.aligned.m16n8k16.row.col.f32." #P "." #P ".f32 "                                     \
            "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"                                        \
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                               \
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));                           \
    }
KILN_GM_MMA(kbf, bf16)
KILN_GM_MMA(kh, f16)

// GmStep<T>::run: one 32-deep K step of a warp's 32×32 block from the shared tiles into
// acc, in mma.sync's D layout (register 2h + c of acc[i][j] is row wm + 16i + gq + 8h,
// column wn + 8j + 2tq + c). 16-bit operands: mma.sync m16n8k16 with f32 accumulation; a
// fragment register holds two k-adjacent values: A rows gq and gq + 8 at k 2tq (+8), B
// column gq at k 2tq (+8).
template <typename T> struct GmStep {
    static __device__ __forceinline__ void run(float (*acc)[4][4], const T (*as)[GM_PAD], const T (*bs)[GM_PAD],
                                               int wm, int wn, int gq, int tq) {
#pragma unroll
        for (int ks = 0; ks < GM_BK; ks += 16) {
            unsigned af[2][4], bf[4][2];
            const int c = ks + 2 * tq;
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const int r = wm + 16 * i + gq;
                af[i][0] = *(const unsigned*)&as[r][c];
                af[i][1] = *(const unsigned*)&as[r + 8][c];
                af[i][2] = *(const unsigned*)&as[r][c + 8];
                af[i][3] = *(const unsigned*)&as[r + 8][c + 8];
            }
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                bf[j][0] = *(const unsigned*)&bs[wn + 8 * j + gq][c];
                bf[j][1] = *(const unsigned*)&bs[wn + 8 * j + gq][c + 8];
            }
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) gm_mma<T>(acc[i][j], af[i], bf[j]);
        }
    }
};

// f32: plain FMAs in the same layout (the tensor cores' f32 mode rounds operands to tf32,
// and the CPU backend, like PyTorch's, multiplies in full f32).
template <> struct GmStep<float> {
    static __device__ __forceinline__ void run(float (*acc)[4][4], const float (*as)[GM_PAD],
                                               const float (*bs)[GM_PAD], int wm, int wn, int gq, int tq) {
#pragma unroll 4
        for (int k = 0; k < GM_BK; ++k) {
            float av[2][2], bv[4][2];
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
                for (int h = 0; h < 2; ++h) av[i][h] = as[wm + 16 * i + gq + 8 * h][k];
#pragma unroll
            for (int j = 0; j < 4; ++j)
#pragma unroll
                for (int c = 0; c < 2; ++c) bv[j][c] = bs[wn + 8 * j + 2 * tq + c][k];
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j)
#pragma unroll
                    for (int h = 0; h < 2; ++h)
#pragma unroll
                        for (int c = 0; c < 2; ++c) acc[i][j][2 * h + c] = fmaf(av[i][h], bv[j][c], acc[i][j][2 * h + c]);
        }
    }
};

// Inclusive scan over the block's 128 threads (sum, or max when `take_max`), starting from
// `carry`; `sh` holds 4 ints. Every thread must call it.
__device__ __forceinline__ int gm_scan(int v, bool take_max, int carry, int* sh) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        int u = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v = take_max ? max(v, u) : v + u;
    }
    if (lane == 31) sh[w] = v;
    __syncthreads();
    int pre = carry;
    for (int i = 0; i < w; ++i) pre = take_max ? max(pre, sh[i]) : pre + sh[i];
    __syncthreads();
    return take_max ? max(pre, v) : pre + v;
}

// The row tile `slot` of the groups, in group order: `found` = {group, first row, end row},
// group −1 past the last tile.
__device__ void gm_find(const int* __restrict__ offs, int M, int G, int slot, int* found) {
    __shared__ int sh[4], last[2], ends[GM_THREADS];
    if (threadIdx.x == 0) found[0] = -1;
    int end_carry = 0, tile_carry = 0;
    for (int base = 0; base <= G; base += GM_THREADS) {
        int g = base + (int)threadIdx.x;
        int raw = g < G ? min(max(offs[g], 0), M) : (g == G ? M : 0);
        int end = gm_scan(raw, true, end_carry, sh);
        ends[threadIdx.x] = end;
        __syncthreads();
        int start = threadIdx.x ? ends[threadIdx.x - 1] : end_carry;
        int tiles = g <= G ? (end - start + GM_BM - 1) / GM_BM : 0;
        int upto = gm_scan(tiles, false, tile_carry, sh);
        if (slot >= upto - tiles && slot < upto) {
            found[0] = g;
            found[1] = start + (slot - (upto - tiles)) * GM_BM;
            found[2] = end;
        }
        if (threadIdx.x == GM_THREADS - 1) last[0] = end, last[1] = upto;
        __syncthreads();
        end_carry = last[0];
        tile_carry = last[1];
        __syncthreads();
    }
}

template <typename T>
__device__ __forceinline__ void grouped_mm_body(const T* __restrict__ a, i64 sam, i64 sak, const T* __restrict__ b,
                                                i64 sbg, i64 sbk, i64 sbn, const int* __restrict__ offs,
                                                T* __restrict__ out, int M, int N, int K, int G) {
    __shared__ __align__(16) T as[GM_BM][GM_PAD];
    __shared__ __align__(16) T bs[GM_BN][GM_PAD];
    __shared__ int found[3];
    kiln_after_previous_kernel();
    gm_find(offs, M, G, blockIdx.x, found);
    __syncthreads();
    const int g = found[0], m0 = found[1], m1 = found[2], n0 = blockIdx.y * GM_BN;
    if (g < 0) return;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gq = lane >> 2, tq = lane & 3;
    const int wm = (warp >> 1) * 32, wn = (warp & 1) * 32;
    const T zero = down<T>(0.f);
    float acc[2][4][4];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[i][j][c] = 0.f;
    // Group G (the rows past the last end) multiplies nothing: its tile stays zero.
    const bool b_k_unit = sbk == 1;
    const T* bg = g < G ? b + (i64)g * sbg : b;
    for (int k0 = 0; g < G && k0 < K; k0 += GM_BK) {
        // a: lanes along k, 4 rows per pass. b: lanes along whichever of k and n is unit-stride.
#pragma unroll
        for (int i = 0; i < GM_BM * GM_BK / GM_THREADS; ++i) {
            int r = tid / GM_BK + i * (GM_THREADS / GM_BK), k = k0 + (tid % GM_BK);
            as[r][tid % GM_BK] = (m0 + r < m1 && k < K) ? a[(i64)(m0 + r) * sam + (i64)k * sak] : zero;
        }
#pragma unroll
        for (int i = 0; i < GM_BN * GM_BK / GM_THREADS; ++i) {
            int n, kk;
            if (b_k_unit) n = tid / GM_BK + i * (GM_THREADS / GM_BK), kk = tid % GM_BK;
            else n = tid % GM_BN, kk = tid / GM_BN + i * (GM_THREADS / GM_BN);
            bs[n][kk] = (n0 + n < N && k0 + kk < K) ? bg[(i64)(k0 + kk) * sbk + (i64)(n0 + n) * sbn] : zero;
        }
        __syncthreads();
        GmStep<T>::run(acc, as, bs, wm, wn, gq, tq);
        __syncthreads();
    }
    // GmStep's layout: register 2h + c of acc[i][j] is row 16i + gq + 8h, column 8j + 2tq + c.
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            int r = m0 + wm + 16 * i + gq + 8 * h;
            if (r >= m1) continue;
#pragma unroll
            for (int j = 0; j < 4; ++j)
#pragma unroll
                for (int c = 0; c < 2; ++c) {
                    int n = n0 + wn + 8 * j + 2 * tq + c;
                    if (n < N) out[(i64)r * N + n] = down<T>(acc[i][j][2 * h + c]);
                }
        }
}

#define KILN_GROUPED_MM(S, T)                                                                             \
    extern "C" __global__ void __launch_bounds__(GM_THREADS)                                              \
        grouped_mm_##S(const T* a, i64 sam, i64 sak, const T* b, i64 sbg, i64 sbk, i64 sbn, const int* offs, \
                       T* out, int M, int N, int K, int G) {                                              \
        grouped_mm_body<T>(a, sam, sak, b, sbg, sbk, sbn, offs, out, M, N, K, G);                         \
    }
KILN_GROUPED_MM(bf16, kbf)
KILN_GROUPED_MM(f16, kh)
KILN_GROUPED_MM(f32, float)
