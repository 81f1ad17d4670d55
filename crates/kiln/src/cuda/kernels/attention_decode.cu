// Decode attention (flash-decoding): out = softmax(q·kᵀ·scale)·v for the few query rows
// of a decode step (1–8 queries per head), GQA / MQA at any head ratio, head dim D of
// 64, 80, 96, 128 or 256, bf16 or f16, keys and values read where they lie in the cache (rows of D
// contiguous elements, any batch / head / position strides). The number of keys may be
// read from device memory (`len`, an i32: min(*len, s) keys), so a captured CUDA graph
// attends over a growing cache without re-capture.
//
// Floor: the op moves K and V once, 2·n·D·Hkv·B elements (Llama-3.1-8B, 4096 keys, bf16:
// 16.8 MB = 4.1 µs at 4.1 TB/s); FLOPs are negligible. The kernel is built to stream them:
// - a group is one (batch, KV head, tile of R = 4 or 8 query rows): the query heads that share the
//   KV head and their queries, so each key is read once for all of them;
// - split-KV: the keys of a group are split over a cluster of C blocks (C set at launch,
//   up to 16, one when clusters are absent), so a handful of KV heads still fills the GPU;
// - in a block, 8 warps take keys in turn; a warp reads U keys per step per lane group,
//   LK lanes per key, 16 bytes per lane (every load of a warp is whole cache rows);
// - every lane group keeps an online-softmax state (max m, sum l, acc = Σ p·v, base-2
//   exponentials, q pre-scaled by scale·log2 e); the states merge across lane groups
//   (shuffles), warps (shared memory) and the cluster's blocks (remote shared-memory
//   stores, one cluster barrier), each block finishing a slice of the R·D outputs.
// Causal (top-left, as PyTorch's is_causal): query i sees keys 0..=i. A row with no key
// gives 0. Query rows past the group's are neither read nor written.

#define AD_WARPS 8
#define AD_THREADS (AD_WARPS * 32)

// 16 bytes of T as floats.
template <typename T> struct Chunk { enum { N = 16 / sizeof(T) }; };
__device__ __forceinline__ void to_floats(u32x4 v, float* f, kbf) {
    unsigned int w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}
__device__ __forceinline__ void to_floats(u32x4 v, float* f, kh) {
    unsigned int w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        kh lo, hi;
        lo.x = (unsigned short)(w[i] & 0xffffu);
        hi.x = (unsigned short)(w[i] >> 16);
        f[2 * i] = h2f(lo);
        f[2 * i + 1] = h2f(hi);
    }
}

__host__ __device__ constexpr int ad_pow2_at_least(int n) { return n <= 4 ? 4 : n <= 8 ? 8 : n <= 16 ? 16 : 32; }

// exp2(a - b) with exp2(-inf - -inf) = 0 (a state that has seen no key weighs nothing).
__device__ __forceinline__ float ad_weight(float a, float b) { return a == -kiln_inf() ? 0.f : exp2f(a - b); }

struct AdArgs {
    i64 q_sb, q_sh, q_sl;  // query strides (elements): batch, head, query
    i64 k_sb, k_sh, k_ss;  // key strides: batch, head, position
    i64 v_sb, v_sh, v_ss;  // value strides
    int hkv, g, l, s;      // KV heads, query heads per KV head, queries, keys in the view
    int tiles, causal;     // R-row tiles per group; top-left causal
    float scale_log2;      // scale · log2(e)
};

