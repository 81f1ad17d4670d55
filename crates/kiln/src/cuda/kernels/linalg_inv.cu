// Batched inverses of contiguous n×n matrices, n ≤ 4, in closed form: the adjugate over
// the determinant, one thread per matrix, one launch. Computed in double (as the CPU
// reference's LU is) and rounded once to T. A matrix whose determinant is exactly zero is
// singular: its thread records it in `singular` as count − its index (atomicMax keeps the
// first such matrix; 0 when none), and its output holds the division's non-finite values.

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

template <typename T, int N>
__device__ void inv_small(const T* a, T* out, i64 count, unsigned long long* singular) {
    for (i64 b = (i64)blockIdx.x * blockDim.x + threadIdx.x; b < count; b += (i64)gridDim.x * blockDim.x) {
        const T* src = a + b * (N * N);
        double m[N][N], r[N][N];
#pragma unroll
        for (int i = 0; i < N; ++i)
#pragma unroll
            for (int j = 0; j < N; ++j) m[i][j] = (double)src[i * N + j];
        double det = adjugate<N>(m, r);
        if (det == 0.0) atomicMax(singular, (unsigned long long)(count - b));
        double s = 1.0 / det;
        T* dst = out + b * (N * N);
#pragma unroll
        for (int i = 0; i < N; ++i)
#pragma unroll
            for (int j = 0; j < N; ++j) dst[i * N + j] = (T)(r[i][j] * s);
    }
}

#define KILN_INV(S, T, N) \
    extern "C" __global__ void inv##N##_##S(const T* a, T* out, i64 count, unsigned long long* singular) { \
        inv_small<T, N>(a, out, count, singular); \
    }
KILN_INV(f32, float, 1) KILN_INV(f32, float, 2) KILN_INV(f32, float, 3) KILN_INV(f32, float, 4)
KILN_INV(f64, double, 1) KILN_INV(f64, double, 2) KILN_INV(f64, double, 3) KILN_INV(f64, double, 4)
