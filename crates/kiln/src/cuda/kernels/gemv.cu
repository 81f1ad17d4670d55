// Decode-time linear: out[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n]) for 1-8 rows of x
// against a row-major weight [N, K] (F.linear's layout); f32 accumulation, bias fused, one
// rounding to the output type.
//
// Floor. The weight is read once, so time >= (N*K + M*K + N + M*N) * size / 4.1 TB/s:
//   Llama-3.1-8B lm_head 128256 x 4096 bf16   1.05 GB   256 us
//   Llama-3.1-8B gate     14336 x 4096 bf16    117 MB  28.6 us
//   Llama-3.1-8B q_proj    4096 x 4096 bf16   33.6 MB   8.2 us
//   Qwen3-30B-A3B router    128 x 2048 bf16   0.52 MB  0.13 us (so launch + one DRAM
//                                                       round trip, ~2 us, is the real floor)
// 2*M*N*K FLOPs are at most 16 per weight element (M = 8): far below the FP32 rate, so the
// weight stream rules and the kernel's job is to keep enough 16-byte loads in flight.
//
// One template; cuda/ops/gemv.rs picks the variant (its policy table):
//   VB  bytes per load: 16 (8 bf16/f16 or 4 f32), or 8 / 4 / 2 when K or a pointer is not
//       16-byte aligned (K % E == 0 always holds for the VB chosen, so there is no tail);
//   R   output rows per warp: each x load serves R weight rows;
//   U   loads in flight per thread and row (unrolled): R*U weight loads pending per thread;
//   MM  x rows compiled for (1, 2, 4, 8); rows m >= M re-read row M-1 and are not stored;
// and at run time
//   G   warps per row group, splitting K between them (split-K inside the block): their
//       partial sums meet in shared memory in a fixed order, so the result is
//       deterministic and there is one launch. Small N uses it to put enough warps to work;
//   blockDim.x / 32 warps per block (a multiple of G, at most GEMV_MAX_WARPS).
// The 32 lanes of a warp read consecutive VB-byte pieces of a row (coalesced) and the G
// warps of a group interleave over K. Weight loads bypass L1 (each byte is read once) and
// ask L2 for 256-byte fetches; x loads go through L1, where every warp of the SM finds them.

#define GEMV_MAX_WARPS 16

template <int VB> struct Raw { unsigned int w[VB >= 4 ? VB / 4 : 1]; };

// Q: cache qualifiers of the load.
#define KILN_GEMV_LOAD(NAME, Q)                                                                    \
    template <int VB> __device__ __forceinline__ Raw<VB> NAME(const char* p) {                     \
        Raw<VB> r;                                                                                 \
        if constexpr (VB == 16) {                                                                  \
            asm("ld.global.nc" Q ".v4.u32 {%0, %1, %2, %3}, [%4];"                                 \
                : "=r"(r.w[0]), "=r"(r.w[1]), "=r"(r.w[2]), "=r"(r.w[3]) : "l"(p));                \
        } else if constexpr (VB == 8) {                                                            \
            asm("ld.global.nc" Q ".v2.u32 {%0, %1}, [%2];" : "=r"(r.w[0]), "=r"(r.w[1]) : "l"(p)); \
        } else if constexpr (VB == 4) {                                                            \
            asm("ld.global.nc" Q ".u32 %0, [%1];" : "=r"(r.w[0]) : "l"(p));                        \
        } else {                                                                                   \
            unsigned short h;                                                                      \
            asm("ld.global.nc" Q ".u16 %0, [%1];" : "=h"(h) : "l"(p));                             \
            r.w[0] = h;                                                                            \
        }                                                                                          \
        return r;                                                                                  \
    }
KILN_GEMV_LOAD(ld_weight, ".L1::no_allocate.L2::256B")
KILN_GEMV_LOAD(ld_x, "")

// Element e of a load as float (16-bit types: two per 32-bit word, low half first), and
// the reverse, rounding to T.
template <typename T, int VB> __device__ __forceinline__ float elem(const Raw<VB>& r, int e) {
    if constexpr (sizeof(T) == 4) {
        return __uint_as_float(r.w[e]);
    } else {
        T v;
        v.x = (unsigned short)(r.w[e >> 1] >> (16 * (e & 1)));
        return up<float>(v);
    }
}
template <typename T, int VB> __device__ __forceinline__ void set_elem(Raw<VB>& r, int e, float f) {
    if constexpr (sizeof(T) == 4) {
        r.w[e] = __float_as_uint(f);
    } else {
        const unsigned int bits = down<T>(f).x, shift = 16 * (e & 1);
        r.w[e >> 1] = (r.w[e >> 1] & ~(0xffffu << shift)) | (bits << shift);
    }
}

