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

// An x row as the dot products read it, piece c (VB bytes) at a time.
// PlainX: the row as stored.
template <typename T, int VB> struct PlainX {
    const char* p;
    __device__ __forceinline__ Raw<VB> load(i64 c) const { return ld_x<VB>(p + c * VB); }
};
// SwigluX: silu(gate) · up of a gate_up row (up `up_bytes` after gate), rounded to T as the
// separate silu_mul launch would store it, so fusing it changes no bit of the product.
template <typename T, int VB> struct SwigluX {
    const char* p;
    i64 up_bytes;
    __device__ __forceinline__ Raw<VB> load(i64 c) const {
        constexpr int E = VB / (int)sizeof(T);
        const Raw<VB> g = ld_x<VB>(p + c * VB), u = ld_x<VB>(p + up_bytes + c * VB);
        Raw<VB> r = g;
#pragma unroll
        for (int e = 0; e < E; ++e) set_elem<T>(r, e, silu_mul(elem<T>(g, e), elem<T>(u, e)));
        return r;
    }
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
template <int R> __device__ __forceinline__ void weight_rows(const char* (&wr)[R], const char* w, i64 n0, int N,
                                                             int K, int size) {
#pragma unroll
    for (int r = 0; r < R; ++r) wr[r] = w + (n0 + r < N ? n0 + r : (i64)N - 1) * (i64)K * size;
}

// Sums each lane's partials over the warp, then over the G warps of the row group (in
// shared memory, in a fixed order: deterministic), and the group's first warp stores
// out[m, n0 + r] (+ bias): lane r*MM + m writes it.
template <typename T, int R, int MM>
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
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int m = 0; m < MM; ++m) {
            const i64 n = n0 + r;
            if (lane == r * MM + m && n < N && m < M) {
                float s = acc[r][m];
                for (int j = 1; j < G; ++j) s += part[warp + j][r * MM + m];
                if (bias) s += up<float>(bias[n * bs]);
                out[(i64)m * N + n] = down<T>(s);
            }
        }
    }
}

// X's row type: the row as stored, or (SWIGLU) silu(gate) · up of a [2K] gate_up row.
template <bool SWIGLU, typename T, int VB> struct XRow { typedef PlainX<T, VB> type; };
template <typename T, int VB> struct XRow<true, T, VB> { typedef SwigluX<T, VB> type; };

// The G warps of a row group interleave over K (split-K).
template <typename T, int VB, int R, int U, int MM, bool SWIGLU = false>
__device__ __forceinline__ void gemv(const T* x, i64 xs, const T* w, const T* bias, i64 bs, T* out,
                                     int M, int N, int K, int G) {
    __shared__ float part[GEMV_MAX_WARPS][R * MM];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = warp % G;
    const int groups = (int)(blockDim.x >> 5) / G;
    const i64 n0 = ((i64)blockIdx.x * groups + warp / G) * R;
    const char* wr[R];
    weight_rows<R>(wr, (const char*)w, n0, N, K, sizeof(T));
    typename XRow<SWIGLU, T, VB>::type xr[MM];
#pragma unroll
    for (int m = 0; m < MM; ++m) {
        xr[m].p = (const char*)(x + (i64)(m < M ? m : M - 1) * xs);
        if constexpr (SWIGLU) xr[m].up_bytes = (i64)K * sizeof(T);
    }
    float acc[R][MM] = {};
    dot_rows<T, VB, R, U, MM>(wr, xr, g * 32 + lane, 32 * G, K / (VB / (int)sizeof(T)), acc);
    store_rows<T, R, MM>(acc, part, G, bias, bs, out, n0, M, N);
}

// Mixture-of-experts decode: slot s = blockIdx.y multiplies x row s / per_row (xs apart)
// by expert experts[s] of the stacked weights [E, N, K] into out[s, :N]. The expert is read
// on the device, so routing needs no host sync, and only the chosen experts' weights are
// streamed (no gathered copy). An index outside [-E, E) yields a zero row, as index_select
// reads it on the GPU.
template <typename T, int VB, int R, int U>
__device__ __forceinline__ void gemv_experts(const T* x, i64 xs, int per_row, const T* w, const i64* experts,
                                             int E, T* out, int N, int K, int G) {
    const int s = blockIdx.y;
    i64 e = experts[s];
    if (e < 0) e += E;
    T* o = out + (i64)s * N;
    if (e < 0 || e >= E) {
        const int rows = (int)(blockDim.x >> 5) / G * R, n0 = blockIdx.x * rows;
        for (int i = threadIdx.x; i < rows && n0 + i < N; i += blockDim.x) o[n0 + i] = down<T>(0.f);
        return;
    }
    gemv<T, VB, R, U, 1>(x + (i64)(s / per_row) * xs, xs, w + e * N * (i64)K, nullptr, 0, o, 1, N, K, G);
}

