// Decode attention (flash-decoding): out = softmax(q·kᵀ·scale)·v for the few query rows
// of a decode step (1–8 queries per head), GQA / MQA at any head ratio, head dim D of
// 64, 80, 96, 128 or 256, bf16 or f16, keys and values read where they lie in the cache (rows of D
// contiguous elements, any batch / head / position strides). The number of keys may be
// read from device memory (`len`, an i32: min(*len, s) keys), so a captured CUDA graph
// attends over a growing cache without re-capture.
//
// Floor: the op moves K and V once, 2·n·D·Hkv·B elements (Llama-3.1-8B, 4096 keys, bf16:
// 16.8 MB = 4.1 µs at 4.1 TB/s). On CUDA cores the per-key dot products and their shuffles
// made it instruction-bound (4–10× the floor), so both products run on tensor cores:
// - a group is one (batch, KV head, tile of 16 query rows): the query heads that share the
//   KV head and their queries, mma.sync's M (rows past the group's are zeros, never written);
// - split-KV: the group's keys, in tiles of 16, are balanced over `splits` blocks (set at
//   launch to fill the GPU); in a block each of 4 warps takes every 4th tile, streamed into
//   its own shared-memory stages by cp.async (AD_STAGES deep, zero-filled past the keys);
// - per tile: S = Q·Kᵀ (16 rows × 16 keys, ldmatrix of the row-major tiles), masked and
//   scaled by scale·log2 e, an online softmax per row in base 2 (max and rescale over
//   the 4 lanes that hold a row), then O += P·V with P taken from S's registers as the A
//   operand and V by ldmatrix.trans;
// - the 4 warps' states merge in shared memory. One split writes the output; more write
//   (max, sum) and unnormalised sums per row to scratch and attention_decode_merge (next
//   on the stream) weighs the splits.
// Causal (top-left, as PyTorch's is_causal): query i sees keys 0..=i. A row with no key
// gives 0.

#define AD_WARPS 4
#define AD_THREADS (AD_WARPS * 32)
#define AD_ROWS 16
#define AD_KEYS 16
#define AD_STAGES 2
// Splits a group may have (the merge kernel's weights live in shared memory).
#define AD_MAX_SPLITS 64
// Key tiles a split takes at least (2 per warp, so its cp.async stages overlap).
#define AD_MIN_TILES 8

// exp2(a - b) with exp2(-inf - -inf) = 0 (a state that has seen no key weighs nothing).
__device__ __forceinline__ float ad_weight(float a, float b) { return a == -kiln_inf() ? 0.f : exp2f(a - b); }

struct AdArgs {
    i64 q_sb, q_sh, q_sl;  // query strides (elements): batch, head, query
    i64 k_sb, k_sh, k_ss;  // key strides: batch, head, position
    i64 v_sb, v_sh, v_ss;  // value strides
    int hkv, g, l, s;      // KV heads, query heads per KV head, queries, keys in the view
    int tiles, causal;     // 16-row tiles per group; top-left causal
    int splits;            // blocks per group
    float scale_log2;      // scale · log2(e)
};

// The splits that a group's n keys use: a.splits (set at launch from the view's S keys) or
// fewer, so that each takes AD_MIN_TILES tiles. A graph captured for a long cache then
// neither runs near-empty blocks at a short context nor merges their states.
__device__ __forceinline__ int ad_used_splits(int n, const AdArgs& a) {
    const int tiles = (n + AD_KEYS - 1) / AD_KEYS;
    return max(1, min(a.splits, (tiles + AD_MIN_TILES - 1) / AD_MIN_TILES));
}

// The keys that count: min(*len, S) when the length is on the device, else S.
__device__ __forceinline__ int ad_keys(const int* len, i64 zero, const AdArgs& a) {
    return len ? max(0, min(*(const volatile int*)(len + zero), a.s)) : a.s;
}

