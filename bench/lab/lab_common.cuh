// Shared by the nvcc kernel labs (bench/lab/README.md): error check, the e4m3 decoder of the
// host references, a seeded generator, the fp8 suite's timing method, a decode shape's
// operands with their host check (LabShape), and the read-only floor kernel.
#pragma once
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <algorithm>
#include <cmath>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)

static float e4m3h(unsigned char b) {
    int e = (b >> 3) & 15, m = b & 7;
    float v = e ? ldexpf(1.f + m / 8.f, e - 7) : ldexpf(m / 8.f, -6);
    return (b & 128) ? -v : v;
}
static unsigned long long rng = 88172645463325252ull;
static unsigned nxt() { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (unsigned)(rng >> 11); }
static float bf2fh(unsigned short v) { unsigned u = (unsigned)v << 16; float f; memcpy(&f, &u, 4); return f; }

static float median(std::vector<float> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }

// Median µs per call of `launch(i)` for i < 20 captured in one graph, over `reps` replays
// (the first 10 are warm-up).
template <typename F> static float graph_us(cudaStream_t st, int reps, F launch) {
    cudaGraph_t g; cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < 20; ++i) launch(i);
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    std::vector<float> t;
    for (int r = 0; r < reps; ++r) {
        CK(cudaEventRecord(e0, st)); CK(cudaGraphLaunch(ge, st)); CK(cudaEventRecord(e1, st)); CK(cudaEventSynchronize(e1));
        float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); if (r >= 10) t.push_back(ms * 1000 / 20);
    }
    cudaEventDestroy(e0); cudaEventDestroy(e1); cudaGraphExecDestroy(ge); cudaGraphDestroy(g);
    return median(t);
}

// How many of the M×N bf16 outputs at `dout` miss the f32 host product (a · wᵀ) · scales by
// more than the decode kernels' tolerance; fa / fw hold a (M×K) and w (N×K) decoded, hsa /
// hsb the scales (row-wise: per row of a / of w; else element 0 of each).
static int lab_bad(const void* dout, const std::vector<float>& fa, const std::vector<float>& fw,
                   const std::vector<float>& hsa, const std::vector<float>& hsb, int M, int N, int K, int rowwise) {
    std::vector<unsigned short> got((size_t)M * N);
    CK(cudaMemcpy(got.data(), dout, got.size() * 2, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int m = 0; m < M; ++m)
        for (int n = 0; n < N; ++n) {
            float acc = 0, mag = 0;
            const float *x = &fa[(size_t)m * K], *y = &fw[(size_t)n * K];
            for (int k = 0; k < K; ++k) { float p = x[k] * y[k]; acc += p; mag += fabsf(p); }
            double sc = rowwise ? (double)hsa[m] * hsb[n] : (double)hsa[0] * hsb[0];
            double ref = acc * sc, g = bf2fh(got[(size_t)m * N + n]);
            if (!(fabs(g - ref) <= 1e-5 * mag * sc + 8e-3 * fabs(ref))) ++bad;
        }
    return bad;
}

// One decode shape's operands on the device: a (M×K) and `copies` weight copies (N×K each,
// rotated through 128 MiB so that every call streams from DRAM; the last is the one
// checked), random e4m3 without NaN, scales in [0.5, 1.5), a bf16 output; and the host
// values `bad` checks against.
struct LabShape {
    int M, N, K, copies;
    long wb;
    unsigned char *da, *dw;
    kbf* dout;
    float *dsa, *dsb;
    std::vector<float> fa, fw, hsa, hsb;

    LabShape(int m, int n, int k) : M(m), N(n), K(k), wb((long)n * k) {
        copies = (int)std::max(1L, ((128L << 20) + wb - 1) / wb);
        float lut[256];
        for (int b = 0; b < 256; ++b) lut[b] = e4m3h(b);
        std::vector<unsigned char> ha((size_t)M * K), hw(wb);
        for (auto& b : ha) b = nxt() & 0xBF;  // bit 6 clear: no NaN
        CK(cudaMalloc(&da, ha.size())); CK(cudaMalloc(&dw, wb * copies)); CK(cudaMalloc(&dout, (size_t)M * N * 2));
        CK(cudaMalloc(&dsa, M * 4)); CK(cudaMalloc(&dsb, N * 4));
        CK(cudaMemcpy(da, ha.data(), ha.size(), cudaMemcpyHostToDevice));
        for (int c = 0; c < copies; ++c) {  // hw keeps the last copy, the one checked
            for (auto& b : hw) b = nxt() & 0xBF;
            CK(cudaMemcpy(dw + c * wb, hw.data(), wb, cudaMemcpyHostToDevice));
        }
        hsa.resize(M), hsb.resize(N);
        for (auto& v : hsa) v = 0.5f + (nxt() % 1000) / 1000.f;
        for (auto& v : hsb) v = 0.5f + (nxt() % 1000) / 1000.f;
        CK(cudaMemcpy(dsa, hsa.data(), M * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dsb, hsb.data(), N * 4, cudaMemcpyHostToDevice));
        fa.resize(ha.size()), fw.resize(hw.size());
        for (size_t i = 0; i < ha.size(); ++i) fa[i] = lut[ha[i]];
        for (size_t i = 0; i < hw.size(); ++i) fw[i] = lut[hw[i]];
    }
    ~LabShape() { cudaFree(da); cudaFree(dw); cudaFree(dout); cudaFree(dsa); cudaFree(dsb); }
    // Weight copy i (mod copies); the checked one is `w(copies - 1)`.
    const unsigned char* w(int i) const { return dw + (long)(i % copies) * wb; }
    // Outputs that miss the host product after a launch with the last copy.
    int bad(int rowwise) const { return lab_bad(dout, fa, fw, hsa, hsb, M, N, K, rowwise); }
    double floor_us() const { return (wb + (double)M * K + M * N * 2) / 4.13e6; }
};

// Reads `bytes` (16-byte streaming loads, L per thread in flight); PDL: lets the next
// kernel start at once and, if WAIT, waits for the previous one at the end (as a kernel
// that writes its output must).
template <int L, bool PDL = false, bool WAIT = false>
__global__ void read_floor(const unsigned char* w, long bytes, unsigned* sink) {
    if (PDL) kiln_let_next_kernel_start();
    unsigned x = 0;
    long stride = (long)gridDim.x * blockDim.x * 16 * L;
    for (long o = ((long)blockIdx.x * blockDim.x + threadIdx.x) * 16; o < bytes; o += stride) {
        u32x4 v[L];
#pragma unroll
        for (int u = 0; u < L; ++u) { long p = o + (long)u * gridDim.x * blockDim.x * 16; v[u] = p < bytes ? ld_stream16(w + p) : u32x4{0,0,0,0}; }
#pragma unroll
        for (int u = 0; u < L; ++u) x ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    if (PDL && WAIT) kiln_wait_previous_kernel();
    if (x == 0x12345678) sink[0] = x;
}

