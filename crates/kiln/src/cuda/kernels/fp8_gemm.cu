// Hopper FP8 GEMM (sm_90a): out[M, N] = (A[M, K] · W[N, K]ᵀ) · scales (+ bias), A and W
// e4m3 bytes, both K-major (scaled_mm's layout). Persistent and warp-specialised: one
// thread of warpgroup 0 feeds a ring of shared-memory stages with the tensor copy engine
// (TMA, 128-byte swizzle); warpgroups 1 and 2 each multiply 64 rows of a 128×192 tile
// with wgmma. The tensor cores accumulate FP8 products in reduced precision, so every
// 128-deep K block starts a fresh wgmma accumulator and is then added into f32 registers
// (the "promotion" cuBLASLt does when fast accumulation is off, PyTorch's default).
// 128×192 keeps wgmma and promotion accumulators (96 + 96 registers) within a thread's
// budget and tiles N = 8192 in 43 columns: 2752 tiles fill 132 SMs in 20.9 waves.
// Blocks run in clusters of two that take vertically adjacent tiles: each loads its own
// A rows and half of the shared W rows, multicast into both: 28 KB of L2 reads per K
// block instead of 40 (lab, 8192³ tensor-wise: 989 µs against 1041 without clusters).
// Tried and slower at 8192³ (bench/results/2026-12-04-gemm-variants): running a tile's
// epilogue beside the next tile's first K block, warpgroups taking turns to issue, bands
// of 8 or 32 row tiles.

#define FG_BM 128
#define FG_BN 192
#define FG_BK 128
#define FG_STAGES 4
#define FG_A_BYTES (FG_BM * FG_BK)
#define FG_B_BYTES (FG_BN * FG_BK)
#define FG_STAGE_BYTES (FG_A_BYTES + FG_B_BYTES)
// Each consumer warpgroup's output staging buffer: 64 rows of 384 bytes.
#define FG_OUT_BYTES (64 * 384)
// Tiles are visited in bands of this many row tiles, so the A and W slices that the
// resident tiles read stay in L2 together.
#define FG_GROUP_M 16
#define FG_THREADS 384
#define FG_CLUSTER 2
#define FG_W_SLICE (FG_BN / FG_CLUSTER)

// A CUtensorMap (opaque, 128 bytes, 64-byte aligned), passed by value.
struct __align__(64) TmaMap { u64 v[16]; };

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KILN_HAS_WGMMA 1
#endif

#ifdef KILN_HAS_WGMMA

__device__ __forceinline__ void fg_bar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void fg_bar_wait(unsigned bar, unsigned parity) {
    unsigned done;
    do {
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}

// Cluster tile t → the first row of its FG_CLUSTER row tiles and its first column; bands of
// FG_GROUP_M row tiles.
__device__ __forceinline__ void fg_tile(int t, int tiles_m, int tiles_n, int& m0, int& n0) {
    const int group = FG_GROUP_M / FG_CLUSTER, pairs_m = (tiles_m + FG_CLUSTER - 1) / FG_CLUSTER;
    int band = group * tiles_n, first = (t / band) * group, r = t % band;
    int rows = min(pairs_m - first, group);
    m0 = (first + r % rows) * FG_CLUSTER * FG_BM;
    n0 = (r / rows) * FG_BN;
}

// Arrives on the mbarrier at shared address `bar` in cluster block `rank`. CTA-scope
// release: what it orders is this warpgroup's finished wgmma reads (a cluster-scope release
// would put a GPU-wide memory barrier before every arrival).
__device__ __forceinline__ void fg_bar_arrive_in(unsigned bar, unsigned rank) {
    asm volatile("{ .reg .b32 r; mapa.shared::cluster.u32 r, %0, %1; mbarrier.arrive.shared::cluster.b64 _, [r]; }"
                 ::"r"(bar), "r"(rank) : "memory");
}

__device__ __forceinline__ void fg_cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}

