// FP8 family (Tensor::scaled_mm and the FP8 quantiser):
//   fp8_gemv_*            scaled_mm for M <= 16 (decode): streams the [N, K] weight once
//   scaled_mm_epilogue_*  row-wise scales + bias + cast of a unit-scale f32 cuBLASLt product
//   quantize_rows_*       per-row amax, scale = max(amax, 1e-12) / 448, e4m3 values
// FP8 mma / cvt need sm_89+: below that the bodies trap, and the launcher refuses first.


struct e4m3 {};
struct e5m2 {};

// D(16x8, f32) += A(16x32, row) · B(32x8, col) on FP8 tensor cores.
template <typename A, typename B> struct Mma;
#define KILN_MMA(A, B)                                                                           \
    template <> struct Mma<A, B> {                                                               \
        static __device__ __forceinline__ void run(float* d, const unsigned* a, const unsigned* b) { \
            asm("mma.sync.aligned.m16n8k32.row.col.f32." #A "." #B ".f32 "                       \
                "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"                        \
                : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                 \
                : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));             \
        }                                                                                        \
    };
#ifdef KILN_HAS_FP8
KILN_MMA(e4m3, e4m3) KILN_MMA(e4m3, e5m2) KILN_MMA(e5m2, e4m3)
#endif

// ---- fp8_gemv: out[M, N] = (a[M, K] · w[N, K]ᵀ) · scales + bias, for M <= 16 ----
// A block of 4 warps holds 4/KW row groups of NT·8 weight rows; the KW warps of a group
// split K (interleaved 64·U-byte chunks; KW is chosen per shape so that the grid has enough
// warps, each with few steps: a warp's steps wait on DRAM one after another), each lane
// loading 16 contiguous bytes of a weight row per step,
// U·NT loads in flight. The mma's k order is a permutation of memory order, the same for A
// and B (lane group t holds bytes t·16 .. t·16+15 of a 64-byte chunk: bytes 0–7 feed one
// mma, 8–15 the next), so every load is a 16-byte vector with no shuffles. Rows m < 8 of A
// come from lanes' g = m, rows 8..15 from the second A register pair. A group's partial
// sums meet in shared memory.
// Requires: K % 16 == 0, a / w 16-byte aligned, lda / ldw multiples of 16.
// EARLY (the `_early` kernels; ops/scaled_mm.rs launches them as dependents, and only for a
// frozen weight, which no kernel writes): the next kernel may start at once, and this one
// issues its first step's weight loads before it waits for the kernel ahead, then reads A,
// the scales and the bias. In a run of decode ops each weight stream then starts while the
// op before finishes. H200 lab, 2026-12-04 (bench/lab/gemv_pdl_lab.cu, 20-call graph, plain
// -> _early): 1x4096x4096 6.8 -> 6.1 µs, 1x14336x4096 17.4 -> 16.3, 1x4096x1024 4.3 -> 3.9,
// 1x4096x14336 17.2 both; the suite at a1af1a7, after the weight loads lost their row test
// (see wrow below), 1x4096x4096 5.6 µs. Waiting first thing instead gains 0.25 on 1x4096² and
// loses 0.7 on 1x4096x14336. The plain kernels keep every load of a step together (split,
// they lose 0.4-1 µs). Plainly, 1x4096x4096 takes 6.7-6.8 µs, of which reading with this
// kernel's pattern alone is 5.6 (left out one stage at a time: plus the cross-warp sum 6.0,
// plus A loads and scales 6.3, plus the mma, which ptxas emulates on sm_90 with F2FP +
// HMMA, 6.8). What else was tried, with its figures: bench/results/2026-12-04-gemv-lab/README.md.
#define FP8_GEMV_WARPS 4
#define FP8_GEMV_MIN_BLOCKS 4 // per SM, by the launch bound below

// The scales of lane (g, t)'s outputs in a warp with K slice q: rows g (and g + 8 when
// NT = 2) and columns t·2, t·2 + 1 of each 8-row tile (row-wise sa[m]·sb[n], tensor-wise
// sa[0]·sb[0]). Fetched before the K loop's work so that their round trip overlaps it
// instead of following it (lab, 2026-12-04: row-wise 0.1-0.5 µs faster on every decode shape).
template <int NT>
__device__ __forceinline__ void fp8_gemv_scales(const float* sa, const float* sb, int rowwise, i64 n0, int q, int g,
                                                int t, int M, int N, float (&srow)[2], float (&scol)[NT][2]) {
#pragma unroll
    for (int h = 0; h < NT; ++h) srow[h] = q == 0 && g + 8 * h < M ? sa[rowwise ? g + 8 * h : 0] : 0.f;
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
            i64 n = n0 + j * 8 + t * 2 + c;
            scol[j][c] = q == 0 && n < N ? sb[rowwise ? n : 0] : 0.f;
        }
}

