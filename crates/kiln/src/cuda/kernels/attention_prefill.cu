// Prefill attention (FlashAttention-2 forward on mma.sync m16n8k16, sm_80+): out =
// softmax(q·kᵀ·scale + mask)·v for many queries per head, without the L×S scores: memory
// is the output alone. bf16 or f16; head dims 40, 64, 80, 96, 128, 256; GQA / MQA by the
// KV head h / g; any L and S; q, k, v read where they lie (rows of D contiguous elements,
// any batch / head / position strides that keep 16-byte alignment).
//
// Floor: 4·L·S·D flops per head (half of it causal) over the tensor cores' rate; the
// operands are re-read from L2 by each row tile, so it is compute-bound from a few hundred
// keys on.
// - A block is one (batch, query head, tile of 16·WARPS query rows); each warp owns 16 rows
//   and keeps their output (16 × D f32) and softmax state (max, sum) in registers.
// - Key tiles of BN keys are streamed by every thread with cp.async into STAGES shared
//   buffers (zero-filled past S and in the k-dim padding: D = 40 runs as 48), one tile
//   in flight while the warps compute on the previous one.
// - Per tile: S = Q·Kᵀ with ldmatrix of the row-major tiles; an online softmax per row in
//   base 2 (scale·log2 e folded into one multiply; max and sum over the 4 lanes that hold
//   a row); then O += P·V, P re-packed from S's accumulators as the A operand (no shared
//   memory round trip) and V read by ldmatrix.trans.
// - Masking costs only where needed: tiles that every row of the block sees whole take
//   the unmasked path; causal blocks stop at their last visible key tile; tiles with the
//   diagonal, past S or under an explicit mask compare per element.
// - Causal with an offset: query i sees keys j ≤ i + offset (0 top-left, S − L
//   bottom-right). Masks (u8 bool: nonzero attends; or f32 added) are read from global
//   memory with strides, 0 where they broadcast. A row that sees no key gives 0.
// - Blocks run the heavy (last, with causal) row tiles first, so the light ones fill the tail.

// exp2 on the SFU: ex2(-inf) = 0.
__device__ __forceinline__ float ap_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

#define AP_STAGES 2

struct ApArgs {
    i64 q_sb, q_sh, q_sl;        // query strides (elements): batch, head, query
    i64 k_sb, k_sh, k_ss;        // key strides: batch, head, position
    i64 v_sb, v_sh, v_ss;        // value strides
    i64 m_sb, m_sh, m_sl, m_ss;  // mask strides: batch, query head, query, key (0: broadcast)
    int hq, g, l, s;             // query heads, query heads per KV head, queries, keys
    int tiles;                   // row tiles per head
    int causal, offset;          // with causal, query i sees keys j <= i + offset
    int mask;                    // 0 none, 1 bool (u8), 2 additive (f32)
    float scale_log2;            // scale · log2(e)
};

// Tile shapes per head dim: 8 warps × 16 rows and 64-key tiles while the query fragments
// fit in registers beside the output; d256 keeps them in shared memory and halves both so
// two blocks still fit an SM. cuda/ops/attention_prefill.rs sizes the launch alike.
template <int D> struct ApCfg {
    enum {
        DP = (D + 15) / 16 * 16,  // k-dim of the products (zero-padded)
        WARPS = D > 128 ? 4 : 8,
        ROWS = 16 * WARPS,
        BN = D > 128 ? 32 : 64,
        QREG = D <= 128,
        // An odd number of 16-byte units per row: ldmatrix's 8 row reads hit distinct banks.
        PITCH = DP + 8,
        Q = ROWS * PITCH * 2,
        KV = BN * PITCH * 2,  // one K or V tile
        BYTES = Q + AP_STAGES * 2 * KV,
    };
};

