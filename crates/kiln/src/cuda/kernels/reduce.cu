// Reduction family over contiguous rows (ops/reduce.rs moves the reduced dims last):
// sum, prod, mean, max, min, argmax, argmin (op codes 0..6), one block per row; and
// var_mean in one pass (Welford per thread, Chan's merge across threads and blocks), a long
// row split across blocks.

// NaN counts as the extreme for both max and min (as on the CPU); ties keep the lower index.
template <typename A> __device__ __forceinline__ bool better(A a, i64 ia, A b, i64 ib, bool want_max) {
    bool an = a != a, bn = b != b;
    if (an || bn) return an && (!bn || ia < ib);
    if (a == b) return ia < ib;
    return want_max ? a > b : a < b;
}

#define RD_UNROLL 8

template <typename T>
__device__ void reduce_rows(int op, const T* x, T* out_t, i64* out_i, i64 outer, i64 r) {
    typedef typename Acc<T>::type A;
    __shared__ A sv[1024];
    __shared__ i64 si[1024];
    bool is_arg = op == 5 || op == 6, want_max = op == 3 || op == 5;
    kiln_after_previous_kernel();
    for (i64 row = blockIdx.x; row < outer; row += gridDim.x) {
        const T* xr = x + row * r;
        A acc = (op == 1) ? (A)1 : (A)0;
        i64 idx = -1;
        // RD_UNROLL loads in flight before they are folded, in the same order as one at a
        // time (a long row, as a vocabulary's argmax, was a chain of load latencies).
        for (i64 base = threadIdx.x; base < r; base += (i64)blockDim.x * RD_UNROLL) {
            A v[RD_UNROLL];
#pragma unroll
            for (int u = 0; u < RD_UNROLL; ++u) {
                const i64 j = base + (i64)u * blockDim.x;
                v[u] = j < r ? up<A>(xr[j]) : (A)0;
            }
#pragma unroll
            for (int u = 0; u < RD_UNROLL; ++u) {
                const i64 j = base + (i64)u * blockDim.x;
                if (j >= r) break;
                if (op == 0 || op == 2) acc += v[u];
                else if (op == 1) acc *= v[u];
                else if (idx < 0 || better(v[u], j, acc, idx, want_max)) { acc = v[u]; idx = j; }
            }
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

// Welford state of a set: count, mean, sum of squared deviations (M2).
template <typename A> struct Welford { i64 n; A m, q; };

// Chan et al.'s merge of two sets' states.
template <typename A> __device__ __forceinline__ Welford<A> merge(Welford<A> a, Welford<A> b) {
    if (b.n == 0) return a;
    if (a.n == 0) return b;
    Welford<A> o;
    o.n = a.n + b.n;
    A d = b.m - a.m, fb = (A)b.n / (A)o.n;
    o.m = a.m + d * fb;
    o.q = a.q + b.q + d * d * ((A)a.n * fb);
    return o;
}

template <typename T, typename A>
__device__ void var_mean_store(Welford<A> w, T* var, T* mean, i64 row, i64 r, double correction) {
    double dof = (double)r - correction;
    mean[row] = down<T>(r > 0 ? w.m : (A)kiln_nan());
    var[row] = down<T>(dof > 0 ? (A)(w.q / (A)dof) : (A)kiln_nan());
}

#define VM_V 4

// var_mean over rows of r cut into `bpr` chunks of `chunk`, one block each. Each thread
// folds tiles of VM_V values (exact tile mean and M2, one division per tile) into its
// state, then the block merges. One chunk per row: the block writes. Several: chunk states
// go to `part` (mean, M2; the count follows from the chunk) and the last block to finish
// (phase 2; `counter` word) or a second launch (phase 0, then 1 with a warp per row)
// merges each row.
template <typename T>
__device__ void var_mean_split(const T* x, T* var, T* mean, i64 outer, i64 r, i64 bpr, i64 chunk,
                               double correction, int phase, typename Acc<T>::type* part, unsigned int* counter) {
    typedef typename Acc<T>::type A;
    if (phase != 1) {
        for (i64 u = blockIdx.x; u < outer * bpr; u += gridDim.x) {
            i64 row = u / bpr, b = u - row * bpr;
            i64 begin = b * chunk, end = min(begin + chunk, r);
            const T* xr = x + row * r;
            Welford<A> st;
            st.n = 0; st.m = 0; st.q = 0;
            for (i64 base = begin + threadIdx.x; base < end; base += (i64)blockDim.x * VM_V) {
                A v[VM_V];
                Welford<A> t;
                t.n = 0; t.m = 0; t.q = 0;
#pragma unroll
                for (int i = 0; i < VM_V; ++i) {
                    i64 j = base + (i64)i * blockDim.x;
                    v[i] = j < end ? up<A>(xr[j]) : (A)0;
                    t.n += j < end;
                    t.m += v[i];
                }
                t.m /= (A)t.n;
#pragma unroll
                for (int i = 0; i < VM_V; ++i) {
                    A d = v[i] - t.m;
                    if (i < t.n) t.q += d * d;  // a thread's valid values come first
                }
                st = merge(st, t);
            }
            st = block_merge(st, Welford<A>{0, (A)0, (A)0});
            if (bpr == 1) {
                if (threadIdx.x == 0) var_mean_store(st, var, mean, row, r, correction);
            } else if (threadIdx.x == 0) {
                part[2 * u] = st.m;
                part[2 * u + 1] = st.q;
            }
        }
        if (bpr == 1 || phase == 0 || !last_block(counter)) return;
    }
    // Merge each row's chunk states, a warp per row: the rows of the last block (phase 2)
    // or of this block's warps (phase 1). Not a block-wide merge per row: the last block
    // would pay one block barrier per row, serially.
    const int lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    const i64 first = (phase == 1 ? (i64)blockIdx.x * nw : 0) + (threadIdx.x >> 5);
    const i64 stride = phase == 1 ? (i64)gridDim.x * nw : nw;
    for (i64 row = first; row < outer; row += stride) {
        const volatile A* p = part + 2 * row * bpr;
        Welford<A> st;
        st.n = 0; st.m = 0; st.q = 0;
        for (i64 b = lane; b < bpr; b += 32) {
            Welford<A> c;
            c.n = max((i64)0, min(chunk, r - b * chunk));
            c.m = p[2 * b];
            c.q = p[2 * b + 1];
            st = merge(st, c);
        }
        st = warp_merge(st);
        if (lane == 0) var_mean_store(st, var, mean, row, r, correction);
    }
}

#define KILN_REDUCE(S, T) \
    extern "C" __global__ void reduce_##S(int op, const T* x, T* ot, i64* oi, i64 outer, i64 r) { reduce_rows<T>(op, x, ot, oi, outer, r); }
KILN_FOR_REAL_TYPES(KILN_REDUCE)

#define KILN_VAR_MEAN(S, T) \
    extern "C" __global__ void var_mean_##S(const T* x, T* v, T* m, i64 outer, i64 r, i64 bpr, i64 chunk, double c, \
        int phase, typename Acc<T>::type* part, unsigned int* counter) { var_mean_split<T>(x, v, m, outer, r, bpr, chunk, c, phase, part, counter); }
KILN_VAR_MEAN(f16, kh) KILN_VAR_MEAN(bf16, kbf) KILN_VAR_MEAN(f32, float) KILN_VAR_MEAN(f64, double)