// Shared-memory matrix descriptor: 128-byte swizzled K-major rows, 8-row groups 1024 bytes
// apart (the TMA box layout); the start address advances 32 bytes per k32 step.
__device__ __forceinline__ u64 fg_desc(unsigned addr) {
    return (u64)((addr & 0x3FFFF) >> 4) | ((u64)1 << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}

#define FG_R8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])

// d (64×192 of this warpgroup, f32) = (accumulate ? d : 0) + A_k32 · W_k32ᵀ.
__device__ __forceinline__ void fg_wgmma(float* d, u64 da, u64 db, int accumulate) {
    asm volatile(
        "{ .reg .pred p; setp.ne.b32 p, %98, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n192k32.f32.e4m3.e4m3 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}, "
        "%96, %97, p, 1, 1; }\n"
        : FG_R8(0), FG_R8(8), FG_R8(16), FG_R8(24), FG_R8(32), FG_R8(40), FG_R8(48), FG_R8(56),
          FG_R8(64), FG_R8(72), FG_R8(80), FG_R8(88)
        : "l"(da), "l"(db), "r"(accumulate)
        : "memory");
}
#undef FG_R8

// One 128-deep K block into a fresh accumulator d, as one commit group.
__device__ __forceinline__ void fg_wgmma_block(float* d, u64 da, u64 dw) {
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
    for (int k = 0; k < FG_BK / 32; ++k) fg_wgmma(d, da + 2 * k, dw + 2 * k, k);
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

// This warp is done reading a stage: lane 0 tells both blocks' producers.
__device__ __forceinline__ void fg_release(unsigned empty_bar, int wt) {
    if ((wt & 31) == 0)
        for (unsigned r = 0; r < FG_CLUSTER; ++r) fg_bar_arrive_in(empty_bar, r);
}
#endif

// Two adjacent outputs into the staging buffer at shared address `at`, as the output type.
__device__ __forceinline__ void fg_stage2(unsigned at, float a, float b, float*) {
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};" ::"r"(at), "f"(a), "f"(b) : "memory");
}
template <typename T> __device__ __forceinline__ void fg_stage2(unsigned at, float a, float b, T*) {
    unsigned two = (unsigned)down<T>(a).x | ((unsigned)down<T>(b).x << 16);
    asm volatile("st.shared.b32 [%0], %1;" ::"r"(at), "r"(two) : "memory");
}

// The first of thread wt's two accumulator rows (r0, r0 + 8) within its warpgroup's 64
// (wgmma's layout, see fg_epilogue).
__device__ __forceinline__ int fg_row0(int wt) { return 16 * (wt >> 5) + ((wt & 31) >> 2); }

// A tile's scales, fetched when its K loop starts so that their L2 round trip overlaps it:
// the warpgroup's 192 column scales go to shared memory `cols` by asynchronous copies
// (rowwise only; in registers they would spill), and this thread's two row scales (the
// product sa·sb for tensor-wise) into `row`. Called after the previous tile's epilogue,
// whose last barrier follows every read of `cols`.
__device__ __forceinline__ void fg_fetch_scales(unsigned cols, float* row, const float* __restrict__ sa,
                                                const float* __restrict__ sb, int rowwise, int m0, int n0, int M, int N,
                                                int wt) {
    if (rowwise) {
        for (int c = wt; c < FG_BN; c += 128)
            asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(cols + 4 * c), "l"(sb + min(n0 + c, N - 1))
                         : "memory");
    }
    cp_async_commit();
    int r0 = m0 + fg_row0(wt);
#pragma unroll
    for (int h = 0; h < 2; ++h) row[h] = rowwise ? sa[min(r0 + 8 * h, M - 1)] : sa[0] * sb[0];
}

