// Lab (2026-12-04 evening): what programmatic dependent launch buys fp8_gemv in the fp8
// suite's 20-call graph when a kernel may read its weight before the kernel ahead of it
// has finished. `tree_pdl` is the tree's fp8_gemv (NT = 1) with griddepcontrol added: it
// lets the next kernel launch at once, and waits for the previous one either first thing
// (EARLY = false: safe for any inputs) or after issuing its first weight loads (EARLY =
// true: safe only for a weight no kernel still running can write). Read-only floors, plain
// and dependent, bound what any such kernel can reach.
#include <cuda.h>
#include "common.cuh"
#include "lab_common.cuh"
#include "scaled_mm.cu"


// The tree's fp8_gemv<e4m3, e4m3, bf16, NT = 1, U = 8> with dependent-launch control.
template <bool EARLY, bool DEP = false>
__global__ void __launch_bounds__(128, 4)
    tree_pdl(const unsigned char* a, i64 lda, const unsigned char* w, i64 ldw, const float* sa, const float* sb,
             int rowwise, kbf* out, int M, int N, int K, int KW) {
#ifdef KILN_HAS_FP8
    const int U = 8;
    __shared__ float part[4][4][32];
    kiln_let_next_kernel_start();
    if (!EARLY) kiln_wait_previous_kernel();
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    int q = warp % KW;
    i64 n0 = ((i64)blockIdx.x * (4 / KW) + warp / KW) * 8;
    i64 n = n0 + g;
    bool wok = n < N, lo = g < M;
    const unsigned char* wrow = w + (wok ? n : 0) * ldw;
    const unsigned char* arow0 = a + (lo ? g : 0) * lda;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    float srow = 0.f, scol[2] = {0.f, 0.f};
    bool waited = !EARLY;
    const u32x4 zero = {0, 0, 0, 0};
    for (int kb = q * 64 * U; kb < K; kb += KW * 64 * U) {
        u32x4 wv[U], a0[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            int k = kb + u * 64 + t * 16;
            wv[u] = k < K && wok ? ld_stream16(wrow + k) : zero;
        }
        if (!waited) {
            i64 after = kiln_wait_previous_kernel();
            if (DEP) arow0 += after;
            waited = true;
        }
        if (kb == q * 64 * U) {
            srow = q == 0 && lo ? sa[rowwise ? g : 0] : 0.f;
#pragma unroll
            for (int c = 0; c < 2; ++c) {
                i64 nc = n0 + t * 2 + c;
                scol[c] = q == 0 && nc < N ? sb[rowwise ? nc : 0] : 0.f;
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            int k = kb + u * 64 + t * 16;
            a0[u] = k < K && lo ? (DEP ? ld_after16(arow0 + k) : ld_keep16(arow0 + k)) : zero;
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            unsigned af[2][4] = {{a0[u].x, 0u, a0[u].y, 0u}, {a0[u].z, 0u, a0[u].w, 0u}};
            unsigned bf[2][2] = {{wv[u].x, wv[u].y}, {wv[u].z, wv[u].w}};
            Mma<e4m3, e4m3>::run(acc, af[0], bf[0]);
            Mma<e4m3, e4m3>::run(acc, af[1], bf[1]);
        }
    }
    if (!waited) kiln_wait_previous_kernel();
    if (KW > 1) {
#pragma unroll
        for (int i = 0; i < 4; ++i) part[warp][i][lane] = acc[i];
        __syncthreads();
    }
    if (q != 0) return;
#pragma unroll
    for (int i = 0; i < 2; ++i) {  // accumulators 2, 3 are rows 8..15 of A: zero for M <= 8
        i64 nc = n0 + t * 2 + i;
        if (g >= M || nc >= N) continue;
        float v = acc[i];
        for (int p = 1; p < KW; ++p) v += part[warp + p][i][lane];
        out[g * N + nc] = down<kbf>(v * srow * scol[i]);
    }
#endif
}

template <typename K, typename... Args>
static void launch_pdl(K kern, int grid, int block, cudaStream_t st, Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid; cfg.blockDim = block; cfg.stream = st;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at; cfg.numAttrs = 1;
    CK(cudaLaunchKernelEx(&cfg, kern, args...));
}

int main() {
    int reps = getenv("LAB_REPS") ? atoi(getenv("LAB_REPS")) : 60;
    int sms; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    int shapes[][3] = {{1, 4096, 4096}, {1, 1024, 4096}, {1, 14336, 4096}, {1, 4096, 14336}, {4, 4096, 4096},
                       {3, 1000, 272}};  // M, N, K
    cudaStream_t st; CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    unsigned* sink; CK(cudaMalloc(&sink, 4));
    for (auto& s : shapes) {
        LabShape sh(s[0], s[1], s[2]);
        int M = sh.M, N = sh.N, K = sh.K;
        const unsigned char* da = sh.da;
        const float *dsa = sh.dsa, *dsb = sh.dsb;
        kbf* dout = sh.dout;
        auto run = [&](const char* name, auto launch) {
            for (int rowwise = 0; rowwise < 2; ++rowwise) {
                CK(cudaMemsetAsync(dout, 0xFF, (size_t)M * N * 2, st));
                launch(sh.w(sh.copies - 1), rowwise);
                CK(cudaGetLastError()); CK(cudaStreamSynchronize(st));
                int bad = sh.bad(rowwise);
                float us = graph_us(st, reps, [&](int i) { launch(sh.w(i), rowwise); });
                printf("    %-26s %2dx%5dx%5d %-10s: %7.2f us  (floor %.2f)  %s\n", name, M, K, N,
                       rowwise ? "rowwise" : "tensorwise", us, sh.floor_us(), bad ? "FAIL" : "ok");
                if (bad) printf("   %d bad of %d\n", bad, M * N);
            }
        };
        int steps = std::max(1, K / (64 * 8)), slots = 4 * sms;
        auto blocks = [&](int kw) { return (N + 8 * (4 / kw) - 1) / (8 * (4 / kw)); };
        int kw = 1;
        for (int c : {4, 2, 1}) if (c <= steps && blocks(c) <= slots) { kw = c; break; }
        int grid = blocks(kw);
        run("tree", [&](const unsigned char* w, int rw) {
            fp8_gemv_e4m3_e4m3_bf16_1<<<grid, 128, 0, st>>>(da, K, w, K, dsa, dsb, rw, nullptr, dout, M, N, K, kw);
        });
        run("tree _early, dependent", [&](const unsigned char* w, int rw) {
            launch_pdl(fp8_gemv_e4m3_e4m3_bf16_1_early, grid, 128, st, da, (i64)K, w, (i64)K,
                       dsa, dsb, rw, (const kbf*)nullptr, dout, M, N, K, kw);
        });
        run("pdl, wait first", [&](const unsigned char* w, int rw) {
            launch_pdl(tree_pdl<false>, grid, 128, st, da, (i64)K, w, (i64)K, dsa,
                       dsb, rw, dout, M, N, K, kw);
        });
        run("pdl, before wait, A dep", [&](const unsigned char* w, int rw) {
            launch_pdl(tree_pdl<true, true>, grid, 128, st, da, (i64)K, w, (i64)K, dsa,
                       dsb, rw, dout, M, N, K, kw);
        });
        run("pdl, weights before wait", [&](const unsigned char* w, int rw) {
            launch_pdl(tree_pdl<true>, grid, 128, st, da, (i64)K, w, (i64)K, dsa,
                       dsb, rw, dout, M, N, K, kw);
        });
        if (M == 1 && N == 4096 && K == 4096) {
            int grids[] = {4 * sms, 8 * sms};
            for (int g : grids) {
                auto floor = [&](const char* what, auto launch) {
                    float us = graph_us(st, reps, [&](int i) { launch(sh.w(i)); });
                    printf("    read-only 16.8 MB, grid %4d, %-24s %.2f us\n", g, what, us);
                };
                floor("plain", [&](const unsigned char* w) { read_floor<8, false, false><<<g, 128, 0, st>>>(w, sh.wb, sink); });
                floor("pdl, no wait", [&](const unsigned char* w) { launch_pdl(read_floor<8, true, false>, g, 128, st, w, sh.wb, sink); });
                floor("pdl, wait at end", [&](const unsigned char* w) { launch_pdl(read_floor<8, true, true>, g, 128, st, w, sh.wb, sink); });
            }
        }
    }
    return 0;
}
