// Batched triangular solves of small systems: one block per matrix, n ≤ 64, any number
// of right-hand sides. The launcher states every case as a lower-triangular left solve
// L X = B through strides (a right solve X A = B is Aᵀ Xᵀ = Bᵀ, so A and B are read
// transposed) and `upper`, which reverses the row order (an upper solve is a lower one
// read backwards). The block keeps L in shared memory (padded rows: a warp reading a
// column is conflict-free) and each warp solves one RHS column at a time held in
// registers, lane l owning rows l and l + 32: step j broadcasts x_j from its owner by a
// shuffle and every lower row takes its share, so the n steps need no block barrier.
// Computed in float for f32, double for f64 (the CPU reference computes in double).

#define TRSM_MAX_N 64

template <typename T>
__device__ void trsm_small(const T* a, const T* b, T* x, int n, int k, i64 a_rs, i64 a_cs, i64 b_rs, i64 b_cs,
                           int upper, int unit) {
    typedef typename Acc<T>::type A;
    extern __shared__ __align__(16) unsigned char trsm_smem[];
    A* sa = reinterpret_cast<A*>(trsm_smem);
    const int ld = n + 1;
    const i64 m = blockIdx.x;
    const T* am = a + m * n * n;
    const T* bm = b + m * n * k;
    T* xm = x + m * n * k;
    // Solve row i is matrix row p(i).
#define P(i) (upper ? n - 1 - (i) : (i))
    for (int e = threadIdx.x; e < n * n; e += blockDim.x) {
        int i = e / n, j = e % n;
        sa[i * ld + j] = j <= i ? up<A>(am[P(i) * a_rs + P(j) * a_cs]) : (A)0;
    }
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    for (int c = blockIdx.y * warps + warp; c < k; c += gridDim.y * warps) {
        A v0 = lane < n ? up<A>(bm[P(lane) * b_rs + c * b_cs]) : (A)0;
        A v1 = lane + 32 < n ? up<A>(bm[P(lane + 32) * b_rs + c * b_cs]) : (A)0;
        for (int j = 0; j < n; ++j) {
            A xj = __shfl_sync(0xffffffffu, j < 32 ? v0 : v1, j & 31);
            if (!unit) xj = xj / sa[j * ld + j];
            if (lane == (j & 31)) {
                if (j < 32) v0 = xj; else v1 = xj;
            }
            if (lane > j && lane < n) v0 -= sa[lane * ld + j] * xj;
            if (lane + 32 > j && lane + 32 < n) v1 -= sa[(lane + 32) * ld + j] * xj;
        }
        if (lane < n) xm[P(lane) * b_rs + c * b_cs] = down<T>(v0);
        if (lane + 32 < n) xm[P(lane + 32) * b_rs + c * b_cs] = down<T>(v1);
    }
#undef P
}

#define KILN_TRSM(S, T) \
    extern "C" __global__ void trsm_small_##S(const T* a, const T* b, T* x, int n, int k, i64 a_rs, i64 a_cs, \
        i64 b_rs, i64 b_cs, int upper, int unit) { trsm_small<T>(a, b, x, n, k, a_rs, a_cs, b_rs, b_cs, upper, unit); }
KILN_TRSM(f32, float) KILN_TRSM(f64, double)
