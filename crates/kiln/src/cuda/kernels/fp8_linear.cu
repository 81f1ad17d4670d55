// FP8-weight linear at decode ("w8a16"; Tensor::linear_fp8 for 1 <= M <= 16 rows of bf16 / f16):
//   out[M, N] = round_T((x[M, K] · w[N, K]ᵀ) · scale + bias)
// x: T = bf16 or f16, rows ldx elements apart; w: float8_e4m3fn [N, K], rows ldw bytes apart;
// scale: f32, one (per tensor) or N (per output row); bias: [N] of T (ldb elements apart) or
// none. Accumulated in f32, rounded once to T: F.linear(x, w.dequantize()) up to summation order.
//
// Why w8a16 instead of quantising x to e4m3 (the FP8 path: a `quantize_rows` launch, then
// FP8 mma): at decode the weight is all the traffic, so widening it in registers costs no
// bandwidth, saves a launch, and keeps x's 8 (bf16) / 11 (f16) significant bits instead of 4.
//
// Floor: N·K weight bytes (+ 2·M·K + 2·M·N + 4·N) over 4.1 TB/s; 1×4096×4096 moves 16.8 MB,
// 4.1 µs. The 2·M·N·K FLOPs are negligible next to the tensor cores' rate.
//
// Layout (cuda/ops/fp8_linear.rs picks RT, KW and the warps per block):
// - mma.sync m16n8k16 with the WEIGHT as operand A (16 output features × 16 k) and x as
//   operand B (16 k × 8 x rows), so D is a 16 × 8 tile of outᵀ. M <= 8 then wastes no
//   tensor-core work on the weight side; M <= 16 (MT = 2) runs a second mma on the same A.
// - A warp owns 16·RT weight rows; lane (g = lane / 4, t = lane % 4) streams rows g and g + 8
//   of each 16-row tile. The KW warps of a row group split K in interleaved steps of U
//   64-byte chunks and meet in shared memory. Per step a lane issues 2·RT·U = 8 weight loads
//   of 16 bytes (`ld.global.nc.L1::no_allocate`, read once) and 2·MT·U activation loads
//   (plain `ld.global.nc`: x is re-read by every warp, so it stays in L1).
// - K permutation (as fp8_gemv): in chunk c the lane loads bytes [c·64 + t·16, +16) of its
//   weight rows, and the 32 bytes of x rows g (and g + 8) at the same k. Weight word j
//   (bytes 4j..4j+3 of the 16) feeds mma j: its two bf16x2 / f16x2 halves are A registers
//   a0 / a2 (row g) and a1 / a3 (row g + 8), and B registers b0 / b1 hold the x values of the
//   same four k, in the same order. The mma only needs A's k order to equal B's, so every
//   load is one 16-byte vector and no value crosses lanes.
// - Widening, exact: f16 by `cvt.rn.f16x2.e4m3x2` (bytes 4j, 4j+1 | 4j+2, 4j+3; B is x's words
//   as loaded). bf16 has no such cvt before sm_100: the halves take bytes (4j, 4j+2) and
//   (4j+1, 4j+3) so that two shifts and selects place them — bf16 bits
//   ((b & 0x80) << 8) | ((b & 0x7F) << 4) are the e4m3 value · 2^-120, subnormals included —
//   then one `fma.rn.bf16x2` by 2^120 (exact; bf16 FMA keeps subnormal inputs), and B pairs
//   x's values with one `prmt` per register.
// - NaN: e4m3 0x7F / 0xFF would widen to ±480 by the bf16 bit trick, so each bf16 lane ORs a
//   per-byte "low 7 bits all ones" test over its bytes and turns the outputs of a row that
//   held one into NaN (as the CPU's dequantised product would be); f16's cvt gives NaN itself.
// - Cost (sm_90a SASS of the main loop, per 4 weight bytes and lane): bf16 ~15 instructions
//   (shifts / LOP3 / HMUL2 widening ~10, NaN test ~3, PRMT 1), f16 ~5 (2 F2FP). At 4.1 TB/s
//   the bf16 loop needs ~1.9 of an SM's 4 issue slots per clock, ~60% of its integer pipe.
// - Rows m >= M read row M - 1 and weight rows n >= N read row N - 1 (valid memory; their
//   results are not stored), so full steps load unpredicated; only a warp's last, partial
//   step of K reads zeros past K. Requires K % 16 == 0 and 16-byte aligned weight rows (else
//   the launcher leaves the call to the FP8 path) and x rows (else it copies x first).
// FP8 cvt needs sm_89+: below that the bodies trap, and the launcher refuses first.


