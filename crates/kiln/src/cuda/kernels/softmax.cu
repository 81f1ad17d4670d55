// softmax / log_softmax over contiguous rows, math in float (double for f64). A row of
// -inf gives NaN (x - max is NaN), as does a row holding NaN or +inf; as in PyTorch.
//
// v1 softmax_rows: one block per row, three passes (max, sum, write). The reference.
// v2 softmax_warp: one warp per row for r <= 32·V, the row held in registers; no block
//    synchronisation at all. For many short rows (attention, small vocabularies).
// v3 softmax_split: a row cut into chunks of one block each. Pass 1 gives each chunk's
//    (max, sum of exp(x - max)) with online rescaling, pass 2 merges the chunks' pairs and
//    writes. The chunks of a row meet through a grid barrier in one cooperative launch
//    (phase 2) or through two launches (phase 0, then 1). With one chunk per row
//    (bpr = 1) it is the block-per-row kernel for medium rows, with no barrier; its last
//    tile stays in registers between the passes, so a one-tile chunk is read once.

template <typename T>
__device__ void softmax_rows(const T* x, T* y, i64 outer, i64 r, int want_log) {
    typedef typename Acc<T>::type A;
    for (i64 row = blockIdx.x; row < outer; row += gridDim.x) {
        const T* xr = x + row * r;
        T* yr = y + row * r;
        A m = (A)-kiln_inf();
        for (i64 j = threadIdx.x; j < r; j += blockDim.x) {
            A v = up<A>(xr[j]);
            m = (v != v || v > m) ? v : m;
        }
        m = block_max(m);
        A s = 0;
        for (i64 j = threadIdx.x; j < r; j += blockDim.x) s += exp(up<A>(xr[j]) - m);
        s = block_sum(s);
        A ls = log(s);
        for (i64 j = threadIdx.x; j < r; j += blockDim.x) {
            A z = up<A>(xr[j]) - m;
            yr[j] = down<T>(want_log ? z - ls : exp(z) / s);
        }
        __syncthreads();
    }
}

template <typename A> __device__ __forceinline__ A nan_max(A a, A b) { return (b != b || b > a) ? b : a; }

// (max, sum of exp(x - max)) of a set of values; an empty or all -inf set has s = 0.
template <typename A> struct MaxSum { A m, s; };

template <typename A> __device__ __forceinline__ MaxSum<A> merge(MaxSum<A> a, MaxSum<A> b) {
    MaxSum<A> o;
    o.m = nan_max(a.m, b.m);
    // Both sides all -inf: exp(-inf - -inf) would be NaN; the merged set is still empty.
    o.s = o.m == (A)-kiln_inf() ? (A)0 : a.s * exp(a.m - o.m) + b.s * exp(b.m - o.m);
    return o;
}

// The pair of V values (-inf where padded).
template <typename A, int V> __device__ __forceinline__ MaxSum<A> tile_ms(const A* v) {
    MaxSum<A> t;
    t.m = v[0];
#pragma unroll
    for (int i = 1; i < V; ++i) t.m = nan_max(t.m, v[i]);
    t.s = 0;
    if (t.m != (A)-kiln_inf()) {
#pragma unroll
        for (int i = 0; i < V; ++i) t.s += exp(v[i] - t.m);
    }
    return t;
}

template <typename A> __device__ __forceinline__ A softmax_out(A x, MaxSum<A> st, A log_s, int want_log) {
    A z = x - st.m;
    return want_log ? z - log_s : exp(z) / st.s;
}

template <typename T, int V>
__device__ void softmax_warp(const T* x, T* y, i64 outer, i64 r, int want_log) {
    typedef typename Acc<T>::type A;
    int lane = threadIdx.x & 31;
    i64 per_block = blockDim.x >> 5, warps = (i64)gridDim.x * per_block;
    for (i64 row = blockIdx.x * per_block + (threadIdx.x >> 5); row < outer; row += warps) {
        const T* xr = x + row * r;
        T* yr = y + row * r;
        A v[V];
#pragma unroll
        for (int i = 0; i < V; ++i) {
            i64 j = lane + 32 * i;
            v[i] = j < r ? up<A>(xr[j]) : (A)-kiln_inf();
        }
        MaxSum<A> st = warp_merge(tile_ms<A, V>(v));
        A ls = log(st.s);
#pragma unroll
        for (int i = 0; i < V; ++i) {
            i64 j = lane + 32 * i;
            if (j < r) yr[j] = down<T>(softmax_out(v[i], st, ls, want_log));
        }
    }
}