template <typename T, int D>
__device__ void attention_prefill(const T* q, const T* k, const T* v, const void* mask, T* out, ApArgs a) {
    using C = ApCfg<D>;
    constexpr int DP = C::DP, P = C::PITCH, BN = C::BN, THREADS = 32 * C::WARPS;
    constexpr int CH = D / 8, CHP = DP / 8;  // 16-byte chunks of a row: data, padded
    constexpr int NT = DP / 8, NS = BN / 8;  // n-tiles of the output and of the scores
    extern __shared__ __align__(16) unsigned char ap_smem[];
    const unsigned q_at = smem_addr(ap_smem), kv_at = q_at + C::Q;

    const i64 zero = kiln_wait_previous_kernel();
    kiln_let_next_kernel_start();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, tq = lane & 3;
    const int bhq = gridDim.x / a.tiles, bh = blockIdx.x % bhq;
    const int tile = a.tiles - 1 - blockIdx.x / bhq, b = bh / a.hq, h = bh % a.hq, hk = h / a.g;
    const int row0 = tile * C::ROWS;
    // Keys the block sees, [0, end); keys [0, whole) every row of it sees.
    int end = a.s, whole = a.mask ? 0 : a.s;
    if (a.causal) {
        end = max(0, min(a.s, min(row0 + C::ROWS, a.l) + a.offset));
        whole = a.mask ? 0 : max(0, min(a.s, row0 + 1 + a.offset));
    }
    const int tiles = (end + BN - 1) / BN, whole_tiles = whole / BN;

    const T* qb = q + zero + b * a.q_sb + h * a.q_sh;
    for (int c = threadIdx.x; c < C::ROWS * CHP; c += THREADS) {
        const int r = c / CHP, ch = c % CHP, i = row0 + r;
        const bool ok = i < a.l && ch < CH;
        cp_async16(q_at + (r * P + ch * 8) * 2, ok ? qb + i * a.q_sl + ch * 8 : qb, ok);
    }
    cp_async_commit();
    const T* kb = k + zero + b * a.k_sb + hk * a.k_sh;
    const T* vb = v + zero + b * a.v_sb + hk * a.v_sh;
    auto fetch = [&](int t) {
        if (t < tiles) {
            const unsigned at = kv_at + (t % AP_STAGES) * 2 * C::KV;
            for (int c = threadIdx.x; c < BN * CHP; c += THREADS) {
                const int r = c / CHP, ch = c % CHP, j = t * BN + r;
                const bool ok = j < a.s && ch < CH;
                const unsigned dst = at + (r * P + ch * 8) * 2;
                cp_async16(dst, ok ? kb + j * a.k_ss + ch * 8 : kb, ok);
                cp_async16(dst + C::KV, ok ? vb + j * a.v_ss + ch * 8 : vb, ok);
            }
        }
        cp_async_commit();
    };
#pragma unroll
    for (int i = 0; i < AP_STAGES - 1; ++i) fetch(i);

    const int wrow = warp * 16;  // the warp's first row in the tile
    const unsigned q_frag = q_at + ((wrow + (lane & 15)) * P + (lane >> 4) * 8) * 2;
    float m[2] = {-kiln_inf(), -kiln_inf()}, sum[2] = {0.f, 0.f};  // rows gq, gq + 8
    float o[NT][4];
#pragma unroll
    for (int t = 0; t < NT; ++t) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0.f;
    unsigned qf[C::QREG ? DP / 16 : 1][4];

    for (int t = 0; t < tiles; ++t) {
        fetch(t + AP_STAGES - 1);
        cp_async_wait<AP_STAGES - 1>();
        __syncthreads();
        if (C::QREG && t == 0) {
#pragma unroll
            for (int kk = 0; kk < DP / 16; ++kk) ldsm_x4(qf[C::QREG ? kk : 0], q_frag + kk * 32, false);
        }
        const unsigned ks = kv_at + (t % AP_STAGES) * 2 * C::KV, vs = ks + C::KV;
        // s[j]: scores of keys 8j..8j+7 of the tile.
        float s[NS][4];
#pragma unroll
        for (int j = 0; j < NS; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < DP / 16; ++kk) {
            unsigned af[4];
            if (!C::QREG) ldsm_x4(af, q_frag + kk * 32, false);
            const unsigned* qa = C::QREG ? qf[C::QREG ? kk : 0] : af;
#pragma unroll
            for (int n = 0; n < BN / 16; ++n) {
                unsigned bf[4];
                ldsm_x4(bf, ks + ((n * 16 + (lane >> 4) * 8 + (lane & 7)) * P + kk * 16 + ((lane >> 3) & 1) * 8) * 2,
                        false);
                mma_16816<T>(s[2 * n], qa, bf);
                mma_16816<T>(s[2 * n + 1], qa, bf + 2);
            }
        }
        const bool masked = t >= whole_tiles;
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int i = row0 + wrow + gq + 8 * hh;  // this row's query
            if (masked) {
                // Keys [0, lim) are visible; a row past L reads no mask.
                const int lim = i >= a.l ? 0 : a.causal ? max(0, min(a.s, i + a.offset + 1)) : a.s;
                const i64 mrow = b * a.m_sb + h * a.m_sh + i * a.m_sl;
#pragma unroll
                for (int j = 0; j < NS; ++j)
#pragma unroll
                    for (int c = 0; c < 2; ++c) {
                        const int key = t * BN + 8 * j + 2 * tq + c;
                        float& x = s[j][2 * hh + c];
                        x *= a.scale_log2;
                        if (key >= lim) {
                            x = -kiln_inf();
                        } else if (a.mask == 1) {
                            if (!((const unsigned char*)mask)[mrow + key * a.m_ss]) x = -kiln_inf();
                        } else if (a.mask == 2) {
                            x += ((const float*)mask)[mrow + key * a.m_ss] * 1.4426950408889634f;
                        }
                    }
            } else {
#pragma unroll
                for (int j = 0; j < NS; ++j) {
                    s[j][2 * hh] *= a.scale_log2;
                    s[j][2 * hh + 1] *= a.scale_log2;
                }
            }
            // Online softmax: the new max, the old state rescaled, the tile's weights.
            float top = m[hh];
#pragma unroll
            for (int j = 0; j < NS; ++j) top = fmaxf(top, fmaxf(s[j][2 * hh], s[j][2 * hh + 1]));
            top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 1));
            top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 2));
            // A row that has seen no key yet stays at zero weight (no -inf - -inf).
            const float base = top == -kiln_inf() ? 0.f : top, f = ap_exp2(m[hh] - base);
            m[hh] = top;
            sum[hh] *= f;
