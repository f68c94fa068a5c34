// harness.cu -- standalone correctness and speed test of codac's hand-written
// CUDA GEMM template (crates/coda-cuda/cuda/*.cuh), compiled with nvcc.
//
// The epilogue structs below are written by hand the way codac emits them:
//   Epi_store<T>     D = acc, stored as T (bf16 or f16)
//   Epi_residual     D = acc + R (bf16), H = D * gamma[col] (bf16), and row
//                    sum-of-squares partials of D ([M][num_n_tiles] fp32)
//   Epi_swiglu       out[m, c] = silu(acc[m, 2c]) * acc[m, 2c+1] (half-width
//                    bf16) and column-sum partials of out ([N/2][num_m_tiles])
//   Epi_consumer     finishes Epi_residual's row partials (rs = rsqrt(ss/N +
//                    eps)), Y += acc * rs (f32 read-modify-write), row
//                    log-sum-exp partials and column-max partials of acc * rs
// For every operand layout (A M x K or K x M, B K x N or N x K) and several
// tile configurations it runs ragged shapes against a float64 CPU reference
// (inputs never zero, operand padding filled with NaN so any read outside
// M/N/K poisons the result, outputs NaN-poisoned so unwritten elements and
// stray writes are caught), then a 4096^3 shape checked on a random sample of
// elements and timed (10 warm-ups, median of 50 event-timed launches) next to
// cuBLAS (cublasGemmEx, bf16 in/out, fp32 compute), loaded with dlopen so no
// cuBLAS headers or link-time library are needed.
//
// With --sm90 it runs the Hopper mainloop (coda_gemm_sm90.cuh) instead: the
// same epilogues on ragged shapes for every sm90 configuration (tensor maps
// built with cuTensorMapEncodeTiled through the runtime's driver entry point),
// then sampled checks and timings against cuBLAS at 4096^3, 8192x4096x4096,
// 8192x28672x4096 and 8192x4096x14336 (median of 100 launches after 10
// warm-ups, rotating over 3 copies of the inputs).  Build with -DCODA_NO_SM90
// for targets other than sm_90a.
//
// Exit status: 0 when every check passed, 1 otherwise.
#include <cuda.h>  // CUtensorMap and its enums only (no libcuda link: driver entry point)
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "coda_common.cuh"
#include "coda_epilogue.cuh"
#include "coda_gemm_sm80.cuh"
#ifndef CODA_NO_SM90
#include "coda_gemm_sm90.cuh"
#endif

#define CK(x)                                                                                       \
    do {                                                                                            \
        cudaError_t err_ = (x);                                                                     \
        if (err_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorName(err_), __FILE__, __LINE__, \
                    cudaGetErrorString(err_));                                                      \
            exit(2);                                                                                \
        }                                                                                           \
    } while (0)

using coda::bf16;
using coda::f16;

// ===========================================================================
// Epilogues, written as codac would emit them
// ===========================================================================

#include "harness_loads.cuh"

template <class OutT>
struct Epi_store {
    struct Params {
        OutT* d;
        long long ldd;
    };
    static constexpr int kSmemFloats = 0;
    template <class Frag, class Tile>
    static __device__ void apply(const Params& p, Frag& f, const Tile&, float*) {
#pragma unroll
        for (int i = 0; i < Frag::RI; ++i)
#pragma unroll
            for (int j = 0; j < Frag::CJ; ++j) coda::store_pair(f, i, j, p.d, p.ldd, f.acc[i][j][0], f.acc[i][j][1]);
    }
};

// D = acc through coda::store_tile_staged (16-byte coalesced stores).
template <class OutT>
struct Epi_store_staged {
    struct Params {
        OutT* d;
        long long ldd;
    };
    static constexpr int kSmemFloats = 0;
    template <class Frag, class Tile>
    static __device__ void apply(const Params& p, Frag& f, const Tile& t, float* smem) {
        coda::store_tile_staged(f, t, f.acc, p.d, p.ldd, smem);
    }
};

struct Epi_residual {
    struct Params {
        bf16* d;
        long long ldd;
        const bf16* res;
        long long ldr;
        const float* gamma;
        bf16* h;
        long long ldh;
        float* ss_partial;  // [M][num_n_tiles]
    };
    static constexpr int kSmemFloats = 0;
    template <class Frag, class Tile>
    static __device__ void apply(const Params& p, Frag& f, const Tile& t, float* smem) {
        // Per-column vectors are loaded at their use, not hoisted into an
        // array: an array live across the whole loop costs registers that a
        // 128-register (2 CTAs/SM) kernel does not have.
        float ss[Frag::RI];
#pragma unroll
        for (int i = 0; i < Frag::RI; ++i) {
            ss[i] = 0.0f;
#pragma unroll
            for (int j = 0; j < Frag::CJ; ++j) {
                const float2 r = harness::load_pair(f, i, j, p.res, p.ldr);
                const float d0 = f.acc[i][j][0] + r.x, d1 = f.acc[i][j][1] + r.y;
                coda::store_pair(f, i, j, p.d, p.ldd, d0, d1);
                const float2 gm = harness::load_col_pair(f, j, p.gamma);
                coda::store_pair(f, i, j, p.h, p.ldh, d0 * gm.x, d1 * gm.y);
                if (f.col_in(j, 0)) ss[i] += d0 * d0;
                if (f.col_in(j, 1)) ss[i] += d1 * d1;
            }
        }
        coda::row_reduce<coda::SumOp>(f, ss, smem);
        coda::store_row_partial(f, t, ss, p.ss_partial);
    }
};

struct Epi_swiglu {
    struct Params {
        bf16* out;  // M x (N/2)
        long long ldo;
        int n_out;
        float* cs_partial;  // [N/2][num_m_tiles]
    };
    static constexpr int kSmemFloats = 0;
    template <class Frag, class Tile>
    static __device__ void apply(const Params& p, Frag& f, const Tile& t, float* smem) {
        float cs[Frag::CJ][2];
#pragma unroll
        for (int j = 0; j < Frag::CJ; ++j) cs[j][0] = cs[j][1] = 0.0f;
#pragma unroll
        for (int i = 0; i < Frag::RI; ++i) {
#pragma unroll
            for (int j = 0; j < Frag::CJ; ++j) {
                const float y = coda::silu(f.acc[i][j][0]) * f.acc[i][j][1];
                coda::store_at(p.out, p.ldo, f.row(i), f.col(j) >> 1, f.m, p.n_out, y);
                if (f.row_in(i) && f.col_in(j, 1)) cs[j][0] += y;
            }
        }
        coda::col_reduce<coda::SumOp>(f, cs, smem);
        coda::store_col_partial_half(f, t, cs, p.cs_partial);
    }
};

struct Epi_consumer {
    struct Params {
        float* y;  // f32, Y += acc * rs
        long long ldy;
        const float* ss_partial;  // [M][ss_tiles] from Epi_residual
        int ss_tiles;
        float inv_n;
        float eps;
        float* lse_max;  // [M][num_n_tiles]
        float* lse_sum;  // [M][num_n_tiles]
        float* col_max;  // [N][num_m_tiles]
    };
    static constexpr int kSmemFloats = 0;
    template <class Frag, class Tile>
    static __device__ void apply(const Params& p, Frag& f, const Tile& t, float* smem) {
        float rs[Frag::RI];
        coda::finish_row_partials(f, p.ss_partial, p.ss_tiles, rs);
#pragma unroll
        for (int i = 0; i < Frag::RI; ++i) rs[i] = coda::rsqrt_fast(rs[i] * p.inv_n + p.eps);
        float mx[Frag::RI], se[Frag::RI], cm[Frag::CJ][2];
#pragma unroll
        for (int j = 0; j < Frag::CJ; ++j) cm[j][0] = cm[j][1] = coda::neg_inf();
#pragma unroll
        for (int i = 0; i < Frag::RI; ++i) {
            mx[i] = coda::neg_inf();
            se[i] = 0.0f;
#pragma unroll
            for (int j = 0; j < Frag::CJ; ++j) {
                const float z0 = f.acc[i][j][0] * rs[i], z1 = f.acc[i][j][1] * rs[i];
                coda::accum_pair(f, i, j, p.y, p.ldy, z0, z1);
                if (f.row_in(i)) {
                    if (f.col_in(j, 0)) coda::lse_add(mx[i], se[i], z0);
                    if (f.col_in(j, 1)) coda::lse_add(mx[i], se[i], z1);
                    cm[j][0] = fmaxf(cm[j][0], z0);
                    cm[j][1] = fmaxf(cm[j][1], z1);
                }
            }
        }
        coda::row_reduce_lse(f, mx, se, smem);
        coda::store_row_partial(f, t, mx, p.lse_max);
        coda::store_row_partial(f, t, se, p.lse_sum);
        coda::col_reduce<coda::MaxOp>(f, cm, smem);
        coda::store_col_partial(f, t, cm, p.col_max);
    }
};

// An entry point written exactly in the emitted convention (extern "C",
// non-template); the tests below use the equivalent template wrapper.
extern "C" __global__ void __launch_bounds__(coda::Cfg128x128::kThreads, coda::Cfg128x128::kMinBlocks)
    coda_gemm_example_bf16_tn(coda::GemmArgs g, Epi_store<bf16>::Params e) {
    coda::gemm_sm80<coda::Cfg128x128, coda::A_MxK, coda::B_NxK, bf16, Epi_store<bf16> >(g, e);
}

