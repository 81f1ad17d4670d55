// top-k along contiguous rows (k <= 64, element types of at most 32 bits) and the fused
// mixture-of-experts routers (scores, then top-k, then optional renormalisation).
//
// Every candidate is one u64: an order-preserving 32-bit key of its value (NaN above
// everything; for `largest = 0` the key is inverted, NaN then below everything; -0 and
// +0 tie) above the complement of its index, so a larger u64 ranks first and equal values
// rank by lower index, as in PyTorch. 0 is the empty candidate.
//
// topk_stage: a warp takes a segment of up to TOPK_SEG candidates of one row into registers
// (TOPK_V per lane) and picks its k best in k rounds, each a warp-wide maximum (two
// redux.sync) that the owning lane then drops: the picks come out in rank order with no
// shared memory or block barrier. A long row takes several stages (launches), each cutting
// the candidates by TOPK_SEG / k; the last writes values and int64 indices.
//
// router_topk: one block per row of at most ROUTER_MAX experts, one launch: softmax (or
// sigmoid) scores in shared memory, selection by score (+ bias), the same ranking, then
// the k weights (unbiased scores), optionally divided by their sum + eps.
// router_topk_warp: the same for rows of at most 32·RV experts and k <= 32, a warp per row:
// scores stay in registers and the k picks are k rounds of a warp-wide max of the keys, with
// no shared memory and no block barrier (decode routes one token: this is its latency).

#define TOPK_V 8
#define TOPK_SEG (32 * TOPK_V)
#define TOPK_MAX_K 64
#define ROUTER_MAX 2048

__device__ __forceinline__ unsigned int ordered(unsigned int k, int largest) { return largest ? k : ~k; }
__device__ __forceinline__ unsigned int key32(float v, int largest) {
    if (v != v) return largest ? 0xFFFFFFFFu : 0u;
    unsigned int b = v == 0.0f ? 0u : __float_as_uint(v);
    return ordered((b & 0x80000000u) ? ~b : (b | 0x80000000u), largest);
}
__device__ __forceinline__ unsigned int key32(kh v, int largest) { return key32(h2f(v), largest); }
__device__ __forceinline__ unsigned int key32(kbf v, int largest) { return key32(bf2f(v), largest); }
__device__ __forceinline__ unsigned int key32(int v, int largest) { return ordered((unsigned int)v ^ 0x80000000u, largest); }
__device__ __forceinline__ unsigned int key32(short v, int largest) { return key32((int)v, largest); }
__device__ __forceinline__ unsigned int key32(signed char v, int largest) { return key32((int)v, largest); }
__device__ __forceinline__ unsigned int key32(unsigned int v, int largest) { return ordered(v, largest); }
__device__ __forceinline__ unsigned int key32(unsigned short v, int largest) { return ordered(v, largest); }
__device__ __forceinline__ unsigned int key32(unsigned char v, int largest) { return ordered(v, largest); }
__device__ __forceinline__ unsigned int key32(kbool v, int largest) { return ordered(v.v != 0, largest); }

__device__ __forceinline__ u64 pack(unsigned int key, i64 idx) {
    return ((u64)key << 32) | (u64)(0xFFFFFFFFu - (unsigned int)idx);
}
__device__ __forceinline__ i64 unpack_index(u64 p) { return (i64)(0xFFFFFFFFu - (unsigned int)p); }

// Ranks the `len` candidates of `s` and puts those ranked below k at best[rank]; best[t]
// stays 0 (empty) where fewer than k candidates exist. Ends with a block barrier.
__device__ void rank_into(const u64* s, int len, int k, u64* best) {
    for (int t = threadIdx.x; t < k; t += blockDim.x) best[t] = 0;
    __syncthreads();
    for (int t = threadIdx.x; t < len; t += blockDim.x) {
        u64 mine = s[t];
        int above = 0;
        // Eight reads between checks, in flight together: with one check per read the
        // loop ran at shared-memory latency.
        for (int j = 0; j < len && above < k; j += 8) {
#pragma unroll
            for (int q = 0; q < 8; ++q) above += j + q < len && s[j + q] > mine;
        }
        if (above < k && mine != 0) best[above] = mine;
    }
    __syncthreads();
}

// Warp-wide maximum in one instruction (sm_80+).
__device__ __forceinline__ unsigned redux_max(unsigned v) {
    unsigned r;
    asm volatile("redux.sync.max.u32 %0, %1, 0xffffffff;" : "=r"(r) : "r"(v));
    return r;
}

// The warp's largest u64 (keys are distinct: they hold the index) as two redux.sync: the
// value halves, then the index halves of the lanes holding that value.
__device__ __forceinline__ u64 warp_max_key(u64 mine) {
    unsigned hi = redux_max((unsigned)(mine >> 32));
    unsigned lo = redux_max((unsigned)(mine >> 32) == hi ? (unsigned)mine : 0u);
    return ((u64)hi << 32) | lo;
}