#define SPLIT_V 4

// `part` holds (max, sum) per chunk (outer·bpr pairs); `bar` is the grid-barrier word.
template <typename T>
__device__ void softmax_split(const T* x, T* y, i64 outer, i64 r, i64 bpr, i64 chunk, int want_log, int phase,
                              typename Acc<T>::type* part, unsigned int* bar) {
    typedef typename Acc<T>::type A;
    const A NEG = (A)-kiln_inf();
    i64 tile = (i64)blockDim.x * SPLIT_V;
    for (i64 u = blockIdx.x; u < outer * bpr; u += gridDim.x) {  // one pass per block when phase 2
        i64 row = u / bpr, b = u - row * bpr;
        i64 begin = b * chunk, end = min(begin + chunk, r);
        i64 last_tile = end > begin ? begin + (end - 1 - begin) / tile * tile : begin;
        const T* xr = x + row * r;
        T* yr = y + row * r;
        A v[SPLIT_V];
        MaxSum<A> st;
        st.m = NEG;
        st.s = 0;
        if (phase != 1) {
            for (i64 base = begin; base < end; base += tile) {
#pragma unroll
                for (int i = 0; i < SPLIT_V; ++i) {
                    i64 j = base + threadIdx.x + (i64)i * blockDim.x;
                    v[i] = j < end ? up<A>(xr[j]) : NEG;
                }
                st = merge(st, tile_ms<A, SPLIT_V>(v));
            }
            st = block_merge(st, MaxSum<A>{(A)-kiln_inf(), (A)0});
            if (bpr > 1) {
                if (threadIdx.x == 0) {
                    part[2 * u] = st.m;
                    part[2 * u + 1] = st.s;
                }
                if (phase == 0) continue;
                grid_barrier(bar);
            }
        }
        if (bpr > 1) {
            const volatile A* p = part + 2 * row * bpr;  // written by other blocks: not via L1
            MaxSum<A> t;
            t.m = NEG;
            t.s = 0;
            for (i64 i = threadIdx.x; i < bpr; i += blockDim.x) {
                MaxSum<A> q;
                q.m = p[2 * i];
                q.s = p[2 * i + 1];
                t = merge(t, q);
            }
            st = block_merge(t, MaxSum<A>{(A)-kiln_inf(), (A)0});
        }
        A ls = log(st.s);
        for (i64 base = begin; base < end; base += tile) {
            bool cached = phase == 2 && base == last_tile;
#pragma unroll
            for (int i = 0; i < SPLIT_V; ++i) {
                i64 j = base + threadIdx.x + (i64)i * blockDim.x;
                if (j < end) yr[j] = down<T>(softmax_out(cached ? v[i] : up<A>(xr[j]), st, ls, want_log));
            }
        }
    }
}

#define KILN_SOFTMAX(S, T) \
    extern "C" __global__ void softmax_##S(const T* x, T* y, i64 outer, i64 r, int want_log) { softmax_rows<T>(x, y, outer, r, want_log); } \
    extern "C" __global__ void softmax_warp1_##S(const T* x, T* y, i64 outer, i64 r, int lg) { softmax_warp<T, 1>(x, y, outer, r, lg); } \
    extern "C" __global__ void softmax_warp4_##S(const T* x, T* y, i64 outer, i64 r, int lg) { softmax_warp<T, 4>(x, y, outer, r, lg); } \
    extern "C" __global__ void softmax_warp8_##S(const T* x, T* y, i64 outer, i64 r, int lg) { softmax_warp<T, 8>(x, y, outer, r, lg); } \
    extern "C" __global__ void softmax_warp32_##S(const T* x, T* y, i64 outer, i64 r, int lg) { softmax_warp<T, 32>(x, y, outer, r, lg); } \
    extern "C" __global__ void __launch_bounds__(512, 2) softmax_split_##S(const T* x, T* y, i64 outer, i64 r, i64 bpr, i64 chunk, \
        int lg, int phase, typename Acc<T>::type* part, unsigned int* bar) { softmax_split<T>(x, y, outer, r, bpr, chunk, lg, phase, part, bar); }
KILN_SOFTMAX(f16, kh) KILN_SOFTMAX(bf16, kbf) KILN_SOFTMAX(f32, float) KILN_SOFTMAX(f64, double)
