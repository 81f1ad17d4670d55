// Shared by every kiln kernel source: element types, up/down conversion to the compute
// type, strided indexing and block reductions. Self-contained: NVRTC is given no CUDA
// headers, so f16 / bf16 are bit containers converted with PTX `cvt` (sm_80+).

#define KILN_MAX_RANK 8
typedef long long i64;
typedef unsigned long long u64;

// A strided view: element i (row-major) sits at offset + sum(coord[d] * strides[d]).
struct Strided {
    int rank;
    i64 offset;
    i64 shape[KILN_MAX_RANK];
    i64 strides[KILN_MAX_RANK];
};

__device__ __forceinline__ i64 strided_offset(const Strided& s, i64 i) {
    i64 off = s.offset;
    for (int d = s.rank - 1; d >= 0; --d) {
        i64 c = i % s.shape[d];
        i /= s.shape[d];
        off += c * s.strides[d];
    }
    return off;
}

struct __align__(2) kh { unsigned short x; };  // float16 bits
struct __align__(2) kbf { unsigned short x; }; // bfloat16 bits

__device__ __forceinline__ float h2f(kh v) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.x)); return f; }
__device__ __forceinline__ kh f2h(float f) { kh v; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(v.x) : "f"(f)); return v; }
__device__ __forceinline__ float bf2f(kbf v) { return __uint_as_float(((unsigned int)v.x) << 16); }
__device__ __forceinline__ kbf f2bf(float f) { kbf v; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(v.x) : "f"(f)); return v; }

__device__ __forceinline__ float kiln_inf() { return __int_as_float(0x7f800000); }
__device__ __forceinline__ float kiln_nan() { return __int_as_float(0x7fc00000); }

// Compute types: narrow floats in float, f64 in double, integers in i64 (u64 in u64).
template <typename T> struct Acc { typedef i64 type; };
template <> struct Acc<float> { typedef float type; };
template <> struct Acc<double> { typedef double type; };
template <> struct Acc<kh> { typedef float type; };
template <> struct Acc<kbf> { typedef float type; };
template <> struct Acc<u64> { typedef u64 type; };

template <typename A, typename T> __device__ __forceinline__ A up(T v) { return (A)v; }
template <> __device__ __forceinline__ float up<float, kh>(kh v) { return h2f(v); }
template <> __device__ __forceinline__ float up<float, kbf>(kbf v) { return bf2f(v); }

template <typename T, typename A> __device__ __forceinline__ T down(A v) { return (T)v; }
template <> __device__ __forceinline__ kh down<kh, float>(float v) { return f2h(v); }
template <> __device__ __forceinline__ kbf down<kbf, float>(float v) { return f2bf(v); }

// SwiGLU's product silu(x) · y, in the compute type F (float for 16-bit types): the
// elementwise silu_mul and the GEMV's fused activation compute it alike.
template <typename F> __device__ __forceinline__ F silu_mul(F x, F y) { return x / ((F)1 + exp(-x)) * y; }

// FP8 cvt / mma need sm_89+ (scaled_mm.cu, fp8_linear.cu: below that their bodies trap,
// and the launchers refuse first).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define KILN_HAS_FP8 1
#endif

// ---- programmatic dependent launch (sm_90+) ----
// A kernel launched with programmatic stream serialization (cuda/launch.rs) may start while
// the kernel before it on the stream is still running. kiln_wait_previous_kernel waits
// until that kernel has finished and its writes are visible; before it a kernel may read
// only frozen memory (Tensor::freeze), and most call kiln_after_previous_kernel before
// their first global access. kiln_let_next_kernel_start lets the next such kernel start.
// Their blocks' scheduling and setup overlap the previous kernel's tail. Launched plainly,
// both instructions do nothing.
// Returns 0, computed after the wait: plain loads stay below the wait (its "memory"
// clobber), but asm loads (ld_after16) do only if their address depends on it.
__device__ __forceinline__ i64 kiln_wait_previous_kernel() {
    i64 zero;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n\tmov.b64 %0, 0;" : "=l"(zero) : : "memory");
#else
    asm volatile("mov.b64 %0, 0;" : "=l"(zero) : : "memory");
#endif
    return zero;
}

__device__ __forceinline__ void kiln_let_next_kernel_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void kiln_after_previous_kernel() {
    kiln_wait_previous_kernel();
    kiln_let_next_kernel_start();
}

// ---- 16-byte loads of the decode kernels (fp8_gemv, fp8_linear) ----
struct __align__(16) u32x4 { unsigned int x, y, z, w; };

