// Lab for fp8_gemv (crates/kiln/src/cuda/kernels/scaled_mm.cu), built with nvcc beside the
// tree's kernel (bench/lab/README.md): checks each decode shape against a host reference
// with poisoned outputs, times a graph of 20 calls over weight copies rotated through
// 128 MiB (the fp8 suite's method), and times a kernel that only reads a 4096×4096 FP8
// weight, the floor for the 1×4096² goal. Not part of the cargo build.
#include <cuda.h>
#include "common.cuh"
#include "lab_common.cuh"
#include "scaled_mm.cu"

typedef void (*Kern)(const unsigned char*, i64, const unsigned char*, i64, const float*, const float*, int, const kbf*,
                     kbf*, int, int, int, int);

int main() {
    int reps = getenv("LAB_REPS") ? atoi(getenv("LAB_REPS")) : 60;
    int sms; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    int shapes[][3] = {{1, 4096, 4096}, {1, 1024, 4096}, {1, 14336, 4096}, {1, 4096, 14336},
                       {4, 4096, 4096}, {16, 14336, 4096}, {16, 4096, 4096}, {3, 1000, 272}};  // M, N, K
    cudaStream_t st; CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    unsigned* sink; CK(cudaMalloc(&sink, 4));
    for (auto& s : shapes) {
        LabShape sh(s[0], s[1], s[2]);
        int M = sh.M, N = sh.N, K = sh.K;
        // The launcher's geometry (ops/scaled_mm.rs: gemv, gemv_k_warps).
        int nt = M > 8 ? 2 : 1, steps = std::max(1, K / (64 * 8 / nt)), slots = 4 * sms;
        auto blocks = [&](int kw) { return (N + 8 * nt * (4 / kw) - 1) / (8 * nt * (4 / kw)); };
        int kw = 1;
        for (int c : {4, 2, 1}) if (c <= steps && blocks(c) <= slots) { kw = c; break; }
        Kern f = nt == 1 ? fp8_gemv_e4m3_e4m3_bf16_1 : fp8_gemv_e4m3_e4m3_bf16_2;
        for (int rowwise = 0; rowwise < 2; ++rowwise) {
            auto launch = [&](const unsigned char* w) {
                f<<<blocks(kw), 128, 0, st>>>(sh.da, K, w, K, sh.dsa, sh.dsb, rowwise, nullptr, sh.dout, M, N, K, kw);
            };
            CK(cudaMemsetAsync(sh.dout, 0xFF, (size_t)M * N * 2, st));
            launch(sh.w(sh.copies - 1));
            CK(cudaGetLastError()); CK(cudaStreamSynchronize(st));
            int bad = sh.bad(rowwise);
            float us = graph_us(st, reps, [&](int i) { launch(sh.w(i)); });
            printf("    %2dx%5dx%5d %-10s kw %d blocks %4d: %7.2f us  (floor %.2f)  %s\n", M, K, N,
                   rowwise ? "rowwise" : "tensorwise", kw, blocks(kw), us, sh.floor_us(), bad ? "FAIL" : "ok");
            if (bad) printf("   %d bad of %d\n", bad, M * N);
        }
        if (M == 1 && N == 4096 && K == 4096) {
            int cfgs[][2] = {{4, 8}, {2, 8}, {8, 8}, {4, 16}, {16, 16}};  // blocks per SM, loads per thread
            for (auto& c : cfgs) {
                int grid = c[0] * sms;
                float us = graph_us(st, reps, [&](int i) {
                    if (c[1] == 8) read_floor<8><<<grid, 128, 0, st>>>(sh.w(i), sh.wb, sink);
                    else read_floor<16><<<grid, 128, 0, st>>>(sh.w(i), sh.wb, sink);
                });
                printf("    read-only floor kernel, 16.8 MB, grid %d, %d loads: %.2f us\n", grid, c[1], us);
            }
        }
    }
    return 0;
}