template <typename T, int D, int R>
__device__ void attention_decode(const T* q, const T* k, const T* v, const int* len, T* out, AdArgs a) {
    constexpr int V = Chunk<T>::N, NCH = D / V, LK = ad_pow2_at_least(NCH), CPL = (NCH + LK - 1) / LK;
    constexpr int KG = 32 / LK, U = R >= 8 ? 2 : 4, KPW = KG * U;
    __shared__ float qs[R][D];
    __shared__ float sacc[R][D];
    __shared__ float wm[AD_WARPS][R], wl[AD_WARPS][R];
#ifdef KILN_HAS_CLUSTER
    __shared__ float pairs[CLUSTER_MAX][R][2];
    __shared__ float recv[R * D / 2 + CLUSTER_MAX][2];
    const unsigned nb = cluster_blocks(), rank = cluster_rank();
    // Another block's shared memory exists once that block runs: announce this one now,
    // wait for all before the remote stores.
    if (nb > 1) cluster_arrive_relaxed();
#else
    const unsigned nb = 1, rank = 0;
#endif
    const i64 zero = kiln_wait_previous_kernel();
    kiln_let_next_kernel_start();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, sub = lane % LK, kg = lane / LK;
    const int group = blockIdx.x / nb, tile = group % a.tiles, hk = group / a.tiles % a.hkv, b = group / a.tiles / a.hkv;
    const int rows = a.g * a.l;
    int n = a.s;
    if (len) n = max(0, min(*(const volatile int*)(len + zero), a.s));

    // The tile's query rows, pre-scaled, as floats; sacc zeroed for the warps' merge.
    for (int e = threadIdx.x; e < R * D; e += AD_THREADS) {
        const int r = e / D, d = e % D, gr = tile * R + r;
        float x = 0.f;
        if (gr < rows) x = up<float>(q[b * a.q_sb + (i64)(hk * a.g + gr / a.l) * a.q_sh + (i64)(gr % a.l) * a.q_sl + d]) * a.scale_log2;
        qs[r][d] = x;
        sacc[r][d] = 0.f;
    }
    __syncthreads();
    // This block's keys.
    const int per = (n + nb - 1) / nb, k0 = min(n, (int)rank * per), k1 = min(n, k0 + per);
    const unsigned char* kb = (const unsigned char*)(k + b * a.k_sb + hk * a.k_sh + zero);
    const unsigned char* vb = (const unsigned char*)(v + b * a.v_sb + hk * a.v_sh + zero);
    float m[R], l[R], acc[R][CPL][V];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        m[r] = -kiln_inf();
        l[r] = 0.f;
#pragma unroll
        for (int c = 0; c < CPL; ++c)
#pragma unroll
            for (int e = 0; e < V; ++e) acc[r][c][e] = 0.f;
    }
    for (int base = k0 + warp * KPW; base < k1; base += AD_WARPS * KPW) {
        u32x4 kv[U][CPL], vv[U][CPL];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int j = base + u * KG + kg;
#pragma unroll
            for (int c = 0; c < CPL; ++c) {
                const int ch = sub + c * LK;
                const bool on = j < k1 && ch < NCH;
                kv[u][c] = on ? ld_stream16(kb + ((i64)j * a.k_ss + ch * V) * sizeof(T)) : u32x4{0, 0, 0, 0};
                vv[u][c] = on ? ld_stream16(vb + ((i64)j * a.v_ss + ch * V) * sizeof(T)) : u32x4{0, 0, 0, 0};
            }
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            // Keys row r may see: all, or 0..=i (causal).
            const int end = min(k1, a.causal ? (tile * R + r) % a.l + 1 : n);
            float sc[U];
            float top = m[r];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                float dot = 0.f;
#pragma unroll
                for (int c = 0; c < CPL; ++c) {
                    const int ch = sub + c * LK;
                    if (ch < NCH) {
                        float kf[V];
                        to_floats(kv[u][c], kf, T());
#pragma unroll
                        for (int e = 0; e < V; ++e) dot += qs[r][ch * V + e] * kf[e];
                    }
                }
#pragma unroll
                for (int o = LK / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
                sc[u] = base + u * KG + kg < end ? dot : -kiln_inf();
                top = fmaxf(top, sc[u]);
            }
            if (top == -kiln_inf()) continue;
            const float f = ad_weight(m[r], top);
            m[r] = top;
            l[r] *= f;
#pragma unroll
            for (int c = 0; c < CPL; ++c)
#pragma unroll
                for (int e = 0; e < V; ++e) acc[r][c][e] *= f;
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const float p = ad_weight(sc[u], top);
                l[r] += p;
#pragma unroll
                for (int c = 0; c < CPL; ++c) {
                    float vf[V];
                    to_floats(vv[u][c], vf, T());
#pragma unroll
                    for (int e = 0; e < V; ++e) acc[r][c][e] += p * vf[e];
                }
            }
        }
    }

    // Lane groups of a warp → one state (lanes with the same `sub` hold the same dims).
#pragma unroll
    for (int o = LK; o < 32; o <<= 1) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const float m2 = __shfl_xor_sync(0xffffffffu, m[r], o), l2 = __shfl_xor_sync(0xffffffffu, l[r], o);
            const float top = fmaxf(m[r], m2), f1 = ad_weight(m[r], top), f2 = ad_weight(m2, top);
            l[r] = l[r] * f1 + l2 * f2;
#pragma unroll
            for (int c = 0; c < CPL; ++c)
