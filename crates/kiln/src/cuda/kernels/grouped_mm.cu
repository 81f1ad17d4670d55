// Grouped GEMM, torch._grouped_mm's 2-D × 3-D form: out[r, :] = a[r, :] · b[g] for the rows
// r of group g, [offs[g − 1], offs[g]) (int32 cumulative ends, offs[−1] = 0). The ends are
// read here, on the device, so a mixture-of-experts layer sizes its groups without a host
// sync. Rows past the last end come out zero, as on the CPU backend. Ends that go
// backwards or past M cannot be refused without a sync; they are clamped (each end is the
// running maximum of the ends so far, at most M) as the CPU backend clamps them, so no row
// is written twice.
//
// A block computes a 64×64 tile of one group's rows, four warps of 32×32, K in steps of 32
// through shared memory: bf16 / f16 on mma.sync m16n8k16 with f32 accumulation, f32 on
// FMAs. Any strides are read, so views (a transposed `[G, N, K]` weight, as F.linear
// stores experts) need no copy.
//
// Two ways in. The common layouts (16-bit types, a's rows and one of b's K or N axes
// contiguous, 16-byte aligned, K — and N when b's N axis is the contiguous one — a
// multiple of 8) take 16-byte asynchronous copies, GM_STAGES K steps in flight, and
// fragments by ldmatrix (.trans for b stored N-contiguous). Everything else, f32 included,
// takes element loads, one K step at a time. Rows are padded (80 or 144 bytes) so that
// ldmatrix's eight 16-byte row reads fall in distinct banks.
//
// The grid is one-dimensional: block b takes column tile b % ceil(N/64) of row tile
// b / ceil(N/64). Column tiles run fastest so that the blocks resident at once share a few
// row tiles: each 64-row slice of a is read from memory once and each expert's b while its
// row tiles run (row tiles fastest streamed all of a once per column tile: 3.2 GB at 4096
// Qwen3-30B-A3B tokens). There are at most ceil(M/64) + G + 1 row tiles (a group boundary
// adds at most one partial tile; group G is the zero rows past the last end). A block finds
// its group by a block-wide scan of the ends; blocks past the last tile exit.

#define GM_BM 64
#define GM_BN 64
#define GM_BK 32
// Row pitch, in elements, of tiles stored K-contiguous (a; b when its K axis is
// contiguous) and of b tiles stored N-contiguous.
#define GM_PAD 40
#define GM_NPAD 72
#define GM_STAGES 3
#define GM_THREADS 128
// Bytes of one operand's stages (the larger of a [64][GM_PAD] and a [32][GM_NPAD] 16-bit
// tile per stage); the element-load path uses the first stage, f32 included.
#define GM_OPERAND_BYTES (GM_STAGES * GM_BM * GM_PAD * 2)

// GmStep<T>::run: one 32-deep K step of a warp's 32×32 block from the shared tiles into
// acc, in mma.sync's D layout (register 2h + c of acc[i][j] is row wm + 16i + gq + 8h,
// column wn + 8j + 2tq + c). 16-bit operands: mma.sync m16n8k16 with f32 accumulation
// (fragment layouts in common.cuh).
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
                for (int j = 0; j < 4; ++j) mma_16816<T>(acc[i][j], af[i], bf[j]);
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

// The 16-byte path's K loop (see the top): a tile at shared address `as`, b at `bs`, one
// stage each GM_BM·GM_PAD·2 bytes apart; b stored [n][k] when `b_kmajor`, else [k][n].
template <typename T>
__device__ __forceinline__ void gm_loop_async(float (*acc)[4][4], const T* __restrict__ a, i64 sam,
                                              const T* __restrict__ bg, i64 sbk, i64 sbn, bool b_kmajor, unsigned as,
                                              unsigned bs, int m0, int m1, int n0, int N, int K) {
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int wm = (warp >> 1) * 32, wn = (warp & 1) * 32;
    const unsigned stage_bytes = GM_BM * GM_PAD * 2;
    const int steps = (K + GM_BK - 1) / GM_BK;
    auto load = [&](int step) {
        const int k0 = step * GM_BK;
        const unsigned sa = as + (step % GM_STAGES) * stage_bytes, sb = bs + (step % GM_STAGES) * stage_bytes;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int id = tid + i * GM_THREADS, r = id >> 2, kc = (id & 3) * 8, k = k0 + kc;
            const bool ok = m0 + r < m1 && k < K;
            cp_async16(sa + (r * GM_PAD + kc) * 2, ok ? a + (i64)(m0 + r) * sam + k : a, ok);
            if (b_kmajor) {
                const bool okb = n0 + r < N && k < K;
                cp_async16(sb + (r * GM_PAD + kc) * 2, okb ? bg + (i64)(n0 + r) * sbn + k : bg, okb);
            } else {
                const int kr = id >> 3, nc = (id & 7) * 8;
                const bool okb = k0 + kr < K && n0 + nc < N;
                cp_async16(sb + (kr * GM_NPAD + nc) * 2, okb ? bg + (i64)(k0 + kr) * sbk + n0 + nc : bg, okb);
            }
        }
    };
