// coda_common.cuh -- shared device helpers for codac's emitted CUDA kernels.
//
// This header is embedded verbatim (first, then coda_epilogue.cuh, then
// coda_gemm_sm80.cuh) into every self-contained .cu file that codac emits and
// compiles at run time with NVRTC.  Rules that follow from that:
//   * only <cuda_bf16.h> and <cuda_fp16.h> are included; no host standard
//     headers (no <cstdint>, <cstdio>, <type_traits>, <cmath> ...), so the
//     code uses plain int / long long / unsigned and CUDA's builtin math;
//   * everything lives in namespace coda;
//   * everything is __device__ and header-only (force-inlined helpers);
//   * the headers never #include each other (NVRTC sees them concatenated);
//     classic include guards, not #pragma once, so that the concatenated
//     text is also a valid main file.
//
// Contents:
//   1. element types: load/convert/store of bf16, f16 and f32 scalars, pairs
//      (2 adjacent elements, 4- or 8-byte accesses) and 16-byte vectors of
//      8 halves (or 2x float4 for f32);
//   2. fast math used by epilogues: exp via exp2, rsqrt, tanh, sigmoid, silu,
//      gelu (tanh and erf forms), softplus, and -inf / +inf constants;
//   3. warp shuffle helpers (xor butterflies over a quad or a whole warp).
//
// Determinism: every helper here is a pure function of its inputs; the
// butterfly reductions give bit-identical results in every participating lane
// (floating-point + and max are commutative, and each lane combines the same
// operand pairs).
#ifndef CODA_COMMON_CUH
#define CODA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace coda {

// ---------------------------------------------------------------------------
// 1. Element types
// ---------------------------------------------------------------------------

typedef __nv_bfloat16 bf16;
typedef __half f16;

// Minimal compile-time type equality (no <type_traits> under NVRTC).
template <class A, class B> struct is_same { static constexpr bool value = false; };
template <class A> struct is_same<A, A> { static constexpr bool value = true; };
// Compile-time type selection (std::conditional).
template <bool C, class A, class B> struct conditional { typedef A type; };
template <class A, class B> struct conditional<false, A, B> { typedef B type; };

// Scalar conversions to/from float.  Rounding to bf16/f16 is round-to-nearest-even.
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(f16 x) { return __half2float(x); }

template <class T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ bf16 from_float<bf16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ f16 from_float<f16>(float x) { return __float2half_rn(x); }

// Bit-level views of a pair of halves packed in one 32-bit register
// (element 0 in the low 16 bits, i.e. at the lower address).
__device__ __forceinline__ unsigned pack2(bf16 lo, bf16 hi) {
    __nv_bfloat162 v; v.x = lo; v.y = hi;
    return *reinterpret_cast<unsigned*>(&v);
}
__device__ __forceinline__ unsigned pack2_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<unsigned*>(&v);
}
__device__ __forceinline__ unsigned pack2_f16(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<unsigned*>(&v);
}
__device__ __forceinline__ float2 unpack2_bf16(unsigned u) {
    __nv_bfloat162 v = *reinterpret_cast<__nv_bfloat162*>(&u);
    return __bfloat1622float2(v);
}
__device__ __forceinline__ float2 unpack2_f16(unsigned u) {
    __half2 v = *reinterpret_cast<__half2*>(&u);
    return __half22float2(v);
}
// The same for the 16-bit element type Elem (bf16 or f16).
template <class Elem>
__device__ __forceinline__ float2 unpack_pair(unsigned u) {
    if constexpr (is_same<Elem, bf16>::value) return unpack2_bf16(u);
    else return unpack2_f16(u);
}
template <class Elem>
__device__ __forceinline__ unsigned pack_pair(float lo, float hi) {
    if constexpr (is_same<Elem, bf16>::value) return pack2_bf16(lo, hi);
    else return pack2_f16(lo, hi);
}

// ---- scalar load / store -------------------------------------------------
__device__ __forceinline__ float load1(const float* p) { return __ldg(p); }
__device__ __forceinline__ float load1(const bf16* p) { return __bfloat162float(__ldg(p)); }
__device__ __forceinline__ float load1(const f16* p) { return __half2float(__ldg(p)); }