template <typename AT, typename BT, typename O, int NT, int U, bool EARLY>
__device__ void fp8_gemv(const unsigned char* a, i64 lda, const unsigned char* w, i64 ldw, const float* sa,
                         const float* sb, int rowwise, const O* bias, O* out, int M, int N, int K, int KW) {
#ifdef KILN_HAS_FP8
    // NT = 1 (M <= 8): accumulators 2, 3 hold rows 8..15, never stored, so they are neither
    // shared nor read (lab, 2026-12-04: _early 1x4096x4096 6.4 -> 6.1 µs).
    constexpr int NACC = NT > 1 ? 4 : 2;
    __shared__ float part[FP8_GEMV_WARPS][NT][4][32];
    if (EARLY) kiln_let_next_kernel_start();
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    int q = warp % KW;  // this warp's K slice within its row group
    i64 n0 = ((i64)blockIdx.x * (FP8_GEMV_WARPS / KW) + warp / KW) * 8 * NT;
    float acc[NT][4];
    // Rows past N read row 0 instead: their columns are never stored, and without a row
    // test in the load predicate ptxas keeps the _early loop's addresses in registers
    // (with it, the NT = 1 _early kernel recomputed every address each step, nvcc 13.0 SASS:
    // 148 instructions from the loop head to the first load, against 36, as in the lab's
    // copy tree_pdl, which was 0.2 µs faster on 1x4096x4096).
    const unsigned char* wrow[NT];
#pragma unroll
    for (int j = 0; j < NT; ++j) {
        i64 n = n0 + j * 8 + g;
        wrow[j] = w + (n < N ? n : 0) * ldw;
        acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
    }
    // NT = 1 serves M <= 8: rows 8..15 of A are zero and their loads (and registers) go
    // (H200 lab, 2026-12-03: 142 -> 112 registers, 4 blocks per SM, 1x4096x4096 8.5 -> 6.7 µs).
    bool lo = g < M, hi = NT > 1 && g + 8 < M;
    const unsigned char* arow0 = a + (lo ? g : 0) * lda;
    const unsigned char* arow1 = a + (hi ? g + 8 : 0) * lda;
    float srow[2], scol[NT][2];
    if (!EARLY) fp8_gemv_scales<NT>(sa, sb, rowwise, n0, q, g, t, M, N, srow, scol);
    bool waited = !EARLY;
    const u32x4 zero = {0, 0, 0, 0};
    for (int kb = q * 64 * U; kb < K; kb += KW * 64 * U) {
        u32x4 wv[NT][U], a0[U], a1[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            int k = kb + u * 64 + t * 16;
            bool in = k < K; // K % 16 == 0: a 16-byte piece is wholly inside or outside
#pragma unroll
            for (int j = 0; j < NT; ++j) wv[j][u] = in ? ld_stream16(wrow[j] + k) : zero;
            if (!EARLY) {
                a0[u] = in && lo ? ld_keep16(arow0 + k) : zero;
                a1[u] = in && hi ? ld_keep16(arow1 + k) : zero;
            }
        }
        if (EARLY) {
            if (!waited) {
                i64 after = kiln_wait_previous_kernel();
                arow0 += after;
                arow1 += after;
                waited = true;
                fp8_gemv_scales<NT>(sa, sb, rowwise, n0, q, g, t, M, N, srow, scol);
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                int k = kb + u * 64 + t * 16;
                bool in = k < K;
                a0[u] = in && lo ? ld_after16(arow0 + k) : zero;
                a1[u] = in && hi ? ld_after16(arow1 + k) : zero;
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            unsigned af[2][4] = {{a0[u].x, a1[u].x, a0[u].y, a1[u].y}, {a0[u].z, a1[u].z, a0[u].w, a1[u].w}};
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                unsigned bf[2][2] = {{wv[j][u].x, wv[j][u].y}, {wv[j][u].z, wv[j][u].w}};
                Mma<AT, BT>::run(acc[j], af[0], bf[0]);
                Mma<AT, BT>::run(acc[j], af[1], bf[1]);
            }
        }
    }
    if (!waited) {  // EARLY, and this warp's K slice was empty
        kiln_wait_previous_kernel();
        fp8_gemv_scales<NT>(sa, sb, rowwise, n0, q, g, t, M, N, srow, scol);
    }
    if (KW > 1) {
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int i = 0; i < NACC; ++i) part[warp][j][i][lane] = acc[j][i];
        __syncthreads();
    }
    if (q != 0) return;
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int i = 0; i < NACC; ++i) {
            // Accumulator i of lane (g, t): row g (+8 for i >= 2), column t·2 + (i & 1).
            i64 m = g + (i >= 2 ? 8 : 0), n = n0 + j * 8 + t * 2 + (i & 1);
            if (m >= M || n >= N) continue;
            float v = acc[j][i];
            for (int p = 1; p < KW; ++p) v += part[warp + p][j][i][lane];
            v *= srow[i >> 1] * scol[j][i & 1];
            if (bias) v += up<float>(bias[n]);
            out[m * N + n] = down<O>(v);
        }
#else
    __trap();
#endif
}

