// One decode token of Qwen3.5's Gated DeltaNet (ops/gated_delta.rs has the math) in one
// launch: L2 norms of q and k, the gates β = sigmoid(b) and exp(g), g = −exp(A_log) ·
// softplus(a + dt_bias), the delta-rule update of the state, o = Sᵀq, and the gated RMS
// norm norm(o) · w · silu(z). As composed ops it was about 35 launches per layer.
//
// A block per (batch, value head), a thread per value column j (blockDim = dv rounded up to
// a warp): the thread keeps column j of the head's f32 state S [DK, dv] in registers, so
// kᵀS, the rank-1 update and qᵀS are sums inside the thread; the state is read and written
// once, coalesced (threads j, j + 1 read neighbours). q and k (the head's key head,
// shared by hv / hk value heads) sit in shared memory; the two L2 norms and the output's
// RMS norm are block sums. Math in f32; inputs and output in T.

struct GdArgs {
    i64 channels;      // qkv's row: 2·hk·DK + hv·dv (all inputs contiguous rows)
    int hk, hv, dv;    // key heads, value heads, value dim
    float q_scale;     // 1/sqrt(DK), applied after q's L2 norm
    float eps;         // the output norm's epsilon
};

template <typename T, int DK>
__device__ void gated_delta_step(const T* qkv, const T* bg, const T* ag, const T* z, const float* s_in, float* s_out,
                                 const float* neg_a, const float* dt_bias, const float* norm_w, T* y, GdArgs a) {
    __shared__ float qs[DK], ks[DK];
    kiln_after_previous_kernel();
    const int b = blockIdx.x / a.hv, h = blockIdx.x % a.hv, kh = h / (a.hv / a.hk), j = threadIdx.x;
    const T* row = qkv + b * a.channels;
    float sq = 0.f, sk = 0.f;
    for (int i = threadIdx.x; i < DK; i += blockDim.x) {
        const float qv = up<float>(row[kh * DK + i]), kv = up<float>(row[(a.hk + kh) * DK + i]);
        qs[i] = qv;
        ks[i] = kv;
        sq += qv * qv;
        sk += kv * kv;
    }
    // block_sum's barriers also publish qs / ks.
    const float rq = rsqrtf(block_sum(sq) + 1e-6f) * a.q_scale, rk = rsqrtf(block_sum(sk) + 1e-6f);
    const int gate = b * a.hv + h;
    const float av = up<float>(ag[gate]) + dt_bias[h];
    const float decay = expf((fmaxf(av, 0.f) + logf(1.f + expf(-fabsf(av)))) * neg_a[h]);
    const float beta = 1.f / (1.f + expf(-up<float>(bg[gate])));
    float o = 0.f;
    if (j < a.dv) {
        const i64 head = (i64)blockIdx.x * DK * a.dv + j;
        float s[DK];
        float remembered = 0.f;
#pragma unroll
        for (int i = 0; i < DK; ++i) {
            s[i] = s_in[head + (i64)i * a.dv] * decay;
            remembered += ks[i] * rk * s[i];
        }
        const float delta = (up<float>(row[2 * a.hk * DK + h * a.dv + j]) - remembered) * beta;
#pragma unroll
        for (int i = 0; i < DK; ++i) {
            s[i] += ks[i] * rk * delta;
            s_out[head + (i64)i * a.dv] = s[i];
            o += qs[i] * rq * s[i];
        }
    }
    const float ss = block_sum(j < a.dv ? o * o : 0.f);
    if (j < a.dv) {
        const i64 at = (i64)gate * a.dv + j;
        const float zv = up<float>(z[at]);
        y[at] = down<T>(o * rsqrtf(ss / (float)a.dv + a.eps) * norm_w[j] * (zv / (1.f + expf(-zv))));
    }
}

// gated_delta_step_<dtype>_k<DK>; cuda/ops/gated_delta.rs lists the key dims (KEY_DIMS).
#define KILN_GD(S, T, DK)                                                                                     \
    extern "C" __global__ void __launch_bounds__(1024) gated_delta_step_##S##_k##DK(                          \
        const T* qkv, const T* b, const T* a, const T* z, const float* s_in, float* s_out, const float* neg_a, \
        const float* dt_bias, const float* norm_w, T* y, GdArgs args) {                                        \
        gated_delta_step<T, DK>(qkv, b, a, z, s_in, s_out, neg_a, dt_bias, norm_w, y, args);                  \
    }
#define KILN_GD_DIMS(S, T) KILN_GD(S, T, 16) KILN_GD(S, T, 32) KILN_GD(S, T, 64) KILN_GD(S, T, 128)
KILN_GD_DIMS(f32, float) KILN_GD_DIMS(bf16, kbf) KILN_GD_DIMS(f16, kh)
