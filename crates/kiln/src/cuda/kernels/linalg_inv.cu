// Batched inverses of contiguous n×n matrices, n ≤ 4, in closed form: the adjugate over
// the determinant, one thread per matrix, one launch. Computed in double (as the CPU
// reference's LU is) and rounded once to T: ~150 flops a 4×4 matrix, under a microsecond
// for 100k even at FP64's rate, so memory decides the time. A matrix whose determinant is
// exactly zero is singular; its output holds the division's non-finite values.

// r = adj(m), returns det(m). 1×1 and 2×2 directly; 3×3 by cofactors; 4×4 by the 2×2
// minors of its top two rows (s) and bottom two rows (c): det = Σ ± s·c (Laplace).
template <int N> __device__ __forceinline__ double adjugate(const double (&m)[N][N], double (&r)[N][N]);

template <> __device__ __forceinline__ double adjugate<1>(const double (&m)[1][1], double (&r)[1][1]) {
    r[0][0] = 1.0;
    return m[0][0];
}

template <> __device__ __forceinline__ double adjugate<2>(const double (&m)[2][2], double (&r)[2][2]) {
    r[0][0] = m[1][1];
    r[0][1] = -m[0][1];
    r[1][0] = -m[1][0];
    r[1][1] = m[0][0];
    return m[0][0] * m[1][1] - m[0][1] * m[1][0];
}

template <> __device__ __forceinline__ double adjugate<3>(const double (&m)[3][3], double (&r)[3][3]) {
#pragma unroll
    for (int i = 0; i < 3; ++i)
#pragma unroll
        for (int j = 0; j < 3; ++j) {
            // adj[j][i] is the cofactor of m[i][j] (cyclic indices carry the sign).
            int i1 = (i + 1) % 3, i2 = (i + 2) % 3, j1 = (j + 1) % 3, j2 = (j + 2) % 3;
            r[j][i] = m[i1][j1] * m[i2][j2] - m[i1][j2] * m[i2][j1];
        }
    return m[0][0] * r[0][0] + m[0][1] * r[1][0] + m[0][2] * r[2][0];
}

template <> __device__ __forceinline__ double adjugate<4>(const double (&m)[4][4], double (&r)[4][4]) {
    double s0 = m[0][0] * m[1][1] - m[1][0] * m[0][1];
    double s1 = m[0][0] * m[1][2] - m[1][0] * m[0][2];
    double s2 = m[0][0] * m[1][3] - m[1][0] * m[0][3];
    double s3 = m[0][1] * m[1][2] - m[1][1] * m[0][2];
    double s4 = m[0][1] * m[1][3] - m[1][1] * m[0][3];
    double s5 = m[0][2] * m[1][3] - m[1][2] * m[0][3];
    double c5 = m[2][2] * m[3][3] - m[3][2] * m[2][3];
    double c4 = m[2][1] * m[3][3] - m[3][1] * m[2][3];
    double c3 = m[2][1] * m[3][2] - m[3][1] * m[2][2];
    double c2 = m[2][0] * m[3][3] - m[3][0] * m[2][3];
    double c1 = m[2][0] * m[3][2] - m[3][0] * m[2][2];
    double c0 = m[2][0] * m[3][1] - m[3][0] * m[2][1];
    r[0][0] = m[1][1] * c5 - m[1][2] * c4 + m[1][3] * c3;
    r[0][1] = -m[0][1] * c5 + m[0][2] * c4 - m[0][3] * c3;
    r[0][2] = m[3][1] * s5 - m[3][2] * s4 + m[3][3] * s3;
    r[0][3] = -m[2][1] * s5 + m[2][2] * s4 - m[2][3] * s3;
    r[1][0] = -m[1][0] * c5 + m[1][2] * c2 - m[1][3] * c1;
    r[1][1] = m[0][0] * c5 - m[0][2] * c2 + m[0][3] * c1;
    r[1][2] = -m[3][0] * s5 + m[3][2] * s2 - m[3][3] * s1;
    r[1][3] = m[2][0] * s5 - m[2][2] * s2 + m[2][3] * s1;
    r[2][0] = m[1][0] * c4 - m[1][1] * c2 + m[1][3] * c0;
    r[2][1] = -m[0][0] * c4 + m[0][1] * c2 - m[0][3] * c0;
    r[2][2] = m[3][0] * s4 - m[3][1] * s2 + m[3][3] * s0;
    r[2][3] = -m[2][0] * s4 + m[2][1] * s2 - m[2][3] * s0;
    r[3][0] = -m[1][0] * c3 + m[1][1] * c1 - m[1][2] * c0;
    r[3][1] = m[0][0] * c3 - m[0][1] * c1 + m[0][2] * c0;
    r[3][2] = -m[3][0] * s3 + m[3][1] * s1 - m[3][2] * s0;
    r[3][3] = m[2][0] * s3 - m[2][1] * s1 + m[2][2] * s0;
    return s0 * c5 - s1 * c4 + s2 * c3 + s3 * c2 - s4 * c1 + s5 * c0;
}