// An x row as the dot products read it, piece c (VB bytes) at a time: the row as stored.
template <typename T, int VB> struct PlainX {
    const char* p;
    __device__ __forceinline__ Raw<VB> load(i64 c) const { return ld_x<VB>(p + c * VB); }
};

// U pieces (step apart from piece c, of kc per row) of R weight rows against MM x rows.
// All R*U weight loads are issued before any is used. TAIL: some of the U pieces may lie
// past the row; they load piece kc-1 instead (so loads stay unconditional and in flight
// together) and are not added.
template <typename T, int VB, int R, int U, int MM, bool TAIL, typename X>
__device__ __forceinline__ void accumulate(const char* const (&wr)[R], const X (&xr)[MM], int c, int step,
                                           int kc, float (&acc)[R][MM]) {
    constexpr int E = VB / (int)sizeof(T);
    Raw<VB> wv[U][R];
#pragma unroll
    for (int u = 0; u < U; ++u) {
        const int cu = TAIL ? min(c + u * step, kc - 1) : c + u * step;
#pragma unroll
        for (int r = 0; r < R; ++r) wv[u][r] = ld_weight<VB>(wr[r] + (i64)cu * VB);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
        if (TAIL && c + u * step >= kc) break;
#pragma unroll
        for (int m = 0; m < MM; ++m) {
            const Raw<VB> xv = xr[m].load(c + u * step);
#pragma unroll
            for (int e = 0; e < E; ++e) {
                const float xe = elem<T>(xv, e);
#pragma unroll
                for (int r = 0; r < R; ++r) acc[r][m] = fmaf(elem<T>(wv[u][r], e), xe, acc[r][m]);
            }
        }
    }
}

// This lane's partial dot products of R weight rows with MM x rows over pieces c0,
// c0 + step, ... of kc (added to acc).
template <typename T, int VB, int R, int U, int MM, typename X>
__device__ __forceinline__ void dot_rows(const char* const (&wr)[R], const X (&xr)[MM], int c0, int step, int kc,
                                         float (&acc)[R][MM]) {
    int c = c0;
    for (; c + (U - 1) * step < kc; c += U * step) accumulate<T, VB, R, U, MM, false>(wr, xr, c, step, kc, acc);
    if (c < kc) accumulate<T, VB, R, U, MM, true>(wr, xr, c, step, kc, acc);
}

// Row n of R rows from n0 (past N: row N-1 re-read, no divergence, nothing stored).
// PAIRS: the weight is [2·N, K], gate rows then up rows, and the R rows are R / 2 (gate,
// up) pairs of outputs n0, n0 + 1, ...
template <int R, bool PAIRS> __device__ __forceinline__ void weight_rows(const char* (&wr)[R], const char* w, i64 n0,
                                                                         int N, int K, int size) {
    constexpr int O = PAIRS ? R / 2 : R;
#pragma unroll
    for (int o = 0; o < O; ++o) {
        const i64 n = n0 + o < N ? n0 + o : (i64)N - 1;
        if constexpr (PAIRS) {
            wr[2 * o] = w + n * (i64)K * size;
            wr[2 * o + 1] = w + (N + n) * (i64)K * size;
        } else {
            wr[o] = w + n * (i64)K * size;
        }
    }
}

// Sums each lane's partials over the warp, then over the G warps of the row group (in
// shared memory, in a fixed order: deterministic), and the group's first warp stores
// out[m, n0 + o] (+ bias): lane o*MM + m writes it. PAIRS: output o is silu(gate) · up of
// rows 2o and 2o + 1, each rounded to T first, as separate linear and silu_mul launches
// store them, so fusing changes no bit of the result.
template <typename T, int R, int MM, bool PAIRS>
__device__ __forceinline__ void store_rows(float (&acc)[R][MM], float (*part)[R * MM], int G, const T* bias,
                                           i64 bs, T* out, i64 n0, int M, int N) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int m = 0; m < MM; ++m) acc[r][m] = warp_sum(acc[r][m]);
    if (G > 1) {
        if (lane == 0) {
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int m = 0; m < MM; ++m) part[warp][r * MM + m] = acc[r][m];
        }
        __syncthreads();
    }
    if (warp % G != 0) return;
    const auto total = [&](int r, int m) {
        float s = acc[r][m];
        for (int j = 1; j < G; ++j) s += part[warp + j][r * MM + m];
        return s;
    };
    constexpr int O = PAIRS ? R / 2 : R;