// Scales a warpgroup's 64×192 block into its shared staging buffer and stores it with the
// tensor copy engine, which clips partial tiles and runs on while the next tile's K loop
// starts (plain stores of the fragments stalled the tensor cores: lab, 6.5% of 8192³).
// wgmma's accumulator layout: register 4j + 2h + c of lane l in warp w holds row
// 16w + l/4 + 8h, column 8j + 2(l%4) + c. The staging buffer holds 64 rows of 384 bytes
// (all 192 columns of bf16 / f16, half of them of f32, so f32 takes two passes) as
// boxes of 64 rows × 128 bytes in the 128-byte swizzle: the 8 rows a store instruction
// touches land in 8 different bank groups. The bias is loaded here, all at once (clamped
// indices, no branches): per column it would cost an L2 round trip each.
template <typename T>
__device__ __forceinline__ void fg_epilogue(const float* acc, unsigned cols, const float* row, int rowwise,
                                            unsigned stage, const TmaMap* mo, const T* __restrict__ bias, int m0,
                                            int n0, int N, int wt, int barrier) {
    const int mine = FG_BN / 4;  // this thread's columns: c0 + 8j + e, j < FG_BN / 8, e < 2
    const int passes = sizeof(T) / 2, per = FG_BN / passes, box_cols = 128 / sizeof(T);
    int r0 = fg_row0(wt), c0 = 2 * (wt & 3);
    float cb[mine];
#pragma unroll
    for (int i = 0; i < mine; ++i) cb[i] = bias ? up<float>(bias[min(n0 + c0 + 8 * (i >> 1) + (i & 1), N - 1)]) : 0.f;
#pragma unroll
    for (int p = 0; p < passes; ++p) {
        // The buffer is free once the copy engine has read the previous stores out of it.
        if (wt == 0) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
        // ... and the column scales are in once every thread's copies have landed.
        asm volatile("cp.async.wait_all;" ::: "memory");
        asm volatile("bar.sync %0, 128;" ::"r"(barrier) : "memory");
#pragma unroll
        for (int jp = 0; jp < per / 8; ++jp) {
            const int j = p * per / 8 + jp;
            float cs0 = 1.f, cs1 = 1.f;
            if (rowwise)
                asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(cs0), "=f"(cs1) : "r"(cols + 4 * (8 * j + c0)));
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                int r = r0 + 8 * h, byte = (8 * jp + c0) * (int)sizeof(T);
                unsigned at = stage + (byte >> 7) * 64 * 128 + r * 128 + ((((byte >> 4) & 7) ^ (r & 7)) << 4) + (byte & 15);
                float v0 = acc[4 * j + 2 * h] * row[h] * cs0 + cb[2 * j];
                float v1 = acc[4 * j + 2 * h + 1] * row[h] * cs1 + cb[2 * j + 1];
                fg_stage2(at, v0, v1, (T*)0);
            }
        }
        // The copy engine reads shared memory through the async proxy.
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        asm volatile("bar.sync %0, 128;" ::"r"(barrier) : "memory");
        if (wt == 0) {
#pragma unroll
            for (int b = 0; b < per / box_cols; ++b)
                asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
                             ::"l"((u64)mo), "r"(n0 + p * per + b * box_cols), "r"(m0), "r"(stage + b * 64 * 128)
                             : "memory");
            asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        }
    }
}

