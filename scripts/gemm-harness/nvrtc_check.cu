// nvrtc_check.cu -- checks the production path of codac's CUDA GEMM headers:
// the headers concatenated verbatim (coda_common.cuh, coda_epilogue.cuh,
// coda_gemm_sm80.cuh, and for sm_90a also coda_gemm_sm90.cuh), followed by an
// epilogue struct and extern "C" entry points written exactly as codac emits
// them, compiled at run time with NVRTC (sm_80: the three sm80 headers and
// the sm80 entry points; sm_90a: all four headers and both kinds of entry
// points) with only the CUDA include directory.  Reports registers / spills
// from ptxas (fails on any spill), and with --run loads the cubin built for
// the local GPU (cudaLibraryLoadData) and checks its results against a
// float64 CPU reference; the sm90 entry points are launched as the runtime
// will: two CUtensorMaps (cuTensorMapEncodeTiled) by value, GemmArgs,
// Epi::Params, grid min(tiles, SMs), 384 threads.
//
// usage: nvrtc_check <dir with the .cuh files> <CUDA include dir> [--run]
#include <cuda.h>  // CUtensorMap types only (cuTensorMapEncodeTiled via the driver entry point)
#include <cuda_runtime.h>
#include <nvrtc.h>

#include <algorithm>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#define CK(x)                                                                                              \
    do {                                                                                                   \
        cudaError_t e_ = (x);                                                                              \
        if (e_ != cudaSuccess) {                                                                           \
            fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__);       \
            exit(2);                                                                                       \
        }                                                                                                  \
    } while (0)
#define NK(x)                                                                                              \
    do {                                                                                                   \
        nvrtcResult r_ = (x);                                                                              \
        if (r_ != NVRTC_SUCCESS) {                                                                         \
            fprintf(stderr, "NVRTC error %s at %s:%d\n", nvrtcGetErrorString(r_), __FILE__, __LINE__);     \
            exit(2);                                                                                       \
        }                                                                                                  \
    } while (0)

// What codac appends after the headers: one epilogue struct per kernel and
// the extern "C" entry points.
static const char* kEmitted = R"EMIT(
// ---- emitted by codac (example) ----
struct Epi_k0 {
    struct Params {
        __nv_bfloat16* d; long long ldd;          // D = acc + R
        const __nv_bfloat16* r; long long ldr;
        float* ss;                                // [M][num_n_tiles] row sum of D^2
        // D is written through store_tile_staged: ldd a multiple of 8.
    };
    static constexpr int kSmemFloats = 0;
    template <class Frag, class Tile>
    static __device__ void apply(const Params& p, Frag& f, const Tile& t, float* smem) {
        float ss[Frag::RI];
#pragma unroll
        for (int i = 0; i < Frag::RI; ++i) {
            ss[i] = 0.0f;
#pragma unroll
            for (int j = 0; j < Frag::CJ; ++j) {
                const float2 r = harness::load_pair(f, i, j, p.r, p.ldr);
                const float v0 = f.acc[i][j][0] + r.x, v1 = f.acc[i][j][1] + r.y;
                f.acc[i][j][0] = v0;  // transformed in place, stored below
                f.acc[i][j][1] = v1;
                if (f.row_in(i) && f.col_in(j, 0)) ss[i] += v0 * v0;
                if (f.row_in(i) && f.col_in(j, 1)) ss[i] += v1 * v1;
            }
        }
        coda::store_tile_staged(f, t, f.acc, p.d, p.ldd, smem);  // 16-byte stores via smem
        coda::row_reduce<coda::SumOp>(f, ss, smem);
        coda::store_row_partial(f, t, ss, p.ss);
    }
};