// A group's place: its row tile, KV head and batch, its first row and how many it has (ad_out
// gives the output of that first row).
struct AdGroup {
    int tile, hk, b, row0, here;
};
__device__ __forceinline__ AdGroup ad_group(int group, const AdArgs& a) {
    AdGroup x;
    x.tile = group % a.tiles;
    x.hk = group / a.tiles % a.hkv;
    x.b = group / a.tiles / a.hkv;
    x.row0 = x.tile * AD_ROWS;
    x.here = min(AD_ROWS, a.g * a.l - x.row0);
    return x;
}
template <typename T, int D> __device__ __forceinline__ T* ad_out(T* out, const AdGroup& x, const AdArgs& a) {
    return out + ((i64)x.b * a.hkv * a.g + (i64)x.hk * a.g) * a.l * D + (i64)x.row0 * D;
}

// Dynamic shared memory: the query tile, then per warp AD_STAGES × (K tile, V tile), rows
// padded to an odd number of 16-byte units so ldmatrix's 8 row reads hit distinct banks;
// after the key loop the warps' states (f32 sums, max, sum) overlay the stages.
// cuda/ops/attention_decode.rs sizes it by the same formula.
template <int D> struct AdSmem {
    enum {
        PITCH = D + 8,
        TILE = AD_KEYS * PITCH * 2,
        Q = AD_ROWS * PITCH * 2,
        STAGES = AD_WARPS * AD_STAGES * 2 * TILE,
        MERGE = AD_WARPS * AD_ROWS * (D + 2) * 4,
        BYTES = Q + (STAGES > MERGE ? STAGES : MERGE),
    };
};

template <typename T, int D>
__device__ void attention_decode(const T* q, const T* k, const T* v, const int* len, T* out, float* part, float* ml,
                                 AdArgs a) {
    using S = AdSmem<D>;
    constexpr int P = S::PITCH, CH = D / 8, NT = D / 8;
    extern __shared__ __align__(16) unsigned char ad_smem[];
    T* qs = (T*)ad_smem;
    const unsigned q_at = smem_addr(ad_smem);

    const i64 zero = kiln_wait_previous_kernel();
    kiln_let_next_kernel_start();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;
    const int split = blockIdx.x % a.splits;
    const AdGroup x = ad_group(blockIdx.x / a.splits, a);
    const int n = ad_keys(len, zero, a), used = ad_used_splits(n, a);
    if (split >= used) return;
    // This block's key tiles [t0, t1) of ceil(n / 16), balanced over the used splits; this
    // warp's are t0 + warp + AD_WARPS·i, i < mine.
    const int tiles = (n + AD_KEYS - 1) / AD_KEYS;
    const int t0 = (int)((i64)tiles * split / used), t1 = (int)((i64)tiles * (split + 1) / used);
    const int mine = t1 - t0 > warp ? (t1 - t0 - warp + AD_WARPS - 1) / AD_WARPS : 0;

    for (int e = threadIdx.x; e < AD_ROWS * D; e += AD_THREADS) {
        const int r = e / D, d = e % D, gr = x.row0 + r;
        qs[r * P + d] = r < x.here ? q[x.b * a.q_sb + (i64)(x.hk * a.g + gr / a.l) * a.q_sh + (i64)(gr % a.l) * a.q_sl + d]
                                   : down<T>(0.f);
    }
    const unsigned char* kb = (const unsigned char*)(k + x.b * a.k_sb + x.hk * a.k_sh + zero);
    const unsigned char* vb = (const unsigned char*)(v + x.b * a.v_sb + x.hk * a.v_sh + zero);
    const unsigned stages = q_at + S::Q + warp * AD_STAGES * 2 * S::TILE;
    auto fetch = [&](int i) {
        if (i < mine) {
            const int key0 = (t0 + warp + i * AD_WARPS) * AD_KEYS;
            const unsigned at = stages + (i % AD_STAGES) * 2 * S::TILE;
#pragma unroll
            for (int c = lane; c < AD_KEYS * CH; c += 32) {
                const int r = c / CH, ch = c % CH, j = key0 + r;
                const bool ok = j < n;
                const unsigned dst = at + (r * P + ch * 8) * 2;
                cp_async16(dst, ok ? kb + ((i64)j * a.k_ss + ch * 8) * sizeof(T) : kb, ok);
                cp_async16(dst + S::TILE, ok ? vb + ((i64)j * a.v_ss + ch * 8) * sizeof(T) : vb, ok);
            }
        }
        cp_async_commit();
    };
#pragma unroll
    for (int i = 0; i < AD_STAGES - 1; ++i) fetch(i);
    __syncthreads();

    float m[2] = {-kiln_inf(), -kiln_inf()}, l[2] = {0.f, 0.f};  // rows gq, gq + 8
    float o[NT][4];
#pragma unroll
    for (int t = 0; t < NT; ++t) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0.f;
    for (int i = 0; i < mine; ++i) {
        fetch(i + AD_STAGES - 1);
        cp_async_wait<AD_STAGES - 1>();
        __syncwarp();
        const unsigned ks = stages + (i % AD_STAGES) * 2 * S::TILE, vs = ks + S::TILE;
        const int key0 = (t0 + warp + i * AD_WARPS) * AD_KEYS;
        // s[j]: scores of keys 8j..8j+7 of the tile.
        float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            unsigned af[4], bf[4];
            ldsm_x4(af, q_at + ((lane & 15) * P + kk * 16 + (lane >> 4) * 8) * 2, false);
            ldsm_x4(bf, ks + (((lane >> 4) * 8 + (lane & 7)) * P + kk * 16 + ((lane >> 3) & 1) * 8) * 2, false);
            mma_16816<T>(s[0], af, bf);
            mma_16816<T>(s[1], af, bf + 2);
        }
        // Online softmax; P as mma's A operand: pf[h + 2j] rows gq + 8h, keys 8j + 2tq (+1).
        unsigned pf[4];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int end = a.causal ? min(n, (x.row0 + gq + 8 * h) % a.l + 1) : n;
            float top = m[h];
#pragma unroll
            for (int j = 0; j < 2; ++j)
#pragma unroll
                for (int c = 0; c < 2; ++c) {
                    float& sc = s[j][2 * h + c];
                    sc = key0 + 8 * j + 2 * tq + c < end ? sc * a.scale_log2 : -kiln_inf();
                    top = fmaxf(top, sc);
                }
            top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 1));
            top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 2));
            const float f = ad_weight(m[h], top);
            m[h] = top;
            l[h] *= f;
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                o[t][2 * h] *= f;
                o[t][2 * h + 1] *= f;
            }
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const float p0 = ad_weight(s[j][2 * h], top), p1 = ad_weight(s[j][2 * h + 1], top);
                l[h] += p0 + p1;
                pf[h + 2 * j] = pack2<T>(p0, p1);
            }
        }