__device__ __forceinline__ void store1(float* p, float v) { *p = v; }
__device__ __forceinline__ void store1(bf16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void store1(f16* p, float v) { *p = __float2half_rn(v); }

// ---- pair load / store: elements p[0], p[1] -------------------------------
// p must be aligned to the pair size (4 bytes for bf16/f16, 8 bytes for f32),
// i.e. an even element offset from a 16-byte aligned base.
__device__ __forceinline__ float2 load2(const float* p) { return __ldg(reinterpret_cast<const float2*>(p)); }
__device__ __forceinline__ float2 load2(const bf16* p) {
    return unpack2_bf16(__ldg(reinterpret_cast<const unsigned*>(p)));
}
__device__ __forceinline__ float2 load2(const f16* p) {
    return unpack2_f16(__ldg(reinterpret_cast<const unsigned*>(p)));
}

__device__ __forceinline__ void store2(float* p, float v0, float v1) {
    *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
}
__device__ __forceinline__ void store2(bf16* p, float v0, float v1) {
    *reinterpret_cast<unsigned*>(p) = pack2_bf16(v0, v1);
}
__device__ __forceinline__ void store2(f16* p, float v0, float v1) {
    *reinterpret_cast<unsigned*>(p) = pack2_f16(v0, v1);
}

// Non-cached (coherent) pair load, for read-modify-write of an output that
// the same kernel writes (so __ldg's read-only path must not be used).
__device__ __forceinline__ float2 load2_rw(const float* p) { return *reinterpret_cast<const float2*>(p); }
__device__ __forceinline__ float2 load2_rw(const bf16* p) {
    return unpack2_bf16(*reinterpret_cast<const unsigned*>(p));
}
__device__ __forceinline__ float2 load2_rw(const f16* p) {
    return unpack2_f16(*reinterpret_cast<const unsigned*>(p));
}
__device__ __forceinline__ float load1_rw(const float* p) { return *p; }
__device__ __forceinline__ float load1_rw(const bf16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ float load1_rw(const f16* p) { return __half2float(*p); }

// ---- 4-element vectors: 4 halves (8 bytes) or 4 floats (16 bytes) ---------
// p must be aligned to the vector (an element offset a multiple of 4 from a
// 16-byte aligned base).
__device__ __forceinline__ void load4(const bf16* p, float (&v)[4]) {
    uint2 u = __ldg(reinterpret_cast<const uint2*>(p));
    float2 a = unpack2_bf16(u.x), b = unpack2_bf16(u.y);
    v[0] = a.x; v[1] = a.y; v[2] = b.x; v[3] = b.y;
}
__device__ __forceinline__ void load4(const f16* p, float (&v)[4]) {
    uint2 u = __ldg(reinterpret_cast<const uint2*>(p));
    float2 a = unpack2_f16(u.x), b = unpack2_f16(u.y);
    v[0] = a.x; v[1] = a.y; v[2] = b.x; v[3] = b.y;
}
__device__ __forceinline__ void load4(const float* p, float (&v)[4]) {
    float4 a = __ldg(reinterpret_cast<const float4*>(p));
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
}
__device__ __forceinline__ void store4(bf16* p, const float (&v)[4]) {
    *reinterpret_cast<uint2*>(p) = make_uint2(pack2_bf16(v[0], v[1]), pack2_bf16(v[2], v[3]));
}
__device__ __forceinline__ void store4(f16* p, const float (&v)[4]) {
    *reinterpret_cast<uint2*>(p) = make_uint2(pack2_f16(v[0], v[1]), pack2_f16(v[2], v[3]));
}
__device__ __forceinline__ void store4(float* p, const float (&v)[4]) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
}

// ---- 16-byte vectors: 8 halves (bf16/f16) or 8 floats (two float4) ---------
// p must be 16-byte aligned (element offset a multiple of 8 for halves, of 4
// for f32 -- 8 elements of f32 are two 16-byte accesses).
__device__ __forceinline__ void load8(const bf16* p, float (&v)[8]) {
    uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
    float2 a = unpack2_bf16(u.x), b = unpack2_bf16(u.y), c = unpack2_bf16(u.z), d = unpack2_bf16(u.w);
    v[0] = a.x; v[1] = a.y; v[2] = b.x; v[3] = b.y; v[4] = c.x; v[5] = c.y; v[6] = d.x; v[7] = d.y;
}
__device__ __forceinline__ void load8(const f16* p, float (&v)[8]) {
    uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
    float2 a = unpack2_f16(u.x), b = unpack2_f16(u.y), c = unpack2_f16(u.z), d = unpack2_f16(u.w);
    v[0] = a.x; v[1] = a.y; v[2] = b.x; v[3] = b.y; v[4] = c.x; v[5] = c.y; v[6] = d.x; v[7] = d.y;
}
__device__ __forceinline__ void load8(const float* p, float (&v)[8]) {
    float4 a = __ldg(reinterpret_cast<const float4*>(p));
    float4 b = __ldg(reinterpret_cast<const float4*>(p) + 1);
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}
__device__ __forceinline__ void store8(bf16* p, const float (&v)[8]) {
    uint4 u;
    u.x = pack2_bf16(v[0], v[1]); u.y = pack2_bf16(v[2], v[3]);
    u.z = pack2_bf16(v[4], v[5]); u.w = pack2_bf16(v[6], v[7]);
    *reinterpret_cast<uint4*>(p) = u;
}
__device__ __forceinline__ void store8(f16* p, const float (&v)[8]) {
    uint4 u;
    u.x = pack2_f16(v[0], v[1]); u.y = pack2_f16(v[2], v[3]);
    u.z = pack2_f16(v[4], v[5]); u.w = pack2_f16(v[6], v[7]);
    *reinterpret_cast<uint4*>(p) = u;
}
__device__ __forceinline__ void store8(float* p, const float (&v)[8]) {
    reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}

// ---------------------------------------------------------------------------
// 2. Fast math for epilogues
// ---------------------------------------------------------------------------
// The *_fast forms use the SFU approximations (ex2.approx, tanh.approx,
// rcp.approx): relative error around 1e-6 for exp/sigmoid and about 2^-11 for
// tanh_fast, ample for bf16/f16 outputs.  The plain forms (gelu_erf,
// softplus's log1p) use CUDA's accurate library functions.

__device__ __forceinline__ float pos_inf() { return __int_as_float(0x7f800000); }
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// 2^x with the SFU (ftz: subnormal results flush to 0, fine for exp).
__device__ __forceinline__ float exp2_fast(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
// e^x = 2^(x*log2(e)).  exp_fast(-inf) = 0, exp_fast(+inf) = +inf.
__device__ __forceinline__ float exp_fast(float x) { return exp2_fast(x * 1.4426950408889634f); }
// natural log via the SFU's log2.
__device__ __forceinline__ float log_fast(float x) {
    float y;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y * 0.6931471805599453f;
}
__device__ __forceinline__ float rcp_fast(float x) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
__device__ __forceinline__ float rsqrt_fast(float x) { return rsqrtf(x); }

// tanh: hardware approximation (sm_75+), max rel. error about 2^-11.
__device__ __forceinline__ float tanh_fast(float x) {
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
// tanh accurate to a few ulp, for when tanh_fast's 2^-11 is not enough.
__device__ __forceinline__ float tanh_acc(float x) { return tanhf(x); }

// sigmoid(x) = 1 / (1 + e^-x); saturates cleanly to 0 / 1 at +-inf.
__device__ __forceinline__ float sigmoid(float x) { return rcp_fast(1.0f + exp_fast(-x)); }
// silu(x) = x * sigmoid(x)
__device__ __forceinline__ float silu(float x) { return x * sigmoid(x); }
// gelu, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
__device__ __forceinline__ float gelu_tanh(float x) {
    const float k0 = 0.7978845608028654f, k1 = 0.044715f;
    float u = k0 * (x + k1 * x * x * x);
    return 0.5f * x * (1.0f + tanh_fast(u));
}
// gelu, exact form: 0.5 x (1 + erf(x / sqrt 2))
__device__ __forceinline__ float gelu_erf(float x) {
    return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
}
// softplus(x) = log(1 + e^x), with PyTorch's default threshold (beta = 1,
// threshold = 20): x itself above 20.
__device__ __forceinline__ float softplus(float x) {
    return x > 20.0f ? x : log1pf(exp_fast(x));
}
__device__ __forceinline__ float relu(float x) { return fmaxf(x, 0.0f); }

// ---------------------------------------------------------------------------
// 3. Warp shuffles
// ---------------------------------------------------------------------------
// Lane layout reminder for the mma.sync m16n8 accumulator (and wgmma's):
// lane = 4*g + t; the 4 lanes of a quad (same g) hold the same rows, and the
// 8 lanes with the same t hold the same columns.

__device__ __forceinline__ float shfl_xor(float v, int mask) {
    return __shfl_xor_sync(0xffffffffu, v, mask);
}
__device__ __forceinline__ float shfl_idx(float v, int src_lane) {
    return __shfl_sync(0xffffffffu, v, src_lane);
}

// Reductions over the 4 lanes of a quad (lanes 4g..4g+3); result in all 4.
__device__ __forceinline__ float quad_sum(float v) {
    v += shfl_xor(v, 1);
    v += shfl_xor(v, 2);
    return v;
}
__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, shfl_xor(v, 1));
    v = fmaxf(v, shfl_xor(v, 2));
    return v;
}
// Reductions over the 8 lanes with the same (lane % 4); result in all 8.
__device__ __forceinline__ float column_lanes_sum(float v) {
    v += shfl_xor(v, 4);
    v += shfl_xor(v, 8);
    v += shfl_xor(v, 16);
    return v;
}
// Whole-warp reductions; result in every lane.
__device__ __forceinline__ float warp_sum(float v) {
    v += shfl_xor(v, 16);
    v += shfl_xor(v, 8);
    v += shfl_xor(v, 4);
    v += shfl_xor(v, 2);
    v += shfl_xor(v, 1);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    v = fmaxf(v, shfl_xor(v, 16));
    v = fmaxf(v, shfl_xor(v, 8));
    v = fmaxf(v, shfl_xor(v, 4));
    v = fmaxf(v, shfl_xor(v, 2));
    v = fmaxf(v, shfl_xor(v, 1));
    return v;
}

}  // namespace coda

#endif  // CODA_COMMON_CUH
