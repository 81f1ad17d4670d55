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
//
// NORM puts an RMS norm of each [D] row in front (Qwen3's q / k norms, both of one
// projection in one launch): rows of heads (dim -3, H of them) below `split` take weight
// w0, the rest w1, and the normed row is rounded to T, as rms_norm's output is, before it
// turns.
//
// A warp per row: the row's start is found once (one strided index, its divisions, per
// row rather than per element) and its D values staged in shared memory, where each lane
// finds its rotate_half partner. A decode step's q and k (tens of rows) are then a few
// dependent loads deep instead of several integer divisions per element.

//
// With a cache (`kv.k` set), x is a projection's heads [B, Hq + 2·Hkv, T, D]: query rows go
// to out [B, Hq, T, D], key rows (normed and turned as the queries) and value rows (as
// they are) to the caches [B, Hkv, cap, D] at positions start + t, so a decode step writes
// its keys and values in this launch rather than in two more. A position past the cache
// (only through `start_ptr`) writes nothing.

#define RT_WARPS 8

template <typename T> struct RtCache {
    T* k;
    T* v;
    i64 hq, hkv, cap;
};

template <typename T, bool NORM>
__device__ __forceinline__ void rotary_rows(const T* x, Strided sx, const T* w0, const T* w1, i64 split, i64 H,
                                            double eps, const T* cos, const T* sin, i64 positions, int R,
                                            const i64* start_ptr, i64 start_at, T* out, i64 T_len, int D, i64 rows,
                                            RtCache<T> kv) {
    typedef typename Acc<T>::type A;
    extern __shared__ unsigned char rt_smem[];
    kiln_after_previous_kernel();
    const i64 start = start_ptr ? start_ptr[0] : start_at;
    const int half = R / 2, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const i64 last = sx.strides[sx.rank - 1];
    A* buf = reinterpret_cast<A*>(rt_smem) + (i64)warp * D;
    for (i64 row = (i64)blockIdx.x * RT_WARPS + warp; row < rows; row += (i64)gridDim.x * RT_WARPS) {
        const i64 p = start + row % T_len;
        T* dst = out + row * D;
        bool turn = true;
        if (kv.k) {
            const i64 h = (row / T_len) % H, b = row / (T_len * H);
            if (h < kv.hq) {
                dst = out + ((b * kv.hq + h) * T_len + row % T_len) * D;
            } else {
                if (p < 0 || p >= kv.cap) continue;  // the whole warp: one row
                const i64 hk = h - kv.hq;
                turn = hk < kv.hkv;
                dst = (turn ? kv.k : kv.v) + ((b * kv.hkv + hk % kv.hkv) * kv.cap + p) * D;
            }
        }
        const i64 src = strided_offset(sx, row * D);
        A ss = 0;
        for (int j = lane; j < D; j += 32) {
            const A v = up<A>(x[src + j * last]);
            buf[j] = v;
            ss += v * v;
        }
        if (NORM && turn) {
            ss = warp_sum(ss);
            const A inv = (A)1 / sqrt(ss / (A)D + (A)eps);
            const T* w = (row / T_len) % H < split ? w0 : w1;
            for (int j = lane; j < D; j += 32) buf[j] = up<A>(down<T>(buf[j] * inv * up<A>(w[j])));
        }
        __syncwarp();
        const bool off_table = p < 0 || p >= positions;
        for (int j = lane; j < D; j += 32) {
            A o = buf[j];
            if (turn && j < R) {
                if (off_table) {
                    o = (A)kiln_nan();
                } else {
                    const A partner = buf[j < half ? j + half : j - half];
                    o = o * up<A>(cos[p * R + j]) + (j < half ? -partner : partner) * up<A>(sin[p * R + j]);
                }
            }
            dst[j] = down<T>(o);
        }
        __syncwarp();  // the next row reuses buf
    }
}

#define KILN_ROTARY(S, T)                                                                              \
    extern "C" __global__ void __launch_bounds__(32 * RT_WARPS)                                        \
        rotary_##S(const T* x, Strided sx, const T* cos, const T* sin, i64 positions, int R,           \
                   const i64* start_ptr, i64 start_at, T* out, i64 T_len, int D, i64 rows,             \
                   i64 H, RtCache<T> kv) {                                                             \
        rotary_rows<T, false>(x, sx, nullptr, nullptr, 0, H, 0.0, cos, sin, positions, R, start_ptr, start_at, \
                              out, T_len, D, rows, kv);                                                \
    }                                                                                                  \
    extern "C" __global__ void __launch_bounds__(32 * RT_WARPS)                                        \
        norm_rotary_##S(const T* x, Strided sx, const T* w0, const T* w1, i64 split, i64 H, double eps, \
                        const T* cos, const T* sin, i64 positions, int R, const i64* start_ptr,         \
                        i64 start_at, T* out, i64 T_len, int D, i64 rows, RtCache<T> kv) {              \
        rotary_rows<T, true>(x, sx, w0, w1, split, H, eps, cos, sin, positions, R, start_ptr, start_at, out, \
                             T_len, D, rows, kv);                                                      \
    }
KILN_ROTARY(f32, float)
KILN_ROTARY(f64, double)
KILN_ROTARY(f16, kh)
KILN_ROTARY(bf16, kbf)