#pragma unroll
        for (int t = 0; t < NT; t += 2) {
            unsigned bf[4];
            ldsm_x4(bf, vs + ((((lane >> 3) & 1) * 8 + (lane & 7)) * P + (t + (lane >> 4)) * 8) * 2, true);
            mma_16816<T>(o[t], pf, bf);
            mma_16816<T>(o[t + 1], pf, bf + 2);
        }
        __syncwarp();
    }
    cp_async_wait<0>();

    // The warps' states → shared memory (over the stages, once every warp is done with them).
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    }
    __syncthreads();
    float* om = (float*)(ad_smem + S::Q);  // [AD_WARPS][AD_ROWS][D]
    float* wm = om + AD_WARPS * AD_ROWS * D;  // [AD_WARPS][AD_ROWS]
    float* wl = wm + AD_WARPS * AD_ROWS;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int r = warp * AD_ROWS + gq + 8 * h;
        if (tq == 0) {
            wm[r] = m[h];
            wl[r] = l[h];
        }
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            om[r * D + 8 * t + 2 * tq] = o[t][2 * h];
            om[r * D + 8 * t + 2 * tq + 1] = o[t][2 * h + 1];
        }
    }
    __syncthreads();

    // The block's state: the output (one split) or this split's share for the merge.
    T* ob = ad_out<T, D>(out, x, a);
    for (int e = threadIdx.x; e < x.here * D; e += AD_THREADS) {
        const int r = e / D, d = e % D;
        float top = -kiln_inf();
#pragma unroll
        for (int w = 0; w < AD_WARPS; ++w) top = fmaxf(top, wm[w * AD_ROWS + r]);
        float num = 0.f, den = 0.f;
#pragma unroll
        for (int w = 0; w < AD_WARPS; ++w) {
            const float f = ad_weight(wm[w * AD_ROWS + r], top);
            num += om[(w * AD_ROWS + r) * D + d] * f;
            den += wl[w * AD_ROWS + r] * f;
        }
        if (a.splits == 1) {
            ob[(i64)r * D + d] = down<T>(den > 0.f ? num / den : 0.f);
        } else {
            const i64 at = (i64)blockIdx.x * AD_ROWS + r;
            part[at * D + d] = num;
            if (d == 0) {
                ml[2 * at] = top;
                ml[2 * at + 1] = den;
            }
        }
    }
}

