// Copy family: strided copies, dtype casts with PyTorch's rounding (bf16, float8),
// fills and the seeded generator shared with the CPU (ops/create.rs).
// dtype codes follow kiln::DType: 0 bool, 1 u8, 2 u16, 3 u32, 4 u64, 5 i8, 6 i16,
// 7 i32, 8 i64, 9 f8e4m3, 10 f8e5m2, 11 f16, 12 bf16, 13 f32, 14 f64.

// ---- float8 (bit-exact ports of c10's fp8e4m3fn / fp8e5m2 conversions) ----
__device__ unsigned char f32_to_e4m3(float x) {
    unsigned int bits = __float_as_uint(x);
    unsigned int sign = bits & 0x80000000u;
    bits ^= sign;
    unsigned char r;
    if (bits >= (1087u << 20)) r = 0x7F;
    else if (bits < (121u << 23)) {
        unsigned int b = __float_as_uint(__uint_as_float(bits) + __uint_as_float(141u << 23));
        r = (unsigned char)(b - (141u << 23));
    } else {
        unsigned int odd = (bits >> 20) & 1;
        bits += ((unsigned int)(7 - 127) << 23) + 0x7FFFF;
        bits += odd;
        r = (unsigned char)(bits >> 20);
    }
    return r | (unsigned char)(sign >> 24);
}

__device__ float e4m3_to_f32(unsigned char b) {
    float s = (b & 0x80) ? -1.f : 1.f;
    int e = (b >> 3) & 0xF, m = b & 7;
    if (e == 15 && m == 7) return copysignf(kiln_nan(), s); // keep the sign, as the CPU does
    float mag = e == 0 ? m * 0.001953125f : (1.f + m / 8.f) * ldexpf(1.f, e - 7);
    return s * mag;
}

__device__ unsigned char f32_to_e5m2(float x) {
    unsigned int bits = __float_as_uint(x);
    unsigned int sign = bits & 0x80000000u;
    bits ^= sign;
    unsigned char r;
    if (bits >= (143u << 23)) r = bits > (255u << 23) ? 0x7F : 0x7C;
    else if (bits < (113u << 23)) {
        unsigned int b = __float_as_uint(__uint_as_float(bits) + __uint_as_float(134u << 23));
        r = (unsigned char)(b - (134u << 23));
    } else {
        unsigned int odd = (bits >> 21) & 1;
        bits += ((unsigned int)(15 - 127) << 23) + 0xFFFFF;
        bits += odd;
        r = (unsigned char)(bits >> 21);
    }
    return r | (unsigned char)(sign >> 24);
}

__device__ float e5m2_to_f32(unsigned char b) {
    kh h;
    h.x = (unsigned short)(b << 8);
    return h2f(h);
}

// ---- dtype-generic load / store through a tagged value ----
struct Val { double f; i64 i; int kind; }; // kind 0 float, 1 signed/bool, 2 u64

__device__ Val load(const void* p, int dt, i64 o) {
    Val v; v.kind = 1; v.f = 0; v.i = 0;
    switch (dt) {
    case 0: v.i = ((const unsigned char*)p)[o] != 0; break;
    case 1: v.i = ((const unsigned char*)p)[o]; break;
    case 2: v.i = ((const unsigned short*)p)[o]; break;
    case 3: v.i = ((const unsigned int*)p)[o]; break;
    case 4: v.i = (i64)((const u64*)p)[o]; v.kind = 2; break;
    case 5: v.i = ((const signed char*)p)[o]; break;
    case 6: v.i = ((const short*)p)[o]; break;
    case 7: v.i = ((const int*)p)[o]; break;
    case 8: v.i = ((const i64*)p)[o]; break;
    case 9: v.f = e4m3_to_f32(((const unsigned char*)p)[o]); v.kind = 0; break;
    case 10: v.f = e5m2_to_f32(((const unsigned char*)p)[o]); v.kind = 0; break;
    case 11: v.f = h2f(((const kh*)p)[o]); v.kind = 0; break;
    case 12: v.f = bf2f(((const kbf*)p)[o]); v.kind = 0; break;
    case 13: v.f = ((const float*)p)[o]; v.kind = 0; break;
    case 14: v.f = ((const double*)p)[o]; v.kind = 0; break;
    }
    return v;
}

