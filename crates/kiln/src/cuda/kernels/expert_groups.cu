// expert_groups: the (token, slot) pairs of a mixture-of-experts layer grouped by expert,
// on the device, so that a prompt's experts run as one grouped_mm with no host sync.
// A counting sort in one block (a layer routes at most a few hundred thousand pairs, and
// one block needs no grid-wide barrier):
//   1. count the pairs per expert in shared memory;
//   2. exclusive scan of the counts: group starts; `ends` (int32, grouped_mm's offs) gets
//      each start + count;
//   3. each pair takes the next row of its group (shared-memory atomic): `rows[p]` is its
//      token, `slot_rows[s]` its row p.
// The order within a group follows the atomics (grouped_mm's rows do not depend on it).
// An index outside [0, E) after one wrap goes past the last end, where grouped_mm writes
// zeros (as expert_linear gives a zero row on the GPU).

#define EG_THREADS 1024

__device__ __forceinline__ int eg_expert(i64 v, int E) {
    if (v < 0) v += E;
    return (v >= 0 && v < E) ? (int)v : E;
}

extern "C" __global__ void __launch_bounds__(EG_THREADS)
    expert_groups(const i64* __restrict__ idx, i64 n, int k, int E, i64* __restrict__ rows,
                  i64* __restrict__ slot_rows, int* __restrict__ ends) {
    extern __shared__ int eg_count[];  // E + 1 bins (the last: invalid indices)
    __shared__ int eg_warp[EG_THREADS / 32];
    kiln_after_previous_kernel();
    const int bins = E + 1, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    for (int b = tid; b < bins; b += EG_THREADS) eg_count[b] = 0;
    __syncthreads();
    for (i64 s = tid; s < n; s += EG_THREADS) atomicAdd(&eg_count[eg_expert(idx[s], E)], 1);
    __syncthreads();
    // Exclusive scan over the bins: each thread sums a contiguous chunk, the chunk totals
    // are scanned across the block, then each chunk is rewritten as starts.
    const int per = (bins + EG_THREADS - 1) / EG_THREADS, b0 = min(tid * per, bins), b1 = min(b0 + per, bins);
    int total = 0;
    for (int b = b0; b < b1; ++b) total += eg_count[b];
    int incl = total;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        int u = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += u;
    }
    if (lane == 31) eg_warp[warp] = incl;
    __syncthreads();
    int start = incl - total;
    for (int w = 0; w < warp; ++w) start += eg_warp[w];
    for (int b = b0; b < b1; ++b) {
        int c = eg_count[b];
        eg_count[b] = start;
        start += c;
        if (b < E) ends[b] = start;
    }
    __syncthreads();
    for (i64 s = tid; s < n; s += EG_THREADS) {
        int p = atomicAdd(&eg_count[eg_expert(idx[s], E)], 1);
        rows[p] = s / k;
        slot_rows[s] = p;
    }
}