// A weight's 16 bytes, read once: no L1 allocation; L2 fetches 256 bytes, as a warp reads
// each row 64 bytes per load and the rest of the 256 follows in the next loads.
__device__ __forceinline__ u32x4 ld_stream16(const unsigned char* p) {
    u32x4 v;
    asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

// 16 bytes of the activations, re-read by every warp and block: kept in L1.
__device__ __forceinline__ u32x4 ld_keep16(const unsigned char* p) {
    u32x4 v;
    asm("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

// 16 bytes of the activations after kiln_wait_previous_kernel (address + its zero): they may
// be the output of a kernel that was still running when this one started, so the load is
// coherent (no .nc, whose data must stay constant for the kernel's whole life).
__device__ __forceinline__ u32x4 ld_after16(const unsigned char* p) {
    u32x4 v;
    asm("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

// bool as its own type so conversions normalise to 0 / 1.
struct kbool { unsigned char v; };
template <> __device__ __forceinline__ i64 up<i64, kbool>(kbool v) { return v.v != 0; }
template <> __device__ __forceinline__ kbool down<kbool, i64>(i64 v) { kbool b; b.v = v != 0; return b; }

// Instantiates KERNEL(name_suffix, type) for every dtype the elementwise family serves.
#define KILN_FOR_REAL_TYPES(M) \
    M(bool, kbool) M(u8, unsigned char) M(u16, unsigned short) M(u32, unsigned int) M(u64, u64) \
    M(i8, signed char) M(i16, short) M(i32, int) M(i64, i64) \
    M(f16, kh) M(bf16, kbf) M(f32, float) M(f64, double)

// Atomic add on a 16-bit float, by compare-and-swap on its aligned 32-bit word.
template <typename T> __device__ void atomic_add16(T* addr, T val) {
    unsigned int* word = (unsigned int*)((u64)addr & ~(u64)3);
    unsigned int shift = ((u64)addr & 2) ? 16 : 0;
    unsigned int old = *word, assumed;
    do {
        assumed = old;
        T cur; cur.x = (unsigned short)(assumed >> shift);
        T sum = down<T>(up<float>(cur) + up<float>(val));
        unsigned int next = (assumed & ~(0xFFFFu << shift)) | ((unsigned int)sum.x << shift);
        old = atomicCAS(word, assumed, next);
    } while (old != assumed);
}
__device__ __forceinline__ void atomicAdd(kh* a, kh v) { atomic_add16(a, v); }
__device__ __forceinline__ void atomicAdd(kbf* a, kbf v) { atomic_add16(a, v); }
__device__ __forceinline__ void atomicAdd(i64* a, i64 v) { atomicAdd((u64*)a, (u64)v); }

// ---- block-wide reductions (blockDim.x a multiple of 32, at most 1024) ----
template <typename A> __device__ __forceinline__ A warp_sum(A v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <typename A> __device__ __forceinline__ A warp_max(A v) {
    for (int o = 16; o > 0; o >>= 1) {
        A w = __shfl_xor_sync(0xffffffffu, v, o);
        v = (w != w || w > v) ? w : v;
    }
    return v;
}

// ---- merging a per-thread state (a struct of 32/64-bit fields with `S merge(S, S)`
// overloaded for it) over a warp, then over the block ----
template <typename S> __device__ __forceinline__ S shfl_xor_state(S x, int lane_mask) {
    static_assert(sizeof(S) % 4 == 0, "a state is whole 32-bit words");
    union { S s; unsigned int w[sizeof(S) / 4]; } u;
    u.s = x;
#pragma unroll
    for (int i = 0; i < (int)(sizeof(S) / 4); ++i) u.w[i] = __shfl_xor_sync(0xffffffffu, u.w[i], lane_mask);
    return u.s;
}

template <typename S> __device__ S warp_merge(S x) {
    for (int o = 16; o > 0; o >>= 1) x = merge(x, shfl_xor_state(x, o));
    return x;
}

// Every thread gets the merge of the whole block; `empty` is the state of no values.
template <typename S> __device__ S block_merge(S x, S empty) {
    __shared__ S part[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    x = warp_merge(x);
    __syncthreads();
    if (lane == 0) part[warp] = x;
    __syncthreads();
    return warp_merge(lane < nw ? part[lane] : empty);
}

// Sum and NaN-propagating max over the block; every thread gets the result.
template <typename A> struct Sum { A v; };
template <typename A> __device__ __forceinline__ Sum<A> merge(Sum<A> a, Sum<A> b) { return {a.v + b.v}; }
template <typename A> struct Max { A v; };
template <typename A> __device__ __forceinline__ Max<A> merge(Max<A> a, Max<A> b) {
    return {(b.v != b.v || b.v > a.v) ? b.v : a.v};
}
template <typename A> __device__ A block_sum(A v) { return block_merge(Sum<A>{v}, Sum<A>{(A)0}).v; }
template <typename A> __device__ A block_max(A v) { return block_merge(Max<A>{v}, Max<A>{(A)-kiln_inf()}).v; }

// ---- tensor cores (sm_80+): mma.sync m16n8k16, ldmatrix, cp.async ----
// A fragment register holds two k-adjacent 16-bit values. With gq = lane / 4, tq = lane % 4:
// A (16×16, row) rows gq / gq + 8 at k 2tq (+8); B (16×8, col) column gq at k 2tq (+8);
// D (16×8, f32) register 2h + c is row gq + 8h, column 2tq + c.
template <typename T> __device__ void mma_16816(float* d, const unsigned* a, const unsigned* b);
#define KILN_MMA_16816(T, P)                                                                                   \
    template <> __device__ __forceinline__ void mma_16816<T>(float* d, const unsigned* a, const unsigned* b) { \
        asm("mma.sync.aligned.m16n8k16.row.col.f32." #P "." #P ".f32 "                                         \
            "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"                                            \
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                                   \
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));                               \
    }
KILN_MMA_16816(kbf, bf16)
KILN_MMA_16816(kh, f16)

// Two floats as one fragment register: `lo` in the low half (the lower k).
template <typename T> __device__ unsigned pack2(float lo, float hi);
template <> __device__ __forceinline__ unsigned pack2<kbf>(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
template <> __device__ __forceinline__ unsigned pack2<kh>(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// 16-byte copy into shared memory, zeros where `valid` is false (no bytes are read then).
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

// Four 8×8 16-bit matrices: lanes 8q..8q+7 address the rows of matrix q, register q gets it.
__device__ __forceinline__ void ldsm_x4(unsigned* r, unsigned at, bool trans) {
    if (trans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(at));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(at));
}

// ---- thread-block clusters (sm_90+; size set at launch, up to 16) ----
#define CLUSTER_MAX 16
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define KILN_HAS_CLUSTER 1
#endif

#ifdef KILN_HAS_CLUSTER
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_arrive_relaxed() { asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory"); }
__device__ __forceinline__ unsigned cluster_rank() { unsigned r; asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)); return r; }
__device__ __forceinline__ unsigned cluster_blocks() { unsigned n; asm("mov.u32 %0, %%cluster_nctarank;" : "=r"(n)); return n; }
// Stores (a, b) at the address `p` has in block `rank`'s shared memory: posted, made
// visible to that block by the next cluster barrier (arrive.release / wait.acquire).
__device__ __forceinline__ void cluster_store2(float* p, unsigned rank, float a, float b) {
    unsigned local = (unsigned)__cvta_generic_to_shared(p), remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
    asm volatile("st.shared::cluster.v2.f32 [%0], {%1, %2};" ::"r"(remote), "f"(a), "f"(b) : "memory");
}
#endif

// ---- blocks of one launch meeting (cuda/ops/reduce.rs `sync_words`: two u32 per stream,
// zeroed once, left as found by every launch) ----
// Grid-wide barrier; only in a cooperative launch (all blocks resident). Self-resetting as
// in cooperative groups: block 0 adds 2^31 - (blocks - 1), the others 1, so the top bit
// flips once all have arrived and the low bits return to zero.
__device__ void grid_barrier(unsigned int* word) {
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned int add = blockIdx.x == 0 ? 0x80000000u - (gridDim.x - 1) : 1u;
        unsigned int old = atomicAdd(word, add);
        while (((old ^ *(volatile unsigned int*)word) & 0x80000000u) == 0) {}
        __threadfence();
    }
    __syncthreads();
}

// True in the block that finishes last, once every other block's writes are visible; it
// resets the counter for the next launch. Every block calls it once, after its writes.
__device__ bool last_block(unsigned int* counter) {
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        last = atomicAdd(counter, 1u) == gridDim.x - 1;
        if (last) {
            *(volatile unsigned int*)counter = 0;
            __threadfence();
        }
    }
    __syncthreads();
    return last;
}
