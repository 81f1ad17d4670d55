// LU with partial pivoting (LAPACK getrf), its solve (getrs) and det, batched. The pivot of
// column j is the first row of largest |x| (|re| + |im| for complex), exactly as the CPU
// reference (ops/lu.rs) picks it, and every step does the CPU's operations in its order,
// reals in double and complex64 in complex128 with no contraction into FMAs (the _rn
// intrinsics): the factors and pivots equal the CPU's bit for bit.
//
// A matrix that fits in shared memory is factored by one block (lu_small). A larger one
// is widened into a double workspace and factored one column per launch (lu_step): block
// (tile, matrix) owns 16 columns of every row, swaps rows j and p in them and applies the
// rank-1 update; the block owning column j + 1 then picks that column's pivot (it holds the
// whole column, already updated), so each step is one launch.

struct __align__(16) zd { double re, im; }; // complex128, the compute type of complex64
struct __align__(8) zf { float re, im; };   // complex64

__device__ __forceinline__ double wsub(double a, double b) { return __dsub_rn(a, b); }
__device__ __forceinline__ double wmul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ double wdiv(double a, double b) { return __ddiv_rn(a, b); }
__device__ __forceinline__ double wneg(double a) { return -a; }
__device__ __forceinline__ double abs1(double a) { return fabs(a); }
__device__ __forceinline__ bool is_zero(double a) { return a == 0.0; }
__device__ __forceinline__ void one(double& a) { a = 1.0; }

// num_complex's formulas (the CPU reference's complex128 arithmetic).
__device__ __forceinline__ zd wsub(zd a, zd b) { return {__dsub_rn(a.re, b.re), __dsub_rn(a.im, b.im)}; }
__device__ __forceinline__ zd wmul(zd a, zd b) {
    return {__dsub_rn(__dmul_rn(a.re, b.re), __dmul_rn(a.im, b.im)),
            __dadd_rn(__dmul_rn(a.re, b.im), __dmul_rn(a.im, b.re))};
}
__device__ __forceinline__ zd wdiv(zd a, zd b) {
    double nsq = __dadd_rn(__dmul_rn(b.re, b.re), __dmul_rn(b.im, b.im));
    double re = __dadd_rn(__dmul_rn(a.re, b.re), __dmul_rn(a.im, b.im));
    double im = __dsub_rn(__dmul_rn(a.im, b.re), __dmul_rn(a.re, b.im));
    return {__ddiv_rn(re, nsq), __ddiv_rn(im, nsq)};
}
__device__ __forceinline__ zd wneg(zd a) { return {-a.re, -a.im}; }
__device__ __forceinline__ double abs1(zd a) { return __dadd_rn(fabs(a.re), fabs(a.im)); }
__device__ __forceinline__ bool is_zero(zd a) { return a.re == 0.0 && a.im == 0.0; }
__device__ __forceinline__ void one(zd& a) { a = {1.0, 0.0}; }

__device__ __forceinline__ double widen(float v) { return (double)v; }
__device__ __forceinline__ double widen(double v) { return v; }
__device__ __forceinline__ zd widen(zf v) { return {(double)v.re, (double)v.im}; }
__device__ __forceinline__ void narrow(double v, float& o) { o = (float)v; }
__device__ __forceinline__ void narrow(double v, double& o) { o = v; }
__device__ __forceinline__ void narrow(zd v, zf& o) { o = {(float)v.re, (float)v.im}; }

// The pivot row of column j of the m-row matrix `a` (row stride ld) over the whole block:
// the first i ≥ j of largest abs1. A (value, index) pair wins if larger, or equal and first.
template <typename W>
__device__ int pivot_row(const W* a, int ld, int m, int j) {
    __shared__ double sv[32];
    __shared__ int si[32];
    double best = -1.0;
    int bi = m;
    for (int i = j + threadIdx.x; i < m; i += blockDim.x) {
        double v = abs1(a[(i64)i * ld + j]);
        if (v > best) { best = v; bi = i; }
    }
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
#pragma unroll
    for (int o = 16; o; o >>= 1) {
        double ov = __shfl_down_sync(0xffffffffu, best, o);
        int oi = __shfl_down_sync(0xffffffffu, bi, o);
        if (ov > best || (ov == best && oi < bi)) { best = ov; bi = oi; }
    }
    __syncthreads(); // sv / si are free (an earlier call has read its result)
    if (lane == 0) { sv[warp] = best; si[warp] = bi; }
    __syncthreads();
    if (warp == 0) {
        best = lane < warps ? sv[lane] : -1.0;
        bi = lane < warps ? si[lane] : m;
#pragma unroll
        for (int o = 16; o; o >>= 1) {
            double ov = __shfl_down_sync(0xffffffffu, best, o);
            int oi = __shfl_down_sync(0xffffffffu, bi, o);
            if (ov > best || (ov == best && oi < bi)) { best = ov; bi = oi; }
        }
        if (lane == 0) si[0] = bi;
    }
    __syncthreads();
    return si[0] < m ? si[0] : j; // every entry NaN: no row beats the first, as on the CPU
}

