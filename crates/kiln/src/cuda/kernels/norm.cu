// rms_norm over contiguous rows: y = x / sqrt(mean(x^2) + eps) * w, math in float
// (double for f64). One block per row. With `res` set the row normalised is x + res,
// rounded to T as a separate add would round it, and also stored to `sum` (the decoder's
// residual add and the next norm in one launch); each thread re-reads only what it wrote.

template <typename T>
__device__ void rms_norm_rows(const T* x, const T* res, T* sum, const T* w, T* y, i64 outer, i64 r, double eps) {
    typedef typename Acc<T>::type A;
    kiln_after_previous_kernel();
    for (i64 row = blockIdx.x; row < outer; row += gridDim.x) {
        const T* xr = res ? sum + row * r : x + row * r;
        A ss = 0;
        for (i64 j = threadIdx.x; j < r; j += blockDim.x) {
            if (res) sum[row * r + j] = down<T>(up<A>(x[row * r + j]) + up<A>(res[row * r + j]));
            A v = up<A>(xr[j]);
            ss += v * v;
        }
        ss = block_sum(ss);
        A inv = (A)1 / sqrt(ss / (A)r + (A)eps);
        for (i64 j = threadIdx.x; j < r; j += blockDim.x)
            y[row * r + j] = down<T>(up<A>(xr[j]) * inv * (w ? up<A>(w[j]) : (A)1));
        __syncthreads();
    }
}

#define KILN_RMS_NORM(S, T) \
    extern "C" __global__ void rms_norm_##S(const T* x, const T* res, T* sum, const T* w, T* y, i64 outer, i64 r, double eps) { \
        rms_norm_rows<T>(x, res, sum, w, y, outer, r, eps);                                                          \
    }
KILN_RMS_NORM(f16, kh) KILN_RMS_NORM(bf16, kbf) KILN_RMS_NORM(f32, float) KILN_RMS_NORM(f64, double)