// Warps per block, at most (the launcher's MAX_WARPS).
#define FP8L_MAX_WARPS 8

__device__ __forceinline__ unsigned word(const u32x4& v, int i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

__device__ __forceinline__ unsigned prmt(unsigned a, unsigned b, unsigned sel) {
    unsigned d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
}

// D(16x8, f32) += A(16x16, row) · B(16x8, col) on 16-bit tensor cores (sm_80+).
#define KILN_MMA16(T)                                                                          \
    static __device__ __forceinline__ void mma(float* d, const unsigned* a, const unsigned* b) { \
        asm("mma.sync.aligned.m16n8k16.row.col.f32." #T "." #T ".f32 "                          \
            "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"                             \
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                    \
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));                \
    }

// Per activation type T: how a weight word widens into the A halves (lo, hi), how the x
// words of the same four k become B registers, and the mma.
template <typename T> struct W8;

template <> struct W8<kbf> {
    // lo = bytes (0, 2), hi = bytes (1, 3) of v, as exact bf16x2. `nan` collects bit 7 of
    // (b & 0x7F) + 1 per byte: set only for 0x7F / 0xFF.
    static __device__ __forceinline__ void widen(unsigned v, unsigned& lo, unsigned& hi, unsigned& nan) {
#ifdef KILN_HAS_FP8
        const unsigned mag = 0x07F007F0u;  // bf16 bits 4..10 of each half: e4m3 bits 0..6
        unsigned s = v & 0x80808080u;      // the four sign bits
        lo = ((v << 4) & mag) | ((s << 8) & ~mag);
        hi = ((v >> 4) & mag) | (s & ~mag);
        nan |= (v - s) + 0x01010101u;
        // · 2^120 (bf16 0x7B80) + (-0): exact, so the bf16 value is the e4m3 value.
        asm("fma.rn.bf16x2 %0, %0, %1, %2;" : "+r"(lo) : "r"(0x7B807B80u), "r"(0x80008000u));
        asm("fma.rn.bf16x2 %0, %0, %1, %2;" : "+r"(hi) : "r"(0x7B807B80u), "r"(0x80008000u));
#endif
    }
    // x words w0 = (x[4j], x[4j+1]), w1 = (x[4j+2], x[4j+3]) -> b0 = (x[4j], x[4j+2]),
    // b1 = (x[4j+1], x[4j+3]), the k order of lo / hi.
    static __device__ __forceinline__ void pair(unsigned w0, unsigned w1, unsigned& b0, unsigned& b1) {
        b0 = prmt(w0, w1, 0x5410u);
        b1 = prmt(w0, w1, 0x7632u);
    }
    KILN_MMA16(bf16)
};

template <> struct W8<kh> {
    // lo = bytes (0, 1), hi = bytes (2, 3) of v; the cvt gives NaN for e4m3 NaN itself.
    static __device__ __forceinline__ void widen(unsigned v, unsigned& lo, unsigned& hi, unsigned&) {
#ifdef KILN_HAS_FP8
        asm("{ .reg .b16 l, h;\n\t"
            "mov.b32 {l, h}, %2;\n\t"
            "cvt.rn.f16x2.e4m3x2 %0, l;\n\t"
            "cvt.rn.f16x2.e4m3x2 %1, h; }"
            : "=r"(lo), "=r"(hi) : "r"(v));
#endif
    }
    static __device__ __forceinline__ void pair(unsigned w0, unsigned w1, unsigned& b0, unsigned& b1) {
        b0 = w0;
        b1 = w1;
    }
    KILN_MMA16(f16)
};

