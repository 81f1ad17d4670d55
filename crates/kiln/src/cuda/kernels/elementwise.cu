// Elementwise family: binary ops with broadcasting, unary ops, where, frexp.
// Op codes: the BIN_* / UN_* defines kiln generates from its op tables (ops/elementwise.rs).
// Math runs in Acc<T> (float for f16/bf16/f32, double for f64, i64 / u64 for integers).

// PyTorch's recurrence, in F: n cast to int64 (NaN / out of range is negative: 0), L0 = 1,
// L1 = 1 - x, (k + 1) L(k+1) = (2k + 1 - x) Lk - k L(k-1).
template <typename F> __device__ F laguerre_l(F x, F nf) {
    if (nf != nf || fabs(nf) >= (F)9.2e18) return 0;
    long long n = (long long)nf;
    if (n < 0) return 0;
    if (x == 0 || n == 0) return 1;
    F p = 1, q = (F)1 - x;
    for (long long k = 1; k < n; ++k) {
        F kf = (F)k, r = ((kf + kf + ((F)1 - x)) * q - kf * p) / (kf + (F)1);
        p = q;
        q = r;
    }
    return q;
}

template <typename F> __device__ F fbin(int op, F x, F y) {
    switch (op) {
    case BIN_ADD: return x + y;
    case BIN_SUB: return x - y;
    case BIN_MUL: return x * y;
    case BIN_DIV: return x / y;
    case BIN_POW: return pow(x, y);
    case BIN_MINIMUM: return (x != x || y != y) ? (F)kiln_nan() : (x < y ? x : y);
    case BIN_MAXIMUM: return (x != x || y != y) ? (F)kiln_nan() : (x > y ? x : y);
    case BIN_REMAINDER: { F r = fmod(x, y); return (r != 0 && ((r < 0) != (y < 0))) ? r + y : r; }
    case BIN_HEAVISIDE: return x == 0 ? y : (F)(x > 0); // NaN input gives 0, as in PyTorch
    // In double as on the CPU: in float the terms overflow to inf - inf = NaN where the
    // rounded result is a finite-in-double value past float's range (±inf).
    case BIN_SPECIAL_LAGUERRE_POLYNOMIAL_L: return (F)laguerre_l((double)x, (double)y);
    // Equal infinities give themselves (x - y is NaN only then, or for a NaN input).
    case BIN_LOGADDEXP: return (x == y && x - y != x - y) ? x : (x > y ? x : y) + log1p(exp(-fabs(x - y)));
    case BIN_HYPOT: return hypot(x, y);
    case BIN_SILU_MUL: return silu_mul(x, y);
    case BIN_EQ: return x == y;
    case BIN_NE: return x != y;
    case BIN_LT: return x < y;
    case BIN_LE: return x <= y;
    case BIN_GT: return x > y;
    case BIN_GE: return x >= y;
    }
    return (F)kiln_nan();
}

__device__ __forceinline__ bool is_neg(i64 x) { return x < 0; }
__device__ __forceinline__ bool is_neg(u64) { return false; }

template <typename I> __device__ I ibin(int op, I x, I y) {
    switch (op) {
    case BIN_ADD: return x + y;
    case BIN_SUB: return x - y;
    case BIN_MUL: return x * y;
    case BIN_DIV: { // floor division; division by zero gives 0
        if (y == 0) return 0;
        I q = x / y, r = x % y;
        return (r != 0 && (is_neg(x) != is_neg(y))) ? q - 1 : q;
    }
    case BIN_POW: { // wrapping power; negative exponents give 0
        if (is_neg(y)) return 0;
        I r = 1, b = x;
        for (I e = y; e > 0; e >>= 1) { if (e & 1) r *= b; b *= b; }
        return r;
    }
    case BIN_MINIMUM: return x < y ? x : y;
    case BIN_MAXIMUM: return x > y ? x : y;
    case BIN_REMAINDER: { if (y == 0) return 0; I r = x % y; return (r != 0 && (is_neg(r) != is_neg(y))) ? r + y : r; }
    case BIN_HEAVISIDE: return x == 0 ? y : (I)(x > 0);
    case BIN_EQ: return x == y;
    case BIN_NE: return x != y;
    case BIN_LT: return x < y;
    case BIN_LE: return x <= y;
    case BIN_GT: return x > y;
    case BIN_GE: return x >= y;
    }
    return 0;
}

__device__ __forceinline__ float bin_op(int op, float x, float y) { return fbin(op, x, y); }
__device__ __forceinline__ double bin_op(int op, double x, double y) { return fbin(op, x, y); }
__device__ __forceinline__ i64 bin_op(int op, i64 x, i64 y) { return ibin(op, x, y); }
__device__ __forceinline__ u64 bin_op(int op, u64 x, u64 y) { return ibin(op, x, y); }

template <typename F> __device__ F fun(int op, F x) {
    switch (op) {
    case UN_NEG: return -x;
    case UN_ABS: return fabs(x);
    case UN_EXP: return exp(x);
    case UN_LOG: return log(x);
    case UN_SQRT: return sqrt(x);
    case UN_RSQRT: return (F)1 / sqrt(x);
    case UN_SIN: return sin(x);
    case UN_COS: return cos(x);
    case UN_TANH: return tanh(x);
    case UN_SIGMOID: return (F)1 / ((F)1 + exp(-x));
    case UN_SILU: return x / ((F)1 + exp(-x));
    case UN_GELU: return (F)0.5 * x * ((F)1 + erf(x * (F)0.70710678118654752440));
    case UN_GELU_TANH: {
        const F c = (F)0.79788456080286535588; // sqrt(2/pi)
        return (F)0.5 * x * ((F)1 + tanh(c * (x + (F)0.044715 * x * x * x)));
    }
    case UN_RELU: return x != x ? x : (x > 0 ? x : (F)0);
    case UN_RECIPROCAL: return (F)1 / x;
    case UN_SQUARE: return x * x;
    case UN_FLOOR: return floor(x);
    case UN_CEIL: return ceil(x);
    case UN_ROUND: return rint(x);
    case UN_SIGN: return x != x ? x : (F)((x > 0) - (x < 0));
    case UN_ERF: return erf(x);
    }
    return (F)kiln_nan();
}