#pragma unroll
    for (int o = 0; o < O; ++o) {
#pragma unroll
        for (int m = 0; m < MM; ++m) {
            const i64 n = n0 + o;
            if (lane == o * MM + m && n < N && m < M) {
                float s;
                if constexpr (PAIRS) {
                    s = silu_mul(up<float>(down<T>(total(2 * o, m))), up<float>(down<T>(total(2 * o + 1, m))));
                } else {
                    s = total(o, m);
                    if (bias) s += up<float>(bias[n * bs]);
                }
                out[(i64)m * N + n] = down<T>(s);
            }
        }
    }
}

// The G warps of a row group interleave over K (split-K). PAIRS: w is [2·N, K] (gate
// rows, then up rows) and out[m, n] = silu(x·gate_n) · (x·up_n) (store_rows).
template <typename T, int VB, int R, int U, int MM, bool PAIRS = false>
__device__ __forceinline__ void gemv(const T* x, i64 xs, const T* w, const T* bias, i64 bs, T* out,
                                     int M, int N, int K, int G) {
    __shared__ float part[GEMV_MAX_WARPS][R * MM];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = warp % G;
    const int groups = (int)(blockDim.x >> 5) / G;
    const i64 n0 = ((i64)blockIdx.x * groups + warp / G) * (PAIRS ? R / 2 : R);
    const char* wr[R];
    weight_rows<R, PAIRS>(wr, (const char*)w, n0, N, K, sizeof(T));
    PlainX<T, VB> xr[MM];
#pragma unroll
    for (int m = 0; m < MM; ++m) xr[m].p = (const char*)(x + (i64)(m < M ? m : M - 1) * xs);
    float acc[R][MM] = {};
    dot_rows<T, VB, R, U, MM>(wr, xr, g * 32 + lane, 32 * G, K / (VB / (int)sizeof(T)), acc);
    store_rows<T, R, MM, PAIRS>(acc, part, G, bias, bs, out, n0, M, N);
}

// Mixture-of-experts decode: slot s = blockIdx.y multiplies x row s / per_row (xs apart)
// by expert experts[s] of the stacked weights [E, N, K] into out[s, :N] (PAIRS: [E, 2·N, K]
// gate_up experts, out[s, n] = silu(gate_n) · up_n). The expert is read on the device, so
// routing needs no host sync, and only the chosen experts' weights are streamed (no
// gathered copy). An index outside [-E, E) yields a zero row, as index_select reads it on
// the GPU.
template <typename T, int VB, int R, int U, bool PAIRS>
__device__ __forceinline__ void gemv_experts(const T* x, i64 xs, int per_row, const T* w, const i64* experts,
                                             int E, T* out, int N, int K, int G) {
    const int s = blockIdx.y;
    i64 e = experts[s];
    if (e < 0) e += E;
    T* o = out + (i64)s * N;
    if (e < 0 || e >= E) {
        const int rows = (int)(blockDim.x >> 5) / G * (PAIRS ? R / 2 : R), n0 = blockIdx.x * rows;
        for (int i = threadIdx.x; i < rows && n0 + i < N; i += blockDim.x) o[n0 + i] = down<T>(0.f);
        return;
    }
    const i64 rows_per_expert = PAIRS ? 2 * (i64)N : N;
    gemv<T, VB, R, U, 1, PAIRS>(x + (i64)(s / per_row) * xs, xs, w + e * rows_per_expert * K, nullptr, 0, o, 1, N, K,
                                G);
}

// The down projection of a mixture-of-experts decode step and the routed sum in one:
// out[t, :N] = sum_j weights[t, j] * w[experts[t, j]] · x[t, j] for token t = blockIdx.y,
// where x[t, j] is slot j's activation row (xs apart) and w is stacked [E, N, K]. The G
// warps of a row group split the k slots (each runs whole rows), so a block keeps as many
// loads in flight as one per slot did; their weighted partials meet in shared memory in
// slot order. The f32 sum is rounded once. An index outside [-E, E) adds nothing
// (expert_linear's zero row).
template <typename T, int VB, int R, int U>
__device__ __forceinline__ void gemv_experts_sum(const T* x, i64 xs, const T* w, const i64* experts,
                                                 const float* weights, int k, int E, T* out, int N, int K, int G) {
    __shared__ float part[GEMV_MAX_WARPS][R];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = warp % G;
    const int groups = (int)(blockDim.x >> 5) / G;
    const i64 n0 = ((i64)blockIdx.x * groups + warp / G) * R, t = blockIdx.y;
    float tot[R][1] = {};
    for (int j = g; j < k; j += G) {
        i64 e = experts[t * k + j];
        if (e < 0) e += E;
        if (e < 0 || e >= E) continue;
        const char* wr[R];
        weight_rows<R, false>(wr, (const char*)(w + e * N * (i64)K), n0, N, K, sizeof(T));
        const PlainX<T, VB> xr[1] = {{(const char*)(x + (t * k + j) * xs)}};
        float acc[R][1] = {};
        dot_rows<T, VB, R, U, 1>(wr, xr, lane, 32, K / (VB / (int)sizeof(T)), acc);
        const float wj = weights[t * k + j];
#pragma unroll
        for (int r = 0; r < R; ++r) tot[r][0] = fmaf(wj, acc[r][0], tot[r][0]);
    }
    store_rows<T, R, 1, false>(tot, part, G, (const T*)nullptr, 0, out + t * N, n0, 1, N);
}