// One stage over `outer` rows of `n` candidates in `segs` segments: from the values `x`
// (rows of r, when `cand` is null) or from packed candidates. Writes k per segment to `dst`
// (0 where a segment has fewer than k), or, when `vals` is set (one segment), the values
// and indices.
template <typename T>
__device__ void topk_stage(const T* x, const u64* cand, i64 outer, i64 n, i64 r, int k, int largest, i64 segs,
                           u64* dst, T* vals, i64* idxs) {
    const int lane = threadIdx.x & 31;
    const i64 warps = (i64)gridDim.x * (blockDim.x >> 5);
    // Whole warps iterate together: the redux below needs all 32 lanes.
    for (i64 w = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); w < outer * segs; w += warps) {
        const i64 row = w / segs, begin = (w - row * segs) * TOPK_SEG;
        u64 key[TOPK_V];
#pragma unroll
        for (int i = 0; i < TOPK_V; ++i) {
            const i64 j = begin + lane + 32 * i;
            key[i] = j < n ? (cand ? cand[row * n + j] : pack(key32(x[row * r + j], largest), j)) : 0;
        }
        u64 best = 0;
#pragma unroll
        for (int i = 0; i < TOPK_V; ++i) best = key[i] > best ? key[i] : best;
        u64 pick[TOPK_MAX_K / 32] = {0, 0};  // pick t sits in lane t % 32, slot t / 32
        for (int t = 0; t < k; ++t) {
            const u64 top = warp_max_key(best);
            if (lane == (t & 31)) pick[t >> 5] = top;
            if (top != 0 && best == top) {  // the owner drops it and finds its next best
                best = 0;
#pragma unroll
                for (int i = 0; i < TOPK_V; ++i) {
                    key[i] = key[i] == top ? 0 : key[i];
                    best = key[i] > best ? key[i] : best;
                }
            }
        }
#pragma unroll
        for (int h = 0; h < TOPK_MAX_K / 32; ++h) {
            const int t = lane + 32 * h;
            if (t >= k) break;
            if (vals) {
                const i64 j = unpack_index(pick[h]);
                vals[row * k + t] = x[row * r + j];
                idxs[row * k + t] = j;
            } else {
                dst[w * k + t] = pick[h];
            }
        }
    }
}

// Router score of logit v: sigmoid, or softmax against the row's max m and sum s.
template <typename A> __device__ __forceinline__ float router_score(A v, A m, A s, int sigmoid) {
    return (float)(sigmoid ? (A)1 / ((A)1 + exp(-v)) : exp(v - m) / s);
}

// `bias` (f32, r) or null; `norm_eps` < 0: no renormalisation.
template <typename T>
__device__ void router_topk(const T* x, const float* bias, float* w_out, i64* i_out, i64 outer, i64 r, int k,
                            int sigmoid, float norm_eps) {
    typedef typename Acc<T>::type A;
    __shared__ float score[ROUTER_MAX];
    __shared__ u64 key[ROUTER_MAX];
    __shared__ u64 best[TOPK_MAX_K];
    for (i64 row = blockIdx.x; row < outer; row += gridDim.x) {
        const T* xr = x + row * r;
        A m = 0, s = 1;
        if (!sigmoid) {
            m = (A)-kiln_inf();
            for (i64 j = threadIdx.x; j < r; j += blockDim.x) {
                A v = up<A>(xr[j]);
                m = (v != v || v > m) ? v : m;
            }
            m = block_max(m);
            s = 0;
            for (i64 j = threadIdx.x; j < r; j += blockDim.x) s += exp(up<A>(xr[j]) - m);
            s = block_sum(s);
        }
        for (i64 j = threadIdx.x; j < r; j += blockDim.x) {
            A v = up<A>(xr[j]);
            float p = router_score(v, m, s, sigmoid);
            score[j] = p;
            key[j] = pack(key32(bias ? p + bias[j] : p, 1), j);
        }
        __syncthreads();
        rank_into(key, (int)r, k, best);
        if (threadIdx.x < 32) {
            float total = 0;
            for (int t = threadIdx.x; t < k; t += 32) total += score[unpack_index(best[t])];
            total = warp_sum(total);
            for (int t = threadIdx.x; t < k; t += 32) {
                i64 j = unpack_index(best[t]);
                w_out[row * k + t] = norm_eps >= 0 ? score[j] / (total + norm_eps) : score[j];
                i_out[row * k + t] = j;
            }
        }
        __syncthreads();
    }
}