// One step of a warp: U 64-byte chunks of K from kb for its RT·16 weight rows and MT·8 x rows.
// TAIL: some chunks may lie past K, and those read zeros (only a warp's last step). Other
// steps load unconditionally: rows past N / M were clamped to valid rows by the caller, and
// their outputs are never stored.
template <typename T, int RT, int MT, int U, bool TAIL>
__device__ __forceinline__ void fp8_linear_step(int kb, int t, int K, const unsigned char* const (&wrow)[RT][2],
                                                const unsigned char* const (&xrow)[MT], float (&acc)[RT][MT][4],
                                                unsigned (&nan)[RT][2]) {
    const u32x4 zero = {0, 0, 0, 0};
    u32x4 wv[U][RT][2], xv[U][MT][2];
#pragma unroll
    for (int u = 0; u < U; ++u) {
        int k = kb + u * 64 + t * 16;
        bool in = !TAIL || k < K;  // K % 16 == 0: a 16-byte piece is wholly inside or outside
#pragma unroll
        for (int r = 0; r < RT; ++r)
#pragma unroll
            for (int h = 0; h < 2; ++h) wv[u][r][h] = in ? ld_stream16(wrow[r][h] + k) : zero;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            xv[u][mt][0] = in ? ld_keep16(xrow[mt] + 2 * k) : zero;
            xv[u][mt][1] = in ? ld_keep16(xrow[mt] + 2 * k + 16) : zero;
        }
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            // x words 2j, 2j+1 of the lane's 16 values: k + 4j .. k + 4j + 3.
            unsigned b[MT][2];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
                W8<T>::pair(word(xv[u][mt][j >> 1], (j & 1) * 2), word(xv[u][mt][j >> 1], (j & 1) * 2 + 1), b[mt][0],
                            b[mt][1]);
#pragma unroll
            for (int r = 0; r < RT; ++r) {
                unsigned a[4];
                W8<T>::widen(word(wv[u][r][0], j), a[0], a[2], nan[r][0]);  // row g
                W8<T>::widen(word(wv[u][r][1], j), a[1], a[3], nan[r][1]);  // row g + 8
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) W8<T>::mma(acc[r][mt], a, b[mt]);
            }
        }
}

// Weight rows of a warp's RT 16-row tiles from output row n0: lane g streams rows g and
// g + 8 of each tile. PAIRS (RT = 2, a [2·N, K] gate_up weight): tile 0 holds gate rows
// n0 + {g, g + 8} and tile 1 the matching up rows N + n0 + {g, g + 8}. Rows past N read
// row N - 1 (valid memory; their results are not stored).
template <int RT, bool PAIRS>
__device__ __forceinline__ void fp8_rows(const unsigned char* (&wrow)[RT][2], const unsigned char* w, i64 ldw, i64 n0,
                                         int N, int g) {
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            i64 n = n0 + (PAIRS ? 0 : r * 16) + h * 8 + g;
            n = n < N ? n : N - 1;
            wrow[r][h] = w + (PAIRS ? n + r * (i64)N : n) * ldw;
        }
}