#pragma unroll
    for (int s = 0; s < GM_STAGES - 1; ++s) {
        if (s < steps) load(s);
        cp_async_commit();
    }
    for (int step = 0; step < steps; ++step) {
        // This step's copies have landed (later ones may still fly) and every warp is done
        // with the stage that the next load overwrites (read in step − 1).
        cp_async_wait<GM_STAGES - 2>();
        __syncthreads();
        if (step + GM_STAGES - 1 < steps) load(step + GM_STAGES - 1);
        cp_async_commit();
        const unsigned sa = as + (step % GM_STAGES) * stage_bytes, sb = bs + (step % GM_STAGES) * stage_bytes;
#pragma unroll
        for (int ks = 0; ks < GM_BK; ks += 16) {
            // ldmatrix.x4: lanes 8q..8q+7 address the rows of matrix q. a: matrices (rows
            // 0–7 | 8–15) × (k 0–7 | 8–15) in mma's a0..a3 order. b: (k 0–7, k 8–15) of
            // columns 0–7, then of columns 8–15: b0, b1 of two n8 blocks.
            unsigned af[2][4], bf[4][2];
#pragma unroll
            for (int i = 0; i < 2; ++i)
                ldsm_x4(af[i], sa + ((wm + 16 * i + (lane & 15)) * GM_PAD + ks + (lane >> 4) * 8) * 2, false);
#pragma unroll
            for (int jj = 0; jj < 2; ++jj) {
                const int n = wn + 16 * jj + (lane >> 4) * 8, k = ks + ((lane >> 3) & 1) * 8;
                unsigned r[4];
                if (b_kmajor) ldsm_x4(r, sb + ((n + (lane & 7)) * GM_PAD + k) * 2, false);
                else ldsm_x4(r, sb + ((k + (lane & 7)) * GM_NPAD + n) * 2, true);
                bf[2 * jj][0] = r[0], bf[2 * jj][1] = r[1], bf[2 * jj + 1][0] = r[2], bf[2 * jj + 1][1] = r[3];
            }
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) mma_16816<T>(acc[i][j], af[i], bf[j]);
        }
    }
}

// The element-load path's K loop: any strides, any K, f32 too; one K step at a time through
// the first stage of the shared tiles.
template <typename T>
__device__ __forceinline__ void gm_loop_plain(float (*acc)[4][4], const T* __restrict__ a, i64 sam, i64 sak,
                                              const T* __restrict__ bg, i64 sbk, i64 sbn, T (*as)[GM_PAD],
                                              T (*bs)[GM_PAD], int m0, int m1, int n0, int N, int K) {
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const T zero = down<T>(0.f);
    const bool b_k_unit = sbk == 1;
    for (int k0 = 0; k0 < K; k0 += GM_BK) {
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
        GmStep<T>::run(acc, as, bs, (warp >> 1) * 32, (warp & 1) * 32, lane >> 2, lane & 3);
        __syncthreads();
    }
}

__device__ __forceinline__ bool gm_aligned16(const void* p) { return ((unsigned long long)p & 15) == 0; }

template <typename T>
__device__ __forceinline__ void grouped_mm_body(const T* __restrict__ a, i64 sam, i64 sak, const T* __restrict__ b,
                                                i64 sbg, i64 sbk, i64 sbn, const int* __restrict__ offs,
                                                T* __restrict__ out, int M, int N, int K, int G) {
    __shared__ __align__(128) unsigned char tiles[2 * GM_OPERAND_BYTES];
    __shared__ int found[3];
    kiln_after_previous_kernel();
    const int col_tiles = (N + GM_BN - 1) / GM_BN;
    gm_find(offs, M, G, blockIdx.x / col_tiles, found);
    __syncthreads();
    const int g = found[0], m0 = found[1], m1 = found[2], n0 = (blockIdx.x % col_tiles) * GM_BN;
    if (g < 0) return;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gq = lane >> 2, tq = lane & 3;
    const int wm = (warp >> 1) * 32, wn = (warp & 1) * 32;
    float acc[2][4][4];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[i][j][c] = 0.f;
    // Group G (the rows past the last end) multiplies nothing: its tile stays zero.
    if (g < G) {
        const T* bg = b + (i64)g * sbg;
        bool a_vec = sak == 1 && sam % 8 == 0 && K % 8 == 0 && gm_aligned16(a);
        bool b_base = sbg % 8 == 0 && gm_aligned16(b);
        bool b_kmajor = b_base && sbk == 1 && sbn % 8 == 0 && K % 8 == 0;
        bool b_nmajor = b_base && sbn == 1 && sbk % 8 == 0 && N % 8 == 0;
        T(*as)[GM_PAD] = reinterpret_cast<T(*)[GM_PAD]>(tiles);
        T(*bs)[GM_PAD] = reinterpret_cast<T(*)[GM_PAD]>(tiles + GM_OPERAND_BYTES);
        if constexpr (sizeof(T) == 2) {
            if (a_vec && (b_kmajor || b_nmajor)) {
                unsigned base = smem_addr(tiles);
                gm_loop_async<T>(acc, a, sam, bg, sbk, sbn, b_kmajor, base, base + GM_OPERAND_BYTES, m0, m1, n0, N, K);
            } else {
                gm_loop_plain<T>(acc, a, sam, sak, bg, sbk, sbn, as, bs, m0, m1, n0, N, K);
            }
        } else {
            gm_loop_plain<T>(acc, a, sam, sak, bg, sbk, sbn, as, bs, m0, m1, n0, N, K);
        }
    }
    // mma.sync's layout: register 2h + c of acc[i][j] is row 16i + gq + 8h, column 8j + 2tq
    // + c. Column pairs go out as one store when N is even (the pair is then aligned).
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            int r = m0 + wm + 16 * i + gq + 8 * h;
            if (r >= m1) continue;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                int n = n0 + wn + 8 * j + 2 * tq;
                T* o = out + (i64)r * N + n;
                T v0 = down<T>(acc[i][j][2 * h]), v1 = down<T>(acc[i][j][2 * h + 1]);
                if (N % 2 == 0 && n + 1 < N) {
                    struct __align__(2 * sizeof(T)) Pair { T x, y; };
                    *(Pair*)o = Pair{v0, v1};
                } else {
                    if (n < N) o[0] = v0;
                    if (n + 1 < N) o[1] = v1;
                }
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
