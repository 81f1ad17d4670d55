// Rotary position embedding, the rotate_half convention of transformers'
// apply_rotary_pos_emb, in one launch (the composed form is a narrow, a cat, two muls and
// an add per tensor, plus two table gathers when the position lives on the device):
//   out[.., t, j] = x[j]·cos[p, j] + rotate_half(x)[j]·sin[p, j]   for j < R
//   out[.., t, j] = x[j]                                            for R <= j < D
// with rotate_half(x)[j] = -x[j + R/2] below R/2 and x[j - R/2] above, at position
// p = start + t. `start` is `start_at`, or the int64 at `start_ptr` when that is set: a
// captured decode step then turns its token wherever it is replayed. A position past the
// tables (only possible through `start_ptr`; the host checks its own) gives NaN, not a
// stray read. x is any strided view [.., T, D]; out is contiguous; math in Acc<T> (float,
// double for f64), one rounding.

template <typename T>
__device__ __forceinline__ void rotary(const T* x, Strided sx, const T* cos, const T* sin, i64 positions, int R,
                                       const i64* start_ptr, i64 start_at, T* out, i64 T_len, int D, i64 n) {
    typedef typename Acc<T>::type A;
    kiln_after_previous_kernel();
    const i64 start = start_ptr ? start_ptr[0] : start_at;
    const int half = R / 2;
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        const int j = (int)(i % D);
        const A v = up<A>(x[strided_offset(sx, i)]);
        if (j >= R) {
            out[i] = down<T>(v);
            continue;
        }
        const i64 p = start + (i / D) % T_len;
        if (p < 0 || p >= positions) {
            out[i] = down<T>((A)kiln_nan());
            continue;
        }
        const int pj = j < half ? j + half : j - half;
        const A partner = up<A>(x[strided_offset(sx, i - j + pj)]);
        const A turned = j < half ? -partner : partner;
        out[i] = down<T>(v * up<A>(cos[p * R + j]) + turned * up<A>(sin[p * R + j]));
    }
}

// The same after an RMS norm of each [D] row (Qwen3's q / k norms, both of one projection
// in one launch): a warp per row; rows of heads (dim -3, H of them) below `split` take
// weight w0, the rest w1. The normed row is rounded to T, as rms_norm's output is, before
// it turns; each lane normalises the partners it needs itself (L1 serves the re-reads).
template <typename T>
__device__ __forceinline__ void norm_rotary(const T* x, Strided sx, const T* w0, const T* w1, i64 split, i64 H,
                                            double eps, const T* cos, const T* sin, i64 positions, int R,
                                            const i64* start_ptr, i64 start_at, T* out, i64 T_len, int D, i64 rows) {
    typedef typename Acc<T>::type A;
    kiln_after_previous_kernel();
    const i64 start = start_ptr ? start_ptr[0] : start_at;
    const int half = R / 2, lane = threadIdx.x & 31;
    const i64 warps = (i64)gridDim.x * (blockDim.x >> 5);
    for (i64 row = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); row < rows; row += warps) {
        const i64 base = row * D;
        A ss = 0;
        for (int j = lane; j < D; j += 32) {
            const A v = up<A>(x[strided_offset(sx, base + j)]);
            ss += v * v;
        }
        ss = warp_sum(ss);
        const A inv = (A)1 / sqrt(ss / (A)D + (A)eps);
        const T* w = (row / T_len) % H < split ? w0 : w1;
        auto normed = [&](int j) { return up<A>(down<T>(up<A>(x[strided_offset(sx, base + j)]) * inv * up<A>(w[j]))); };
        const i64 p = start + row % T_len;
        for (int j = lane; j < D; j += 32) {
            const A v = normed(j);
            A o = v;
            if (j < R) {
                if (p < 0 || p >= positions) {
                    o = (A)kiln_nan();
                } else {
                    const A partner = normed(j < half ? j + half : j - half);
                    o = v * up<A>(cos[p * R + j]) + (j < half ? -partner : partner) * up<A>(sin[p * R + j]);
                }
            }
            out[base + j] = down<T>(o);
        }
    }
}

#define KILN_ROTARY(S, T)                                                                              \
    extern "C" __global__ void rotary_##S(const T* x, Strided sx, const T* cos, const T* sin, i64 positions, \
                                          int R, const i64* start_ptr, i64 start_at, T* out, i64 T_len,  \
                                          int D, i64 n) {                                                \
        rotary<T>(x, sx, cos, sin, positions, R, start_ptr, start_at, out, T_len, D, n);                 \
    }                                                                                                  \
    extern "C" __global__ void norm_rotary_##S(const T* x, Strided sx, const T* w0, const T* w1, i64 split,  \
                                               i64 H, double eps, const T* cos, const T* sin,            \
                                               i64 positions, int R, const i64* start_ptr, i64 start_at, \
                                               T* out, i64 T_len, int D, i64 rows) {                     \
        norm_rotary<T>(x, sx, w0, w1, split, H, eps, cos, sin, positions, R, start_ptr, start_at, out, T_len, D, \
                       rows);                                                                            \
    }
KILN_ROTARY(f32, float)
KILN_ROTARY(f64, double)
KILN_ROTARY(f16, kh)
KILN_ROTARY(bf16, kbf)