template <class Cfg, class LA, class LB, class Elem, class Epi>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    gemm_kernel(coda::GemmArgs g, typename Epi::Params e) {
    coda::gemm_sm80<Cfg, LA, LB, Elem, Epi>(g, e);
}

// Tuning variants of the predefined configurations (ragged-tested on two
// layouts, timed at 4096^3).
typedef coda::GemmConfig<128, 128, 64, 2, 2, 3, 2, true> Cfg128x128w4k64;  // 4 warps, BK 64, 96 KiB
typedef coda::GemmConfig<128, 256, 64, 2, 4, 4, 1, true> Cfg128x256s4;     // 4 stages, 192 KiB
typedef coda::GemmConfig<256, 128, 64, 4, 2, 4, 1, true> Cfg256x128s4;     // 4 stages, 192 KiB
typedef coda::GemmConfig<256, 128, 64, 4, 2, 3, 1, true, 16> Cfg256x128g16;  // raster group 16

template <class Cfg>
static int tiles_m(int m) { return (m + Cfg::BM - 1) / Cfg::BM; }
template <class Cfg>
static int tiles_n(int n) { return (n + Cfg::BN - 1) / Cfg::BN; }

// Sm90Config (has kIsSm90) or GemmConfig.
template <class C, class = void> struct IsSm90 : std::false_type {};
template <class C> struct IsSm90<C, std::void_t<decltype(C::kIsSm90)> > : std::true_type {};

#ifndef CODA_NO_SM90
template <class Cfg, class LA, class LB, class Elem, class Epi>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    gemm90_kernel(const __grid_constant__ coda::TmaDesc ta, const __grid_constant__ coda::TmaDesc tb,
                  coda::GemmArgs g, typename Epi::Params e) {
    coda::gemm_sm90<Cfg, LA, LB, Elem, Epi>(ta, tb, g, e);
}

// cuTensorMapEncodeTiled through the runtime's driver entry point (so the
// harness needs no -lcuda).
typedef CUresult (*EncodeTiledFn)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                  const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                  CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
static EncodeTiledFn encode_tiled() {
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
    return fn;
}
// The host contract of coda_gemm_sm90.cuh: 2D map {inner, outer}, row stride
// ld * 2 bytes, box 64 x 64, 128-byte swizzle, zero fill out of bounds.
template <class Elem>
static CUtensorMap make_tmap(const void* ptr, long long inner, long long outer, long long ld) {
    CUtensorMap m;
    const cuuint64_t dims[2] = {(cuuint64_t)std::max(inner, 1LL), (cuuint64_t)std::max(outer, 1LL)};
    const cuuint64_t strides[1] = {(cuuint64_t)ld * 2};
    const cuuint32_t box[2] = {64, 64};
    const cuuint32_t estr[2] = {1, 1};
    const CUtensorMapDataType dt =
        coda::is_same<Elem, coda::bf16>::value ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    CUresult r = encode_tiled()(&m, dt, 2, const_cast<void*>(ptr), dims, strides, box, estr,
                                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "cuTensorMapEncodeTiled failed: %d (inner %lld outer %lld ld %lld)\n", (int)r, inner, outer,
                ld);
        exit(2);
    }
    return m;
}
static int g_num_sms = 132;
static int g_grid_override = 0;  // > 0: persistent grid size for the sm90 kernels (tests)
template <class Cfg, class LA, class LB, class Elem, class Epi>
static void launch90(const coda::GemmArgs& g, const typename Epi::Params& e) {
    static_assert(sizeof(CUtensorMap) == sizeof(coda::TmaDesc) && alignof(CUtensorMap) == alignof(coda::TmaDesc),
                  "TmaDesc must mirror CUtensorMap");
    void (*k)(coda::TmaDesc, coda::TmaDesc, coda::GemmArgs, typename Epi::Params) =
        gemm90_kernel<Cfg, LA, LB, Elem, Epi>;
    const int smem = coda::gemm_sm90_smem_bytes<Cfg, Epi>();
    static bool attr_done = false;
    if (!attr_done) {
        CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        attr_done = true;
    }
    const CUtensorMap ta = make_tmap<Elem>(g.a, LA::kKContiguous ? g.k : g.m, LA::kKContiguous ? g.m : g.k, g.lda);
    const CUtensorMap tb = make_tmap<Elem>(g.b, LB::kKContiguous ? g.k : g.n, LB::kKContiguous ? g.n : g.k, g.ldb);
    coda::TmaDesc da, db;
    memcpy(&da, &ta, sizeof da);
    memcpy(&db, &tb, sizeof db);
    const int tiles = tiles_m<Cfg>(g.m) * tiles_n<Cfg>(g.n);
    const int grid = g_grid_override > 0 ? g_grid_override : std::min(tiles, g_num_sms);
    k<<<grid, Cfg::kThreads, smem>>>(da, db, g, e);
    CK(cudaGetLastError());
}
#endif

// Epilogue scratch available to store_tile_staged.
template <class Cfg, class Epi>
static int epi_scratch_bytes() {
#ifndef CODA_NO_SM90
    if constexpr (IsSm90<Cfg>::value) return coda::sm90_scratch_bytes<Cfg, Epi>();
    else
#endif
        return coda::gemm_smem_bytes<Cfg, Epi>();
}

// Host launch of a gemm_sm80 kernel: what codac's runtime does (grid, block,
// dynamic smem, and the opt-in above 48 KiB).
template <class Cfg, class LA, class LB, class Elem, class Epi>
static void launch80(const coda::GemmArgs& g, const typename Epi::Params& e) {
    void (*k)(coda::GemmArgs, typename Epi::Params) = gemm_kernel<Cfg, LA, LB, Elem, Epi>;
    const int smem = coda::gemm_smem_bytes<Cfg, Epi>();
    static bool attr_done = false;
    if (!attr_done) {
        CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        attr_done = true;
    }
    const int grid = tiles_m<Cfg>(g.m) * tiles_n<Cfg>(g.n);
    k<<<grid, Cfg::kThreads, smem>>>(g, e);
    CK(cudaGetLastError());
}

// Host launch of any configuration.
template <class Cfg, class LA, class LB, class Elem, class Epi>
static void launch(const coda::GemmArgs& g, const typename Epi::Params& e) {
#ifndef CODA_NO_SM90
    if constexpr (IsSm90<Cfg>::value) {
        launch90<Cfg, LA, LB, Elem, Epi>(g, e);
        return;
    } else
#endif
        launch80<Cfg, LA, LB, Elem, Epi>(g, e);
}

// ===========================================================================
// Host utilities
// ===========================================================================

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static double urand() {  // xorshift64*, uniform in [0, 1)
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return (double)((g_rng * 2685821657736338717ull) >> 11) * (1.0 / 9007199254740992.0);
}
// Uniform in [-1, 1], never (close to) zero.
static float nzrand() {
    double x = 2.0 * urand() - 1.0;
    if (std::fabs(x) < 1e-3) x = 0.5;
    return (float)x;
}