extern "C" __global__ void __launch_bounds__(coda::Cfg128x128::kThreads, coda::Cfg128x128::kMinBlocks)
coda_k0_128x128_mk_nk(coda::GemmArgs g, Epi_k0::Params e) {
    coda::gemm_sm80<coda::Cfg128x128, coda::A_MxK, coda::B_NxK, __nv_bfloat16, Epi_k0>(g, e);
}
extern "C" __global__ void __launch_bounds__(coda::Cfg128x256::kThreads, coda::Cfg128x256::kMinBlocks)
coda_k0_128x256_km_kn(coda::GemmArgs g, Epi_k0::Params e) {
    coda::gemm_sm80<coda::Cfg128x256, coda::A_KxM, coda::B_KxN, __nv_bfloat16, Epi_k0>(g, e);
}
extern "C" __global__ void __launch_bounds__(coda::Cfg64x64::kThreads, coda::Cfg64x64::kMinBlocks)
coda_k0_64x64_mk_kn(coda::GemmArgs g, Epi_k0::Params e) {
    coda::gemm_sm80<coda::Cfg64x64, coda::A_MxK, coda::B_KxN, __nv_bfloat16, Epi_k0>(g, e);
}
)EMIT";

// sm_90a only: the same functor under the Hopper mainloop.
static const char* kEmitted90 = R"EMIT(
extern "C" __global__ void __launch_bounds__(coda::Sm90Cfg128x256::kThreads, 1)
coda_k0_sm90_128x256_mk_nk(const __grid_constant__ coda::TmaDesc ta, const __grid_constant__ coda::TmaDesc tb,
                           coda::GemmArgs g, Epi_k0::Params e) {
    coda::gemm_sm90<coda::Sm90Cfg128x256, coda::A_MxK, coda::B_NxK, __nv_bfloat16, Epi_k0>(ta, tb, g, e);
}
extern "C" __global__ void __launch_bounds__(coda::Sm90Cfg128x128pp::kThreads, 1)
coda_k0_sm90_128x128pp_km_kn(const __grid_constant__ coda::TmaDesc ta, const __grid_constant__ coda::TmaDesc tb,
                             coda::GemmArgs g, Epi_k0::Params e) {
    coda::gemm_sm90<coda::Sm90Cfg128x128pp, coda::A_KxM, coda::B_KxN, __nv_bfloat16, Epi_k0>(ta, tb, g, e);
}
extern "C" __global__ void __launch_bounds__(coda::Sm90Cfg256x128::kThreads, 1)
coda_k0_sm90_256x128_mk_kn(const __grid_constant__ coda::TmaDesc ta, const __grid_constant__ coda::TmaDesc tb,
                           coda::GemmArgs g, Epi_k0::Params e) {
    coda::gemm_sm90<coda::Sm90Cfg256x128, coda::A_MxK, coda::B_KxN, __nv_bfloat16, Epi_k0>(ta, tb, g, e);
}
)EMIT";

struct KernelDesc {
    const char* name;
    int bm, bn, threads, smem;
    bool a_kcontig, b_kcontig;
    bool sm90;
};
// Host mirror of coda::gemm_sm90_smem_bytes<Cfg, Epi> for kSmemFloats = 0:
// 1024 + stages * (BM + BN) * 128 + units * scratch + 16 * stages + 16, scratch =
// round_up(max(BM * (BN + 8) * 2, 4 * max(2 * BM, BN * warps_m)), 128).
static int sm90_smem(int bm, int bn, int stages, bool pingpong) {
    const int warps_m = pingpong ? 4 : 8;
    int scratch = std::max(bm * (bn + 8) * 2, 4 * std::max(2 * bm, bn * warps_m));
    scratch = (scratch + 127) / 128 * 128;
    return 1024 + stages * (bm + bn) * 128 + (pingpong ? 2 : 1) * scratch + 16 * stages + 16;
}
// sm80 smem = kStages * (BM + BN) * BK * 2 (the host mirror of gemm_smem_bytes).
static const KernelDesc kKernels[] = {
    {"coda_k0_128x128_mk_nk", 128, 128, 256, 4 * (128 + 128) * 32 * 2, true, true, false},
    {"coda_k0_128x256_km_kn", 128, 256, 256, 3 * (128 + 256) * 64 * 2, false, false, false},
    {"coda_k0_64x64_mk_kn", 64, 64, 128, 3 * (64 + 64) * 32 * 2, true, false, false},
};
static const KernelDesc kKernels90[] = {
    {"coda_k0_sm90_128x256_mk_nk", 128, 256, 384, sm90_smem(128, 256, 3, false), true, true, true},
    {"coda_k0_sm90_128x128pp_km_kn", 128, 128, 384, sm90_smem(128, 128, 4, true), false, false, true},
    {"coda_k0_sm90_256x128_mk_kn", 256, 128, 384, sm90_smem(256, 128, 3, false), true, false, true},
};