// gemv_<dtype>_b<VB>_r<R>_u<U>_m<MM>, gemv_experts_<dtype>_b<VB>_r<R>_u<U> and
// gemv_experts_sum_<dtype>_b<VB>_r<R>_u<U> for every tile; gemv_pairs_<dtype>_..._m<MM> and
// gemv_experts_pairs_<dtype>_... (SwiGLU of gate_up pairs) for the tiles of even R.
// cuda/ops/gemv.rs lists the same tiles (TILES).
#define KILN_GEMV(S, T, VB, R, U, MM, PAIRS, NAME)                                                 \
    extern "C" __global__ void __launch_bounds__(32 * GEMV_MAX_WARPS)                              \
        NAME##_##S##_b##VB##_r##R##_u##U##_m##MM(const T* x, i64 xs, const T* w, const T* bias,    \
                                                 i64 bs, T* out, int M, int N, int K, int G) {      \
        kiln_after_previous_kernel();                                                              \
        gemv<T, VB, R, U, MM, PAIRS>(x, xs, w, bias, bs, out, M, N, K, G);                         \
    }
#define KILN_GEMV_EXPERTS(S, T, VB, R, U, PAIRS, NAME)                                             \
    extern "C" __global__ void __launch_bounds__(32 * GEMV_MAX_WARPS)                              \
        NAME##_##S##_b##VB##_r##R##_u##U(const T* x, i64 xs, int per_row, const T* w,              \
                                         const i64* experts, int E, T* out, int N, int K, int G) {  \
        kiln_after_previous_kernel();                                                              \
        gemv_experts<T, VB, R, U, PAIRS>(x, xs, per_row, w, experts, E, out, N, K, G);             \
    }
#define KILN_GEMV_EXPERTS_SUM(S, T, VB, R, U)                                                      \
    extern "C" __global__ void __launch_bounds__(32 * GEMV_MAX_WARPS)                              \
        gemv_experts_sum_##S##_b##VB##_r##R##_u##U(const T* x, i64 xs, const T* w,                 \
                                                   const i64* experts, const float* weights, int k, \
                                                   int E, T* out, int N, int K, int G) {            \
        kiln_after_previous_kernel();                                                              \
        gemv_experts_sum<T, VB, R, U>(x, xs, w, experts, weights, k, E, out, N, K, G);              \
    }
#define KILN_GEMV_ROWS(S, T, VB, R, U, PAIRS, NAME)                                                \
    KILN_GEMV(S, T, VB, R, U, 1, PAIRS, NAME) KILN_GEMV(S, T, VB, R, U, 2, PAIRS, NAME)            \
    KILN_GEMV(S, T, VB, R, U, 4, PAIRS, NAME) KILN_GEMV(S, T, VB, R, U, 8, PAIRS, NAME)
#define KILN_GEMV_TILE(S, T, VB, R, U)                                                             \
    KILN_GEMV_ROWS(S, T, VB, R, U, false, gemv) KILN_GEMV_EXPERTS(S, T, VB, R, U, false, gemv_experts) \
    KILN_GEMV_EXPERTS_SUM(S, T, VB, R, U)
#define KILN_GEMV_PAIR_TILE(S, T, VB, R, U)                                                        \
    KILN_GEMV_TILE(S, T, VB, R, U) KILN_GEMV_ROWS(S, T, VB, R, U, true, gemv_pairs)               \
    KILN_GEMV_EXPERTS(S, T, VB, R, U, true, gemv_experts_pairs)
#define KILN_GEMV_TILES(S, T)                                                                      \
    KILN_GEMV_TILE(S, T, 16, 1, 4) KILN_GEMV_TILE(S, T, 16, 1, 8) KILN_GEMV_PAIR_TILE(S, T, 16, 2, 4) \
    KILN_GEMV_PAIR_TILE(S, T, 16, 4, 2) KILN_GEMV_TILE(S, T, 8, 1, 4) KILN_GEMV_TILE(S, T, 4, 1, 4)
KILN_GEMV_TILES(bf16, kbf)
KILN_GEMV_TILES(f16, kh)
KILN_GEMV_TILES(f32, float)
KILN_GEMV_TILE(bf16, kbf, 2, 1, 4)
KILN_GEMV_TILE(f16, kh, 2, 1, 4)