// acc = this warp's f32 dot products of its weight rows with its x rows over the 64·U-byte
// steps kb0, kb0 + stride, ... of K. A row whose bytes held an e4m3 NaN gives NaN outputs
// (the bf16 widening alone reads it as ±480). Lanes t of one g read different k of the same
// rows; accumulators 0, 1 are row g, 2, 3 row g + 8.
template <typename T, int RT, int MT>
__device__ __forceinline__ void fp8_dot(const unsigned char* const (&wrow)[RT][2], const unsigned char* const (&xrow)[MT],
                                        int kb0, int stride, int K, int t, float (&acc)[RT][MT][4]) {
    constexpr int U = 4 / RT;  // 64-byte chunks per step: 2·RT·U = 8 weight loads
    unsigned nan[RT][2];
#pragma unroll
    for (int r = 0; r < RT; ++r) {
        nan[r][0] = nan[r][1] = 0;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) acc[r][mt][0] = acc[r][mt][1] = acc[r][mt][2] = acc[r][mt][3] = 0.f;
    }
    int kb = kb0;
    for (; kb + 64 * U <= K; kb += stride) fp8_linear_step<T, RT, MT, U, false>(kb, t, K, wrow, xrow, acc, nan);
    if (kb < K) fp8_linear_step<T, RT, MT, U, true>(kb, t, K, wrow, xrow, acc, nan);
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            unsigned f = nan[r][h] & 0x80808080u;
            f |= __shfl_xor_sync(0xffffffffu, f, 1);
            f |= __shfl_xor_sync(0xffffffffu, f, 2);
            if (f != 0)
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) acc[r][mt][2 * h] = acc[r][mt][2 * h + 1] = kiln_nan();
        }
}

// Adds the accumulators of the KW warps of each row group (in shared memory, in a fixed
// order: deterministic) into the group's first warp, which gets true; the others false.
// part: dynamic shared memory of warps · RT·MT·4 · 32 floats when KW > 1.
template <int RT, int MT> __device__ __forceinline__ bool fp8_group_sum(float (&acc)[RT][MT][4], float* part, int KW) {
    constexpr int NACC = RT * MT * 4;  // accumulators per lane
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (KW > 1) {
        float* mine = part + (i64)warp * NACC * 32;
#pragma unroll
        for (int r = 0; r < RT; ++r)
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int i = 0; i < 4; ++i) mine[((r * MT + mt) * 4 + i) * 32 + lane] = acc[r][mt][i];
        __syncthreads();
    }
    if (warp % KW != 0) return false;
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int i = 0; i < 4; ++i)
                for (int p = 1; p < KW; ++p) acc[r][mt][i] += part[((i64)(warp + p) * NACC + (r * MT + mt) * 4 + i) * 32 + lane];
    return true;
}

// RT: 16-row weight tiles per warp; MT: 8-row x tiles (1 for M <= 8, 2 for M <= 16). The KW
// warps of a row group split K in interleaved steps.
template <typename T, int RT, int MT>
__device__ void fp8_linear(const T* x, i64 ldx, const unsigned char* w, i64 ldw, const float* scale, int rowwise,
                           const T* bias, i64 ldb, T* out, int M, int N, int K, int KW) {
#ifdef KILN_HAS_FP8
    constexpr int U = 4 / RT;
    extern __shared__ float part[];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    int groups = (blockDim.x >> 5) / KW; // row groups per block
    i64 n0 = ((i64)blockIdx.x * groups + warp / KW) * 16 * RT;
    const unsigned char* wrow[RT][2];
    fp8_rows<RT, false>(wrow, w, ldw, n0, N, g);
    const unsigned char* xrow[MT];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        int m = mt * 8 + g;
        xrow[mt] = (const unsigned char*)(x + (m < M ? m : M - 1) * ldx);
    }
    float acc[RT][MT][4];
    fp8_dot<T, RT, MT>(wrow, xrow, warp % KW * 64 * U, KW * 64 * U, K, t, acc);
    if (!fp8_group_sum<RT, MT>(acc, part, KW)) return;
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                // D[row][col] of lane (g, t): row g (+8 for i >= 2) = weight row, col 2t + (i & 1) = x row.
                i64 n = n0 + r * 16 + g + (i >= 2 ? 8 : 0);
                int m = mt * 8 + 2 * t + (i & 1);
                if (m >= M || n >= N) continue;
                float v = acc[r][mt][i] * (rowwise ? scale[n] : scale[0]);
                if (bias) v += up<float>(bias[n * ldb]);
                out[(i64)m * N + n] = down<T>(v);
            }