#pragma unroll
            for (int n = 0; n < NT; ++n) {
                o[n][2 * hh] *= f;
                o[n][2 * hh + 1] *= f;
            }
#pragma unroll
            for (int j = 0; j < NS; ++j) {
                s[j][2 * hh] = ap_exp2(s[j][2 * hh] - base);
                s[j][2 * hh + 1] = ap_exp2(s[j][2 * hh + 1] - base);
                sum[hh] += s[j][2 * hh] + s[j][2 * hh + 1];
            }
        }
        // O += P·V, 16 keys at a time: P's A fragment is S's accumulators of those keys.
#pragma unroll
        for (int kc = 0; kc < BN / 16; ++kc) {
            const unsigned pf[4] = {pack2<T>(s[2 * kc][0], s[2 * kc][1]), pack2<T>(s[2 * kc][2], s[2 * kc][3]),
                                    pack2<T>(s[2 * kc + 1][0], s[2 * kc + 1][1]),
                                    pack2<T>(s[2 * kc + 1][2], s[2 * kc + 1][3])};
#pragma unroll
            for (int n = 0; n < NT; n += 2) {
                unsigned bf[4];
                ldsm_x4(bf, vs + ((kc * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * P + (n + (lane >> 4)) * 8) * 2,
                        true);
                mma_16816<T>(o[n], pf, bf);
                mma_16816<T>(o[n + 1], pf, bf + 2);
            }
        }
        __syncthreads();  // every warp is done with this stage before it is refilled
    }
    cp_async_wait<0>();
    __syncthreads();  // the query tile's copies (issued by any thread) have landed

    // The warp's rows, normalised, over its own rows of the query tile (only it read them),
    // then out in 16-byte stores; rows past L are not written.
    T* os = (T*)ap_smem;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        sum[hh] += __shfl_xor_sync(0xffffffffu, sum[hh], 1);
        sum[hh] += __shfl_xor_sync(0xffffffffu, sum[hh], 2);
        const float inv = sum[hh] > 0.f ? 1.f / sum[hh] : 0.f;
        const int r = wrow + gq + 8 * hh;
#pragma unroll
        for (int n = 0; n < NT; ++n)
            *(unsigned*)(os + r * P + 8 * n + 2 * tq) = pack2<T>(o[n][2 * hh] * inv, o[n][2 * hh + 1] * inv);
    }
    __syncwarp();
    T* ob = out + ((i64)bh * a.l + row0 + wrow) * D;
    for (int c = lane; c < 16 * CH; c += 32) {
        const int r = c / CH, ch = c % CH;
        if (row0 + wrow + r < a.l) *(u32x4*)(ob + (i64)r * D + ch * 8) = *(const u32x4*)(os + (wrow + r) * P + ch * 8);
    }
}

#define KILN_AP(S, T, D)                                                                                       \
    extern "C" __global__ void __launch_bounds__(32 * ApCfg<D>::WARPS) attention_prefill_##S##_d##D(          \
        const T* q, const T* k, const T* v, const void* mask, T* out, ApArgs a) {                              \
        attention_prefill<T, D>(q, k, v, mask, out, a);                                                        \
    }
#define KILN_AP_DIMS(S, T) \
    KILN_AP(S, T, 40) KILN_AP(S, T, 64) KILN_AP(S, T, 80) KILN_AP(S, T, 96) KILN_AP(S, T, 128) KILN_AP(S, T, 256)
KILN_AP_DIMS(bf16, kbf) KILN_AP_DIMS(f16, kh)