__device__ double as_double(Val v) { return v.kind == 0 ? v.f : (v.kind == 2 ? (double)(u64)v.i : (double)v.i); }

// Float → integer truncates toward zero (saturating; NaN gives 0), like the CPU backend.
__device__ i64 as_int(Val v) { return v.kind == 0 ? (v.f != v.f ? 0 : (i64)v.f) : v.i; }

__device__ void store(void* p, int dt, i64 o, Val v) {
    switch (dt) {
    case 0: ((unsigned char*)p)[o] = v.kind == 0 ? (v.f != 0) : (v.i != 0); break;
    case 1: ((unsigned char*)p)[o] = (unsigned char)as_int(v); break;
    case 2: ((unsigned short*)p)[o] = (unsigned short)as_int(v); break;
    case 3: ((unsigned int*)p)[o] = (unsigned int)as_int(v); break;
    case 4: ((u64*)p)[o] = v.kind == 0 ? (v.f != v.f ? 0 : (u64)v.f) : (u64)v.i; break;
    case 5: ((signed char*)p)[o] = (signed char)as_int(v); break;
    case 6: ((short*)p)[o] = (short)as_int(v); break;
    case 7: ((int*)p)[o] = (int)as_int(v); break;
    case 8: ((i64*)p)[o] = as_int(v); break;
    // Narrow floats go through float first, as PyTorch's casts do.
    case 9: ((unsigned char*)p)[o] = f32_to_e4m3((float)as_double(v)); break;
    case 10: ((unsigned char*)p)[o] = f32_to_e5m2((float)as_double(v)); break;
    case 11: ((kh*)p)[o] = f2h((float)as_double(v)); break;
    case 12: ((kbf*)p)[o] = f2bf((float)as_double(v)); break;
    case 13: ((float*)p)[o] = (float)as_double(v); break;
    case 14: ((double*)p)[o] = as_double(v); break;
    }
}

extern "C" __global__ void cast_strided(const void* src, int sdt, Strided s, void* dst, int ddt, i64 n) {
    kiln_after_previous_kernel();
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        store(dst, ddt, i, load(src, sdt, strided_offset(s, i)));
}

// Same-dtype copy between two strided views, by element size.
#define KILN_COPY(S, T) \
    extern "C" __global__ void copy_##S(const T* src, Strided s, T* dst, Strided d, i64 n) { \
        kiln_after_previous_kernel(); \
        for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) \
            dst[strided_offset(d, i)] = src[strided_offset(s, i)]; \
    } \
    extern "C" __global__ void fill_##S(T* dst, T value, i64 n) { \
        for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) \
            dst[i] = value; \
    }
KILN_COPY(b1, unsigned char) KILN_COPY(b2, unsigned short) KILN_COPY(b4, unsigned int) KILN_COPY(b8, u64)

// ---- seeded generator: splitmix64 of (seed, i), identical to ops/create.rs ----
__device__ u64 hash_u64(u64 seed, u64 i) {
    u64 z = (seed * 0x9E3779B97F4A7C15ull) ^ (i + 0x632BE59BD9B4E019ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

__device__ float uniform_f32(u64 seed, u64 i) { return (float)(hash_u64(seed, i) >> 40) * (1.0f / 16777216.0f); }

// start + i·step in any dtype, computed in double and cast as the CPU's arange casts.
extern "C" __global__ void arange_fill(void* dst, int ddt, double start, double step, i64 n) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        Val val; val.kind = 0; val.f = start + (double)i * step; val.i = 0;
        store(dst, ddt, i, val);
    }
}

// kind 0: U[0,1); kind 1: N(0,1) by Box–Muller.
extern "C" __global__ void rand_fill(void* dst, int ddt, u64 seed, int kind, i64 n) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        float v;
        if (kind == 0) v = uniform_f32(seed, (u64)i);
        else {
            float u1 = 1.0f - uniform_f32(seed, 2 * (u64)i), u2 = uniform_f32(seed, 2 * (u64)i + 1);
            v = sqrtf(-2.0f * logf(u1)) * cosf(6.28318530717958647692f * u2);
        }
        Val val; val.kind = 0; val.f = v; val.i = 0;
        store(dst, ddt, i, val);
    }
}
