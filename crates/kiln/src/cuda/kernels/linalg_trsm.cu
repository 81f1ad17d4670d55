// Batched triangular solves of small systems (n ≤ 64), any number of right-hand sides.
// Every case is solved as a lower-triangular left solve L Y = C: a right solve X A = B is
// Aᵀ Xᵀ = Bᵀ (A and B read transposed), and an upper solve is a lower one with the row
// order reversed; `transposed` and `rev` say which (rev = upper == left).
//
// Block (m, y) solves system m for the right-hand sides y·blockDim + t, one per thread t,
// each held whole in registers (v[NM], NM = 16 / 32 / 64 ≥ n: the loops unroll, so every
// index is static). Step j: x_j = v_j / l_jj, then v_i -= l_ij x_j for i > j, with l_·j
// read from shared memory as a broadcast 16-byte load per 16 / 8 rows: no shuffles and no
// block barriers in the solve, and the threads of one system share one copy of L.
// Only the stored triangle of A is loaded (coalesced row segments, several loads in
// flight per thread), into L column-major with columns NM + W apart (W = 16 / sizeof(T)):
// aligned for the 16-byte loads, and 4-way bank conflicts at most while storing.
// Computed in T (the CPU reference computes in double; the f32 error stays ~1e-6).

// 16 bytes of shared memory as T values.
__device__ __forceinline__ void ld16(const float* p, float (&o)[4]) {
    float4 v = *reinterpret_cast<const float4*>(p);
    o[0] = v.x; o[1] = v.y; o[2] = v.z; o[3] = v.w;
}
__device__ __forceinline__ void ld16(const double* p, double (&o)[2]) {
    double2 v = *reinterpret_cast<const double2*>(p);
    o[0] = v.x; o[1] = v.y;
}

// Rows of A each warp loads per batch (its loads all in flight before any store).
#define TRSM_ROWS 4

template <typename T, int NM>
__device__ void trsm_small(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ x, int n, int k,
                           int upper, int transposed, int rev, int unit) {
    constexpr int W = 16 / (int)sizeof(T);
    constexpr int LD = NM + W;
    constexpr int CW = (NM + 31) / 32; // column segments of 32 per stored row
    __shared__ __align__(16) T sl[NM * LD];
    __shared__ T sd[NM];
    const T* am = a + (i64)blockIdx.x * n * n;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    // Stored row r needs columns [r, n) (upper) or [0, r]; canonical (i, j) of stored (r, c).
    for (int r0 = warp * TRSM_ROWS; r0 < n; r0 += warps * TRSM_ROWS) {
        T t[TRSM_ROWS][CW];
#pragma unroll
        for (int rr = 0; rr < TRSM_ROWS; ++rr)
#pragma unroll
            for (int s = 0; s < CW; ++s) {
                int r = r0 + rr, c = lane + 32 * s;
                bool need = r < n && c < n && (upper ? c >= r : c <= r);
                t[rr][s] = need ? am[r * n + c] : (T)0;
            }
#pragma unroll
        for (int rr = 0; rr < TRSM_ROWS; ++rr)
#pragma unroll
            for (int s = 0; s < CW; ++s) {
                int r = r0 + rr, c = lane + 32 * s;
                if (!(r < n && c < n && (upper ? c >= r : c <= r))) continue;
                int i = transposed ? c : r, j = transposed ? r : c;
                if (rev) { i = n - 1 - i; j = n - 1 - j; }
                if (i == j) sd[i] = unit ? (T)1 : t[rr][s];
                else sl[j * LD + i] = t[rr][s];
            }
    }
    __syncthreads();
    // Rows ≥ n of L stay unset: they only ever reach v[i ≥ n], which is never used.
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= k) return;
    // Canonical row i of right-hand side c: B[p(i)][c] (left) or B[c][p(i)] (right).
    const i64 base = (i64)blockIdx.x * n * k;
    const i64 rs = transposed ? 1 : k, cs = transposed ? n : 1;
    T v[NM];
#pragma unroll
    for (int i = 0; i < NM; ++i) v[i] = i < n ? b[base + (rev ? n - 1 - i : i) * rs + c * cs] : (T)0;
#pragma unroll
    for (int j = 0; j < NM; ++j) {
        if (j < n) {
            const T xj = v[j] / sd[j];
            v[j] = xj;
            const T* col = sl + j * LD;
#pragma unroll
            for (int g = (j + 1) / W; g < NM / W; ++g) {
                T q[W];
                ld16(col + g * W, q);
#pragma unroll
                for (int e = 0; e < W; ++e)
                    if (g * W + e > j) v[g * W + e] -= q[e] * xj;
            }
        }
    }
#pragma unroll
    for (int i = 0; i < NM; ++i)
        if (i < n) x[base + (rev ? n - 1 - i : i) * rs + c * cs] = v[i];
}

#define KILN_TRSM(S, T, NM) \
    extern "C" __global__ void __launch_bounds__(128) trsm##NM##_##S(const T* a, const T* b, T* x, int n, int k, \
        int upper, int transposed, int rev, int unit) { \
        trsm_small<T, NM>(a, b, x, n, k, upper, transposed, rev, unit); \
    }
KILN_TRSM(f32, float, 16) KILN_TRSM(f32, float, 32) KILN_TRSM(f32, float, 64)
KILN_TRSM(f64, double, 16) KILN_TRSM(f64, double, 32) KILN_TRSM(f64, double, 64)