template <typename T, int RV>
__device__ __forceinline__ void router_warp_row(const T* xr, const float* bias, float* w_out, i64* i_out, i64 r, int k,
                                                int sigmoid, float norm_eps) {
    typedef typename Acc<T>::type A;
    int lane = threadIdx.x & 31;
    A v[RV];
    A m = (A)-kiln_inf(), s = 0;
#pragma unroll
    for (int i = 0; i < RV; ++i) {
        int j = lane + 32 * i;
        v[i] = j < r ? up<A>(xr[j]) : (A)-kiln_inf();
        m = (v[i] != v[i] || v[i] > m) ? v[i] : m;
    }
    if (sigmoid) {
        m = 0;
        s = 1;
    } else {
        m = warp_max(m);
#pragma unroll
        for (int i = 0; i < RV; ++i)
            if (lane + 32 * i < r) s += exp(v[i] - m);
        s = warp_sum(s);
    }
    u64 key[RV];
#pragma unroll
    for (int i = 0; i < RV; ++i) {
        int j = lane + 32 * i;
        float p = router_score(v[i], m, s, sigmoid);
        key[i] = j < r ? pack(key32(bias ? p + bias[j] : p, 1), j) : 0;
    }
    // Round t: the warp's largest remaining key goes to lane t (two redux.sync; ten
    // dependent shuffles were most of this kernel's latency).
    u64 mine = 0;
    for (int t = 0; t < k; ++t) {
        u64 top = 0;
#pragma unroll
        for (int i = 0; i < RV; ++i) top = key[i] > top ? key[i] : top;
        top = warp_max_key(top);
        if (lane == t) mine = top;
#pragma unroll
        for (int i = 0; i < RV; ++i) key[i] = key[i] == top ? 0 : key[i];
    }
    i64 j = unpack_index(mine);
    float p = lane < k ? router_score(up<A>(xr[j]), m, s, sigmoid) : 0.f;
    float total = warp_sum(p);
    if (lane < k) {
        w_out[lane] = norm_eps >= 0 ? p / (total + norm_eps) : p;
        i_out[lane] = j;
    }
}

template <typename T, int RV>
__device__ void router_topk_warp(const T* x, const float* bias, float* w_out, i64* i_out, i64 outer, i64 r, int k,
                                 int sigmoid, float norm_eps) {
    i64 warps = (i64)gridDim.x * (blockDim.x >> 5);
    // Whole warps iterate together: the shuffles below see all 32 lanes.
    for (i64 row = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); row < outer; row += warps)
        router_warp_row<T, RV>(x + row * r, bias, w_out + row * k, i_out + row * k, r, k, sigmoid, norm_eps);
}

#define KILN_TOPK(S, T) \
    extern "C" __global__ void topk_stage_##S(const T* x, const u64* cand, i64 outer, i64 n, i64 r, int k, int largest, \
        i64 chunks, u64* dst, T* vals, i64* idxs) { topk_stage<T>(x, cand, outer, n, r, k, largest, chunks, dst, vals, idxs); }
KILN_TOPK(bool, kbool) KILN_TOPK(u8, unsigned char) KILN_TOPK(u16, unsigned short) KILN_TOPK(u32, unsigned int)
KILN_TOPK(i8, signed char) KILN_TOPK(i16, short) KILN_TOPK(i32, int)
KILN_TOPK(f16, kh) KILN_TOPK(bf16, kbf) KILN_TOPK(f32, float)

#define KILN_ROUTER(S, T) \
    extern "C" __global__ void router_topk_##S(const T* x, const float* bias, float* w, i64* i, i64 outer, i64 r, int k, \
        int sigmoid, float norm_eps) { kiln_after_previous_kernel(); router_topk<T>(x, bias, w, i, outer, r, k, sigmoid, norm_eps); }
KILN_ROUTER(f16, kh) KILN_ROUTER(bf16, kbf) KILN_ROUTER(f32, float) KILN_ROUTER(f64, double)

// router_topk_warp<RV>_<dtype>; cuda/ops/topk.rs: ROUTER_WARP_RV.
#define KILN_ROUTER_WARP(S, T, RV) \
    extern "C" __global__ void router_topk_warp##RV##_##S(const T* x, const float* bias, float* w, i64* i, i64 outer, \
        i64 r, int k, int sigmoid, float norm_eps) { kiln_after_previous_kernel(); router_topk_warp<T, RV>(x, bias, w, i, outer, r, k, sigmoid, norm_eps); }
#define KILN_ROUTER_WARPS(S, T) KILN_ROUTER_WARP(S, T, 2) KILN_ROUTER_WARP(S, T, 4) KILN_ROUTER_WARP(S, T, 8)
KILN_ROUTER_WARPS(f16, kh) KILN_ROUTER_WARPS(bf16, kbf) KILN_ROUTER_WARPS(f32, float) KILN_ROUTER_WARPS(f64, double)
