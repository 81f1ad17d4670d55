// softmax / log_softmax over contiguous rows, one block per row, math in float
// (double for f64). A row of -inf gives NaN, as in PyTorch.

template <typename T>
__device__ void softmax_rows(const T* x, T* y, i64 outer, i64 r, int want_log) {
    typedef typename Acc<T>::type A;
    __shared__ A scratch[32];
    for (i64 row = blockIdx.x; row < outer; row += gridDim.x) {
        const T* xr = x + row * r;
        T* yr = y + row * r;
        A m = (A)-kiln_inf();
        for (i64 j = threadIdx.x; j < r; j += blockDim.x) {
            A v = up<A>(xr[j]);
            m = (v != v || v > m) ? v : m;
        }
        m = block_max(m, scratch);
        A s = 0;
        for (i64 j = threadIdx.x; j < r; j += blockDim.x) s += exp(up<A>(xr[j]) - m);
        s = block_sum(s, scratch);
        A ls = log(s);
        for (i64 j = threadIdx.x; j < r; j += blockDim.x) {
            A z = up<A>(xr[j]) - m;
            yr[j] = down<T>(want_log ? z - ls : exp(z) / s);
        }
        __syncthreads();
    }
}

#define KILN_SOFTMAX(S, T) \
    extern "C" __global__ void softmax_##S(const T* x, T* y, i64 outer, i64 r, int want_log) { softmax_rows<T>(x, y, outer, r, want_log); }
KILN_SOFTMAX(f16, kh) KILN_SOFTMAX(bf16, kbf) KILN_SOFTMAX(f32, float) KILN_SOFTMAX(f64, double)