// The down projection of a mixture-of-experts decode step and the routed sum in one:
// out[t, :N] = sum_j weights[t, j] * down[experts[t, j]] · swiglu(x[t, j]) for token
// t = blockIdx.y, where x[t, j] is the gate_up output row of slot j (xs apart; up at +up_off
// elements) and down is stacked [E, N, K]. The G warps of a row group split the k slots
// (each runs whole rows), so a block keeps as many loads in flight as one per slot did;
// their weighted partials meet in shared memory in slot order. The f32 sum is rounded
// once. An index outside [-E, E) adds nothing (expert_linear's zero row).
template <typename T, int VB, int R, int U>
__device__ __forceinline__ void gemv_experts_sum(const T* x, i64 xs, i64 up_off, const T* w, const i64* experts,
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
        weight_rows<R>(wr, (const char*)(w + e * N * (i64)K), n0, N, K, sizeof(T));
        const SwigluX<T, VB> xr[1] = {{(const char*)(x + (t * k + j) * xs), up_off * (i64)sizeof(T)}};
        float acc[R][1] = {};
        dot_rows<T, VB, R, U, 1>(wr, xr, lane, 32, K / (VB / (int)sizeof(T)), acc);
        const float wj = weights[t * k + j];
#pragma unroll
        for (int r = 0; r < R; ++r) tot[r][0] = fmaf(wj, acc[r][0], tot[r][0]);
    }
    store_rows<T, R, 1>(tot, part, G, (const T*)nullptr, 0, out + t * N, n0, 1, N);
}

// gemv_<dtype>_b<VB>_r<R>_u<U>_m<MM>, gemv_swiglu_<dtype>_b<VB>_r<R>_u<U> (one x row, a
// [2K] gate_up row: an MLP's down projection), gemv_experts_<dtype>_b<VB>_r<R>_u<U> and
// gemv_experts_sum_<dtype>_b<VB>_r<R>_u<U>; cuda/ops/gemv.rs lists the same tiles (TILES).
#define KILN_GEMV(S, T, VB, R, U, MM)                                                              \
    extern "C" __global__ void __launch_bounds__(32 * GEMV_MAX_WARPS)                              \
        gemv_##S##_b##VB##_r##R##_u##U##_m##MM(const T* x, i64 xs, const T* w, const T* bias,       \
                                               i64 bs, T* out, int M, int N, int K, int G) {        \
        kiln_after_previous_kernel();                                                              \
        gemv<T, VB, R, U, MM>(x, xs, w, bias, bs, out, M, N, K, G);                               \
    }
#define KILN_GEMV_SWIGLU(S, T, VB, R, U)                                                           \
    extern "C" __global__ void __launch_bounds__(32 * GEMV_MAX_WARPS)                              \
        gemv_swiglu_##S##_b##VB##_r##R##_u##U(const T* x, i64 xs, const T* w, const T* bias, i64 bs, \
                                              T* out, int M, int N, int K, int G) {                \
        kiln_after_previous_kernel();                                                              \
        gemv<T, VB, R, U, 1, true>(x, xs, w, bias, bs, out, M, N, K, G);                           \
    }
#define KILN_GEMV_EXPERTS(S, T, VB, R, U)                                                          \
    extern "C" __global__ void __launch_bounds__(32 * GEMV_MAX_WARPS)                              \
        gemv_experts_##S##_b##VB##_r##R##_u##U(const T* x, i64 xs, int per_row, const T* w,         \
                                               const i64* experts, int E, T* out, int N, int K,     \
                                               int G) {                                             \
        kiln_after_previous_kernel();                                                              \
        gemv_experts<T, VB, R, U>(x, xs, per_row, w, experts, E, out, N, K, G);                    \
    }                                                                                              \
    extern "C" __global__ void __launch_bounds__(32 * GEMV_MAX_WARPS)                              \
        gemv_experts_sum_##S##_b##VB##_r##R##_u##U(const T* x, i64 xs, i64 up_off, const T* w,        \
                                                   const i64* experts, const float* weights, int k, \
                                                   int E, T* out, int N, int K, int G) {            \
        kiln_after_previous_kernel();                                                              \
        gemv_experts_sum<T, VB, R, U>(x, xs, up_off, w, experts, weights, k, E, out, N, K, G);      \
    }
#define KILN_GEMV_TILE(S, T, VB, R, U)                                                             \
    KILN_GEMV(S, T, VB, R, U, 1) KILN_GEMV(S, T, VB, R, U, 2) KILN_GEMV(S, T, VB, R, U, 4)         \
    KILN_GEMV(S, T, VB, R, U, 8) KILN_GEMV_SWIGLU(S, T, VB, R, U) KILN_GEMV_EXPERTS(S, T, VB, R, U)
#define KILN_GEMV_TILES(S, T)                                                                      \
    KILN_GEMV_TILE(S, T, 16, 1, 4) KILN_GEMV_TILE(S, T, 16, 1, 8) KILN_GEMV_TILE(S, T, 16, 2, 4)   \
    KILN_GEMV_TILE(S, T, 16, 4, 2) KILN_GEMV_TILE(S, T, 8, 1, 4) KILN_GEMV_TILE(S, T, 4, 1, 4)
KILN_GEMV_TILES(bf16, kbf)
KILN_GEMV_TILES(f16, kh)
KILN_GEMV_TILES(f32, float)
KILN_GEMV_TILE(bf16, kbf, 2, 1, 4)
KILN_GEMV_TILE(f16, kh, 2, 1, 4)