// Matrices per block. A block stages its matrices' words through shared memory so that
// global loads and stores are coalesced 16-byte accesses (a thread's own matrix is 4 to
// 128 contiguous bytes: read directly, a warp's loads would stride by that much).
#define INV_TPB 128

__device__ __forceinline__ double word_get(const unsigned int* w, double) {
    return __hiloint2double((int)w[1], (int)w[0]);
}
__device__ __forceinline__ float word_get(const unsigned int* w, float) { return __uint_as_float(w[0]); }
__device__ __forceinline__ void word_put(unsigned int* w, double v) {
    w[0] = (unsigned int)__double2loint(v);
    w[1] = (unsigned int)__double2hiint(v);
}
__device__ __forceinline__ void word_put(unsigned int* w, float v) { w[0] = __float_as_uint(v); }

// Copies `words` 32-bit words between global `g` (16-byte aligned) and the staging tile,
// where matrix t's word e sits at t·P + e (P odd, so a thread per matrix reads without
// bank conflicts). 16-byte global accesses, the last few words one by one.
template <bool LOAD>
__device__ __forceinline__ void inv_stage(unsigned int* g, unsigned int* tile, int words, int S, int P) {
    const int quads = words / 4;
    for (int q = threadIdx.x; q < quads; q += INV_TPB) {
        uint4 v;
        if (LOAD) v = reinterpret_cast<const uint4*>(g)[q];
        unsigned int* e[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) e[u] = tile + (4 * q + u) / S * P + (4 * q + u) % S;
        if (LOAD) {
            *e[0] = v.x; *e[1] = v.y; *e[2] = v.z; *e[3] = v.w;
        } else {
            v.x = *e[0]; v.y = *e[1]; v.z = *e[2]; v.w = *e[3];
            reinterpret_cast<uint4*>(g)[q] = v;
        }
    }
    for (int w = 4 * quads + threadIdx.x; w < words; w += INV_TPB) {
        unsigned int* e = tile + w / S * P + w % S;
        if (LOAD) *e = g[w]; else g[w] = *e;
    }
}

// One thread per matrix. A zero determinant sets the host-mapped word `raised` (a plain
// store: every writer writes 1); when `first` is given (the launcher's second pass, after
// `raised`), it also records count − the index of the first singular matrix by atomicMax.
template <typename T, int N>
__device__ void inv_small(const T* a, T* out, i64 count, unsigned long long* first, unsigned int* raised) {
    constexpr int S = N * N * (int)sizeof(T) / 4; // words per matrix
    constexpr int P = S | 1;
    __shared__ unsigned int tile[INV_TPB * P];
    const i64 b0 = (i64)blockIdx.x * INV_TPB;
    const int cnt = (int)min((i64)INV_TPB, count - b0);
    // b0 · S words is a multiple of 4 (INV_TPB is), so the tile starts 16-byte aligned.
    inv_stage<true>((unsigned int*)(a + b0 * N * N), tile, cnt * S, S, P);
    __syncthreads();
    if (threadIdx.x < cnt) {
        unsigned int* w = tile + threadIdx.x * P;
        double m[N][N], r[N][N];
#pragma unroll
        for (int i = 0; i < N; ++i)
#pragma unroll
            for (int j = 0; j < N; ++j) m[i][j] = (double)word_get(w + (i * N + j) * (int)(sizeof(T) / 4), T());
        double det = adjugate<N>(m, r);
        if (det == 0.0) {
            *(volatile unsigned int*)raised = 1u;
            if (first) atomicMax(first, (unsigned long long)(count - (b0 + threadIdx.x)));
        }
        double s = 1.0 / det;
#pragma unroll
        for (int i = 0; i < N; ++i)
#pragma unroll
            for (int j = 0; j < N; ++j) word_put(w + (i * N + j) * (int)(sizeof(T) / 4), (T)(r[i][j] * s));
    }
    __syncthreads();
    inv_stage<false>((unsigned int*)(out + b0 * N * N), tile, cnt * S, S, P);
}

#define KILN_INV(S, T, N) \
    extern "C" __global__ void __launch_bounds__(INV_TPB) inv##N##_##S(const T* a, T* out, i64 count, \
        unsigned long long* first, unsigned int* raised) { \
        inv_small<T, N>(a, out, count, first, raised); \
    }
KILN_INV(f32, float, 1) KILN_INV(f32, float, 2) KILN_INV(f32, float, 3) KILN_INV(f32, float, 4)
KILN_INV(f64, double, 1) KILN_INV(f64, double, 2) KILN_INV(f64, double, 3) KILN_INV(f64, double, 4)