template <typename T>
__device__ __forceinline__ void fp8_gemm_body(const TmaMap* ma, const TmaMap* mw, const TmaMap* mo, const float* sa,
                                              const float* sb, const T* bias, int M, int N, int K, int rowwise) {
#ifdef KILN_HAS_WGMMA
    extern __shared__ __align__(1024) unsigned char fg_raw[];
    // The 128-byte swizzle repeats every 1024 bytes: stages start on a 1024-byte boundary.
    unsigned base = (smem_addr(fg_raw) + 1023) & ~1023u;
    unsigned staging = base + FG_STAGES * FG_STAGE_BYTES, scales = staging + 2 * FG_OUT_BYTES;
    unsigned full = scales + 2 * FG_BN * 4, empty = full + 8 * FG_STAGES;
    unsigned rank;
    asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    int wg = threadIdx.x >> 7;
    if (threadIdx.x == 0) {
        for (int s = 0; s < FG_STAGES; ++s) {
            fg_bar_init(full + 8 * s, 1);
            // A stage is refilled once lane 0 of every consumer warp of both blocks is done
            // with it: either block's producer writes W rows into both.
            fg_bar_init(empty + 8 * s, 8 * FG_CLUSTER);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("prefetch.tensormap [%0];" ::"l"((u64)ma) : "memory");
        asm volatile("prefetch.tensormap [%0];" ::"l"((u64)mw) : "memory");
        asm volatile("prefetch.tensormap [%0];" ::"l"((u64)mo) : "memory");
    }
    fg_cluster_sync();
    kiln_after_previous_kernel();
    int tiles_m = (M + FG_BM - 1) / FG_BM, tiles_n = (N + FG_BN - 1) / FG_BN, kblocks = (K + FG_BK - 1) / FG_BK;
    int tiles = (tiles_m + FG_CLUSTER - 1) / FG_CLUSTER * tiles_n, cluster = blockIdx.x / FG_CLUSTER;
    int clusters = gridDim.x / FG_CLUSTER;
    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        if (threadIdx.x == 0) {
            unsigned it = 0;
            for (int t = cluster; t < tiles; t += clusters) {
                int m0, n0;
                fg_tile(t, tiles_m, tiles_n, m0, n0);
                for (int kb = 0; kb < kblocks; ++kb, ++it) {
                    unsigned s = it % FG_STAGES, bar = full + 8 * s, dst = base + s * FG_STAGE_BYTES;
                    fg_bar_wait(empty + 8 * s, ((it / FG_STAGES) & 1) ^ 1);
                    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar),
                                 "n"(FG_STAGE_BYTES) : "memory");
                    asm volatile(
                        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                        ::"r"(dst), "l"((u64)ma), "r"(kb * FG_BK), "r"(m0 + (int)rank * FG_BM), "r"(bar) : "memory");
                    asm volatile(
                        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                        " [%0], [%1, {%2, %3}], [%4], %5;"
                        ::"r"(dst + FG_A_BYTES + rank * FG_W_SLICE * FG_BK), "l"((u64)mw), "r"(kb * FG_BK),
                        "r"(n0 + (int)rank * FG_W_SLICE), "r"(bar), "h"((unsigned short)((1 << FG_CLUSTER) - 1))
                        : "memory");
                }
            }
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
        int wt = threadIdx.x & 127, cw = wg - 1;
        float d[FG_BN / 2], acc[FG_BN / 2];
        float row[2];
        unsigned cols = scales + cw * FG_BN * 4;
        unsigned it = 0;
        for (int t = cluster; t < tiles; t += clusters) {
            int m0, n0;
            fg_tile(t, tiles_m, tiles_n, m0, n0);
            int wm0 = m0 + (int)rank * FG_BM + 64 * cw;  // this warpgroup's first row
            fg_fetch_scales(cols, row, sa, sb, rowwise, wm0, n0, M, N, wt);
#pragma unroll
            for (int i = 0; i < FG_BN / 2; ++i) acc[i] = 0.f;
            for (int kb = 0; kb < kblocks; ++kb, ++it) {
                unsigned s = it % FG_STAGES, a = base + s * FG_STAGE_BYTES;
                fg_bar_wait(full + 8 * s, (it / FG_STAGES) & 1);
                fg_wgmma_block(d, fg_desc(a + cw * 64 * FG_BK), fg_desc(a + FG_A_BYTES));
                // ptxas serialises every wgmma if the accumulator of one is read while
                // another is in flight, so the block is finished before it is promoted.
                asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
                fg_release(empty + 8 * s, wt);
#pragma unroll
                for (int i = 0; i < FG_BN / 2; ++i) acc[i] += d[i];
            }
            fg_epilogue(acc, cols, row, rowwise, staging + cw * FG_OUT_BYTES, mo, bias, wm0, n0, N, wt, 1 + cw);
        }
        if (wt == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    }
    // No block may leave while the other can still write its shared memory or barriers.
    fg_cluster_sync();
#else
    __trap();
#endif
}

// The cluster shape is compiled in (the launcher reads it back); older targets, where the
// kernel only traps, have no clusters.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FG_CLUSTER_DIMS __cluster_dims__(FG_CLUSTER, 1, 1)
#else
#define FG_CLUSTER_DIMS
#endif
#define KILN_FP8_GEMM(S, T)                                                                                        \
    extern "C" __global__ void __launch_bounds__(FG_THREADS, 1) FG_CLUSTER_DIMS                                    \
        fp8_gemm_##S(const __grid_constant__ TmaMap ma, const __grid_constant__ TmaMap mw,                         \
                     const __grid_constant__ TmaMap mo, const float* sa, const float* sb, const T* bias, int M,    \
                     int N, int K, int rowwise) {                                                                   \
        fp8_gemm_body<T>(&ma, &mw, &mo, sa, sb, bias, M, N, K, rowwise);                                           \
    }
KILN_FP8_GEMM(bf16, kbf)
KILN_FP8_GEMM(f16, kh)
KILN_FP8_GEMM(f32, float)