// The bound's minimum of 4 blocks per SM makes ptxas issue a step's NT·U weight loads before
// the mma's (with the thread count alone it interleaved them, 1-2 loads in flight) and gives
// 528 resident blocks on an H200, one wave for most decode shapes (ops/scaled_mm.rs:
// gemv_k_warps). H200 lab, 2026-12-03: 1x4096x4096 9.7 -> 6.7 µs, 16x4096x14336 (M x K x N)
// 24 -> 19.1 µs (NT = 2 at 114 registers, against 118 under a bound of 3).
#define KILN_GEMV_ONE(AS, AT, BS, BT, OS, O, NT, U, EARLY, SUFFIX)                                          \
    extern "C" __global__ void __launch_bounds__(32 * FP8_GEMV_WARPS, FP8_GEMV_MIN_BLOCKS)                  \
        fp8_gemv_##AS##_##BS##_##OS##_##NT##SUFFIX(const unsigned char* a, i64 lda, const unsigned char* w,  \
                                                    i64 ldw, const float* sa, const float* sb, int rowwise,  \
                                                    const O* bias, O* out, int M, int N, int K, int KW) {    \
        fp8_gemv<AT, BT, O, NT, U, EARLY>(a, lda, w, ldw, sa, sb, rowwise, bias, out, M, N, K, KW);         \
    }
#define KILN_GEMV(AS, AT, BS, BT, OS, O, NT, U) \
    KILN_GEMV_ONE(AS, AT, BS, BT, OS, O, NT, U, false, ) KILN_GEMV_ONE(AS, AT, BS, BT, OS, O, NT, U, true, _early)
// NT = 1 for M <= 8, 2 for M <= 16 (each activation load then feeds two weight tiles);
// both keep 8 weight loads of 16 bytes in flight per lane (cuda/ops/scaled_mm.rs: gemv_step).
#define KILN_GEMV_OUT(AS, AT, BS, BT) \
    KILN_GEMV(AS, AT, BS, BT, bf16, kbf, 1, 8) KILN_GEMV(AS, AT, BS, BT, bf16, kbf, 2, 4) \
    KILN_GEMV(AS, AT, BS, BT, f16, kh, 1, 8) KILN_GEMV(AS, AT, BS, BT, f16, kh, 2, 4) \
    KILN_GEMV(AS, AT, BS, BT, f32, float, 1, 8) KILN_GEMV(AS, AT, BS, BT, f32, float, 2, 4)
KILN_GEMV_OUT(e4m3, e4m3, e4m3, e4m3) KILN_GEMV_OUT(e4m3, e4m3, e5m2, e5m2) KILN_GEMV_OUT(e5m2, e5m2, e4m3, e4m3)

// ---- row-wise epilogue of the cuBLASLt fallback: out = d · sa[m] · sb[n] + bias[n] ----
template <typename O>
__device__ void epilogue(const float* d, i64 ldd, const float* sa, const float* sb, const O* bias, O* out, i64 M,
                         i64 N) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < M * N; i += (i64)gridDim.x * blockDim.x) {
        i64 m = i / N, n = i % N;
        float v = d[m * ldd + n] * (sa[m] * sb[n]);
        if (bias) v += up<float>(bias[n]);
        out[i] = down<O>(v);
    }
}

#define KILN_EPILOGUE(S, O)                                                                                \
    extern "C" __global__ void scaled_mm_epilogue_##S(const float* d, i64 ldd, const float* sa, const float* sb, \
                                                      const O* bias, O* out, i64 M, i64 N) {                 \
        epilogue<O>(d, ldd, sa, sb, bias, out, M, N);                                                      \
    }
KILN_EPILOGUE(bf16, kbf) KILN_EPILOGUE(f16, kh) KILN_EPILOGUE(f32, float)

// ---- quantize_rows: one block per row of k values ----
// Same f32 arithmetic as fp8::quantize's composed CPU path; `cvt.rn.satfinite` rounds to
// nearest-even like c10's cast, and the clamp to ±448 keeps it from saturating differently.
template <typename T>
__device__ void quantize_rows(const T* x, unsigned char* q, float* scale, i64 rows, i64 k) {
#ifdef KILN_HAS_FP8
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const T* xr = x + r * k;
        float amax = 0.f;
        for (i64 j = threadIdx.x; j < k; j += blockDim.x) {
            float v = fabsf(up<float>(xr[j]));
            amax = (v != v || v > amax) ? v : amax;
        }
        amax = block_max(amax);
        float s = amax != amax ? amax : fmaxf(amax, 1e-12f) / 448.f;
        for (i64 j = threadIdx.x; j < k; j += blockDim.x) {
            float v = up<float>(xr[j]) / s;
            v = v != v ? v : fminf(fmaxf(v, -448.f), 448.f);
            unsigned short pair;
            asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.f), "f"(v));
            q[r * k + j] = (unsigned char)(pair & 0xFF);
        }
        if (threadIdx.x == 0) scale[r] = s;
        __syncthreads();
    }
#else
    __trap();
#endif
}

#define KILN_QUANTIZE(S, T) \
    extern "C" __global__ void quantize_rows_##S(const T* x, unsigned char* q, float* s, i64 rows, i64 k) { \
        quantize_rows<T>(x, q, s, rows, k); \
    }
KILN_QUANTIZE(bf16, kbf) KILN_QUANTIZE(f16, kh) KILN_QUANTIZE(f32, float)