struct __align__(16) AdF4 { float v[4]; };

// The splits of a group → its output, a block per (group, row): warp 0 weighs the splits,
// exp2(max − top) / Σ sum · exp2(max − top); then each thread sums a 4-float slice of the
// row over every SL-th split (loads of many splits in flight), the SL partial slices meet
// in shared memory. Only the used splits are read; those that saw no key weigh 0.
template <typename T, int D>
__device__ void attention_decode_merge(const float* part, const float* ml, const int* len, T* out, AdArgs a) {
    constexpr int CH = D / 4, SL = AD_THREADS / CH;
    __shared__ float wt[AD_MAX_SPLITS];
    __shared__ AdF4 slice[SL][CH];
    const i64 zero = kiln_wait_previous_kernel();
    const int group = blockIdx.x / AD_ROWS, r = blockIdx.x % AD_ROWS;
    const AdGroup x = ad_group(group, a);
    if (r >= x.here) return;
    const int used = ad_used_splits(ad_keys(len, zero, a), a);
    const i64 first = (i64)group * a.splits * AD_ROWS + r;  // (group, split 0, row r)
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        float top = -kiln_inf();
        for (int s = lane; s < used; s += 32) top = fmaxf(top, ml[2 * (first + s * AD_ROWS)]);
        top = warp_max(top);
        float den = 0.f;
        for (int s = lane; s < used; s += 32) {
            const i64 at = first + s * AD_ROWS;
            den += ml[2 * at + 1] * ad_weight(ml[2 * at], top);
        }
        den = warp_sum(den);
        const float inv = den > 0.f ? 1.f / den : 0.f;
        for (int s = lane; s < used; s += 32) wt[s] = ad_weight(ml[2 * (first + s * AD_ROWS)], top) * inv;
    }
    __syncthreads();
    const int c = threadIdx.x % CH, sl = threadIdx.x / CH;
    if (sl < SL) {
        AdF4 acc = {{0.f, 0.f, 0.f, 0.f}};
#pragma unroll 4
        for (int s = sl; s < used; s += SL) {
            const float w = wt[s];
            if (w == 0.f) continue;
            const AdF4 p = ((const AdF4*)(part + (first + (i64)s * AD_ROWS) * D))[c];
#pragma unroll
            for (int e = 0; e < 4; ++e) acc.v[e] += p.v[e] * w;
        }
        slice[sl][c] = acc;
    }
    __syncthreads();
    if (threadIdx.x < CH) {
        AdF4 sum = slice[0][c];
        for (int j = 1; j < SL; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) sum.v[e] += slice[j][c].v[e];
        T* o = ad_out<T, D>(out, x, a) + (i64)r * D + 4 * c;
#pragma unroll
        for (int e = 0; e < 4; ++e) o[e] = down<T>(sum.v[e]);
    }
}

#define KILN_AD(S, T, D)                                                                                        \
    extern "C" __global__ void __launch_bounds__(AD_THREADS) attention_decode_##S##_d##D(                       \
        const T* q, const T* k, const T* v, const int* len, T* out, float* part, float* ml, AdArgs a) {         \
        attention_decode<T, D>(q, k, v, len, out, part, ml, a);                                                 \
    }                                                                                                           \
    extern "C" __global__ void __launch_bounds__(AD_THREADS) attention_decode_merge_##S##_d##D(                 \
        const float* part, const float* ml, const int* len, T* out, AdArgs a) {                                 \
        attention_decode_merge<T, D>(part, ml, len, out, a);                                                    \
    }
#define KILN_AD_DIMS(S, T) KILN_AD(S, T, 64) KILN_AD(S, T, 80) KILN_AD(S, T, 96) KILN_AD(S, T, 128) KILN_AD(S, T, 256)
KILN_AD_DIMS(bf16, kbf) KILN_AD_DIMS(f16, kh)
