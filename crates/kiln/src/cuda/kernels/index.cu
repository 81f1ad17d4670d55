// Index family: index_select, gather, take, put_, index_copy_. Indices are contiguous int64 (the
// launcher converts). Indices are never read back to the host: a negative index wraps
// once, and one still out of range reads as 0 (select / gather / take) or is skipped
// (put_). On the CPU the same input is an IndexOutOfRange error.

__device__ __forceinline__ bool wrap(i64& i, i64 size) {
    if (i < 0) i += size;
    return i >= 0 && i < size;
}

// Output element p has coordinates of `out` (x's shape with dim `dim` resized); x is
// read at the same coordinates except along dim, where `sel` gives the index.
template <typename T>
__device__ void gather_walk(const T* x, Strided sx, int dim, const i64* idx, int per_elem, Strided out, T* y, i64 n) {
    kiln_after_previous_kernel();
    for (i64 p = blockIdx.x * (i64)blockDim.x + threadIdx.x; p < n; p += (i64)gridDim.x * blockDim.x) {
        i64 rem = p, off = sx.offset;
        bool ok = true;
        for (int d = out.rank - 1; d >= 0; --d) {
            i64 c = rem % out.shape[d];
            rem /= out.shape[d];
            if (d == dim) {
                c = idx[per_elem ? p : c];
                ok = ok && wrap(c, sx.shape[d]);
            }
            off += c * sx.strides[d];
        }
        T zero;
        memset(&zero, 0, sizeof(T));
        y[p] = ok ? x[off] : zero;
    }
}

template <typename T>
__device__ void take_flat(const T* x, Strided sx, const i64* idx, T* y, i64 n, i64 numel) {
    for (i64 p = blockIdx.x * (i64)blockDim.x + threadIdx.x; p < n; p += (i64)gridDim.x * blockDim.x) {
        i64 i = idx[p];
        T zero;
        memset(&zero, 0, sizeof(T));
        y[p] = wrap(i, numel) ? x[strided_offset(sx, i)] : zero;
    }
}

// index_copy_: source element p (coordinates of `ss`) goes to x at the same coordinates
// except along dim, where idx gives the position. One thread per element: repeated
// indices leave one of their writes, unspecified which (as PyTorch's CUDA index_copy_).
template <typename T>
__device__ void scatter_walk(T* x, Strided sx, int dim, const i64* idx, const T* src, Strided ss, i64 n) {
    kiln_after_previous_kernel();
    for (i64 p = blockIdx.x * (i64)blockDim.x + threadIdx.x; p < n; p += (i64)gridDim.x * blockDim.x) {
        i64 rem = p, off = sx.offset, from = ss.offset;
        bool ok = true;
        for (int d = ss.rank - 1; d >= 0; --d) {
            i64 c = rem % ss.shape[d];
            rem /= ss.shape[d];
            from += c * ss.strides[d];
            if (d == dim) {
                c = idx[c];
                ok = ok && wrap(c, sx.shape[d]);
            }
            off += c * sx.strides[d];
        }
        if (ok) x[off] = src[from];
    }
}

// Overwrite: one thread walks the indices in order, so repeated indices resolve like
// the CPU (last write wins); put_ is not on any hot path.
template <typename T>
__device__ void put_overwrite(T* x, Strided sx, const i64* idx, const T* src, Strided ss, i64 n, i64 numel) {
    kiln_after_previous_kernel();
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    for (i64 p = 0; p < n; ++p) {
        i64 i = idx[p];
        if (wrap(i, numel)) x[strided_offset(sx, i)] = src[strided_offset(ss, p)];
    }
}

#define KILN_INDEX(S, T) \
    extern "C" __global__ void index_select_##S(const T* x, Strided sx, int dim, const i64* idx, Strided out, T* y, i64 n) { gather_walk<T>(x, sx, dim, idx, 0, out, y, n); } \
    extern "C" __global__ void gather_##S(const T* x, Strided sx, int dim, const i64* idx, Strided out, T* y, i64 n) { gather_walk<T>(x, sx, dim, idx, 1, out, y, n); } \
    extern "C" __global__ void take_##S(const T* x, Strided sx, const i64* idx, T* y, i64 n, i64 numel) { take_flat<T>(x, sx, idx, y, n, numel); } \
    extern "C" __global__ void put_##S(T* x, Strided sx, const i64* idx, const T* src, Strided ss, i64 n, i64 numel) { put_overwrite<T>(x, sx, idx, src, ss, n, numel); } \
    extern "C" __global__ void index_copy_##S(T* x, Strided sx, int dim, const i64* idx, const T* src, Strided ss, i64 n) { scatter_walk<T>(x, sx, dim, idx, src, ss, n); }
KILN_INDEX(b1, unsigned char) KILN_INDEX(b2, unsigned short) KILN_INDEX(b4, unsigned int) KILN_INDEX(b8, u64)

// Accumulating put_: atomics, so repeated indices add up (in any order).
#define KILN_PUT_ADD(S, T) \
    extern "C" __global__ void put_add_##S(T* x, Strided sx, const i64* idx, const T* src, Strided ss, i64 n, i64 numel) { \
        kiln_after_previous_kernel(); \
        for (i64 p = blockIdx.x * (i64)blockDim.x + threadIdx.x; p < n; p += (i64)gridDim.x * blockDim.x) { \
            i64 i = idx[p]; \
            if (wrap(i, numel)) atomicAdd(&x[strided_offset(sx, i)], src[strided_offset(ss, p)]); \
        } \
    }
KILN_PUT_ADD(f32, float) KILN_PUT_ADD(f64, double) KILN_PUT_ADD(i32, int) KILN_PUT_ADD(i64, i64)
KILN_PUT_ADD(f16, kh) KILN_PUT_ADD(bf16, kbf)
