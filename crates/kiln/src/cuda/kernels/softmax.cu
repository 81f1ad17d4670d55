// softmax / log_softmax over contiguous rows, math in float (double for f64). A row of
// -inf gives NaN (x - max is NaN), as does a row holding NaN or +inf; as in PyTorch.
//
// v1 softmax_rows: one block per row, three passes (max, sum, write). The reference.
// v2 softmax_warp: one warp per row for r <= 128·V4, the row held in registers as groups of
//    four consecutive values (vector loads and stores); no block synchronisation at all; one
//    exp per value, one division per row. For many short rows (attention, small vocabularies).
// v3 softmax_split: a row cut into chunks of one block each. Pass 1 gives each chunk's
//    (max, sum of exp(x - max)) with online rescaling, pass 2 merges the chunks' pairs and
//    writes. The chunks of a row meet through a grid barrier in one cooperative launch
//    (phase 2) or through two launches (phase 0, then 1). With one chunk per row
//    (bpr = 1) it is the block-per-row kernel for medium rows, with no barrier; its last
//    tile stays in registers between the passes, so a one-tile chunk is read once.
// v4 softmax_cluster: a row over a cluster of up to 16 blocks (Hopper; size set at launch),
//    each holding its chunk in registers (vector loads): read once, one exp per value. Each
//    block writes its (max, sum) pair into every block's shared memory (remote stores) before
//    one hardware cluster barrier: no global memory, no grid barrier. For a few to some tens
//    of long rows.
// v5 softmax_poll: rows over co-resident blocks (cooperative launch), each block's chunk in
//    registers (4·V4 consecutive elements per thread: vector loads); a block publishes its
//    (max, sum) pair to a slot tagged with the launch's epoch and polls its row's slots
//    (a warp per 32) instead of meeting at a grid barrier: no atomics, one L2 round trip
//    after the last pair lands (H200 lab, 2026-12-03: 1×128256 f32 4.3 µs launched plainly,
//    3.8 as a programmatic dependent, against the split kernel's 6.4).
// v4 and v5 are launched as programmatic dependents (cuda/launch.rs): they may be scheduled
// while the kernel before them finishes, and wait for it in kiln_after_previous_kernel.

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

