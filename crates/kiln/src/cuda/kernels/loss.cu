// mse_loss over contiguous tensors of one shape (ops/loss.rs broadcasts first).
// mse_none: (a - b)² per element. mse_reduce: the sum (or mean) of it in one launch: each
// block sums a grid-stride share in double, the last block to finish (`counter` word) adds
// the blocks' sums in a fixed order and writes; a single block writes directly. Without a
// counter word the launcher runs phase 0 (block sums) then phase 1 (one block adds them).

template <typename T>
__device__ void mse_none(const T* a, const T* b, T* out, i64 n) {
    typedef typename Acc<T>::type A;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        A d = up<A>(a[i]) - up<A>(b[i]);
        out[i] = down<T>(d * d);
    }
}

#define MSE_V 4

template <typename T>
__device__ void mse_reduce(const T* a, const T* b, T* out, i64 n, int mean, int phase, i64 parts, double* part,
                           unsigned int* counter) {
    typedef typename Acc<T>::type A;
    double s = 0;
    if (phase != 1) {
        i64 stride = (i64)gridDim.x * blockDim.x;
        for (i64 base = (i64)blockIdx.x * blockDim.x + threadIdx.x; base < n; base += stride * MSE_V) {
            A d[MSE_V];
#pragma unroll
            for (int k = 0; k < MSE_V; ++k) {  // loads of the tile first: several in flight
                i64 i = base + k * stride;
                d[k] = i < n ? up<A>(a[i]) - up<A>(b[i]) : (A)0;
            }
#pragma unroll
            for (int k = 0; k < MSE_V; ++k) s += (double)(d[k] * d[k]);
        }
        s = block_sum(s);
        if (gridDim.x > 1) {
            if (threadIdx.x == 0) part[blockIdx.x] = s;
            if (phase == 0 || !last_block(counter)) return;
        }
    }
    if (phase == 1 || gridDim.x > 1) {
        s = 0;
        for (i64 i = threadIdx.x; i < parts; i += blockDim.x) s += ((const volatile double*)part)[i];
        s = block_sum(s);
    }
    if (threadIdx.x == 0) out[0] = down<T>((A)(mean ? s / (double)n : s));
}

#define KILN_MSE(S, T) \
    extern "C" __global__ void mse_none_##S(const T* a, const T* b, T* out, i64 n) { mse_none<T>(a, b, out, n); } \
    extern "C" __global__ void mse_reduce_##S(const T* a, const T* b, T* out, i64 n, int mean, int phase, i64 parts, \
        double* part, unsigned int* counter) { mse_reduce<T>(a, b, out, n, mean, phase, parts, part, counter); }
KILN_MSE(f16, kh) KILN_MSE(bf16, kbf) KILN_MSE(f32, float) KILN_MSE(f64, double)