#else
    __trap();
#endif
}

// Mixture-of-experts decode, gate_up experts (fp8_linear's layout with M = 1 and RT = 2 as
// gate / up tiles): slot s = blockIdx.y multiplies x row s / per_row by expert
// e = experts[s] of the stacked [E, 2·N, K] weight with f32 row scales [E, 2·N], and stores
// out[s, n] = silu(gate_n) · up_n, each rounded to T first (as linear_fp8, then silu_mul,
// store them). The expert is read on the device: no host sync, only the chosen experts'
// weights are streamed. An index outside [-E, E) after one wrap gives a zero row.
template <typename T>
__device__ void fp8_experts_swiglu(const T* x, i64 ldx, int per_row, const unsigned char* w, const float* scale,
                                   const i64* experts, int E, T* out, int N, int K, int KW) {
#ifdef KILN_HAS_FP8
    extern __shared__ float part[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3, s = blockIdx.y;
    const i64 n0 = ((i64)blockIdx.x * ((blockDim.x >> 5) / KW) + warp / KW) * 16;
    T* o = out + (i64)s * N;
    i64 e = experts[s];
    if (e < 0) e += E;
    if (e < 0 || e >= E) {  // the whole block has this slot: no warp is left at a barrier
        if (warp % KW == 0 && lane < 16 && n0 + lane < N) o[n0 + lane] = down<T>(0.f);
        return;
    }
    const unsigned char* wrow[2][2];
    fp8_rows<2, true>(wrow, w + e * 2 * (i64)N * K, K, n0, N, g);
    const unsigned char* xrow[1] = {(const unsigned char*)(x + (i64)(s / per_row) * ldx)};
    float acc[2][1][4];
    fp8_dot<T, 2, 1>(wrow, xrow, warp % KW * 128, KW * 128, K, t, acc);
    // Every D column holds x row 0 (the M - 1 clamp): lanes t = 0 store rows g and g + 8.
    if (!fp8_group_sum<2, 1>(acc, part, KW) || t != 0) return;
    const float* sc = scale + e * 2 * (i64)N;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const i64 n = n0 + g + 8 * h;
        if (n >= N) continue;
        const float gate = up<float>(down<T>(acc[0][0][2 * h] * sc[n]));
        const float upv = up<float>(down<T>(acc[1][0][2 * h] * sc[N + n]));
        o[n] = down<T>(silu_mul(gate, upv));
    }
#else
    __trap();
#endif
}

// The down projection of a MoE decode step and the routed sum in one: for token
// tok = blockIdx.y, out[tok, n] = Σ_j weights[tok, j] · scale[e_j, n] · (w[e_j] · x[tok, j])_n
// with e_j = experts[tok, j], w stacked [E, N, K] with f32 row scales [E, N] and x [T, k, K]
// (rows ldx apart). The KW warps of a row group take slots j = q, q + KW, ... (each over the
// whole K) and meet in shared memory in a fixed order; the f32 sum is rounded once. An index
// outside [-E, E) after one wrap adds nothing.
template <typename T, int RT>
__device__ void fp8_experts_sum(const T* x, i64 ldx, const unsigned char* w, const float* scale, const i64* experts,
                                const float* weights, int k, int E, T* out, int N, int K, int KW) {
#ifdef KILN_HAS_FP8
    constexpr int U = 4 / RT;
    extern __shared__ float part[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const i64 n0 = ((i64)blockIdx.x * ((blockDim.x >> 5) / KW) + warp / KW) * 16 * RT, tok = blockIdx.y;
    float tot[RT][1][4] = {};
    for (int j = warp % KW; j < k; j += KW) {
        i64 e = experts[tok * k + j];
        if (e < 0) e += E;
        if (e < 0 || e >= E) continue;
        const unsigned char* wrow[RT][2];
        fp8_rows<RT, false>(wrow, w + e * N * (i64)K, K, n0, N, g);
        const unsigned char* xrow[1] = {(const unsigned char*)(x + (tok * k + j) * ldx)};
        float acc[RT][1][4];
        fp8_dot<T, RT, 1>(wrow, xrow, 0, 64 * U, K, t, acc);
        const float wj = weights[tok * k + j];
        const float* sc = scale + e * N;
#pragma unroll
        for (int r = 0; r < RT; ++r)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const i64 n = n0 + r * 16 + g + (i >= 2 ? 8 : 0);
                tot[r][0][i] = fmaf(wj * sc[n < N ? n : N - 1], acc[r][0][i], tot[r][0][i]);
            }
    }
    if (!fp8_group_sum<RT, 1>(tot, part, KW) || t != 0) return;
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const i64 n = n0 + r * 16 + g + 8 * h;
            if (n < N) out[tok * N + n] = down<T>(tot[r][0][2 * h]);
        }
