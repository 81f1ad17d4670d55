// bincount of int64 values into `nbins` bins (values outside [0, nbins) are dropped):
// counts (int64 out) or sums of f32 / f64 weights. One cooperative launch:
//   1. each block zeroes its share of the output and of its shared-memory histogram;
//   2. it counts a grid-stride share of the input: a warp whose 32 values all fall in one
//      bin adds once (32, or the warp's weight sum), so one hot bin costs one atomic per
//      warp instead of 32 serialised ones; other warps add per lane;
//   3. grid barrier (the output is zeroed everywhere), then the block adds its non-zero
//      bins to the output with global atomics.
// Histograms larger than shared memory count straight into the output after the barrier.
// Without a barrier word (`bar` null) the launcher zeroes the output first.
// value_range_i64: (min, max) of the input for the eager bincount's output size, over the
// whole GPU (a one-block reduction of 4M values took milliseconds).

#define BIN_SMEM 32768
#define BIN_V 4

template <typename S> __device__ __forceinline__ void bin_add(S* h, i64 bin, S v) { atomicAdd(h + bin, v); }
__device__ __forceinline__ void bin_add(i64* h, i64 bin, unsigned int v) { atomicAdd(h + bin, (i64)v); }

// S: shared-memory bin type (unsigned int counts, float, double); O: output element type.
template <typename S, typename O, typename W>
__device__ void bincount(const i64* x, const W* w, O* out, i64 n, i64 nbins, unsigned int* bar) {
    __shared__ __align__(8) unsigned char raw[BIN_SMEM];
    S* hist = (S*)raw;
    bool priv = nbins * (i64)sizeof(S) <= BIN_SMEM;
    i64 tid = (i64)blockIdx.x * blockDim.x + threadIdx.x, threads = (i64)gridDim.x * blockDim.x;
    if (bar)
        for (i64 i = tid; i < nbins; i += threads) out[i] = (O)0;
    if (priv)
        for (i64 i = threadIdx.x; i < nbins; i += blockDim.x) hist[i] = (S)0;
    if (bar && !priv) grid_barrier(bar);
    __syncthreads();
    int lane = threadIdx.x & 31;
    // Warps step through the input in lockstep (every lane iterates), so votes see 32 lanes.
    i64 warp_base = tid - lane;
    for (i64 base = warp_base; base < n; base += threads * BIN_V) {
        i64 v[BIN_V];
        S wv[BIN_V];
#pragma unroll
        for (int k = 0; k < BIN_V; ++k) {
            i64 i = base + lane + k * threads;
            v[k] = i < n ? x[i] : -1;
            wv[k] = i < n ? (w ? (S)w[i] : (S)1) : (S)0;
        }
#pragma unroll
        for (int k = 0; k < BIN_V; ++k) {
            bool ok = v[k] >= 0 && v[k] < nbins;
            i64 first = __shfl_sync(0xffffffffu, v[k], 0);
            if (__all_sync(0xffffffffu, v[k] == first)) {
                S total = warp_sum(wv[k]);
                if (lane == 0 && ok) {
                    if (priv) bin_add(hist, first, total);
                    else bin_add(out, first, total);
                }
            } else if (ok) {
                if (priv) bin_add(hist, v[k], wv[k]);
                else bin_add(out, v[k], wv[k]);
            }
        }
    }
    if (!priv) return;
    if (bar) grid_barrier(bar);
    __syncthreads();
    for (i64 i = threadIdx.x; i < nbins; i += blockDim.x)
        if (hist[i] != (S)0) bin_add(out, i, hist[i]);
}

extern "C" __global__ void __launch_bounds__(512, 2) bincount_count(const i64* x, i64* out, i64 n, i64 nbins, unsigned int* bar) {
    bincount<unsigned int, i64, float>(x, (const float*)0, out, n, nbins, bar);
}
extern "C" __global__ void __launch_bounds__(512, 2) bincount_f32(const i64* x, const float* w, float* out, i64 n, i64 nbins, unsigned int* bar) {
    bincount<float, float, float>(x, w, out, n, nbins, bar);
}
extern "C" __global__ void __launch_bounds__(512, 2) bincount_f64(const i64* x, const double* w, double* out, i64 n, i64 nbins, unsigned int* bar) {
    bincount<double, double, double>(x, w, out, n, nbins, bar);
}

// out[0] = max over x of key(x), out[1] = max of ~key(x), key(v) = v ^ 2^63 (ordered like
// v as unsigned), so min = ~out[1] ^ 2^63; out zeroed by the launcher (0 is the least key).
extern "C" __global__ void __launch_bounds__(512) value_range_i64(const i64* x, u64* out, i64 n) {
    const u64 SIGN = 0x8000000000000000ull;
    u64 hi = 0, lo = 0;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        u64 key = (u64)x[i] ^ SIGN;
        hi = max(hi, key);
        lo = max(lo, ~key);
    }
    hi = block_merge(Max<u64>{hi}, Max<u64>{0}).v;
    lo = block_merge(Max<u64>{lo}, Max<u64>{0}).v;
    if (threadIdx.x == 0) {
        atomicMax((unsigned long long*)out, (unsigned long long)hi);
        atomicMax((unsigned long long*)out + 1, (unsigned long long)lo);
    }
}