// Step j's pivot, within column j only: records it (1-based) in piv[j], swaps it into row j
// and divides the entries below by it (the multipliers l_ij). A zero pivot (the column is
// zero from row j down) changes nothing, as getrf's info > 0.
template <typename W>
__device__ void pivot_column(W* a, int n, int m, int j, int* piv) {
    const int p = pivot_row(a, n, m, j);
    if (threadIdx.x == 0) piv[j] = p + 1;
    const W d = a[(i64)p * n + j];
    if (!is_zero(d)) {
        __syncthreads(); // every thread has read d before the swap moves it
        if (threadIdx.x == 0 && p != j) {
            a[(i64)p * n + j] = a[(i64)j * n + j];
            a[(i64)j * n + j] = d;
        }
        __syncthreads();
        for (int i = j + 1 + threadIdx.x; i < m; i += blockDim.x) a[(i64)i * n + j] = wdiv(a[(i64)i * n + j], d);
    }
    __syncthreads();
}

// The rest of step j in columns [c0, c1): swap rows j and p (p + 1 = piv[j]) outside column
// j, then a_ic -= l_ij · a_jc for i, c > j. Nothing for a zero pivot.
template <typename W>
__device__ void swap_update(W* a, int n, int m, int j, int p, int c0, int c1) {
    if (is_zero(a[(i64)j * n + j])) return;
    if (p != j)
        for (int c = c0 + threadIdx.x; c < c1; c += blockDim.x)
            if (c != j) {
                W t = a[(i64)j * n + c];
                a[(i64)j * n + c] = a[(i64)p * n + c];
                a[(i64)p * n + c] = t;
            }
    __syncthreads();
    const int cs = max(c0, j + 1), w = c1 - cs, rows = m - j - 1;
    if (w <= 0) return;
    for (int e = threadIdx.x; e < rows * w; e += blockDim.x) {
        const i64 i = j + 1 + e / w, c = cs + e % w;
        a[i * n + c] = wsub(a[i * n + c], wmul(a[i * n + j], a[(i64)j * n + c]));
    }
}

// det = Π u_ii, negated per row swap (the CPU's fold, in its order).
template <typename W>
__device__ W det_of(const W* a, int n, const int* piv) {
    W d;
    one(d);
    for (int i = 0; i < n; ++i) {
        d = wmul(d, a[(i64)i * n + i]);
        if (piv[i] != i + 1) d = wneg(d);
    }
    return d;
}

// One block per m × n matrix in shared memory (m·n·sizeof(W) bytes, then min(m, n) ints).
// Writes the factors to `lu` and the pivots to `piv` and / or det (square) to `det`;
// null pointers are skipped.
template <typename T, typename W>
__device__ void lu_small(const T* a, T* lu, int* piv, T* det, int m, int n) {
    extern __shared__ __align__(16) unsigned char lu_smem[];
    W* sa = reinterpret_cast<W*>(lu_smem);
    int* sp = reinterpret_cast<int*>(sa + m * n);
    const i64 off = (i64)blockIdx.x * m * n;
    const int k = min(m, n);
    for (int e = threadIdx.x; e < m * n; e += blockDim.x) sa[e] = widen(a[off + e]);
    __syncthreads();
    for (int j = 0; j < k; ++j) {
        pivot_column(sa, n, m, j, sp);
        swap_update(sa, n, m, j, sp[j] - 1, 0, n);
        __syncthreads();
    }
    if (lu)
        for (int e = threadIdx.x; e < m * n; e += blockDim.x) narrow(sa[e], lu[off + e]);
    if (piv)
        for (int e = threadIdx.x; e < k; e += blockDim.x) piv[(i64)blockIdx.x * k + e] = sp[e];
    if (det && threadIdx.x == 0) narrow(det_of(sa, n, sp), det[blockIdx.x]);
}

// Columns per block of lu_step.
#define LU_TILE 16