typedef CUresult (*EncodeTiledFn)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                  const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                  CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
// The tensor map of one bf16 operand (host contract of coda_gemm_sm90.cuh).
static CUtensorMap make_tmap(void* ptr, long long inner, long long outer, long long ld) {
    static EncodeTiledFn fn = nullptr;
    if (!fn) {
        void* p = nullptr;
        cudaDriverEntryPointQueryResult q;
        CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q));
        if (q != cudaDriverEntryPointSuccess || !p) {
            fprintf(stderr, "cuTensorMapEncodeTiled not found\n");
            exit(2);
        }
        fn = (EncodeTiledFn)p;
    }
    CUtensorMap m;
    const cuuint64_t dims[2] = {(cuuint64_t)inner, (cuuint64_t)outer};
    const cuuint64_t strides[1] = {(cuuint64_t)ld * 2};
    const cuuint32_t box[2] = {64, 64}, estr[2] = {1, 1};
    if (fn(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, ptr, dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
           CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
           CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
        fprintf(stderr, "cuTensorMapEncodeTiled failed\n");
        exit(2);
    }
    return m;
}

// This file's directory (build.sh compiles it by absolute path), where
// harness_loads.cuh lives.
static std::string harness_dir() {
    const std::string file = __FILE__;
    const size_t slash = file.rfind('/');
    return slash == std::string::npos ? "." : file.substr(0, slash);
}