template <typename I> __device__ I iun(int op, I x) {
    switch (op) {
    case UN_NEG: return (I)0 - x;
    case UN_ABS: return is_neg(x) ? (I)0 - x : x;
    case UN_RELU: return x > 0 ? x : 0;
    case UN_SQUARE: return x * x;
    case UN_SIGN: return (I)((x > 0) - is_neg(x));
    }
    return x; // floor / ceil / round of an integer
}

__device__ __forceinline__ float un_op(int op, float x) { return fun(op, x); }
__device__ __forceinline__ double un_op(int op, double x) { return fun(op, x); }
__device__ __forceinline__ i64 un_op(int op, i64 x) { return iun(op, x); }
__device__ __forceinline__ u64 un_op(int op, u64 x) { return iun(op, x); }

// Generic strided binary op. `out` is T (arithmetic) or kbool (comparisons).
template <typename T, typename O>
__device__ void binary_strided(int op, const T* a, Strided sa, const T* b, Strided sb, O* out, i64 n) {
    kiln_after_previous_kernel();
    typedef typename Acc<T>::type A;
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        A r = bin_op(op, up<A>(a[strided_offset(sa, i)]), up<A>(b[strided_offset(sb, i)]));
        out[i] = down<O>((typename Acc<O>::type)r);
    }
}

// Contiguous, same-shape fast path: 16-byte loads when pointers and n allow.
template <typename T>
__device__ void binary_contig(int op, const T* a, const T* b, T* out, i64 n) {
    kiln_after_previous_kernel();
    typedef typename Acc<T>::type A;
    const int V = 16 / sizeof(T);
    i64 tid = blockIdx.x * (i64)blockDim.x + threadIdx.x, stride = (i64)gridDim.x * blockDim.x;
    bool aligned = ((((u64)a) | ((u64)b) | ((u64)out)) & 15) == 0;
    i64 nv = aligned ? n / V : 0;
    for (i64 v = tid; v < nv; v += stride) {
        uint4 ra = ((const uint4*)a)[v], rb = ((const uint4*)b)[v], ro;
        const T* pa = (const T*)&ra; const T* pb = (const T*)&rb; T* po = (T*)&ro;
#pragma unroll
        for (int j = 0; j < V; ++j) po[j] = down<T>(bin_op(op, up<A>(pa[j]), up<A>(pb[j])));
        ((uint4*)out)[v] = ro;
    }
    for (i64 i = nv * V + tid; i < n; i += stride) out[i] = down<T>(bin_op(op, up<A>(a[i]), up<A>(b[i])));
}

template <typename T>
__device__ void unary_strided(int op, const T* x, Strided sx, T* out, i64 n) {
    typedef typename Acc<T>::type A;
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        out[i] = down<T>(un_op(op, up<A>(x[strided_offset(sx, i)])));
}

template <typename T>
__device__ void where_strided(const kbool* c, Strided sc, const T* a, Strided sa, const T* b, Strided sb, T* out, i64 n) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        out[i] = c[strided_offset(sc, i)].v ? a[strided_offset(sa, i)] : b[strided_offset(sb, i)];
}

template <typename T>
__device__ void frexp_strided(const T* x, Strided sx, T* m, int* e, i64 n) {
    typedef typename Acc<T>::type A;
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        A v = up<A>(x[strided_offset(sx, i)]);
        int ex = 0;
        A mant = (v == 0 || v != v || v - v != 0) ? v : frexp(v, &ex);
        m[i] = down<T>(mant);
        e[i] = ex;
    }
}

#define KILN_ELEMENTWISE(S, T) \
    extern "C" __global__ void binary_##S(int op, const T* a, Strided sa, const T* b, Strided sb, T* o, i64 n) { binary_strided<T, T>(op, a, sa, b, sb, o, n); } \
    extern "C" __global__ void compare_##S(int op, const T* a, Strided sa, const T* b, Strided sb, kbool* o, i64 n) { binary_strided<T, kbool>(op, a, sa, b, sb, o, n); } \
    extern "C" __global__ void binary_contig_##S(int op, const T* a, const T* b, T* o, i64 n) { binary_contig<T>(op, a, b, o, n); } \
    extern "C" __global__ void unary_##S(int op, const T* x, Strided sx, T* o, i64 n) { unary_strided<T>(op, x, sx, o, n); } \
    extern "C" __global__ void where_##S(const kbool* c, Strided sc, const T* a, Strided sa, const T* b, Strided sb, T* o, i64 n) { where_strided<T>(c, sc, a, sa, b, sb, o, n); }
KILN_FOR_REAL_TYPES(KILN_ELEMENTWISE)

#define KILN_FREXP(S, T) \
    extern "C" __global__ void frexp_##S(const T* x, Strided sx, T* m, int* e, i64 n) { frexp_strided<T>(x, sx, m, e, n); }
KILN_FREXP(f16, kh) KILN_FREXP(bf16, kbf) KILN_FREXP(f32, float) KILN_FREXP(f64, double)