#else
    __trap();
#endif
}

// `__launch_bounds__(.., 1)`: with the thread bound alone ptxas kept ~60 registers and sank
// the loads of a step between its mma's (1–2 weight loads in flight, as fp8_gemv has); with
// min 1 block it issues all 8 first (90–128 registers, no spills, on sm_89 / sm_90a).
#define KILN_FP8_LINEAR(S, T, RT, MT)                                                                          \
    extern "C" __global__ void __launch_bounds__(32 * FP8L_MAX_WARPS, 1) fp8_linear_##S##_r##RT##_m##MT(            \
        const T* x, i64 ldx, const unsigned char* w, i64 ldw, const float* scale, int rowwise, const T* bias,    \
        i64 ldb, T* out, int M, int N, int K, int KW) {                                                         \
        kiln_after_previous_kernel();                                                                          \
        fp8_linear<T, RT, MT>(x, ldx, w, ldw, scale, rowwise, bias, ldb, out, M, N, K, KW);                    \
    }
// fp8_experts_swiglu_<dtype> and fp8_experts_sum_<dtype>_r<RT>: the MoE decode kernels.
#define KILN_FP8_EXPERTS(S, T)                                                                                  \
    extern "C" __global__ void __launch_bounds__(32 * FP8L_MAX_WARPS, 1) fp8_experts_swiglu_##S(                  \
        const T* x, i64 ldx, int per_row, const unsigned char* w, const float* scale, const i64* experts, int E,   \
        T* out, int N, int K, int KW) {                                                                         \
        kiln_after_previous_kernel();                                                                          \
        fp8_experts_swiglu<T>(x, ldx, per_row, w, scale, experts, E, out, N, K, KW);                            \
    }                                                                                                           \
    KILN_FP8_EXPERTS_SUM(S, T, 1) KILN_FP8_EXPERTS_SUM(S, T, 2)
#define KILN_FP8_EXPERTS_SUM(S, T, RT)                                                                          \
    extern "C" __global__ void __launch_bounds__(32 * FP8L_MAX_WARPS, 1) fp8_experts_sum_##S##_r##RT(             \
        const T* x, i64 ldx, const unsigned char* w, const float* scale, const i64* experts, const float* weights, \
        int k, int E, T* out, int N, int K, int KW) {                                                           \
        kiln_after_previous_kernel();                                                                          \
        fp8_experts_sum<T, RT>(x, ldx, w, scale, experts, weights, k, E, out, N, K, KW);                       \
    }
#define KILN_FP8_LINEAR_T(S, T) \
    KILN_FP8_LINEAR(S, T, 1, 1) KILN_FP8_LINEAR(S, T, 1, 2) KILN_FP8_LINEAR(S, T, 2, 1) KILN_FP8_LINEAR(S, T, 2, 2) \
    KILN_FP8_EXPERTS(S, T)
KILN_FP8_LINEAR_T(bf16, kbf) KILN_FP8_LINEAR_T(f16, kh)