static std::string read_file(const std::string& path) {
    std::ifstream f(path);
    if (!f) {
        fprintf(stderr, "cannot read %s\n", path.c_str());
        exit(2);
    }
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// Compiles the source for `arch`; returns the cubin, prints the log, counts spills.
static std::vector<char> compile(const std::string& src, const std::string& arch, const std::string& inc,
                                 int& spills) {
    nvrtcProgram prog;
    NK(nvrtcCreateProgram(&prog, src.c_str(), "coda_emitted.cu", 0, nullptr, nullptr));
    const std::string a = "--gpu-architecture=" + arch, i = "-I" + inc;
    const char* opts[] = {a.c_str(), i.c_str(), "--std=c++17", "-Xptxas", "-v"};
    nvrtcResult r = nvrtcCompileProgram(prog, 5, opts);
    size_t log_size = 0;
    NK(nvrtcGetProgramLogSize(prog, &log_size));
    std::string log(log_size, '\0');
    NK(nvrtcGetProgramLog(prog, &log[0]));
    printf("---- NVRTC %s: %s\n", arch.c_str(), nvrtcGetErrorString(r));
    // Print the ptxas summary lines only.
    std::istringstream ls(log);
    std::string line;
    spills = 0;
    while (std::getline(ls, line)) {
        if (line.find("Compiling entry") != std::string::npos || line.find("Used") != std::string::npos ||
            line.find("spill") != std::string::npos || line.find("error") != std::string::npos ||
            line.find("warning") != std::string::npos)
            printf("  %s\n", line.c_str());
        size_t p = line.find("bytes spill stores");
        if (p != std::string::npos) {
            size_t q = line.rfind(',', p);
            spills += atoi(line.c_str() + (q == std::string::npos ? 0 : q + 1));
        }
    }
    if (r != NVRTC_SUCCESS) {
        printf("%s\n", log.c_str());
        exit(1);
    }
    size_t n = 0;
    NK(nvrtcGetCUBINSize(prog, &n));
    std::vector<char> cubin(n);
    NK(nvrtcGetCUBIN(prog, cubin.data()));
    NK(nvrtcDestroyProgram(&prog));
    return cubin;
}

static uint16_t f2bf(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static float bf2f(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

struct GemmArgs {  // must match coda::GemmArgs
    const void* a;
    const void* b;
    int m, n, k;
    long long lda, ldb;
};
struct EpiParams {  // must match Epi_k0::Params
    void* d;
    long long ldd;
    const void* r;
    long long ldr;
    float* ss;
};

static bool run_kernel(cudaLibrary_t lib, const KernelDesc& kd) {
    const int M = 517, N = 300, K = 1000;
    uint64_t s = 7;
    auto rnd = [&]() {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        float x = (float)((s >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
        return std::fabs(x) < 1e-3f ? 0.5f : x;
    };
    std::vector<float> A((size_t)M * K), B((size_t)K * N), R((size_t)M * N);
    for (auto& x : A) x = bf2f(f2bf(rnd()));
    for (auto& x : B) x = bf2f(f2bf(rnd()));
    for (auto& x : R) x = bf2f(f2bf(rnd()));
    auto ld8 = [](long long c) { return (c + 7) / 8 * 8 + 8; };
    const long long lda = kd.a_kcontig ? ld8(K) : ld8(M), ldb = kd.b_kcontig ? ld8(K) : ld8(N), ldd = ld8(N);
    const long long arows = kd.a_kcontig ? M : K, brows = kd.b_kcontig ? N : K;
    std::vector<uint16_t> ha((size_t)(arows * lda), 0x7FC0), hb((size_t)(brows * ldb), 0x7FC0),
        hr((size_t)(M * ldd), 0x7FC0);
    for (int m = 0; m < M; ++m)
        for (int k = 0; k < K; ++k)
            ha[kd.a_kcontig ? (size_t)m * lda + k : (size_t)k * lda + m] = f2bf(A[(size_t)m * K + k]);
    for (int k = 0; k < K; ++k)
        for (int n = 0; n < N; ++n)
            hb[kd.b_kcontig ? (size_t)n * ldb + k : (size_t)k * ldb + n] = f2bf(B[(size_t)k * N + n]);
    for (int m = 0; m < M; ++m)
        for (int n = 0; n < N; ++n) hr[(size_t)m * ldd + n] = f2bf(R[(size_t)m * N + n]);
    const int tn = (N + kd.bn - 1) / kd.bn, tm = (M + kd.bm - 1) / kd.bm;
    void *da, *db, *dr, *dd, *dss;
    CK(cudaMalloc(&da, ha.size() * 2));
    CK(cudaMalloc(&db, hb.size() * 2));
    CK(cudaMalloc(&dr, hr.size() * 2));
    CK(cudaMalloc(&dd, (size_t)M * ldd * 2));
    CK(cudaMalloc(&dss, (size_t)M * tn * 4));
    CK(cudaMemcpy(da, ha.data(), ha.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db, hb.data(), hb.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dr, hr.data(), hr.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemset(dd, 0xFF, (size_t)M * ldd * 2));
    CK(cudaMemset(dss, 0xFF, (size_t)M * tn * 4));

    cudaKernel_t k;
    CK(cudaLibraryGetKernel(&k, lib, kd.name));
    CK(cudaFuncSetAttribute((const void*)k, cudaFuncAttributeMaxDynamicSharedMemorySize, kd.smem));
    GemmArgs g = {da, db, M, N, K, lda, ldb};
    EpiParams e = {dd, ldd, dr, ldd, (float*)dss};
    if (kd.sm90) {
        // A_MxK: {K, M}; A_KxM: {M, K}; B_NxK: {K, N}; B_KxN: {N, K}.
        CUtensorMap ta = make_tmap(da, kd.a_kcontig ? K : M, kd.a_kcontig ? M : K, lda);
        CUtensorMap tb = make_tmap(db, kd.b_kcontig ? K : N, kd.b_kcontig ? N : K, ldb);
        int sms = 0;
        CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
        void* args[] = {&ta, &tb, &g, &e};
        CK(cudaLaunchKernel((const void*)k, dim3(std::min(tm * tn, sms)), dim3(kd.threads), args, (size_t)kd.smem,
                            0));
    } else {
        void* args[] = {&g, &e};
        CK(cudaLaunchKernel((const void*)k, dim3(tm * tn), dim3(kd.threads), args, (size_t)kd.smem, 0));
    }
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<uint16_t> hd((size_t)M * ldd);
    std::vector<float> hss((size_t)M * tn);
    CK(cudaMemcpy(hd.data(), dd, hd.size() * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hss.data(), dss, hss.size() * 4, cudaMemcpyDeviceToHost));
    double num = 0, den = 0, snum = 0, sden = 0;
    long long bad = 0;
    std::vector<double> row(N);
    for (int m = 0; m < M; ++m) {
        double ss = 0;
        for (int n = 0; n < N; ++n) {
            double c = R[(size_t)m * N + n];
            for (int kk = 0; kk < K; ++kk) c += (double)A[(size_t)m * K + kk] * B[(size_t)kk * N + n];
            const float o = bf2f(hd[(size_t)m * ldd + n]);
            if (!std::isfinite(o)) ++bad;
            num += (o - c) * (o - c);
            den += c * c;
            ss += c * c;
        }
        for (long long n = N; n < ldd; ++n)
            if (hd[(size_t)m * ldd + n] != 0xFFFF) ++bad;
        float sk = 0;
        for (int t = 0; t < tn; ++t) sk += hss[(size_t)m * tn + t];
        snum += (sk - ss) * (sk - ss);
        sden += ss * ss;
    }
    const double rel = std::sqrt(num / den), srel = std::sqrt(snum / sden);
    const bool ok = bad == 0 && rel < 6e-3 && srel < 1e-4 && std::isfinite(srel);
    printf("  run %-24s %dx%dx%d  D rel=%.2e  ss rel=%.2e  bad=%lld  %s\n", kd.name, M, N, K, rel, srel, bad,
           ok ? "PASS" : "FAIL");
    cudaFree(da);
    cudaFree(db);
    cudaFree(dr);
    cudaFree(dd);
    cudaFree(dss);
    return ok;
}

int main(int argc, char** argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s <coda header dir> <CUDA include dir> [--run]\n", argv[0]);
        return 2;
    }
    const std::string dir = argv[1], inc = argv[2];
    const bool run = argc > 3 && strcmp(argv[3], "--run") == 0;
    // Verbatim concatenation, in include order.
    const std::string loads = read_file(harness_dir() + "/harness_loads.cuh");
    const std::string src = read_file(dir + "/coda_common.cuh") + read_file(dir + "/coda_epilogue.cuh") +
                            read_file(dir + "/coda_gemm_sm80.cuh") + loads + kEmitted;
    const std::string src90 = read_file(dir + "/coda_common.cuh") + read_file(dir + "/coda_epilogue.cuh") +
                              read_file(dir + "/coda_gemm_sm80.cuh") + read_file(dir + "/coda_gemm_sm90.cuh") +
                              loads + kEmitted + kEmitted90;
    int major = 0, minor = 0;
    NK(nvrtcVersion(&major, &minor));
    printf("NVRTC %d.%d, source %zu bytes (sm_90a: %zu)\n", major, minor, src.size(), src90.size());
    int fails = 0, sp = 0;
    compile(src, "sm_80", inc, sp);
    fails += sp != 0;
    std::vector<char> cubin90 = compile(src90, "sm_90a", inc, sp);
    fails += sp != 0;
    if (run) {
        int dev = 0;
        cudaDeviceProp prop;
        CK(cudaGetDeviceProperties(&prop, dev));
        std::vector<char> cubin = cubin90;
        if (!(prop.major == 9 && prop.minor == 0)) {
            const std::string arch = "sm_" + std::to_string(prop.major) + std::to_string(prop.minor);
            cubin = compile(src, arch, inc, sp);
        }
        cudaLibrary_t lib;
        CK(cudaLibraryLoadData(&lib, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
        for (const KernelDesc& kd : kKernels) fails += !run_kernel(lib, kd);
        if (prop.major == 9 && prop.minor == 0)
            for (const KernelDesc& kd : kKernels90) fails += !run_kernel(lib, kd);
        CK(cudaLibraryUnload(lib));
    }
    printf("nvrtc_check: %s\n", fails ? "FAILED" : "OK");
    return fails ? 1 : 0;
}