static uint16_t f2bf_bits(float f) {  // round to nearest even (inputs are finite)
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static float bf_bits2f(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint16_t f2h_bits(float f) {
    __half_raw r = __float2half_rn(f);
    return r.x;
}
static float h_bits2f(uint16_t b) {
    __half_raw r;
    r.x = b;
    return __half2float(__half(r));
}
template <class T> struct ElemBits;
template <> struct ElemBits<bf16> {
    static uint16_t enc(float f) { return f2bf_bits(f); }
    static float dec(uint16_t b) { return bf_bits2f(b); }
    static constexpr uint16_t kNaN = 0x7FC0;
    static const char* name() { return "bf16"; }
};
template <> struct ElemBits<f16> {
    static uint16_t enc(float f) { return f2h_bits(f); }
    static float dec(uint16_t b) { return h_bits2f(b); }
    static constexpr uint16_t kNaN = 0x7E00;
    static const char* name() { return "f16"; }
};

static long long round8(long long x) { return (x + 7) / 8 * 8; }

struct DevBuf {
    void* p = nullptr;
    size_t bytes = 0;
    DevBuf() {}
    explicit DevBuf(size_t b) : bytes(b) { CK(cudaMalloc(&p, b)); }
    DevBuf(const DevBuf&) = delete;
    DevBuf& operator=(const DevBuf&) = delete;
    DevBuf(DevBuf&& o) : p(o.p), bytes(o.bytes) { o.p = nullptr; }
    DevBuf& operator=(DevBuf&& o) {
        std::swap(p, o.p);
        std::swap(bytes, o.bytes);
        return *this;
    }
    ~DevBuf() {
        if (p) cudaFree(p);
    }
    void poison() { CK(cudaMemset(p, 0xFF, bytes)); }  // 0xFFFF.. is NaN in bf16/f16/f32
    template <class T> T* as() const { return static_cast<T*>(p); }
};
template <class T>
static std::vector<T> download(const DevBuf& b) {
    std::vector<T> h(b.bytes / sizeof(T));
    CK(cudaMemcpy(h.data(), b.p, b.bytes, cudaMemcpyDeviceToHost));
    return h;
}
template <class T>
static void upload(DevBuf& b, const std::vector<T>& h) {
    CK(cudaMemcpy(b.p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
}

// A GEMM problem: logical A (M x K) and B (K x N) of values exactly
// representable in the element type, the float64 reference C = A B, and the
// four device storages.  Padding between a row's end and the leading
// dimension is NaN.
struct Problem {
    int M, N, K;
    bool pad;  // pad leading dimensions (ragged tests) or not (large test)
    std::vector<float> A, B;
    std::vector<double> C;  // empty for the large problem (sampled instead)
    DevBuf a_mk, a_km, b_kn, b_nk;
    long long lda_mk, lda_km, ldb_kn, ldb_nk;

    long long ld_of(long long cols) const { return pad ? round8(cols) + 8 : round8(cols); }
    template <class LA> const void* a() const { return LA::kKContiguous ? a_mk.p : a_km.p; }
    template <class LA> long long lda() const { return LA::kKContiguous ? lda_mk : lda_km; }
    template <class LB> const void* b() const { return LB::kKContiguous ? b_nk.p : b_kn.p; }
    template <class LB> long long ldb() const { return LB::kKContiguous ? ldb_nk : ldb_kn; }
    template <class LA, class LB> coda::GemmArgs args() const {
        coda::GemmArgs g;
        g.a = a<LA>();
        g.b = b<LB>();
        g.m = M;
        g.n = N;
        g.k = K;
        g.lda = lda<LA>();
        g.ldb = ldb<LB>();
        return g;
    }
};

// Store a logical rows x cols matrix (value(r, c)) row-major with leading
// dimension ld, NaN in the padding.
template <class Elem, class F>
static DevBuf store_matrix(long long rows, long long cols, long long ld, F value) {
    std::vector<uint16_t> h((size_t)(rows * ld), ElemBits<Elem>::kNaN);
    for (long long r = 0; r < rows; ++r)
        for (long long c = 0; c < cols; ++c) h[(size_t)(r * ld + c)] = ElemBits<Elem>::enc(value(r, c));
    DevBuf d(h.size() * 2);
    upload(d, h);
    return d;
}

template <class Elem>
static void make_problem(Problem& P, int M, int N, int K, bool pad, bool reference) {
    P.M = M;
    P.N = N;
    P.K = K;
    P.pad = pad;
    P.A.resize((size_t)M * K);
    P.B.resize((size_t)K * N);
    for (auto& x : P.A) x = ElemBits<Elem>::dec(ElemBits<Elem>::enc(nzrand()));
    for (auto& x : P.B) x = ElemBits<Elem>::dec(ElemBits<Elem>::enc(nzrand()));
    P.lda_mk = P.ld_of(K);
    P.lda_km = P.ld_of(M);
    P.ldb_kn = P.ld_of(N);
    P.ldb_nk = P.ld_of(K);
    const float* A = P.A.data();
    const float* B = P.B.data();
    P.a_mk = store_matrix<Elem>(M, K, P.lda_mk, [&](long long m, long long k) { return A[m * K + k]; });
    P.a_km = store_matrix<Elem>(K, M, P.lda_km, [&](long long k, long long m) { return A[m * K + k]; });
    P.b_kn = store_matrix<Elem>(K, N, P.ldb_kn, [&](long long k, long long n) { return B[k * N + n]; });
    P.b_nk = store_matrix<Elem>(N, K, P.ldb_nk, [&](long long n, long long k) { return B[k * N + n]; });
    P.C.clear();
    if (!reference) return;
    P.C.assign((size_t)M * N, 0.0);
    // Multithreaded float64 reference, rows split across threads.
    const int nt = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
    std::vector<std::thread> th;
    for (int w = 0; w < nt; ++w) {
        th.emplace_back([&, w]() {
            std::vector<double> row(N);
            for (int m = w; m < M; m += nt) {
                std::fill(row.begin(), row.end(), 0.0);
                for (int k = 0; k < K; ++k) {
                    const double a = A[(size_t)m * K + k];
                    const float* b = B + (size_t)k * N;
                    for (int n = 0; n < N; ++n) row[n] += a * b[n];
                }
                std::copy(row.begin(), row.end(), P.C.begin() + (size_t)m * N);
            }
        });
    }
    for (auto& t : th) t.join();
}

// Error statistics of out vs ref.
struct Err {
    double num = 0, den = 0, max_err = 0, max_ref = 0;
    long long bad = 0;  // NaN / unwritten / wrongly written
    void add(double out, double ref) {
        if (!std::isfinite(out)) {
            ++bad;
            return;
        }
        const double e = out - ref;
        num += e * e;
        den += ref * ref;
        max_err = std::max(max_err, std::fabs(e));
        max_ref = std::max(max_ref, std::fabs(ref));
    }
    double rel() const { return den > 0 ? std::sqrt(num / den) : std::sqrt(num); }
    double max_rel() const { return max_ref > 0 ? max_err / max_ref : max_err; }
    bool ok(double tol_rel, double tol_max) const { return bad == 0 && rel() <= tol_rel && max_rel() <= tol_max; }
};

// Checks a row-major half-precision output: rows x cols against ref(r, c),
// everything else in its rows_alloc x ld buffer still NaN-poisoned (0xFFFF).
template <class F>
static Err check_half_output(const DevBuf& d, bool is_bf16, long long rows, long long cols, long long ld,
                             F ref) {
    std::vector<uint16_t> h = download<uint16_t>(d);
    Err e;
    const long long rows_alloc = (long long)h.size() / ld;
    for (long long r = 0; r < rows_alloc; ++r)
        for (long long c = 0; c < ld; ++c) {
            const uint16_t b = h[(size_t)(r * ld + c)];
            if (r < rows && c < cols) e.add(is_bf16 ? bf_bits2f(b) : h_bits2f(b), ref(r, c));
            else if (b != 0xFFFF) ++e.bad;  // stray write outside the output
        }
    return e;
}
template <class F>
static Err check_f32_output(const DevBuf& d, long long rows, long long cols, long long ld, F ref) {
    std::vector<uint32_t> h = download<uint32_t>(d);
    Err e;
    const long long rows_alloc = (long long)h.size() / ld;
    for (long long r = 0; r < rows_alloc; ++r)
        for (long long c = 0; c < ld; ++c) {
            const uint32_t b = h[(size_t)(r * ld + c)];
            if (r < rows && c < cols) {
                float v;
                memcpy(&v, &b, 4);
                e.add(v, ref(r, c));
            } else if (b != 0xFFFFFFFFu) {
                ++e.bad;
            }
        }
    return e;
}

// ===========================================================================
// Test bookkeeping
// ===========================================================================
struct Result {
    std::string name;
    bool ok;
    std::string detail;
};
static std::vector<Result> g_results;
static void report(const std::string& name, bool ok, const std::string& detail) {
    g_results.push_back({name, ok, detail});
    printf("%-58s %s  %s\n", name.c_str(), ok ? "PASS" : "FAIL", detail.c_str());
    fflush(stdout);
}
static std::string fmt_err(const char* what, const Err& e) {
    char buf[160];
    snprintf(buf, sizeof buf, "%s rel=%.2e maxrel=%.2e bad=%lld", what, e.rel(), e.max_rel(), e.bad);
    return buf;
}

template <class LA> static const char* a_name() { return LA::kKContiguous ? "A_MxK" : "A_KxM"; }
template <class LB> static const char* b_name() { return LB::kKContiguous ? "B_NxK" : "B_KxN"; }
template <class Cfg> static std::string cfg_name() {
    char buf[64];
#ifndef CODA_NO_SM90
    if constexpr (IsSm90<Cfg>::value) {
        snprintf(buf, sizeof buf, "sm90 %dx%dx%d/%s/%ds/g%d", Cfg::BM, Cfg::BN, Cfg::BK,
                 Cfg::kPingPong ? "pp" : "coop", Cfg::kStages, Cfg::kGroupM);
        return buf;
    } else
#endif
    snprintf(buf, sizeof buf, "%dx%dx%d/%dx%dw/%ds/%s%s", Cfg::BM, Cfg::BN, Cfg::BK, Cfg::kWarpsM, Cfg::kWarpsN,
             Cfg::kStages, Cfg::kFragDoubleBuffer ? "db" : "sb", Cfg::kGroupM != 8 ? "/g16" : "");
    return buf;
}
template <class Cfg, class LA, class LB>
static std::string case_name(const char* epi, const Problem& P, const char* elem) {
    char buf[200];
    snprintf(buf, sizeof buf, "%s %s %s*%s %dx%dx%d %s", epi, cfg_name<Cfg>().c_str(), a_name<LA>(),
             b_name<LB>(), P.M, P.N, P.K, elem);
    return buf;
}

template <class F> static void for_each_layout(F&& f) {
    f(coda::A_MxK(), coda::B_KxN());
    f(coda::A_MxK(), coda::B_NxK());
    f(coda::A_KxM(), coda::B_KxN());
    f(coda::A_KxM(), coda::B_NxK());
}

// Tolerances: outputs rounded to bf16 carry up to 2^-9 relative rounding.
static const double kTolRelHalf = 6e-3, kTolMaxHalf = 1.2e-2;
static const double kTolRelF32 = 1e-4, kTolMaxF32 = 1e-3;

// ===========================================================================
// Ragged-shape tests
// ===========================================================================

template <class Elem> static bool is_same_bf16() { return coda::is_same<Elem, bf16>::value; }

// (a) D = acc, output in the operand type.
template <class Cfg, class Elem, class LA, class LB>
static void test_store(const Problem& P) {
    const long long ldd = P.ld_of(P.N);
    DevBuf d((size_t)(P.M + 2) * ldd * 2);
    d.poison();
    typename Epi_store<Elem>::Params e;
    e.d = d.as<Elem>();
    e.ldd = ldd;
    launch<Cfg, LA, LB, Elem, Epi_store<Elem> >(P.args<LA, LB>(), e);
    CK(cudaDeviceSynchronize());
    const double* C = P.C.data();
    const int N = P.N;
    Err err = check_half_output(d, is_same_bf16<Elem>(), P.M, P.N, ldd,
                                [&](long long r, long long c) { return C[r * N + c]; });
    report(case_name<Cfg, LA, LB>("store", P, ElemBits<Elem>::name()), err.ok(kTolRelHalf, kTolMaxHalf),
           fmt_err("D", err));
}

// D = acc through the smem-staged store, output type OutT (bf16 operands).
template <class Cfg, class OutT, class LA, class LB>
static void test_store_staged(const Problem& P) {
    const long long ldd = P.ld_of(P.N);
    DevBuf d((size_t)(P.M + 2) * ldd * sizeof(OutT));
    d.poison();
    typename Epi_store_staged<OutT>::Params e;
    e.d = d.as<OutT>();
    e.ldd = ldd;
    launch<Cfg, LA, LB, bf16, Epi_store_staged<OutT> >(P.args<LA, LB>(), e);
    CK(cudaDeviceSynchronize());
    const double* C = P.C.data();
    const int N = P.N;
    auto ref = [&](long long r, long long c) { return C[r * N + c]; };
    Err err;
    const char* tname;
    bool ok;
    if (coda::is_same<OutT, float>::value) {
        err = check_f32_output(d, P.M, P.N, ldd, ref);
        tname = "bf16->f32";
        ok = err.ok(kTolRelF32, kTolMaxF32);
    } else {
        err = check_half_output(d, coda::is_same<OutT, bf16>::value, P.M, P.N, ldd, ref);
        tname = coda::is_same<OutT, bf16>::value ? "bf16" : "bf16->f16";
        ok = err.ok(kTolRelHalf, kTolMaxHalf);
    }
    const bool staged = coda::staged_store_bytes<Cfg::BM, Cfg::BN, OutT>() <= epi_scratch_bytes<Cfg, Epi_store_staged<OutT> >();
    report(case_name<Cfg, LA, LB>(staged ? "staged" : "staged(fallback)", P, tname), ok, fmt_err("D", err));
}

// (b) + (d): residual epilogue, then the consumer that finishes its partials.
template <class Cfg, class LA, class LB>
static void test_residual_and_consumer(const Problem& P) {
    const int M = P.M, N = P.N;
    const long long ld = P.ld_of(N);
    const int tn = tiles_n<Cfg>(N), tm = tiles_m<Cfg>(M);
    // Inputs: residual R (bf16, M x N, ld) and gamma (f32, N).
    std::vector<float> R((size_t)M * N), gamma(N);
    for (auto& x : R) x = bf_bits2f(f2bf_bits(nzrand()));
    for (auto& x : gamma) x = nzrand();
    DevBuf dR = store_matrix<bf16>(M, N, ld, [&](long long r, long long c) { return R[r * N + c]; });
    DevBuf dg(N * 4);
    upload(dg, gamma);
    DevBuf dD((size_t)(M + 2) * ld * 2), dH((size_t)(M + 2) * ld * 2), dSS((size_t)M * tn * 4);
    dD.poison();
    dH.poison();
    dSS.poison();
    Epi_residual::Params e;
    e.d = dD.as<bf16>();
    e.ldd = ld;
    e.res = dR.as<bf16>();
    e.ldr = ld;
    e.gamma = dg.as<float>();
    e.h = dH.as<bf16>();
    e.ldh = ld;
    e.ss_partial = dSS.as<float>();
    launch<Cfg, LA, LB, bf16, Epi_residual>(P.args<LA, LB>(), e);
    CK(cudaDeviceSynchronize());

    const double* C = P.C.data();
    auto Dref = [&](long long r, long long c) { return C[r * N + c] + (double)R[r * N + c]; };
    Err eD = check_half_output(dD, true, M, N, ld, Dref);
    Err eH = check_half_output(dH, true, M, N, ld, [&](long long r, long long c) { return Dref(r, c) * gamma[c]; });
    std::vector<double> ss_ref(M, 0.0);
    for (int r = 0; r < M; ++r)
        for (int c = 0; c < N; ++c) ss_ref[r] += Dref(r, c) * Dref(r, c);
    std::vector<float> ssp = download<float>(dSS);
    Err eS;
    for (int r = 0; r < M; ++r) {
        float s = 0.0f;
        for (int t = 0; t < tn; ++t) s += ssp[(size_t)r * tn + t];
        eS.add(s, ss_ref[r]);
    }
    const bool ok = eD.ok(kTolRelHalf, kTolMaxHalf) && eH.ok(kTolRelHalf, kTolMaxHalf) && eS.ok(kTolRelF32, kTolMaxF32);
    report(case_name<Cfg, LA, LB>("residual", P, "bf16"), ok,
           fmt_err("D", eD) + " | " + fmt_err("H", eH) + " | " + fmt_err("ss", eS));

    // (d) consumer: Y (f32, prefilled with Y0) += acc * rsqrt(ss / N + eps).
    const float eps = 1e-5f;
    std::vector<float> Y0((size_t)M * N);
    for (auto& x : Y0) x = nzrand();
    std::vector<uint32_t> yh((size_t)(M + 2) * ld, 0xFFFFFFFFu);
    for (int r = 0; r < M; ++r)
        for (int c = 0; c < N; ++c) memcpy(&yh[(size_t)r * ld + c], &Y0[(size_t)r * N + c], 4);
    DevBuf dY(yh.size() * 4);
    upload(dY, yh);
    DevBuf dLM((size_t)M * tn * 4), dLS((size_t)M * tn * 4), dCM((size_t)N * tm * 4);
    dLM.poison();
    dLS.poison();
    dCM.poison();
    Epi_consumer::Params c;
    c.y = dY.as<float>();
    c.ldy = ld;
    c.ss_partial = dSS.as<float>();
    c.ss_tiles = tn;
    c.inv_n = 1.0f / N;
    c.eps = eps;
    c.lse_max = dLM.as<float>();
    c.lse_sum = dLS.as<float>();
    c.col_max = dCM.as<float>();
    launch<Cfg, LA, LB, bf16, Epi_consumer>(P.args<LA, LB>(), c);
    CK(cudaDeviceSynchronize());

    std::vector<double> rs(M);
    for (int r = 0; r < M; ++r) rs[r] = 1.0 / std::sqrt(ss_ref[r] / N + eps);
    Err eY = check_f32_output(dY, M, N, ld,
                              [&](long long r, long long cc) { return Y0[r * N + cc] + C[r * N + cc] * rs[r]; });
    std::vector<float> lm = download<float>(dLM), ls = download<float>(dLS), cm = download<float>(dCM);
    Err eL, eC;
    for (int r = 0; r < M; ++r) {
        double mref = -INFINITY;
        for (int cc = 0; cc < N; ++cc) mref = std::max(mref, C[(size_t)r * N + cc] * rs[r]);
        double sref = 0;
        for (int cc = 0; cc < N; ++cc) sref += std::exp(C[(size_t)r * N + cc] * rs[r] - mref);
        double m = -INFINITY, s = 0;  // merge the kernel's partials in double
        for (int t = 0; t < tn; ++t) {
            const double m2 = lm[(size_t)r * tn + t], s2 = ls[(size_t)r * tn + t];
            const double mx = std::max(m, m2);
            s = s * std::exp(m - mx) + s2 * std::exp(m2 - mx);
            m = mx;
        }
        eL.add(m + std::log(s), mref + std::log(sref));
    }
    for (int cc = 0; cc < N; ++cc) {
        double mref = -INFINITY;
        for (int r = 0; r < M; ++r) mref = std::max(mref, C[(size_t)r * N + cc] * rs[r]);
        float mk = -INFINITY;
        for (int t = 0; t < tm; ++t) mk = std::max(mk, cm[(size_t)cc * tm + t]);
        eC.add(mk, mref);
    }
    const bool ok2 = eY.ok(kTolRelF32, kTolMaxF32) && eL.ok(kTolRelF32, kTolMaxF32) && eC.ok(kTolRelF32, kTolMaxF32);
    report(case_name<Cfg, LA, LB>("consumer", P, "bf16"), ok2,
           fmt_err("Y", eY) + " | " + fmt_err("lse", eL) + " | " + fmt_err("colmax", eC));
}

// (c) SwiGLU pair epilogue (N even).
template <class Cfg, class LA, class LB>
static void test_swiglu(const Problem& P) {
    const int M = P.M, N = P.N, No = N / 2;
    const long long ldo = P.ld_of(No);
    const int tm = tiles_m<Cfg>(M);
    DevBuf dO((size_t)(M + 2) * ldo * 2), dCS((size_t)No * tm * 4);
    dO.poison();
    dCS.poison();
    Epi_swiglu::Params e;
    e.out = dO.as<bf16>();
    e.ldo = ldo;
    e.n_out = No;
    e.cs_partial = dCS.as<float>();
    launch<Cfg, LA, LB, bf16, Epi_swiglu>(P.args<LA, LB>(), e);
    CK(cudaDeviceSynchronize());
    const double* C = P.C.data();
    auto yref = [&](long long r, long long c) {
        const double g = C[r * N + 2 * c], u = C[r * N + 2 * c + 1];
        return g / (1.0 + std::exp(-g)) * u;
    };
    Err eO = check_half_output(dO, true, M, No, ldo, yref);
    std::vector<float> cs = download<float>(dCS);
    Err eS;
    for (int c = 0; c < No; ++c) {
        double sref = 0;
        for (int r = 0; r < M; ++r) sref += yref(r, c);
        float s = 0;
        for (int t = 0; t < tm; ++t) s += cs[(size_t)c * tm + t];
        eS.add(s, sref);
    }
    // Column sums cancel (mixed signs), so judge them against the scale of
    // the summands: |sum| can be far below sum |y|.
    double scale = 0;
    for (int c = 0; c < No; ++c)
        for (int r = 0; r < M; ++r) scale = std::max(scale, std::fabs(yref(r, c)));
    const bool okS = eS.bad == 0 && eS.max_err <= 1e-4 * scale * std::sqrt((double)M) + 1e-6;
    char buf[96];
    snprintf(buf, sizeof buf, "colsum maxerr=%.2e (scale %.2e) bad=%lld", eS.max_err, scale, eS.bad);
    report(case_name<Cfg, LA, LB>("swiglu", P, "bf16"), eO.ok(kTolRelHalf, kTolMaxHalf) && okS,
           fmt_err("out", eO) + " | " + buf);
}

template <class Cfg>
static void ragged_store_all_layouts(const Problem& P) {
    for_each_layout([&](auto la, auto lb) { test_store<Cfg, bf16, decltype(la), decltype(lb)>(P); });
}
template <class Cfg>
static void ragged_store_two_layouts(const Problem& P) {
    test_store<Cfg, bf16, coda::A_MxK, coda::B_NxK>(P);
    test_store<Cfg, bf16, coda::A_KxM, coda::B_KxN>(P);
}
template <class Cfg>
static void ragged_epilogues_all_layouts(const Problem& P) {
    for_each_layout([&](auto la, auto lb) {
        test_residual_and_consumer<Cfg, decltype(la), decltype(lb)>(P);
        test_swiglu<Cfg, decltype(la), decltype(lb)>(P);
    });
}
template <class Cfg>
static void ragged_epilogues_one_layout(const Problem& P) {
    test_residual_and_consumer<Cfg, coda::A_MxK, coda::B_NxK>(P);
    test_swiglu<Cfg, coda::A_MxK, coda::B_NxK>(P);
}

// ===========================================================================
// Large shape: sampled check and timing against cuBLAS
// ===========================================================================

// cuBLAS through dlopen (enum values from cublas_api.h / library_types.h).
typedef int (*cublasCreate_fn)(void**);
typedef int (*cublasGemmEx_fn)(void*, int, int, int, int, int, const void*, const void*, int, int, const void*,
                               int, int, const void*, void*, int, int, int, int);
struct Cublas {
    void* handle = nullptr;
    cublasGemmEx_fn gemm = nullptr;
    bool ok() const { return gemm != nullptr; }
};
static Cublas load_cublas() {
    Cublas c;
    const char* names[] = {getenv("CODA_CUBLAS_LIB"), "libcublas.so.13", "libcublas.so.12", "libcublas.so"};
    void* lib = nullptr;
    for (const char* n : names)
        if (n && (lib = dlopen(n, RTLD_NOW | RTLD_GLOBAL))) {
            printf("cuBLAS: loaded %s\n", n);
            break;
        }
    if (!lib) {
        printf("cuBLAS: not found (set CODA_CUBLAS_LIB); skipping comparison\n");
        return c;
    }
    cublasCreate_fn create = (cublasCreate_fn)dlsym(lib, "cublasCreate_v2");
    cublasGemmEx_fn gemm = (cublasGemmEx_fn)dlsym(lib, "cublasGemmEx");
    if (!create || !gemm || create(&c.handle) != 0) {
        printf("cuBLAS: symbols/handle unavailable; skipping comparison\n");
        return c;
    }
    c.gemm = gemm;
    return c;
}
// Row-major C (M x N, ldc = N) = A B, seen by column-major cuBLAS as
// C^T (N x M) = B^T A^T.  B_KxN storage is B^T column-major (op N); B_NxK is
// B column-major (op T); A_MxK storage is A^T column-major (op N); A_KxM
// is A column-major (op T).
template <class LA, class LB>
static void cublas_gemm(const Cublas& cb, const Problem& P, void* c) {
    const float alpha = 1.0f, beta = 0.0f;
    const int opB = LB::kKContiguous ? 1 : 0, opA = LA::kKContiguous ? 0 : 1;
    const int CUDA_R_16BF = 14, COMPUTE_32F = 68, GEMM_DEFAULT = -1;
    int st = cb.gemm(cb.handle, opB, opA, P.N, P.M, P.K, &alpha, P.b<LB>(), CUDA_R_16BF, (int)P.ldb<LB>(), P.a<LA>(),
                     CUDA_R_16BF, (int)P.lda<LA>(), &beta, c, CUDA_R_16BF, P.N, COMPUTE_32F, GEMM_DEFAULT);
    if (st != 0) {
        fprintf(stderr, "cublasGemmEx failed: status %d\n", st);
        exit(2);
    }
}

// Median over `reps` event-timed runs of fn(), after `warm` warm-ups (ms).
template <class F>
static double time_median_ms(F fn, int warm = 10, int reps = 50) {
    for (int i = 0; i < warm; ++i) fn();
    CK(cudaDeviceSynchronize());
    std::vector<cudaEvent_t> ev(2 * reps);
    for (auto& e : ev) CK(cudaEventCreate(&e));
    for (int i = 0; i < reps; ++i) {
        CK(cudaEventRecord(ev[2 * i]));
        fn();
        CK(cudaEventRecord(ev[2 * i + 1]));
    }
    CK(cudaDeviceSynchronize());
    std::vector<double> t(reps);
    for (int i = 0; i < reps; ++i) {
        float ms;
        CK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
        t[i] = ms;
    }
    for (auto& e : ev) CK(cudaEventDestroy(e));
    std::sort(t.begin(), t.end());
    return t[reps / 2];
}

// Sampled check of a bf16 M x N (ld = N) output against float64 dot products.
static Err sample_check(const Problem& P, const DevBuf& d, int samples) {
    std::vector<uint16_t> h = download<uint16_t>(d);
    Err e;
    uint64_t s = 12345;
    for (int i = 0; i < samples; ++i) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const int m = (int)((s >> 33) % (uint64_t)P.M);
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const int n = (int)((s >> 33) % (uint64_t)P.N);
        double ref = 0;
        for (int k = 0; k < P.K; ++k) ref += (double)P.A[(size_t)m * P.K + k] * P.B[(size_t)k * P.N + n];
        e.add(bf_bits2f(h[(size_t)m * P.N + n]), ref);
    }
    // Also every element must have been written.
    for (uint16_t b : h)
        if (b == 0xFFFF) ++e.bad;
    return e;
}

struct TimingRow {
    std::string what;
    double ms, tflops;
};
static std::vector<TimingRow> g_timing;
static const char* g_timing_note = "50 after 10 warm-ups";

template <class Cfg, class LA, class LB, class Epi = Epi_store<bf16> >
static void large_case(const Problem& P, DevBuf& d, const char* tag = "") {
    d.poison();
    typename Epi::Params e;
    e.d = d.as<bf16>();
    e.ldd = P.N;
    const coda::GemmArgs g = P.args<LA, LB>();
    launch<Cfg, LA, LB, bf16, Epi>(g, e);
    CK(cudaDeviceSynchronize());
    Err err = sample_check(P, d, 2048);
    const bool staged = coda::is_same<Epi, Epi_store_staged<bf16> >::value;
    report(case_name<Cfg, LA, LB>(staged ? "staged" : "store", P, "bf16 (sampled)"), err.ok(kTolRelHalf, kTolMaxHalf),
           fmt_err("D", err));
    const double ms = time_median_ms([&]() { launch<Cfg, LA, LB, bf16, Epi>(g, e); });
    const double tf = 2.0 * P.M * P.N * P.K / (ms * 1e-3) / 1e12;
    g_timing.push_back({"ours " + cfg_name<Cfg>() + " " + a_name<LA>() + "*" + b_name<LB>() +
                            (staged ? " staged-store" : "") + tag,
                        ms, tf});
}

template <class LA, class LB>
static void large_cublas(const Cublas& cb, const Problem& P, DevBuf& d) {
    if (!cb.ok()) return;
    d.poison();
    cublas_gemm<LA, LB>(cb, P, d.p);
    CK(cudaDeviceSynchronize());
    Err err = sample_check(P, d, 2048);
    char name[96];
    snprintf(name, sizeof name, "cuBLAS %s*%s %dx%dx%d bf16 (sampled)", a_name<LA>(), b_name<LB>(), P.M, P.N, P.K);
    report(name, err.ok(kTolRelHalf, kTolMaxHalf), fmt_err("D", err));
    const double ms = time_median_ms([&]() { cublas_gemm<LA, LB>(cb, P, d.p); });
    const double tf = 2.0 * P.M * P.N * P.K / (ms * 1e-3) / 1e12;
    g_timing.push_back({std::string("cuBLAS ") + a_name<LA>() + "*" + b_name<LB>(), ms, tf});
}

// Epilogue cost at the large shape (residual + row partials, SwiGLU + col partials).
template <class Cfg, class LA, class LB>
static void large_epilogue_timing(const Problem& P) {
    const int M = P.M, N = P.N;
    DevBuf dR((size_t)M * N * 2), dg((size_t)N * 4), dD((size_t)M * N * 2), dH((size_t)M * N * 2);
    DevBuf dSS((size_t)M * tiles_n<Cfg>(N) * 4);
    {
        std::vector<uint16_t> r((size_t)M * N);
        for (auto& x : r) x = f2bf_bits(nzrand());
        upload(dR, r);
        std::vector<float> gm(N);
        for (auto& x : gm) x = nzrand();
        upload(dg, gm);
    }
    Epi_residual::Params e;
    e.d = dD.as<bf16>();
    e.ldd = N;
    e.res = dR.as<bf16>();
    e.ldr = N;
    e.gamma = dg.as<float>();
    e.h = dH.as<bf16>();
    e.ldh = N;
    e.ss_partial = dSS.as<float>();
    const coda::GemmArgs g = P.args<LA, LB>();
    double ms = time_median_ms([&]() { launch<Cfg, LA, LB, bf16, Epi_residual>(g, e); });
    g_timing.push_back({"ours " + cfg_name<Cfg>() + " " + a_name<LA>() + "*" + b_name<LB>() + " +residual/rowsumsq",
                        ms, 2.0 * M * N * P.K / (ms * 1e-3) / 1e12});
    DevBuf dO((size_t)M * (N / 2) * 2), dCS((size_t)(N / 2) * tiles_m<Cfg>(M) * 4);
    Epi_swiglu::Params s;
    s.out = dO.as<bf16>();
    s.ldo = N / 2;
    s.n_out = N / 2;
    s.cs_partial = dCS.as<float>();
    ms = time_median_ms([&]() { launch<Cfg, LA, LB, bf16, Epi_swiglu>(g, s); });
    g_timing.push_back({"ours " + cfg_name<Cfg>() + " " + a_name<LA>() + "*" + b_name<LB>() + " +swiglu/colsum", ms,
                        2.0 * M * N * P.K / (ms * 1e-3) / 1e12});
}

#ifndef CODA_NO_SM90
// ===========================================================================
// sm90 mainloop (--sm90)
// ===========================================================================
typedef coda::Sm90Cfg128x256 H128x256;
typedef coda::Sm90Cfg256x128 H256x128;
typedef coda::Sm90Cfg128x128 H128x128;
typedef coda::Sm90Cfg128x128pp H128x128pp;
typedef coda::Sm90Cfg64x256pp H64x256pp;
typedef coda::Sm90Config<128, 256, 3, false, 8> H128x256g8;  // raster group 8 (timing variant)
typedef coda::Sm90Config<128, 128, 4, true, 8> H128x128ppg8;

template <class Cfg>
static void sm90_ragged(const Problem& P, bool epilogues_all_layouts) {
    ragged_store_all_layouts<Cfg>(P);
    test_store_staged<Cfg, bf16, coda::A_MxK, coda::B_NxK>(P);
    test_store_staged<Cfg, float, coda::A_KxM, coda::B_KxN>(P);
    test_store_staged<Cfg, f16, coda::A_MxK, coda::B_KxN>(P);
    if (epilogues_all_layouts) ragged_epilogues_all_layouts<Cfg>(P);
    else ragged_epilogues_one_layout<Cfg>(P);
}

// A large problem: A (M x K) and B (N x K) as bf16 bits, R device copies of
// each storage (rotated through in timing so that L2 does not keep inputs).
struct BigProblem {
    int M, N, K, R;
    std::vector<uint16_t> a, b;  // a[m*K+k], b[n*K+k]
    std::vector<DevBuf> a_mk, b_nk, a_km, b_kn;
    template <class LA, class LB> coda::GemmArgs args(int r) const {
        coda::GemmArgs g;
        g.a = LA::kKContiguous ? a_mk[r].p : a_km[r].p;
        g.b = LB::kKContiguous ? b_nk[r].p : b_kn[r].p;
        g.m = M;
        g.n = N;
        g.k = K;
        g.lda = LA::kKContiguous ? K : M;
        g.ldb = LB::kKContiguous ? K : N;
        return g;
    }
    double ref(int m, int n) const {
        double s = 0;
        for (int k = 0; k < K; ++k) s += (double)bf_bits2f(a[(size_t)m * K + k]) * bf_bits2f(b[(size_t)n * K + k]);
        return s;
    }
};
static void make_big(BigProblem& B, int M, int N, int K, int R, bool all_layouts) {
    B.M = M;
    B.N = N;
    B.K = K;
    B.R = R;
    B.a.resize((size_t)M * K);
    B.b.resize((size_t)N * K);
    for (auto& x : B.a) x = f2bf_bits(nzrand());
    for (auto& x : B.b) x = f2bf_bits(nzrand());
    auto copies = [&](std::vector<DevBuf>& v, const std::vector<uint16_t>& h) {
        for (int r = 0; r < R; ++r) {
            v.emplace_back(h.size() * 2);
            upload(v.back(), h);
        }
    };
    copies(B.a_mk, B.a);
    copies(B.b_nk, B.b);
    if (all_layouts) {
        std::vector<uint16_t> t((size_t)M * K);
        for (int m = 0; m < M; ++m)
            for (int k = 0; k < K; ++k) t[(size_t)k * M + m] = B.a[(size_t)m * K + k];
        copies(B.a_km, t);
        t.assign((size_t)N * K, 0);
        for (int n = 0; n < N; ++n)
            for (int k = 0; k < K; ++k) t[(size_t)k * N + n] = B.b[(size_t)n * K + k];
        copies(B.b_kn, t);
    }
}
static Err big_check(const BigProblem& B, const DevBuf& d, int samples) {
    std::vector<uint16_t> h = download<uint16_t>(d);
    Err e;
    uint64_t s = 987654321;
    for (int i = 0; i < samples; ++i) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const int m = (int)((s >> 33) % (uint64_t)B.M);
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const int n = (int)((s >> 33) % (uint64_t)B.N);
        e.add(bf_bits2f(h[(size_t)m * B.N + n]), B.ref(m, n));
    }
    for (uint16_t b : h)
        if (b == 0xFFFF) ++e.bad;  // unwritten (poison)
    return e;
}
// Median over `reps` event-timed launches of fn(r), r rotating over R input copies.
template <class F>
static double time_median_rot(F fn, int R, int warm = 10, int reps = 100) {
    for (int i = 0; i < warm; ++i) fn(i % R);
    CK(cudaDeviceSynchronize());
    std::vector<cudaEvent_t> ev(2 * reps);
    for (auto& e : ev) CK(cudaEventCreate(&e));
    for (int i = 0; i < reps; ++i) {
        CK(cudaEventRecord(ev[2 * i]));
        fn(i % R);
        CK(cudaEventRecord(ev[2 * i + 1]));
    }
    CK(cudaDeviceSynchronize());
    std::vector<double> t(reps);
    for (int i = 0; i < reps; ++i) {
        float ms;
        CK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
        t[i] = ms;
    }
    for (auto& e : ev) CK(cudaEventDestroy(e));
    std::sort(t.begin(), t.end());
    return t[reps / 2];
}
// Records a timing row and prints it at once (a later hang keeps it in the log).
static void push_timing(const std::string& what, double ms, double tflops) {
    g_timing.push_back({what, ms, tflops});
    printf("TIMING %-78s %8.3f ms  %7.1f TFLOP/s\n", what.c_str(), ms, tflops);
    fflush(stdout);
}
static std::string shape_name(const BigProblem& B) {
    char buf[64];
    snprintf(buf, sizeof buf, "%dx%dx%d", B.M, B.N, B.K);
    return buf;
}
template <class Cfg, class LA, class LB, class Epi = Epi_store<bf16> >
static void big_case(const BigProblem& B, DevBuf& d, const char* tag = "") {
    typename Epi::Params e;
    e.d = d.as<bf16>();
    e.ldd = B.N;
    d.poison();
    launch<Cfg, LA, LB, bf16, Epi>(B.args<LA, LB>(0), e);
    CK(cudaDeviceSynchronize());
    const bool staged = coda::is_same<Epi, Epi_store_staged<bf16> >::value;
    Err err = big_check(B, d, 1024);
    char name[200];
    snprintf(name, sizeof name, "%s %s %s*%s %s bf16 (sampled)", staged ? "staged" : "store", cfg_name<Cfg>().c_str(),
             a_name<LA>(), b_name<LB>(), shape_name(B).c_str());
    report(name, err.ok(kTolRelHalf, kTolMaxHalf), fmt_err("D", err));
    const double ms = time_median_rot([&](int r) { launch<Cfg, LA, LB, bf16, Epi>(B.args<LA, LB>(r), e); }, B.R);
    push_timing(shape_name(B) + " ours " + cfg_name<Cfg>() + " " + a_name<LA>() + "*" + b_name<LB>() +
                    (staged ? " staged" : " pairs") + tag,
                ms, 2.0 * B.M * B.N * (double)B.K / (ms * 1e-3) / 1e12);
}
template <class LA, class LB>
static void big_cublas(const Cublas& cb, const BigProblem& B, DevBuf& d, const char* tag = "") {
    if (!cb.ok()) return;
    auto run = [&](int r) {
        const coda::GemmArgs g = B.args<LA, LB>(r);
        const float alpha = 1.0f, beta = 0.0f;
        const int opB = LB::kKContiguous ? 1 : 0, opA = LA::kKContiguous ? 0 : 1;
        const int CUDA_R_16BF = 14, COMPUTE_32F = 68, GEMM_DEFAULT = -1;
        int st = cb.gemm(cb.handle, opB, opA, B.N, B.M, B.K, &alpha, g.b, CUDA_R_16BF, (int)g.ldb, g.a, CUDA_R_16BF,
                         (int)g.lda, &beta, d.p, CUDA_R_16BF, B.N, COMPUTE_32F, GEMM_DEFAULT);
        if (st != 0) {
            fprintf(stderr, "cublasGemmEx failed: status %d\n", st);
            exit(2);
        }
    };
    d.poison();
    run(0);
    CK(cudaDeviceSynchronize());
    Err err = big_check(B, d, 1024);
    char name[160];
    snprintf(name, sizeof name, "cuBLAS %s*%s %s bf16 (sampled)", a_name<LA>(), b_name<LB>(), shape_name(B).c_str());
    report(name, err.ok(kTolRelHalf, kTolMaxHalf), fmt_err("D", err));
    const double ms = time_median_rot(run, B.R);
    push_timing(shape_name(B) + " cuBLAS " + a_name<LA>() + "*" + b_name<LB>() + tag, ms,
                2.0 * B.M * B.N * (double)B.K / (ms * 1e-3) / 1e12);
}
// Epilogue cost at a large shape (A_MxK * B_NxK): residual + row sum of
// squares partials, SwiGLU + column-sum partials.
template <class Cfg>
static void big_epilogues(const BigProblem& B) {
    typedef coda::A_MxK MK;
    typedef coda::B_NxK NK;
    const int M = B.M, N = B.N;
    DevBuf dR((size_t)M * N * 2), dg((size_t)N * 4), dD((size_t)M * N * 2), dH((size_t)M * N * 2);
    DevBuf dSS((size_t)M * tiles_n<Cfg>(N) * 4);
    {
        std::vector<uint16_t> r((size_t)M * N);
        for (auto& x : r) x = f2bf_bits(nzrand());
        upload(dR, r);
        std::vector<float> gm(N);
        for (auto& x : gm) x = nzrand();
        upload(dg, gm);
    }
    Epi_residual::Params e;
    e.d = dD.as<bf16>();
    e.ldd = N;
    e.res = dR.as<bf16>();
    e.ldr = N;
    e.gamma = dg.as<float>();
    e.h = dH.as<bf16>();
    e.ldh = N;
    e.ss_partial = dSS.as<float>();
    const double flop = 2.0 * M * N * (double)B.K;
    double ms = time_median_rot([&](int r) { launch<Cfg, MK, NK, bf16, Epi_residual>(B.args<MK, NK>(r), e); }, B.R);
    push_timing(shape_name(B) + " ours " + cfg_name<Cfg>() + " +residual/H/rowsumsq", ms, flop / (ms * 1e-3) / 1e12);
    DevBuf dO((size_t)M * (N / 2) * 2), dCS((size_t)(N / 2) * tiles_m<Cfg>(M) * 4);
    Epi_swiglu::Params s;
    s.out = dO.as<bf16>();
    s.ldo = N / 2;
    s.n_out = N / 2;
    s.cs_partial = dCS.as<float>();
    ms = time_median_rot([&](int r) { launch<Cfg, MK, NK, bf16, Epi_swiglu>(B.args<MK, NK>(r), s); }, B.R);
    push_timing(shape_name(B) + " ours " + cfg_name<Cfg>() + " +swiglu/colsum", ms, flop / (ms * 1e-3) / 1e12);
}

// No output at all (the accumulators are only compared against an
// impossible value): the cost of the mainloop and the tile scheduling alone.
struct Epi_null {
    struct Params {
        float* sink;
    };
    static constexpr int kSmemFloats = 0;
    template <class Frag, class Tile>
    static __device__ void apply(const Params& p, Frag& f, const Tile&, float*) {
        if (f.acc[0][0][0] == -12345.678f) *p.sink = f.acc[Frag::RI - 1][Frag::CJ - 1][1];
    }
};
template <class Cfg>
static void big_null(const BigProblem& B) {
    typedef coda::A_MxK MK;
    typedef coda::B_NxK NK;
    DevBuf sink(4);
    Epi_null::Params e{sink.as<float>()};
    const double ms = time_median_rot([&](int r) { launch<Cfg, MK, NK, bf16, Epi_null>(B.args<MK, NK>(r), e); }, B.R);
    push_timing(shape_name(B) + " ours " + cfg_name<Cfg>() + " A_MxK*B_NxK no epilogue (mainloop only)", ms,
                2.0 * B.M * B.N * (double)B.K / (ms * 1e-3) / 1e12);
}

template <class Cfg, class Epi = Epi_store<bf16> >
static void big_mk_nk(const BigProblem& B, DevBuf& d, const char* tag = "") {
    big_case<Cfg, coda::A_MxK, coda::B_NxK, Epi>(B, d, tag);
}

static void big_shapes(const Cublas& cb, bool pingpong);
static void run_sm90(bool skip_large, bool profile) {
    typedef coda::A_MxK MK;
    typedef coda::B_NxK NK;
    typedef Epi_store_staged<bf16> Staged;
    if (profile) {  // one launch of a few kernels, for ncu
        BigProblem B;
        make_big(B, 8192, 4096, 4096, 1, false);
        DevBuf d((size_t)B.M * B.N * 2);
        Epi_store<bf16>::Params e{d.as<bf16>(), B.N};
        Staged::Params es{d.as<bf16>(), B.N};
        launch<H128x256, MK, NK, bf16, Staged>(B.args<MK, NK>(0), es);
        launch<H128x256, MK, NK, bf16, Epi_store<bf16> >(B.args<MK, NK>(0), e);
        launch<H128x128pp, MK, NK, bf16, Staged>(B.args<MK, NK>(0), es);
        DevBuf sink(4);
        Epi_null::Params en{sink.as<float>()};
        launch<H128x256, MK, NK, bf16, Epi_null>(B.args<MK, NK>(0), en);
        CK(cudaDeviceSynchronize());
        printf("profile launches done\n");
        return;
    }
    // ---- ragged shapes --------------------------------------------------
    const int shapes[][3] = {{333, 200, 72}, {1000, 330, 1043}, {77, 50, 40}, {300, 258, 8}, {640, 512, 200}};
    for (auto& sh : shapes) {
        Problem P;
        make_problem<bf16>(P, sh[0], sh[1], sh[2], true, true);
        sm90_ragged<H128x256>(P, true);
        sm90_ragged<H256x128>(P, false);
        sm90_ragged<H128x128>(P, false);
        sm90_ragged<H128x128pp>(P, true);
        sm90_ragged<H64x256pp>(P, false);
    }
    // Large shapes: cooperative configurations first, then the persistence
    // tests (ping-pong with several tiles per CTA), then ping-pong timings.
    Cublas cb;
    if (!skip_large) {
        cb = load_cublas();
        big_shapes(cb, false);
    }
    {   // persistence: many tiles per CTA (small grids), ring phases wrapping across tiles
        Problem P;
        make_problem<bf16>(P, 1500, 1100, 520, true, true);
        for (int grid : {1, 3, 7}) {
            g_grid_override = grid;
            char tag[32];
            snprintf(tag, sizeof tag, "[grid %d] ", grid);
            printf("%s\n", tag);
            test_store<H128x256, bf16, MK, NK>(P);
            test_store<H128x128pp, bf16, MK, NK>(P);
            test_store<H64x256pp, bf16, coda::A_KxM, coda::B_KxN>(P);
            test_residual_and_consumer<H128x128pp, MK, NK>(P);
            test_swiglu<H256x128, MK, NK>(P);
        }
        g_grid_override = 0;
    }
    {   // f16 operands and output
        Problem P;
        make_problem<f16>(P, 1000, 330, 1043, true, true);
        for_each_layout([&](auto la, auto lb) {
            test_store<H128x256, f16, decltype(la), decltype(lb)>(P);
            test_store<H128x128pp, f16, decltype(la), decltype(lb)>(P);
        });
    }
    if (!skip_large) big_shapes(cb, true);
}

static void big_shapes(const Cublas& cb, bool pingpong) {
    typedef coda::A_MxK MK;
    typedef coda::B_NxK NK;
    typedef Epi_store_staged<bf16> Staged;
    {
        BigProblem B;
        make_big(B, 4096, 4096, 4096, 3, true);
        DevBuf d((size_t)B.M * B.N * 2);
        if (!pingpong) {
            big_cublas<MK, NK>(cb, B, d, " (first)");
            for_each_layout([&](auto la, auto lb) {
                typedef decltype(la) LA;
                typedef decltype(lb) LB;
                big_case<H128x256, LA, LB, Staged>(B, d);
                big_cublas<LA, LB>(cb, B, d);
            });
            big_mk_nk<H128x256>(B, d);
            big_mk_nk<H256x128, Staged>(B, d);
            big_mk_nk<H128x128, Staged>(B, d);
            big_null<H128x256>(B);
        } else {
            for_each_layout([&](auto la, auto lb) { big_case<H128x128pp, decltype(la), decltype(lb), Staged>(B, d); });
            big_mk_nk<H64x256pp, Staged>(B, d);
            big_cublas<MK, NK>(cb, B, d, " (again)");
        }
    }
    const int big[][3] = {{8192, 4096, 4096}, {8192, 28672, 4096}, {8192, 4096, 14336}};
    for (auto& sh : big) {
        BigProblem B;
        make_big(B, sh[0], sh[1], sh[2], 3, false);
        DevBuf d((size_t)B.M * B.N * 2);
        if (!pingpong) {
            big_cublas<MK, NK>(cb, B, d, " (first)");
            big_mk_nk<H128x256>(B, d);
            big_mk_nk<H128x256, Staged>(B, d);
            big_mk_nk<H128x256g8, Staged>(B, d);
            big_mk_nk<H256x128>(B, d);
            big_mk_nk<H256x128, Staged>(B, d);
            big_mk_nk<H128x128, Staged>(B, d);
            big_null<H128x256>(B);
            if (sh[1] == 4096 && sh[2] == 4096) big_epilogues<H128x256>(B);
        } else {
            big_mk_nk<H128x128pp>(B, d);
            big_mk_nk<H128x128pp, Staged>(B, d);
            big_mk_nk<H128x128ppg8, Staged>(B, d);
            big_mk_nk<H64x256pp, Staged>(B, d);
            if (sh[1] == 4096 && sh[2] == 4096) big_epilogues<H128x128pp>(B);
            big_cublas<MK, NK>(cb, B, d, " (again)");
        }
    }
}
#endif

// ===========================================================================
// Prints the timing table and the failed checks; returns the exit status.
static int summary(const cudaDeviceProp& prop) {
    int fails = 0;
    for (auto& r : g_results) fails += !r.ok;
    printf("\n==== timing, %s (median of %s) ====\n", prop.name,
           g_timing_note);
    for (auto& t : g_timing) printf("%-78s %8.3f ms  %7.1f TFLOP/s\n", t.what.c_str(), t.ms, t.tflops);
    printf("\n==== %zu checks, %d failed ====\n", g_results.size(), fails);
    for (auto& r : g_results)
        if (!r.ok) printf("FAILED: %s  %s\n", r.name.c_str(), r.detail.c_str());
    return fails ? 1 : 0;
}

int main(int argc, char** argv) {
    bool skip_large = false, profile = false, sm90 = false;
    for (int i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--ragged-only") == 0) skip_large = true;
        else if (strcmp(argv[i], "--profile") == 0) profile = true;
        else if (strcmp(argv[i], "--sm90") == 0) sm90 = true;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, sm_%d%d, %d SMs, %.0f MB L2\n", prop.name, prop.major, prop.minor,
           prop.multiProcessorCount, prop.l2CacheSize / 1048576.0);
    if (sm90) {
#ifndef CODA_NO_SM90
        g_num_sms = prop.multiProcessorCount;
        g_timing_note = "100 after 10 warm-ups, inputs rotating over 3 copies";
        run_sm90(skip_large, profile);
        if (profile) return 0;
        return summary(prop);
#else
        fprintf(stderr, "built with CODA_NO_SM90\n");
        return 2;
#endif
    }
    {  // the emitted-convention entry point must launch too
        void (*k)(coda::GemmArgs, Epi_store<bf16>::Params) = coda_gemm_example_bf16_tn;
        CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                coda::gemm_smem_bytes<coda::Cfg128x128, Epi_store<bf16> >()));
    }

    if (profile) {  // one launch of a few kernels at 4096^3, for ncu
        const int S = 4096;
        Problem P;
        make_problem<bf16>(P, S, S, S, false, false);
        DevBuf d((size_t)S * S * 2);
        typename Epi_store<bf16>::Params e;
        e.d = d.as<bf16>();
        e.ldd = S;
        launch<coda::Cfg256x128, coda::A_MxK, coda::B_NxK, bf16, Epi_store<bf16> >(P.args<coda::A_MxK, coda::B_NxK>(), e);
        launch<coda::Cfg128x256, coda::A_KxM, coda::B_KxN, bf16, Epi_store<bf16> >(P.args<coda::A_KxM, coda::B_KxN>(), e);
        launch<coda::Cfg128x128w4, coda::A_MxK, coda::B_NxK, bf16, Epi_store<bf16> >(P.args<coda::A_MxK, coda::B_NxK>(), e);
        typename Epi_store_staged<bf16>::Params es;
        es.d = d.as<bf16>();
        es.ldd = S;
        launch<coda::Cfg256x128, coda::A_MxK, coda::B_NxK, bf16, Epi_store_staged<bf16> >(P.args<coda::A_MxK, coda::B_NxK>(), es);
        CK(cudaDeviceSynchronize());
        printf("profile launches done\n");
        return 0;
    }

    // ---- ragged shapes --------------------------------------------------
    const int shapes[][3] = {{1000, 330, 1043}, {77, 50, 40}, {300, 258, 8}};
    for (auto& s : shapes) {
        Problem P;
        make_problem<bf16>(P, s[0], s[1], s[2], true, true);
        ragged_store_all_layouts<coda::Cfg64x64>(P);
        ragged_store_all_layouts<coda::Cfg128x128>(P);
        ragged_store_all_layouts<coda::Cfg128x128w4>(P);
        ragged_store_all_layouts<coda::Cfg128x256>(P);
        ragged_store_all_layouts<coda::Cfg256x128>(P);
        ragged_store_all_layouts<coda::Cfg128x256k32>(P);
        ragged_store_two_layouts<Cfg128x128w4k64>(P);
        ragged_store_two_layouts<Cfg128x256s4>(P);
        ragged_store_two_layouts<Cfg256x128s4>(P);
        ragged_store_two_layouts<Cfg256x128g16>(P);
        ragged_epilogues_all_layouts<coda::Cfg128x128>(P);  // 2x4 warps, 128-register cap
        ragged_epilogues_one_layout<coda::Cfg256x128>(P);   // 4x2 warps, BK 64
        ragged_epilogues_one_layout<coda::Cfg128x256>(P);   // 2x4 warps, BK 64
        ragged_epilogues_one_layout<coda::Cfg128x128w4>(P); // 2x2 warps
        ragged_epilogues_one_layout<coda::Cfg64x64>(P);     // 2x2 warps, 4 CTAs/SM
        test_store_staged<coda::Cfg128x128, bf16, coda::A_MxK, coda::B_NxK>(P);
        test_store_staged<coda::Cfg128x128, float, coda::A_MxK, coda::B_NxK>(P);  // does not fit: fallback
        test_store_staged<coda::Cfg128x256, bf16, coda::A_MxK, coda::B_NxK>(P);
        test_store_staged<coda::Cfg128x256, float, coda::A_KxM, coda::B_KxN>(P);
        test_store_staged<coda::Cfg256x128, f16, coda::A_MxK, coda::B_KxN>(P);
        test_store_staged<coda::Cfg128x128w4, bf16, coda::A_KxM, coda::B_NxK>(P);
        test_store_staged<coda::Cfg64x64, bf16, coda::A_MxK, coda::B_NxK>(P);
    }
    {
        Problem P;  // f16 operands and output
        make_problem<f16>(P, 1000, 330, 1043, true, true);
        for_each_layout([&](auto la, auto lb) { test_store<coda::Cfg128x128, f16, decltype(la), decltype(lb)>(P); });
    }

    // ---- large shape ----------------------------------------------------
    if (!skip_large) {
        const int S = 4096;
        Problem P;
        make_problem<bf16>(P, S, S, S, false, false);
        DevBuf d((size_t)S * S * 2);
        Cublas cb = load_cublas();
        typedef coda::A_MxK MK;
        typedef coda::B_NxK NK;
        large_case<coda::Cfg256x128, MK, NK>(P, d, " (first)");  // timed again last: spread
        for_each_layout([&](auto la, auto lb) {
            typedef decltype(la) LA;
            typedef decltype(lb) LB;
            large_case<coda::Cfg128x128, LA, LB>(P, d);
            large_case<coda::Cfg128x128w4, LA, LB>(P, d);
            large_case<coda::Cfg128x256, LA, LB>(P, d);
            large_case<coda::Cfg256x128, LA, LB>(P, d);
            large_cublas<LA, LB>(cb, P, d);
        });
        large_case<coda::Cfg64x64, MK, NK>(P, d);
        large_case<coda::Cfg128x256k32, MK, NK>(P, d);
        large_case<Cfg128x128w4k64, MK, NK>(P, d);
        large_case<Cfg128x256s4, MK, NK>(P, d);
        large_case<Cfg256x128s4, MK, NK>(P, d);
        large_case<Cfg256x128g16, MK, NK>(P, d);
        large_case<coda::Cfg128x256, MK, NK, Epi_store_staged<bf16> >(P, d);
        large_case<coda::Cfg256x128, MK, NK, Epi_store_staged<bf16> >(P, d);
        large_case<coda::Cfg128x128w4, MK, NK, Epi_store_staged<bf16> >(P, d);
        large_case<Cfg256x128s4, MK, NK, Epi_store_staged<bf16> >(P, d);
        large_epilogue_timing<coda::Cfg256x128, MK, NK>(P);
        large_epilogue_timing<coda::Cfg128x128w4, MK, NK>(P);
        large_case<coda::Cfg256x128, MK, NK>(P, d, " (again)");
    }

    return summary(prop);
}
