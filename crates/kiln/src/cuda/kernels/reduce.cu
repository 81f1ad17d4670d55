// Reduction family over contiguous rows (ops/reduce.rs moves the reduced dims last):
// sum, prod, mean, max, min, argmax, argmin (op codes 0..6) and var_mean (Welford per
// thread, Chan's merge across threads). One block per row.

// NaN counts as the extreme for both max and min (as on the CPU); ties keep the lower index.
template <typename A> __device__ __forceinline__ bool better(A a, i64 ia, A b, i64 ib, bool want_max) {
    bool an = a != a, bn = b != b;
    if (an || bn) return an && (!bn || ia < ib);
    if (a == b) return ia < ib;
    return want_max ? a > b : a < b;
}

template <typename T>
__device__ void reduce_rows(int op, const T* x, T* out_t, i64* out_i, i64 outer, i64 r) {
    typedef typename Acc<T>::type A;
    __shared__ A sv[1024];
    __shared__ i64 si[1024];
    bool is_arg = op == 5 || op == 6, want_max = op == 3 || op == 5;
    for (i64 row = blockIdx.x; row < outer; row += gridDim.x) {
        const T* xr = x + row * r;
        A acc = (op == 1) ? (A)1 : (A)0;
        i64 idx = -1;
        for (i64 j = threadIdx.x; j < r; j += blockDim.x) {
            A v = up<A>(xr[j]);
            if (op == 0 || op == 2) acc += v;
            else if (op == 1) acc *= v;
            else if (idx < 0 || better(v, j, acc, idx, want_max)) { acc = v; idx = j; }
        }
        sv[threadIdx.x] = acc;
        si[threadIdx.x] = idx;
        __syncthreads();
        for (int s = blockDim.x / 2; s > 0; s >>= 1) {
            if (threadIdx.x < s) {
                A b = sv[threadIdx.x + s];
                i64 ib = si[threadIdx.x + s];
                if (op == 0 || op == 2) sv[threadIdx.x] += b;
                else if (op == 1) sv[threadIdx.x] *= b;
                else if (ib >= 0 && (si[threadIdx.x] < 0 || better(b, ib, sv[threadIdx.x], si[threadIdx.x], want_max))) {
                    sv[threadIdx.x] = b;
                    si[threadIdx.x] = ib;
                }
            }
            __syncthreads();
        }
        if (threadIdx.x == 0) {
            A v = sv[0];
            if (is_arg) out_i[row] = si[0];
            else if (op == 2) out_t[row] = down<T>((A)(v / (A)r));
            else if (out_i) out_i[row] = (i64)v; // integer sum / prod are int64
            else out_t[row] = down<T>(v);
        }
        __syncthreads();
    }
}

template <typename T>
__device__ void var_mean_rows(const T* x, T* var, T* mean, i64 outer, i64 r, double correction) {
    typedef typename Acc<T>::type A;
    __shared__ A sm[1024], sq[1024];
    __shared__ i64 sn[1024];
    for (i64 row = blockIdx.x; row < outer; row += gridDim.x) {
        const T* xr = x + row * r;
        A m = 0, q = 0;
        i64 n = 0;
        for (i64 j = threadIdx.x; j < r; j += blockDim.x) {
            A v = up<A>(xr[j]);
            n += 1;
            A d = v - m;
            m += d / (A)n;
            q += d * (v - m);
        }
        sm[threadIdx.x] = m; sq[threadIdx.x] = q; sn[threadIdx.x] = n;
        __syncthreads();
        for (int s = blockDim.x / 2; s > 0; s >>= 1) {
            if (threadIdx.x < s) {
                i64 na = sn[threadIdx.x], nb = sn[threadIdx.x + s];
                if (nb > 0) {
                    A ma = sm[threadIdx.x], mb = sm[threadIdx.x + s];
                    i64 nn = na + nb;
                    A d = mb - ma;
                    sm[threadIdx.x] = ma + d * ((A)nb / (A)nn);
                    sq[threadIdx.x] += sq[threadIdx.x + s] + d * d * ((A)na * (A)nb / (A)nn);
                    sn[threadIdx.x] = nn;
                }
            }
            __syncthreads();
        }
        if (threadIdx.x == 0) {
            double dof = (double)r - correction;
            mean[row] = down<T>(r > 0 ? sm[0] : (A)kiln_nan());
            var[row] = down<T>(dof > 0 ? (A)(sq[0] / (A)dof) : (A)kiln_nan());
        }
        __syncthreads();
    }
}

#define KILN_REDUCE(S, T) \
    extern "C" __global__ void reduce_##S(int op, const T* x, T* ot, i64* oi, i64 outer, i64 r) { reduce_rows<T>(op, x, ot, oi, outer, r); }
KILN_FOR_REAL_TYPES(KILN_REDUCE)

#define KILN_VAR_MEAN(S, T) \
    extern "C" __global__ void var_mean_##S(const T* x, T* v, T* m, i64 outer, i64 r, double c) { var_mean_rows<T>(x, v, m, outer, r, c); }
KILN_VAR_MEAN(f16, kh) KILN_VAR_MEAN(bf16, kbf) KILN_VAR_MEAN(f32, float) KILN_VAR_MEAN(f64, double)