// Four consecutive elements from p[j] as floats (-inf past `end`), and back: one vector
// access where all four are inside and aligned (a row of r % 4 != 0 may start unaligned).
template <typename T> struct __align__(4 * sizeof(T)) Four { T v[4]; };
template <typename T> __device__ __forceinline__ bool whole4(const T* p, i64 j, i64 end) {
    return j + 3 < end && ((u64)(p + j) & (4 * sizeof(T) - 1)) == 0;
}
template <typename A, typename T> __device__ __forceinline__ void load4(const T* p, i64 j, i64 end, A (&v)[4]) {
    if (whole4(p, j, end)) {
        Four<T> f = *(const Four<T>*)(p + j);
#pragma unroll
        for (int e = 0; e < 4; ++e) v[e] = up<A>(f.v[e]);
    } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) v[e] = j + e < end ? up<A>(p[j + e]) : (A)-kiln_inf();
    }
}
template <typename A, typename T> __device__ __forceinline__ void store4(T* p, i64 j, i64 end, const A (&v)[4]) {
    if (whole4(p, j, end)) {
        Four<T> f;
#pragma unroll
        for (int e = 0; e < 4; ++e) f.v[e] = down<T>(v[e]);
        *(Four<T>*)(p + j) = f;
    } else {
#pragma unroll
        for (int e = 0; e < 4; ++e)
            if (j + e < end) p[j + e] = down<T>(v[e]);
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

// V4 groups of four from p: group i starts at element first + i·stride (a multiple of 4);
// returns the groups' NaN-propagating max.
template <typename A, typename T, int V4>
__device__ __forceinline__ A load_groups(const T* p, i64 first, i64 stride, i64 end, A (&v)[V4][4]) {
    A m = (A)-kiln_inf();
#pragma unroll
    for (int i = 0; i < V4; ++i) {
        load4(p, first + i * stride, end, v[i]);
#pragma unroll
        for (int e = 0; e < 4; ++e) m = nan_max(m, v[i][e]);
    }
    return m;
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

// Exponentiates V4 groups against their max m in place (log_softmax keeps the values) and
// returns the sum of the exponentials: one exp per value. With m = -inf (no finite value)
// they are exact zeros, as exp(-inf - m) is for any finite m.
template <typename A, int V4> __device__ __forceinline__ A exp_groups(A m, A (&v)[V4][4], int want_log) {
    A s = 0;
#pragma unroll
    for (int i = 0; i < V4; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            A ex = m == (A)-kiln_inf() ? (A)0 : exp(v[i][e] - m);
            s += ex;
            if (!want_log) v[i][e] = ex;
        }
    return s;
}

// The block's (max, sum of exp(v - max)) over its threads' V4 groups, whose max over the
// thread is `m`. Max first, then one exp per value: merging (max, sum) pairs across lanes
// costs two exps per step, which measured slower (H200 lab, 2026-12-03: 1 x 128256 poll
// 4.7 -> 5.0 µs). A block with no finite value gives (-inf, 0).
template <int V4> __device__ __forceinline__ MaxSum<float> block_exp(float m, float (&v)[V4][4], int want_log) {
    m = block_max(m);
    return MaxSum<float>{m, block_sum(exp_groups(m, v, want_log))};
}

template <typename T, int V4>
__device__ void softmax_warp(const T* x, T* y, i64 outer, i64 r, int want_log) {
    typedef typename Acc<T>::type A;
    int lane = threadIdx.x & 31;
    i64 per_block = blockDim.x >> 5, warps = (i64)gridDim.x * per_block;
    for (i64 row = blockIdx.x * per_block + (threadIdx.x >> 5); row < outer; row += warps) {
        const T* xr = x + row * r;
        T* yr = y + row * r;
        A v[V4][4];
        A m = load_groups(xr, (i64)lane * 4, 128, r, v);
        // Max first, then one exp per value, kept for the output (not an online merge,
        // which evaluates exp twice per value: this kernel is bound by that arithmetic).
        // An all -inf or NaN row sums to 0 or NaN: NaN out, as PyTorch.
        m = warp_max(m);
        const A s = warp_sum(exp_groups(m, v, want_log)), ls = log(s), f = (A)1 / s;
#pragma unroll
        for (int i = 0; i < V4; ++i) {
            A o[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) o[e] = want_log ? v[i][e] - m - ls : v[i][e] * f;
            store4(yr, (i64)(lane + 32 * i) * 4, r, o);
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

// ---- v4: a row over a cluster of C blocks (sm_90+; C set at launch, up to 16) ----

// Row blockIdx.x / C; block (cluster rank) b holds elements [b·chunk, (b+1)·chunk) in
// registers, V4 groups of four per thread (vector loads), chunk <= blockDim.x·4·V4. Each
// block exponentiates against its own max m_b (block_exp: one exp per value) and writes
// its pair into every block of the cluster (remote stores, no read round trips); after one
// cluster barrier each block merges the C pairs from its own shared memory and scales its
// exponentials by exp(m_b - m) / s. No block
// touches another's shared memory after that barrier, so none waits before it exits; a
// first barrier phase, entered at the start, makes sure every block runs before the stores.
template <typename T, int V4> __device__ void softmax_cluster(const T* x, T* y, i64 r, i64 chunk, int want_log) {
#ifdef KILN_HAS_CLUSTER
    __shared__ float pairs[CLUSTER_MAX][2];
    // Another block's shared memory exists once that block runs: announce this one now and
    // wait for all before the remote stores (the loads and block merges hide the wait).
    cluster_arrive_relaxed();
    kiln_after_previous_kernel();
    const float NEG = -kiln_inf();
    const unsigned nb = cluster_blocks(), b = cluster_rank();
    const i64 row = blockIdx.x / nb, begin = b * chunk, end = min(begin + chunk, r);
    const T* xr = x + row * r;
    T* yr = y + row * r;
    float v[V4][4];
    const MaxSum<float> bs = block_exp(load_groups(xr, begin + (i64)threadIdx.x * 4, (i64)blockDim.x * 4, end, v), v, want_log);
    cluster_wait();
    if (threadIdx.x < nb) cluster_store2(pairs[b], threadIdx.x, bs.m, bs.s);
    cluster_arrive();
    cluster_wait();
    const int lane = threadIdx.x & 31;
    MaxSum<float> all = lane < (int)nb ? MaxSum<float>{pairs[lane][0], pairs[lane][1]} : MaxSum<float>{NEG, 0.f};
    all = warp_merge(all);
    const float ls = log(all.s);
    float f = bs.m == NEG ? 0.f : exp(bs.m - all.m) / all.s;
    if (all.m == NEG || all.m != all.m) f = kiln_nan();  // an all -inf or NaN row: NaN, as PyTorch
#pragma unroll
    for (int i = 0; i < V4; ++i) {
        float o[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) o[e] = want_log ? v[i][e] - all.m - ls : v[i][e] * f;
        store4(yr, begin + ((i64)i * blockDim.x + threadIdx.x) * 4, end, o);
    }
#else
    __trap();
#endif
}


// ---- v5: softmax_poll ----
// A slot: (max, sum) as two u64, each value's bits under the epoch, so a reader sees a
// whole pair of this launch or knows it has not landed (64-bit accesses are single-copy
// atomic; relaxed.gpu reads skip L1).
__device__ __forceinline__ void put_slot(u64* p, unsigned ep, float m, float s) {
    u64 a = ((u64)ep << 32) | __float_as_uint(m), b = ((u64)ep << 32) | __float_as_uint(s);
    asm volatile("st.relaxed.gpu.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory");
}
__device__ __forceinline__ bool get_slot(const u64* p, unsigned ep, MaxSum<float>& out) {
    u64 a, b;
    asm volatile("ld.relaxed.gpu.global.v2.u64 {%0, %1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
    out.m = __uint_as_float((unsigned)a);
    out.s = __uint_as_float((unsigned)b);
    return (unsigned)(a >> 32) == ep && (unsigned)(b >> 32) == ep;
}

// Row blockIdx.x / bpr, chunk blockIdx.x % bpr. `sync`: this stream's sync words; word 2
// counts launches (the epoch), slots start at word 4 (cuda/ops/reduce.rs: SYNC_BYTES). Every
// block reads the epoch before it publishes; block 0 stores the new one once every slot of
// the grid holds this launch's pair, so no block can still be about to read the old one,
// and the next launch's tag (epoch + 1) matches no stale slot.
template <typename T, int V4>
__device__ void softmax_poll(const T* x, T* y, i64 r, i64 bpr, i64 chunk, int want_log, unsigned* sync) {
    __shared__ float wpart[4][2];  // the polling warps' merged pairs (bpr <= 128)
    kiln_after_previous_kernel();
    const float NEG = -kiln_inf();
    unsigned* epoch = sync + 2;
    u64* slots = (u64*)(sync + 4);
    const unsigned ep = *(volatile unsigned*)epoch + 1;
    const i64 row = blockIdx.x / bpr, begin = (blockIdx.x - row * bpr) * chunk, end = min(begin + chunk, r);
    const T* xr = x + row * r;
    T* yr = y + row * r;
    float v[V4][4];
    const MaxSum<float> bs = block_exp(load_groups(xr, begin + (i64)threadIdx.x * 4, (i64)blockDim.x * 4, end, v), v, want_log);
    if (threadIdx.x == 0) put_slot(slots + 2 * blockIdx.x, ep, bs.m, bs.s);
    // Warp w polls the row's slots 32·w .. 32·w + 31, a slot a lane: one L2 round trip once
    // the last pair lands, however many blocks the row has (bpr <= 32 · warps).
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, pollers = (int)((bpr + 31) / 32);
    if (warp < pollers) {
        MaxSum<float> st{NEG, 0.f}, q;
        const i64 b = (i64)warp * 32 + lane;
        if (b < bpr) {
            while (!get_slot(slots + 2 * (row * bpr + b), ep, q)) {}
            st = q;
        }
        st = warp_merge(st);
        // Block 0 advances the epoch below, once every slot of the grid holds this launch's
        // pair: with one row those are the row's, all seen here.
        if (blockIdx.x == 0 && warp == 0 && gridDim.x > bpr)
            for (unsigned g = lane; g < gridDim.x; g += 32)
                while (!get_slot(slots + 2 * g, ep, q)) {}
        if (lane == 0) {
            wpart[warp][0] = st.m;
            wpart[warp][1] = st.s;
        }
    }
    __syncthreads();
    if (blockIdx.x == 0 && threadIdx.x == 0) *(volatile unsigned*)epoch = ep;
    MaxSum<float> all{wpart[0][0], wpart[0][1]};
    for (int w = 1; w < pollers; ++w) all = merge(all, MaxSum<float>{wpart[w][0], wpart[w][1]});
    const float m = all.m, s = all.s, ls = log(s);
    float f = bs.m == NEG ? 0.f : exp(bs.m - m) / s;
    if (m == NEG || m != m) f = kiln_nan();  // an all -inf or NaN row: NaN, as PyTorch
#pragma unroll
    for (int i = 0; i < V4; ++i) {
        float o[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) o[e] = want_log ? v[i][e] - m - ls : v[i][e] * f;
        store4(yr, begin + ((i64)i * blockDim.x + threadIdx.x) * 4, end, o);
    }
}

#define KILN_SOFTMAX(S, T) \
    extern "C" __global__ void softmax_##S(const T* x, T* y, i64 outer, i64 r, int want_log) { softmax_rows<T>(x, y, outer, r, want_log); } \
    extern "C" __global__ void softmax_warp1_##S(const T* x, T* y, i64 outer, i64 r, int lg) { softmax_warp<T, 1>(x, y, outer, r, lg); } \
    extern "C" __global__ void softmax_warp2_##S(const T* x, T* y, i64 outer, i64 r, int lg) { softmax_warp<T, 2>(x, y, outer, r, lg); } \
    extern "C" __global__ void softmax_warp8_##S(const T* x, T* y, i64 outer, i64 r, int lg) { softmax_warp<T, 8>(x, y, outer, r, lg); } \
    extern "C" __global__ void __launch_bounds__(512, 2) softmax_split_##S(const T* x, T* y, i64 outer, i64 r, i64 bpr, i64 chunk, \
        int lg, int phase, typename Acc<T>::type* part, unsigned int* bar) { softmax_split<T>(x, y, outer, r, bpr, chunk, lg, phase, part, bar); }
KILN_SOFTMAX(f16, kh) KILN_SOFTMAX(bf16, kbf) KILN_SOFTMAX(f32, float) KILN_SOFTMAX(f64, double)

// softmax_cluster<V4>_<dtype>, at most 512 threads, launched with a cluster of up to
// CLUSTER_MAX blocks (cuda/ops/reduce.rs: cluster_plan).
#define KILN_SOFTMAX_CLUSTER(S, T, V4)                                                                   \
    extern "C" __global__ void __launch_bounds__(512) softmax_cluster##V4##_##S(const T* x, T* y, i64 r, \
                                                                                i64 chunk, int lg) {    \
        softmax_cluster<T, V4>(x, y, r, chunk, lg);                                                      \
    }
#define KILN_SOFTMAX_CLUSTERS(S, T) \
    KILN_SOFTMAX_CLUSTER(S, T, 1) KILN_SOFTMAX_CLUSTER(S, T, 2) KILN_SOFTMAX_CLUSTER(S, T, 4) KILN_SOFTMAX_CLUSTER(S, T, 8)
KILN_SOFTMAX_CLUSTERS(f16, kh) KILN_SOFTMAX_CLUSTERS(bf16, kbf) KILN_SOFTMAX_CLUSTERS(f32, float)

// softmax_poll<V4>_<dtype>, at most 512 threads, two blocks per SM resident (the cooperative
// launch's bound, cuda/ops/reduce.rs: coop_blocks); POLL_SHAPES there.
#define KILN_SOFTMAX_POLL(S, T, V4)                                                               \
    extern "C" __global__ void __launch_bounds__(512, 2) softmax_poll##V4##_##S(                  \
        const T* x, T* y, i64 r, i64 bpr, i64 chunk, int lg, unsigned* sync) {                   \
        softmax_poll<T, V4>(x, y, r, bpr, chunk, lg, sync);                                       \
    }
#define KILN_SOFTMAX_POLLS(S, T) KILN_SOFTMAX_POLL(S, T, 1) KILN_SOFTMAX_POLL(S, T, 2)
KILN_SOFTMAX_POLLS(f16, kh) KILN_SOFTMAX_POLLS(bf16, kbf) KILN_SOFTMAX_POLLS(f32, float)
