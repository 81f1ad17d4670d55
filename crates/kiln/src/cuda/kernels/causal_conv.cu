// Causal depthwise convolution along time with a carried state (causal-conv1d's update;
// ops/causal_conv.rs has the math): y[b, t, c] = act(bias[c] + sum_j w[c, j] · win[t + j])
// over the window win = [state (K-1 rows), x (T rows)], then the window's last K-1 rows
// become the state. As composed ops a decode step was a cat, a state copy, K muls, K-1
// adds and a SiLU: 2K + 2 launches.
//
// A thread per (channel, chunk of CC_CHUNK steps, batch row); a warp's threads take
// consecutive channels, so every load and store is coalesced. The thread keeps the K-1
// inputs before its step and the K taps in registers (K <= CC_MAX_K, loops unrolled and
// predicated on K). The chunk holding the last step writes the new state, after reading
// what it needs of the old one: with one chunk (T <= CC_CHUNK, decode) state_out may be
// state_in; with more, another block may still read state_in, so the op passes a fresh
// state_out. Math in Acc<T> (float; double for f64), one rounding per output.

#define CC_CHUNK 64
#define CC_MAX_K 8

template <typename T>
__device__ __forceinline__ void causal_conv(const T* x, const T* state_in, T* state_out, const T* w, const T* bias,
                                            T* y, i64 steps, int C, int K, int silu) {
    typedef typename Acc<T>::type A;
    kiln_after_previous_kernel();
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const i64 b = blockIdx.z, t0 = (i64)blockIdx.y * CC_CHUNK, t1 = min(t0 + CC_CHUNK, steps);
    const T* xb = x + b * steps * C + c;
    const T* sb = state_in + b * (K - 1) * C + c;
    // The window's input at step p (p < 0: the state's row K - 1 + p).
    auto input = [&](i64 p) { return up<A>(p >= 0 ? xb[p * C] : sb[(K - 1 + p) * C]); };
    A taps[CC_MAX_K], win[CC_MAX_K];
#pragma unroll
    for (int j = 0; j < CC_MAX_K; ++j) taps[j] = j < K ? up<A>(w[(i64)c * K + j]) : (A)0;
#pragma unroll
    for (int j = 0; j < CC_MAX_K; ++j) win[j] = j < K - 1 ? input(t0 - (K - 1) + j) : (A)0;
    const A b0 = bias ? up<A>(bias[c]) : (A)0;
    for (i64 t = t0; t < t1; ++t) {
        const A v = up<A>(xb[t * C]);
        A s = b0;
#pragma unroll
        for (int j = 0; j < CC_MAX_K; ++j) {
            if (j < K - 1) s += taps[j] * win[j];
            else if (j == K - 1) s += taps[j] * v;
        }
        // Shift the window: win[K - 2] takes v.
#pragma unroll
        for (int j = 0; j < CC_MAX_K - 1; ++j)
            if (j < K - 1) win[j] = j + 1 < K - 1 ? win[j + 1] : v;
        if (silu) s = s / ((A)1 + exp(-s));
        y[(b * steps + t) * C + c] = down<T>(s);
    }
    if (t1 != steps) return;
    A next[CC_MAX_K - 1];
#pragma unroll
    for (int j = 0; j < CC_MAX_K - 1; ++j) next[j] = j < K - 1 ? input(steps - (K - 1) + j) : (A)0;
#pragma unroll
    for (int j = 0; j < CC_MAX_K - 1; ++j)
        if (j < K - 1) state_out[(b * (K - 1) + j) * C + c] = down<T>(next[j]);
}

// causal_conv_<dtype>; cuda/ops/causal_conv.rs launches it.
#define KILN_CAUSAL_CONV(S, T)                                                                           \
    extern "C" __global__ void causal_conv_##S(const T* x, const T* state_in, T* state_out, const T* w,    \
                                               const T* bias, T* y, i64 steps, int C, int K, int silu) {  \
        causal_conv<T>(x, state_in, state_out, w, bias, y, steps, C, K, silu);                            \
    }
KILN_CAUSAL_CONV(f32, float)
KILN_CAUSAL_CONV(f64, double)
KILN_CAUSAL_CONV(f16, kh)
KILN_CAUSAL_CONV(bf16, kbf)