// Step j of the workspace factorisation: grid (column tiles, matrices).
template <typename W>
__device__ void lu_step(W* ws, int* piv, int m, int n, int j) {
    const int k = min(m, n);
    W* a = ws + (i64)blockIdx.y * m * n;
    int* pv = piv + (i64)blockIdx.y * k;
    const int c0 = blockIdx.x * LU_TILE, c1 = min(n, c0 + LU_TILE);
    swap_update(a, n, m, j, pv[j] - 1, c0, c1);
    if (j + 1 < k && c0 <= j + 1 && j + 1 < c1) {
        __syncthreads();
        pivot_column(a, n, m, j + 1, pv);
    }
}

template <typename T, typename W>
__device__ void lu_solve(const T* lu, const int* piv, const T* b, T* x, int n, int k, int R) {
    extern __shared__ __align__(16) unsigned char lu_smem[];
    W* sx = reinterpret_cast<W*>(lu_smem); // [n][R]: right-hand sides c0 .. c0 + r
    const i64 mat = blockIdx.x;
    const int c0 = blockIdx.y * R, r = min(R, k - c0);
    const T* L = lu + mat * n * n;
    const int* pv = piv + mat * n;
    for (int e = threadIdx.x; e < n * r; e += blockDim.x) sx[e / r * R + e % r] = widen(b[mat * n * k + (i64)(e / r) * k + c0 + e % r]);
    __syncthreads();
    // P: getrs applies the swaps in order. Out-of-range pivots (not checked on CUDA: that
    // would need a host synchronisation) are skipped rather than read out of bounds.
    for (int c = threadIdx.x; c < r; c += blockDim.x)
        for (int i = 0; i < n; ++i) {
            const int p = pv[i] - 1;
            if (p != i && p >= 0 && p < n) {
                W t = sx[i * R + c];
                sx[i * R + c] = sx[p * R + c];
                sx[p * R + c] = t;
            }
        }
    __syncthreads();
    // L (unit lower), column by column: row i takes l_ij · x_j in the CPU's order (j up).
    for (int j = 0; j < n - 1; ++j) {
        for (int e = threadIdx.x; e < (n - j - 1) * r; e += blockDim.x) {
            const int i = j + 1 + e / r, c = e % r;
            sx[i * R + c] = wsub(sx[i * R + c], wmul(widen(L[(i64)i * n + j]), sx[j * R + c]));
        }
        __syncthreads();
    }
    // U, column by column from the last.
    for (int j = n - 1; j >= 0; --j) {
        for (int c = threadIdx.x; c < r; c += blockDim.x) sx[j * R + c] = wdiv(sx[j * R + c], widen(L[(i64)j * n + j]));
        __syncthreads();
        for (int e = threadIdx.x; e < j * r; e += blockDim.x) {
            const int i = e / r, c = e % r;
            sx[i * R + c] = wsub(sx[i * R + c], wmul(widen(L[(i64)i * n + j]), sx[j * R + c]));
        }
        __syncthreads();
    }
    for (int e = threadIdx.x; e < n * r; e += blockDim.x) narrow(sx[e / r * R + e % r], x[mat * n * k + (i64)(e / r) * k + c0 + e % r]);
}

#define KILN_LU(S, T, W) \
    extern "C" __global__ void lu_small_##S(const T* a, T* lu, int* piv, T* det, int m, int n) { \
        lu_small<T, W>(a, lu, piv, det, m, n); \
    } \
    extern "C" __global__ void lu_widen_##S(const T* a, W* ws, i64 total) { \
        for (i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (i64)gridDim.x * blockDim.x) \
            ws[e] = widen(a[e]); \
    } \
    extern "C" __global__ void lu_pivot0_##S(W* ws, int* piv, int m, int n) { \
        pivot_column(ws + (i64)blockIdx.x * m * n, n, m, 0, piv + (i64)blockIdx.x * min(m, n)); \
    } \
    extern "C" __global__ void lu_step_##S(W* ws, int* piv, int m, int n, int j) { lu_step<W>(ws, piv, m, n, j); } \
    extern "C" __global__ void lu_finish_##S(const W* ws, const int* piv, T* lu, T* det, int m, int n, i64 count) { \
        for (i64 e = (i64)blockIdx.x * blockDim.x + threadIdx.x; e < count * m * n; e += (i64)gridDim.x * blockDim.x) { \
            if (lu) narrow(ws[e], lu[e]); \
            if (det && e < count) narrow(det_of(ws + e * n * n, n, piv + e * n), det[e]); \
        } \
    } \
    extern "C" __global__ void lu_solve_##S(const T* lu, const int* piv, const T* b, T* x, int n, int k, int R) { \
        lu_solve<T, W>(lu, piv, b, x, n, k, R); \
    }
KILN_LU(f32, float, double) KILN_LU(f64, double, double) KILN_LU(c64, zf, zd)