#pragma unroll
                for (int e = 0; e < V; ++e)
                    acc[r][c][e] = acc[r][c][e] * f1 + __shfl_xor_sync(0xffffffffu, acc[r][c][e], o) * f2;
            m[r] = top;
        }
    }
    // Warps → the block's state: max over warps, then each adds its rescaled sums.
    if (lane == 0) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
            wm[warp][r] = m[r];
            wl[warp][r] = l[r];
        }
    }
    __syncthreads();
    float bm[R], bl[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        bm[r] = -kiln_inf();
        for (int w = 0; w < AD_WARPS; ++w) bm[r] = fmaxf(bm[r], wm[w][r]);
        bl[r] = 0.f;
        for (int w = 0; w < AD_WARPS; ++w) bl[r] += wl[w][r] * ad_weight(wm[w][r], bm[r]);
    }
    if (lane < LK) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const float f = ad_weight(m[r], bm[r]);
#pragma unroll
            for (int c = 0; c < CPL; ++c) {
                const int ch = sub + c * LK;
                if (ch < NCH && f != 0.f)
#pragma unroll
                    for (int e = 0; e < V; ++e) atomicAdd(&sacc[r][ch * V + e], acc[r][c][e] * f);
            }
        }
    }
    __syncthreads();

    // The cluster's blocks → the output. Pair p of the R·D/2 output pairs belongs to block
    // p % nb, which receives every block's sums of it and every block's (max, sum) per row.
    T* ob = out + ((i64)b * a.hkv * a.g + (i64)hk * a.g) * a.l * D;
    auto finish = [&](int r, int d, float num0, float num1, float den) {
        const int gr = tile * R + r;
        if (gr >= rows) return;
        const float inv = den > 0.f ? 1.f / den : 0.f;
        T* o = ob + (i64)gr * D + d;
        o[0] = down<T>(num0 * inv);
        o[1] = down<T>(num1 * inv);
    };
    if (nb == 1) {
        for (int p = threadIdx.x; p < R * D / 2; p += AD_THREADS) {
            const int r = 2 * p / D, d = 2 * p % D;
            finish(r, d, sacc[r][d], sacc[r][d + 1], bl[r]);
        }
        return;
    }
#ifdef KILN_HAS_CLUSTER
    cluster_wait();
    if (threadIdx.x < nb * R) {
        const int r = threadIdx.x % R;
        cluster_store2(pairs[rank][r], threadIdx.x / R, bm[r], bl[r]);
    }
    const int slots = (R * D / 2 + nb - 1) / nb;
    for (int p = threadIdx.x; p < R * D / 2; p += AD_THREADS) {
        const int r = 2 * p / D, d = 2 * p % D;
        cluster_store2(recv[rank * slots + p / nb], p % nb, sacc[r][d], sacc[r][d + 1]);
    }
    cluster_arrive();
    cluster_wait();
    for (int p = rank + threadIdx.x * nb; p < R * D / 2; p += AD_THREADS * nb) {
        const int r = 2 * p / D, d = 2 * p % D;
        float top = -kiln_inf();
        for (unsigned c = 0; c < nb; ++c) top = fmaxf(top, pairs[c][r][0]);
        float num0 = 0.f, num1 = 0.f, den = 0.f;
        for (unsigned c = 0; c < nb; ++c) {
            const float f = ad_weight(pairs[c][r][0], top);
            const float* x = recv[c * slots + p / nb];
            num0 += x[0] * f;
            num1 += x[1] * f;
            den += pairs[c][r][1] * f;
        }
        finish(r, d, num0, num1, den);
    }
#endif
}

#define KILN_AD(S, T, D, R)                                                                                    \
    extern "C" __global__ void __launch_bounds__(AD_THREADS, 2) attention_decode_##S##_d##D##_r##R(            \
        const T* q, const T* k, const T* v, const int* len, T* out, AdArgs a) {                                 \
        attention_decode<T, D, R>(q, k, v, len, out, a);                                                        \
    }
#define KILN_AD_ROWS(S, T, D) KILN_AD(S, T, D, 4) KILN_AD(S, T, D, 8)
#define KILN_AD_DIMS(S, T) \
    KILN_AD_ROWS(S, T, 64) KILN_AD_ROWS(S, T, 80) KILN_AD_ROWS(S, T, 96) KILN_AD_ROWS(S, T, 128) KILN_AD_ROWS(S, T, 256)
KILN_AD_DIMS(bf16, kbf) KILN_AD_DIMS(f16, kh)
