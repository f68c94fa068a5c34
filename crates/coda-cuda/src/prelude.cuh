// coda_codegen.cuh -- device helpers of the code that codac generates.
//
// Embedded verbatim after coda_common.cuh, coda_epilogue.cuh and
// coda_gemm_sm80.cuh in every .cu file codac emits.  Everything lives in
// namespace cg and implements the semantics of the reference interpreter in
// fp32 (see docs/codegen.md):
//   * bounded loads (0 outside the buffer) and stores of bf16 / f16 / f32 /
//     i32 elements, with pair stores when the address allows them;
//   * elementwise functions with the interpreter's definitions;
//   * rotary tables, partners and angles (angles formed from fp32 pieces
//     and reduced to [-pi, pi] before the fp32 sine / cosine of the SFU);
//   * block reductions in a fixed order for TPR threads per row (TPR = 1:
//     a thread reduces alone), and finishing of per-tile partial buffers;
//   * grid reductions: per-CTA partials, a ticket counter, and the fixed-
//     order reduction of the partials by the CTA that arrives last.
#ifndef CODA_CODEGEN_CUH
#define CODA_CODEGEN_CUH

namespace cg {

// ---------------------------------------------------------------------------
// Loads: element (m, k) of a row-major buffer with leading dimension ld, or 0
// outside rows x cols.
// ---------------------------------------------------------------------------
// One unsigned comparison per axis (a negative index wraps above any
// size): the checked pair loop of a GEMM epilogue is mostly such checks,
// 11% fewer instructions than with signed bounds on both sides.
__device__ __forceinline__ bool inside(int m, int k, int rows, int cols) {
    return (unsigned)m < (unsigned)rows && (unsigned)k < (unsigned)cols;
}
// Predicated accesses: one instruction under a predicate instead of a
// branch around it. A GEMM epilogue's pair loop is unrolled; with a branch
// around every bounded load, each load began its own basic block and its
// latency was paid in turn (the dgrad epilogues of a Llama backward spent
// 0.6-0.8 ms so); predicated, the compiler issues later pairs' loads early.
// Loads go through the read-only path (ld.global.nc, like __ldg) and read
// 0 when the predicate is false; nothing is accessed then.
__device__ __forceinline__ unsigned ldg_b32_if(const void* q, bool p) {
    unsigned v;
    asm("{\n\t.reg .pred q;\n\tsetp.ne.b32 q, %2, 0;\n\tmov.b32 %0, 0;\n\t@q ld.global.nc.b32 %0, [%1];\n\t}"
        : "=r"(v)
        : "l"(q), "r"((int)p));
    return v;
}
__device__ __forceinline__ unsigned short ldg_b16_if(const void* q, bool p) {
    unsigned short v;
    asm("{\n\t.reg .pred q;\n\tsetp.ne.b32 q, %2, 0;\n\tmov.b16 %0, 0;\n\t@q ld.global.nc.b16 %0, [%1];\n\t}"
        : "=h"(v)
        : "l"(q), "r"((int)p));
    return v;
}
__device__ __forceinline__ uint2 ldg_b64_if(const void* q, bool p) {
    uint2 v;
    asm("{\n\t.reg .pred q;\n\tsetp.ne.b32 q, %3, 0;\n\tmov.b32 %0, 0;\n\tmov.b32 %1, 0;\n\t"
        "@q ld.global.nc.v2.b32 {%0, %1}, [%2];\n\t}"
        : "=r"(v.x), "=r"(v.y)
        : "l"(q), "r"((int)p));
    return v;
}
// PTX setting predicates e0..e3 from bits 0..3 of the asm operand `mask`
// (its "%N" text), with a .b32 scratch register t declared by the caller:
// the element-fallback predicates of the quad loads below.
#define CG_ELEMENT_PREDICATES(mask)                          \
    "and.b32 t, " mask ", 1;\n\tsetp.ne.b32 e0, t, 0;\n\t" \
    "and.b32 t, " mask ", 2;\n\tsetp.ne.b32 e1, t, 0;\n\t" \
    "and.b32 t, " mask ", 4;\n\tsetp.ne.b32 e2, t, 0;\n\t" \
    "and.b32 t, " mask ", 8;\n\tsetp.ne.b32 e3, t, 0;\n\t"
// Four consecutive 32-bit words at q: one 16-byte load if `quad`, else
// word d if bit d of `each` is set (0 elsewhere). One asm statement, so all
// loads write the same four registers: a quad load costs four registers in
// flight, not eight (the epilogue's loads in flight are bounded by the
// registers left beside the accumulators).
__device__ __forceinline__ uint4 ldg_w4_if(const void* q, bool quad, unsigned each) {
    uint4 v;
    asm("{\n\t.reg .pred q, e0, e1, e2, e3;\n\t.reg .b32 t;\n\t"
        "setp.ne.b32 q, %5, 0;\n\t"
        CG_ELEMENT_PREDICATES("%6")
        "mov.b32 %0, 0;\n\tmov.b32 %1, 0;\n\tmov.b32 %2, 0;\n\tmov.b32 %3, 0;\n\t"
        "@q ld.global.nc.v4.b32 {%0, %1, %2, %3}, [%4];\n\t"
        "@e0 ld.global.nc.b32 %0, [%4];\n\t"
        "@e1 ld.global.nc.b32 %1, [%4+4];\n\t"
        "@e2 ld.global.nc.b32 %2, [%4+8];\n\t"
        "@e3 ld.global.nc.b32 %3, [%4+12];\n\t}"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(q), "r"((int)quad), "r"(each));
    return v;
}
// The same for four consecutive 16-bit elements: two 32-bit words, each
// holding a pair.
__device__ __forceinline__ uint2 ldg_h4_if(const void* q, bool quad, unsigned each) {
    uint2 v;
    asm("{\n\t.reg .pred q, e0, e1, e2, e3;\n\t.reg .b32 t;\n\t.reg .b16 h0, h1, h2, h3;\n\t"
        "setp.ne.b32 q, %3, 0;\n\t"
        CG_ELEMENT_PREDICATES("%4")
        "mov.b16 h0, 0;\n\tmov.b16 h1, 0;\n\tmov.b16 h2, 0;\n\tmov.b16 h3, 0;\n\t"
        "@e0 ld.global.nc.b16 h0, [%2];\n\t"
        "@e1 ld.global.nc.b16 h1, [%2+2];\n\t"
        "@e2 ld.global.nc.b16 h2, [%2+4];\n\t"
        "@e3 ld.global.nc.b16 h3, [%2+6];\n\t"
        "mov.b32 %0, {h0, h1};\n\tmov.b32 %1, {h2, h3};\n\t"
        "@q ld.global.nc.v2.b32 {%0, %1}, [%2];\n\t}"
        : "=r"(v.x), "=r"(v.y)
        : "l"(q), "r"((int)quad), "r"(each));
    return v;
}
// A hint: the line holding element (m, k) is fetched into L2 if inside.
template <class T>
__device__ __forceinline__ void prefetch_l2(const T* p, long long ld, int m, int k, int rows, int cols) {
    const T* q = p + (long long)m * ld + k;
    asm volatile("{\n\t.reg .pred q;\n\tsetp.ne.b32 q, %1, 0;\n\t@q prefetch.global.L2 [%0];\n\t}" ::"l"(q),
                 "r"((int)inside(m, k, rows, cols)));
}
// Vector accesses of buffers aligned by construction (load2_aligned and
// the rest below), predicated like the accesses above but in asm volatile:
// the compiler keeps them in program order with the stores instead of
// hoisting every load of the unrolled pair loop, which spilled registers.
__device__ __forceinline__ unsigned ldg_b32_on(const void* q, bool p) {
    unsigned v;
    asm volatile("{\n\t.reg .pred q;\n\tsetp.ne.b32 q, %2, 0;\n\tmov.b32 %0, 0;\n\t@q ld.global.nc.b32 %0, [%1];\n\t}"
                 : "=r"(v)
                 : "l"(q), "r"((int)p));
    return v;
}
__device__ __forceinline__ uint2 ldg_b64_on(const void* q, bool p) {
    uint2 v;
    asm volatile("{\n\t.reg .pred q;\n\tsetp.ne.b32 q, %3, 0;\n\tmov.b32 %0, 0;\n\tmov.b32 %1, 0;\n\t"
                 "@q ld.global.nc.v2.b32 {%0, %1}, [%2];\n\t}"
                 : "=r"(v.x), "=r"(v.y)
                 : "l"(q), "r"((int)p));
    return v;
}
__device__ __forceinline__ uint4 ldg_b128_on(const void* q, bool p) {
    uint4 v;
    asm volatile("{\n\t.reg .pred q;\n\tsetp.ne.b32 q, %5, 0;\n\tmov.b32 %0, 0;\n\tmov.b32 %1, 0;\n\t"
                 "mov.b32 %2, 0;\n\tmov.b32 %3, 0;\n\t@q ld.global.nc.v4.b32 {%0, %1, %2, %3}, [%4];\n\t}"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(q), "r"((int)p));
    return v;
}
// Stores: volatile (they have no outputs) but with no memory clobber, so
// loads of read-only inputs may still move across them.
__device__ __forceinline__ void stg_b32_if(void* q, unsigned v, bool p) {
    asm volatile("{\n\t.reg .pred q;\n\tsetp.ne.b32 q, %2, 0;\n\t@q st.global.b32 [%0], %1;\n\t}" ::"l"(q), "r"(v),
                 "r"((int)p));
}
__device__ __forceinline__ void stg_b16_if(void* q, unsigned short v, bool p) {
    asm volatile("{\n\t.reg .pred q;\n\tsetp.ne.b32 q, %2, 0;\n\t@q st.global.b16 [%0], %1;\n\t}" ::"l"(q), "h"(v),
                 "r"((int)p));
}
__device__ __forceinline__ void stg_b64_if(void* q, unsigned a, unsigned b, bool p) {
    asm volatile("{\n\t.reg .pred q;\n\tsetp.ne.b32 q, %3, 0;\n\t@q st.global.v2.b32 [%0], {%1, %2};\n\t}" ::"l"(q),
                 "r"(a), "r"(b), "r"((int)p));
}
// One element of a 16-bit or 32-bit float type, as bits, read if `in`.
template <class T>
__device__ __forceinline__ float load_if(const T* q, bool in) {
    if constexpr (sizeof(T) == 4) {
        return __uint_as_float(ldg_b32_if(q, in));
    } else {
        const unsigned bits = ldg_b16_if(q, in);
        return coda::unpack_pair<T>(bits).x;
    }
}

template <class T>
__device__ __forceinline__ float load(const T* p, long long ld, int m, int k, int rows, int cols) {
    return load_if(p + (long long)m * ld + k, inside(m, k, rows, cols));
}
__device__ __forceinline__ float load(const int* p, long long ld, int m, int k, int rows, int cols) {
    return inside(m, k, rows, cols) ? (float)__ldg(p + (long long)m * ld + k) : 0.0f;
}

// The same through L2 only (ld.global.cg): for buffers that other CTAs
// write while the kernel runs (a GEMM's row prelude outputs), which the
// read-only path (__ldg) could serve stale.
__device__ __forceinline__ float load_cg(const float* p, long long ld, int m, int k, int rows, int cols) {
    return inside(m, k, rows, cols) ? __ldcg(p + (long long)m * ld + k) : 0.0f;
}
__device__ __forceinline__ float load_cg(const __nv_bfloat16* p, long long ld, int m, int k, int rows, int cols) {
    return inside(m, k, rows, cols) ? __bfloat162float(__ldcg(p + (long long)m * ld + k)) : 0.0f;
}
__device__ __forceinline__ float load_cg(const __half* p, long long ld, int m, int k, int rows, int cols) {
    return inside(m, k, rows, cols) ? __half2float(__ldcg(p + (long long)m * ld + k)) : 0.0f;
}
__device__ __forceinline__ float load_cg(const int* p, long long ld, int m, int k, int rows, int cols) {
    return inside(m, k, rows, cols) ? (float)__ldcg(p + (long long)m * ld + k) : 0.0f;
}

// Elements (m, k) and (m, k + 1) as a float2: one 4- or 8-byte load when
// both are inside, k and ld are even and the base is aligned; else element
// loads. All three loads are predicated (see ldg_b32_if): the pair load,
// or the element loads when the pair is not whole or not aligned. For any
// buffer; load2_aligned is the one for buffers aligned by construction.
template <class T>
__device__ __forceinline__ float2 load2(const T* p, long long ld, int m, int k, int rows, int cols) {
    if constexpr (coda::is_same<T, int>::value) {
        return make_float2(load(p, ld, m, k, rows, cols), load(p, ld, m, k + 1, rows, cols));
    } else {
        const bool in0 = inside(m, k, rows, cols), in1 = inside(m, k + 1, rows, cols);
        const bool pair =
            in0 && in1 && ((ld | (long long)k) & 1) == 0 && ((unsigned long long)p & (2 * sizeof(T) - 1)) == 0;
        const T* q = p + (long long)m * ld + k;
        if constexpr (sizeof(T) == 4) {
            const uint2 w = ldg_b64_if(q, pair);
            const unsigned a = ldg_b32_if(q, in0 && !pair), b = ldg_b32_if(q + 1, in1 && !pair);
            return make_float2(__uint_as_float(pair ? w.x : a), __uint_as_float(pair ? w.y : b));
        } else {
            const unsigned w = ldg_b32_if(q, pair);
            const unsigned a = ldg_b16_if(q, in0 && !pair), b = ldg_b16_if(q + 1, in1 && !pair);
            return coda::unpack_pair<T>(pair ? w : (a | (b << 16)));
        }
    }
}

// Whether the four elements at (m, k) are one aligned vector inside the buffer.
template <class T>
__device__ __forceinline__ bool whole_quad(const T* p, long long ld, int m, int k, int rows, int cols) {
    return inside(m, k, rows, cols) && inside(m, k + 3, rows, cols) && ((ld | (long long)k) & 3) == 0 &&
           ((unsigned long long)p & (4 * sizeof(T) - 1)) == 0;
}
// A quad's four floats from the words a load gave: four f32 words, or two
// words of 16-bit pairs.
__device__ __forceinline__ float4 quad_floats(uint4 w) {
    return make_float4(__uint_as_float(w.x), __uint_as_float(w.y), __uint_as_float(w.z), __uint_as_float(w.w));
}
template <class T>
__device__ __forceinline__ float4 quad_floats(uint2 w) {
    const float2 lo = coda::unpack_pair<T>(w.x), hi = coda::unpack_pair<T>(w.y);
    return make_float4(lo.x, lo.y, hi.x, hi.y);
}
// Elements (m, k) .. (m, k + 3) as a float4: one 16-byte (f32) or 8-byte
// (16-bit) load when all four are inside, k and ld are multiples of 4 and
// the base is aligned; else four predicated element loads. A GEMM epilogue
// reads the even and odd columns of a tensor in pair layout with it (both
// halves of an accumulator pair, docs/backward.md) when the tensor is not
// aligned by construction (load4_aligned otherwise).
template <class T>
__device__ __forceinline__ float4 load4(const T* p, long long ld, int m, int k, int rows, int cols) {
    static_assert(!coda::is_same<T, int>::value, "load4 reads floats");
    const bool in0 = inside(m, k, rows, cols), in3 = inside(m, k + 3, rows, cols);
    const bool quad =
        in0 && in3 && ((ld | (long long)k) & 3) == 0 && ((unsigned long long)p & (4 * sizeof(T) - 1)) == 0;
    unsigned each = 0;
#pragma unroll
    for (int d = 0; d < 4; ++d) each |= (!quad && inside(m, k + d, rows, cols)) ? 1u << d : 0u;
    const T* q = p + (long long)m * ld + k;
    if constexpr (sizeof(T) == 4) return quad_floats(ldg_w4_if(q, quad, each));
    else return quad_floats<T>(ldg_h4_if(q, quad, each));
}

// ---------------------------------------------------------------------------
// Vector accesses of buffers aligned by construction (docs/codegen.md,
// "Aligned epilogue operands"): a scratch buffer, or a staging buffer (a
// block input itself when it is 16-byte aligned with a row stride that is a
// multiple of 8 elements, else its padded copy), at a column k that is a
// multiple of the vector (the emitter asks only then). The bounds are the
// one check left: the vector is read (written) when its first element is
// inside, so no element fallback and no second copy of the pair loop for
// interior tiles (which had doubled the NVRTC compile of the dSwiGLU
// backward). Elements past the buffer's columns read as 0 (are not
// written) unless kWhole, which the emitter sets when the columns are a
// constant multiple of the vector. A vector whose first element is inside
// stays within the aligned word that holds it, so inside the allocation.
// ---------------------------------------------------------------------------
template <bool kWhole, class T>
__device__ __forceinline__ float2 load2_aligned(const T* p, long long ld, int m, int k, int rows, int cols) {
    if constexpr (coda::is_same<T, int>::value) {
        return load2(p, ld, m, k, rows, cols);
    } else {
        const T* q = p + (long long)m * ld + k;
        const bool in = inside(m, k, rows, cols);
        float2 v;
        if constexpr (sizeof(T) == 4) {
            const uint2 w = ldg_b64_on(q, in);
            v = make_float2(__uint_as_float(w.x), __uint_as_float(w.y));
        } else {
            v = coda::unpack_pair<T>(ldg_b32_on(q, in));
        }
        if constexpr (!kWhole) v.y = k + 1 < cols ? v.y : 0.0f;
        return v;
    }
}
template <bool kWhole, class T>
__device__ __forceinline__ float4 load4_aligned(const T* p, long long ld, int m, int k, int rows, int cols) {
    static_assert(!coda::is_same<T, int>::value, "load4_aligned reads floats");
    const T* q = p + (long long)m * ld + k;
    const bool in = inside(m, k, rows, cols);
    float4 v;
    if constexpr (sizeof(T) == 4) v = quad_floats(ldg_b128_on(q, in));
    else v = quad_floats<T>(ldg_b64_on(q, in));
    if constexpr (!kWhole) {
        v.y = k + 1 < cols ? v.y : 0.0f;
        v.z = k + 2 < cols ? v.z : 0.0f;
        v.w = k + 3 < cols ? v.w : 0.0f;
    }
    return v;
}

// load4_aligned's words for a 16-bit buffer, unconverted (convert them with
// quad_floats<T>): a staged-subtile epilogue holds a few pairs' quads in
// registers ahead of the pair that reads them, two words per quad.
template <bool kWhole, class T>
__device__ __forceinline__ uint2 quad_bits(const T* p, long long ld, int m, int k, int rows, int cols) {
    static_assert(sizeof(T) == 2, "quad_bits reads 16-bit elements");
    uint2 w = ldg_b64_on(p + (long long)m * ld + k, inside(m, k, rows, cols));
    if constexpr (!kWhole) {
        w.x = k + 1 < cols ? w.x : (w.x & 0xffffu);
        w.y = k + 3 < cols ? w.y : (k + 2 < cols ? (w.y & 0xffffu) : 0u);
    }
    return w;
}

// ---------------------------------------------------------------------------
// Chunks of V consecutive elements (m, k) .. (m, k + V - 1), V = 2, 4 or 8:
// the column loops of CTA-per-row kernels (docs/codegen.md, "Row kernels in
// chunks"). One vector access (coda::load2 / load4 / load8 and their
// stores: 16 bytes at most per instruction, so two for eight f32) when all
// V are inside and the chunk's address is aligned to its size (at most 16
// bytes), which for a tensor with a 16-byte aligned base and a row stride
// of a multiple of 8 elements is every chunk at a column that is a
// multiple of V; element accesses otherwise, so any layout reads and
// writes the same values.
// ---------------------------------------------------------------------------
template <int V, class T>
__device__ __forceinline__ bool whole_chunk(const T* q, int m, int k, int rows, int cols) {
    constexpr unsigned long long kAlign = V * sizeof(T) < 16 ? V * sizeof(T) : 16;
    return inside(m, k, rows, cols) && inside(m, k + V - 1, rows, cols) && ((unsigned long long)q & (kAlign - 1)) == 0;
}
template <int V, class T>
__device__ __forceinline__ void load_chunk(float (&v)[V], const T* p, long long ld, int m, int k, int rows, int cols) {
    static_assert(V == 2 || V == 4 || V == 8, "chunks of 2, 4 or 8 elements");
    if constexpr (!coda::is_same<T, int>::value) {
        const T* q = p + (long long)m * ld + k;
        if (whole_chunk<V>(q, m, k, rows, cols)) {
            if constexpr (V == 8) coda::load8(q, v);
            else if constexpr (V == 4) coda::load4(q, v);
            else {
                const float2 pair = coda::load2(q);
                v[0] = pair.x, v[1] = pair.y;
            }
            return;
        }
    }
#pragma unroll
    for (int e = 0; e < V; ++e) v[e] = load(p, ld, m, k + e, rows, cols);
}

// ---------------------------------------------------------------------------
// Rows staged in shared memory (docs/codegen.md, "Rows staged in shared
// memory"): a CTA-per-row kernel of T threads copies row m of a row stream
// into a shared array s of W elements (stage_row, every copy of the row in
// flight together), waits for the copies of all its streams (stage_wait),
// and its passes read the array (srow, srow_chunk: 0 outside the W
// columns, as a bounded load). A row that is wholly inside the buffer and
// 16-byte aligned is copied in 16-byte cp.async pieces; any other row
// element by element, with the bounded loads above.
// ---------------------------------------------------------------------------
template <int T, int W, class E>
__device__ __forceinline__ void stage_row(E* s, const E* p, long long ld, int m, int rows, int cols) {
    constexpr int V = 16 / (int)sizeof(E);
    static_assert(W % V == 0, "a staged row is whole 16-byte pieces");
    const E* row = p + (long long)m * ld;
    if ((unsigned)m < (unsigned)rows && cols >= W && ((unsigned long long)row & 15) == 0) {
        for (int c = (int)threadIdx.x * V; c < W; c += T * V) {
            const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(s + c));
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(row + c) : "memory");
        }
        return;
    }
    for (int c = (int)threadIdx.x; c < W; c += T) s[c] = coda::from_float<E>(load(p, ld, m, c, rows, cols));
}
// cp.async.wait_all commits this thread's copies and waits for them; the
// barrier then waits for every thread's.
__device__ __forceinline__ void stage_wait() {
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    __syncthreads();
}
template <int W, class E>
__device__ __forceinline__ float srow(const E* s, int k) {
    return (unsigned)k < (unsigned)W ? coda::to_float(s[k]) : 0.0f;
}
template <int W, int V, class E>
__device__ __forceinline__ void srow_chunk(float (&v)[V], const E* s, int k) {
    static_assert(V == 2 || V == 4 || V == 8, "chunks of 2, 4 or 8 elements");
    if (k >= 0 && k + V <= W && k % V == 0) {
        const E* q = s + k;
        if constexpr (sizeof(E) == 2) {
            unsigned u[V / 2];
            if constexpr (V == 8) {
                const uint4 w = *reinterpret_cast<const uint4*>(q);
                u[0] = w.x, u[1] = w.y, u[2] = w.z, u[3] = w.w;
            } else if constexpr (V == 4) {
                const uint2 w = *reinterpret_cast<const uint2*>(q);
                u[0] = w.x, u[1] = w.y;
            } else {
                u[0] = *reinterpret_cast<const unsigned*>(q);
            }
#pragma unroll
            for (int i = 0; i < V / 2; ++i) {
                const float2 f = coda::unpack_pair<E>(u[i]);
                v[2 * i] = f.x, v[2 * i + 1] = f.y;
            }
        } else {
#pragma unroll
            for (int i = 0; i < V; i += 2) {
                const float2 f = *reinterpret_cast<const float2*>(q + i);
                v[i] = f.x, v[i + 1] = f.y;
            }
        }
        return;
    }
#pragma unroll
    for (int e = 0; e < V; ++e) v[e] = srow<W>(s, k + e);
}

// ---------------------------------------------------------------------------
// Stores (bounded).  i32 stores truncate toward zero, saturating, NaN -> 0.
// ---------------------------------------------------------------------------
__device__ __forceinline__ void put(float* p, float v) { *p = v; }
__device__ __forceinline__ void put(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void put(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void put(int* p, float v) { *p = __float2int_rz(v); }
__device__ __forceinline__ float get(const float* p) { return *p; }
__device__ __forceinline__ float get(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ float get(const __half* p) { return __half2float(*p); }
__device__ __forceinline__ float get(const int* p) { return (float)*p; }

// The bits of v as a 16-bit element type (round to nearest even).
template <class T>
__device__ __forceinline__ unsigned short half_bits(float v) {
    return (unsigned short)(coda::pack_pair<T>(v, 0.0f) & 0xffffu);
}
template <class T>
__device__ __forceinline__ void st(T* p, long long ld, int m, int k, int rows, int cols, float v) {
    T* q = p + (long long)m * ld + k;
    const bool in = inside(m, k, rows, cols);
    if constexpr (coda::is_same<T, int>::value) {
        if (in) put(q, v);
    } else if constexpr (sizeof(T) == 4) {
        stg_b32_if(q, __float_as_uint(v), in);
    } else {
        stg_b16_if(q, half_bits<T>(v), in);
    }
}
template <class T>
__device__ __forceinline__ void st_acc(T* p, long long ld, int m, int k, int rows, int cols, float v) {
    if (inside(m, k, rows, cols)) {
        T* q = p + (long long)m * ld + k;
        put(q, get(q) + v);
    }
}
// Elements (m, k) and (m, k + 1): one 4- or 8-byte store when both are
// inside, k and ld are even and the base is aligned; else element stores.
// All predicated, like load2.
template <class T>
__device__ __forceinline__ void st2(T* p, long long ld, int m, int k, int rows, int cols, float v0, float v1) {
    if constexpr (coda::is_same<T, int>::value) {
        st(p, ld, m, k, rows, cols, v0);
        st(p, ld, m, k + 1, rows, cols, v1);
    } else {
        const bool in0 = inside(m, k, rows, cols), in1 = inside(m, k + 1, rows, cols);
        const bool pair =
            in0 && in1 && ((ld | (long long)k) & 1) == 0 && ((unsigned long long)p & (2 * sizeof(T) - 1)) == 0;
        T* q = p + (long long)m * ld + k;
        if constexpr (sizeof(T) == 4) {
            stg_b64_if(q, __float_as_uint(v0), __float_as_uint(v1), pair);
            stg_b32_if(q, __float_as_uint(v0), in0 && !pair);
            stg_b32_if(q + 1, __float_as_uint(v1), in1 && !pair);
        } else {
            stg_b32_if(q, coda::pack_pair<T>(v0, v1), pair);
            stg_b16_if(q, half_bits<T>(v0), in0 && !pair);
            stg_b16_if(q + 1, half_bits<T>(v1), in1 && !pair);
        }
    }
}
// st2 into a buffer aligned by construction (see load2_aligned): the pair
// when its first element is inside, or that element alone at an odd last
// column (never when kWhole).
template <bool kWhole, class T>
__device__ __forceinline__ void st2_aligned(T* p, long long ld, int m, int k, int rows, int cols, float v0,
                                            float v1) {
    if constexpr (coda::is_same<T, int>::value) {
        st2(p, ld, m, k, rows, cols, v0, v1);
    } else {
        const bool in = inside(m, k, rows, cols);
        const bool pair = kWhole || k + 1 < cols;
        T* q = p + (long long)m * ld + k;
        if constexpr (sizeof(T) == 4) {
            stg_b64_if(q, __float_as_uint(v0), __float_as_uint(v1), in && pair);
            if constexpr (!kWhole) stg_b32_if(q, __float_as_uint(v0), in && !pair);
        } else {
            stg_b32_if(q, coda::pack_pair<T>(v0, v1), in && pair);
            if constexpr (!kWhole) stg_b16_if(q, half_bits<T>(v0), in && !pair);
        }
    }
}
template <int V, class T>
__device__ __forceinline__ void st_chunk(T* p, long long ld, int m, int k, int rows, int cols, const float (&v)[V]) {
    static_assert(V == 2 || V == 4 || V == 8, "chunks of 2, 4 or 8 elements");
    if constexpr (!coda::is_same<T, int>::value) {
        T* q = p + (long long)m * ld + k;
        if (whole_chunk<V>(q, m, k, rows, cols)) {
            if constexpr (V == 8) coda::store8(q, v);
            else if constexpr (V == 4) coda::store4(q, v);
            else coda::store2(q, v[0], v[1]);
            return;
        }
    }
#pragma unroll
    for (int e = 0; e < V; ++e) st(p, ld, m, k + e, rows, cols, v[e]);
}
template <int V, class T>
__device__ __forceinline__ void st_chunk_acc(T* p, long long ld, int m, int k, int rows, int cols,
                                             const float (&v)[V]) {
#pragma unroll
    for (int e = 0; e < V; ++e) st_acc(p, ld, m, k + e, rows, cols, v[e]);
}
template <class T>
__device__ __forceinline__ void st2_acc(T* p, long long ld, int m, int k, int rows, int cols, float v0, float v1) {
    st_acc(p, ld, m, k, rows, cols, v0);
    st_acc(p, ld, m, k + 1, rows, cols, v1);
}

// ---------------------------------------------------------------------------
// Elementwise functions (the interpreter's definitions, in fp32)
// ---------------------------------------------------------------------------
// Pair layouts (coda_ir::PairPerm): the original index held at permuted
// position p, and the permuted position of original index c.
__device__ __forceinline__ int pair_source(int p, int start, int end, int group) {
    if (p < start || p >= end) return p;
    const int local = p - start, j = local % group;
    return start + (local - j) + (j & 1) * (group / 2) + (j >> 1);
}
__device__ __forceinline__ int pair_position(int c, int start, int end, int group) {
    if (c < start || c >= end) return c;
    const int local = c - start, j = local % group, half = group / 2;
    return start + (local - j) + (j < half ? 2 * j : 2 * (j - half) + 1);
}
__device__ __forceinline__ float nan_f() { return __int_as_float(0x7fc00000); }
__device__ __forceinline__ float sigmoid(float x) {
    if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
    const float e = expf(x);
    return e / (1.0f + e);
}
__device__ __forceinline__ float silu(float x) { return x * sigmoid(x); }
__device__ __forceinline__ float relu(float x) { return (x > 0.0f || x != x) ? x : 0.0f; }
__device__ __forceinline__ float gelu_tanh(float x) {
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}
// The standard normal distribution function (the complement keeps its
// relative precision far in the lower tail); the exact GELU is x ndtr(x).
__device__ __forceinline__ float ndtr(float x) { return 0.5f * erfcf(-x * 0.7071067811865476f); }
__device__ __forceinline__ float gelu_erf(float x) { return x * ndtr(x); }
__device__ __forceinline__ float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
__device__ __forceinline__ float rsqrt(float x) { return 1.0f / sqrtf(x); }
__device__ __forceinline__ float maximum(float a, float b) { return (a != a || b != b) ? nan_f() : fmaxf(a, b); }
__device__ __forceinline__ float minimum(float a, float b) { return (a != a || b != b) ? nan_f() : fminf(a, b); }
__device__ __forceinline__ float truth(bool b) { return b ? 1.0f : 0.0f; }
__device__ __forceinline__ float to_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
__device__ __forceinline__ float to_f16(float x) { return __half2float(__float2half_rn(x)); }
__device__ __forceinline__ float to_i32(float x) { return (float)__float2int_rz(x); }
__device__ __forceinline__ float to_bool(float x) { return x != 0.0f ? 1.0f : 0.0f; }
// The column an i32-valued index selects, or -1 when it is not an integer in [0, cols).
__device__ __forceinline__ int take_index(float x, int cols) {
    return (x >= 0.0f && x < (float)cols && x == floorf(x)) ? (int)x : -1;
}

// ---------------------------------------------------------------------------
// Rotary embeddings over columns [start, end) with head dim hd.
// ---------------------------------------------------------------------------
struct RopeCol {
    bool in;      // inside the rotated range
    bool first;   // first member of its pair
    int pair;     // pair index i within the head
    int partner;  // the other member (or the column itself outside the range)
};
__device__ __forceinline__ RopeCol rope_col(int n, int start, int end, int hd, bool interleaved) {
    RopeCol r;
    r.in = n >= start && n < end;
    if (!r.in) {
        r.first = false;
        r.pair = 0;
        r.partner = n;
        return r;
    }
    const int j = (n - start) % hd, half = hd / 2;
    r.pair = interleaved ? j / 2 : j % half;
    r.first = interleaved ? (j % 2 == 0) : (j < half);
    const int offset = interleaved ? 1 : half;
    r.partner = r.first ? n + offset : n - offset;
    return r;
}
// base^(-2 pair / hd) in double, as 2^(pair * c) with c = -2 log2(base) / hd
// precomputed by codac (a double literal).
__device__ __forceinline__ double rope_freq_d(int n, int start, int end, int hd, bool interleaved, double c) {
    const RopeCol r = rope_col(n, start, end, hd, interleaved);
    return r.in ? exp2((double)r.pair * c) : 0.0;
}
__device__ __forceinline__ float rope_freq(int n, int start, int end, int hd, bool interleaved, double c) {
    return (float)rope_freq_d(n, start, end, hd, interleaved, c);
}
__device__ __forceinline__ float rope_sign(int n, int start, int end, int hd, bool interleaved) {
    const RopeCol r = rope_col(n, start, end, hd, interleaved);
    return r.in ? (r.first ? -1.0f : 1.0f) : 0.0f;
}
__device__ __forceinline__ int rope_partner(int n, int start, int end, int hd, bool interleaved) {
    return rope_col(n, start, end, hd, interleaved).partner;
}
// The same frequency looked up in a table of the head's head_dim / 2
// frequencies (emitted by codac beside the kernel).
__device__ __forceinline__ float2 rope_freq_tab(int n, int start, int end, int hd, bool interleaved,
                                                const float2* table) {
    const RopeCol r = rope_col(n, start, end, hd, interleaved);
    return r.in ? __ldg(table + r.pair) : make_float2(0.0f, 0.0f);
}
// Partial rotary: only the first rd features of each head of hd turn, as a
// head of rd would; the others are outside the rotated range.
__device__ __forceinline__ RopeCol rope_col(int n, int start, int end, int hd, int rd, bool interleaved) {
    const bool turns = n >= start && n < end && (n - start) % hd < rd;
    const int head = turns ? (n - start) / hd * hd : 0;
    RopeCol r = rope_col(n - head, start, turns ? start + rd : start, rd, interleaved);
    r.partner += head;
    return r;
}
__device__ __forceinline__ double rope_freq_d(int n, int start, int end, int hd, int rd, bool interleaved, double c) {
    const RopeCol r = rope_col(n, start, end, hd, rd, interleaved);
    return r.in ? exp2((double)r.pair * c) : 0.0;
}
__device__ __forceinline__ float rope_freq(int n, int start, int end, int hd, int rd, bool interleaved, double c) {
    return (float)rope_freq_d(n, start, end, hd, rd, interleaved, c);
}
__device__ __forceinline__ float rope_sign(int n, int start, int end, int hd, int rd, bool interleaved) {
    const RopeCol r = rope_col(n, start, end, hd, rd, interleaved);
    return r.in ? (r.first ? -1.0f : 1.0f) : 0.0f;
}
__device__ __forceinline__ int rope_partner(int n, int start, int end, int hd, int rd, bool interleaved) {
    return rope_col(n, start, end, hd, rd, interleaved).partner;
}
__device__ __forceinline__ float2 rope_freq_tab(int n, int start, int end, int hd, int rd, bool interleaved,
                                                const float2* table) {
    const RopeCol r = rope_col(n, start, end, hd, rd, interleaved);
    return r.in ? __ldg(table + r.pair) : make_float2(0.0f, 0.0f);
}
// Top k: whether (x, column c) comes before (b, column bc) in decreasing
// order, NaN above every number, ties to the lower column (the
// interpreter's order); whether column c is among the first t taken; and the
// best of a warp's candidates, combined in a fixed butterfly.
__device__ __forceinline__ bool top_better(float x, int c, float b, int bc) {
    const bool xn = x != x, bn = b != b;
    if (xn != bn) return xn;
    if (!xn && x != b) return x > b;
    return c < bc;
}
__device__ __forceinline__ bool taken(int c, const int* columns, int t) {
    for (int u = 0; u < t; ++u)
        if (columns[u] == c) return true;
    return false;
}
__device__ __forceinline__ void warp_top(float& v, int& c) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, o);
        const int oc = __shfl_xor_sync(0xffffffffu, c, o);
        if (top_better(ov, oc, v, c)) {
            v = ov;
            c = oc;
        }
    }
}
// x * freq reduced to about [-pi, pi], then the SFU sine / cosine (absolute
// error below 4e-7 on [-pi, pi]).  The angle is formed in fp32 pieces, not in
// double (the conversions and rounding of the double form ran at a quarter
// of the fp32 rate and dominated a RoPE epilogue): freq = fh + fl (the
// table's float pair, see rope_freq_tab), x * fh exactly
// as p + e (fma), x * fl added to e, k = round(p / 2pi) by the 1.5 * 2^23
// trick (|p| < 2^24 for positions below 2^24), and p - k 2pi in three fma
// steps of a three-float 2pi, each rounding only a result of magnitude
// about pi: absolute error about 5e-7, for any integer x below 2^24.
__device__ __forceinline__ float reduced_angle(float x, float2 freq) {
    const float fh = freq.x, fl = freq.y;
    const float p = x * fh;
    const float e = fmaf(x, fl, fmaf(x, fh, -p));
    const float magic = 12582912.0f;  // 1.5 * 2^23
    const float k = __fsub_rn(__fmaf_rn(p, 0.15915493667125702f, magic), magic);
    float r = fmaf(-k, 6.2831854820251465f, p);
    r = fmaf(-k, -1.7484555314695172e-07f, r);
    r = fmaf(-k, -7.105427357601002e-15f, r);
    return r + e;
}
__device__ __forceinline__ float sin_angle(float x, float2 freq) { return __sinf(reduced_angle(x, freq)); }
__device__ __forceinline__ float cos_angle(float x, float2 freq) { return __cosf(reduced_angle(x, freq)); }
// Both of one angle, as {cos, sin}: a row's table of its rotary pairs.
__device__ __forceinline__ float2 cos_sin_angle(float x, float2 freq) {
    const float a = reduced_angle(x, freq);
    return make_float2(__cosf(a), __sinf(a));
}
// Column n's {cos, sin} from a table of the row's pairs (cos_sin_angle of
// the pair's frequency); {1, 0}, the zero angle, outside the rotated range.
__device__ __forceinline__ float2 rope_cs_tab(int n, int start, int end, int hd, bool interleaved, const float2* cs) {
    const RopeCol r = rope_col(n, start, end, hd, interleaved);
    return r.in ? cs[r.pair] : make_float2(1.0f, 0.0f);
}
__device__ __forceinline__ float2 rope_cs_tab(int n, int start, int end, int hd, int rd, bool interleaved,
                                              const float2* cs) {
    const RopeCol r = rope_col(n, start, end, hd, rd, interleaved);
    return r.in ? cs[r.pair] : make_float2(1.0f, 0.0f);
}

// ---------------------------------------------------------------------------
// Block reductions over the TPR threads of a row: TPR = 1 (a thread alone),
// 32 (a warp per row: butterflies only) or a multiple of 32 covering the
// whole CTA (one row per CTA: butterflies, then warps in index order through
// red, 2 * TPR / 32 floats of shared memory).  Fixed order; every thread of
// the row gets the result.
// ---------------------------------------------------------------------------
template <int TPR> __device__ __forceinline__ int lane() { return TPR == 1 ? 0 : (int)(threadIdx.x % TPR); }

template <int TPR>
__device__ __forceinline__ float block_sum(float v, float* red) {
    if constexpr (TPR == 1) {
        return v;
    } else if constexpr (TPR == 32) {
        return coda::warp_sum(v);
    } else {
        v = coda::warp_sum(v);
        __syncthreads();
        if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
        __syncthreads();
        float s = red[0];
#pragma unroll
        for (int w = 1; w < TPR / 32; ++w) s += red[w];
        return s;
    }
}
template <int TPR>
__device__ __forceinline__ float block_max(float v, float* red) {
    if constexpr (TPR == 1) {
        return v;
    } else {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v = maximum(v, coda::shfl_xor(v, o));
        if constexpr (TPR == 32) return v;
        __syncthreads();
        if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
        __syncthreads();
        float s = red[0];
#pragma unroll
        for (int w = 1; w < TPR / 32; ++w) s = maximum(s, red[w]);
        return s;
    }
}
// Log-sum-exp state (max, sum of exp(x - max)) merged over the block.
template <int TPR>
__device__ __forceinline__ void block_lse(float& m, float& s, float* red) {
    if constexpr (TPR == 1) {
        return;
    } else {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) coda::lse_merge(m, s, coda::shfl_xor(m, o), coda::shfl_xor(s, o));
        if constexpr (TPR == 32) return;
        __syncthreads();
        if ((threadIdx.x & 31) == 0) {
            red[threadIdx.x >> 5] = m;
            red[TPR / 32 + (threadIdx.x >> 5)] = s;
        }
        __syncthreads();
        float a = red[0], b = red[TPR / 32];
#pragma unroll
        for (int w = 1; w < TPR / 32; ++w) coda::lse_merge(a, b, red[w], red[TPR / 32 + w]);
        m = a;
        s = b;
    }
}
// ---------------------------------------------------------------------------
// Column-tile reductions of a column-reduction kernel: lane l of each of the
// W warps holds a partial of the tile's column l (its rows in turn); the
// partials meet in red (2 * 32 * W floats) and every thread combines its
// column's W partials in warp order. Fixed order; every thread of the
// column gets the result.
// ---------------------------------------------------------------------------
template <int W, class Op>
__device__ __forceinline__ float tile_col_fold(float v, float* red, Op op) {
    __syncthreads();
    red[threadIdx.x] = v;
    __syncthreads();
    const int l = (int)(threadIdx.x & 31);
    float s = red[l];
#pragma unroll
    for (int w = 1; w < W; ++w) s = op(s, red[w * 32 + l]);
    return s;
}
template <int W>
__device__ __forceinline__ float tile_col_sum(float v, float* red) {
    return tile_col_fold<W>(v, red, [](float a, float b) { return a + b; });
}
template <int W>
__device__ __forceinline__ float tile_col_max(float v, float* red) {
    return tile_col_fold<W>(v, red, [](float a, float b) { return maximum(a, b); });
}
template <int W>
__device__ __forceinline__ void tile_col_lse(float& m, float& s, float* red) {
    __syncthreads();
    red[threadIdx.x] = m;
    red[W * 32 + threadIdx.x] = s;
    __syncthreads();
    const int l = (int)(threadIdx.x & 31);
    float a = red[l], b = red[W * 32 + l];
#pragma unroll
    for (int w = 1; w < W; ++w) coda::lse_merge(a, b, red[w * 32 + l], red[W * 32 + w * 32 + l]);
    m = a;
    s = b;
}
// A NaN anywhere makes the log-sum-exp NaN (the interpreter's rule).
__device__ __forceinline__ void lse_push(float& m, float& s, float& bad, float x) {
    if (x != x) bad = x;
    else coda::lse_add(m, s, x);
}
__device__ __forceinline__ float lse_finish(float m, float s, float bad) {
    if (bad != 0.0f) return nan_f();
    if (m == coda::pos_inf()) return m;
    return coda::lse_value(m, s);
}

// ---------------------------------------------------------------------------
// Finishing per-tile partials: row r of a [rows][T] buffer (row tiles of a
// GEMM: sum, max or log-sum-exp merge over t = 0..T-1), column c of a
// [cols][T] buffer (sum).  TPR threads cooperate (TPR = 1: sequential).
// ---------------------------------------------------------------------------
// The partials are loaded 8 at a time (independent loads, one memory
// latency per 8) and combined in index order: the same result as the plain
// loop, which waited for each load before issuing the next (measured as the
// largest stall of a GEMM epilogue's row set-up on the H100).
struct AddPartial {
    __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
struct MaxPartial {
    __device__ __forceinline__ float operator()(float a, float b) const { return maximum(a, b); }
};
// This thread's share of row r's partials folded into s with op, in index order.
template <int TPR, class Op>
__device__ __forceinline__ float fold_partials(const float* p, long long ld, int r, int T, float s, Op op) {
    const float* row = p + (long long)r * ld;
    int t = lane<TPR>();
    for (; t + 7 * TPR < T; t += 8 * TPR) {
        float v[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) v[u] = row[t + u * TPR];
#pragma unroll
        for (int u = 0; u < 8; ++u) s = op(s, v[u]);
    }
    for (; t < T; t += TPR) s = op(s, row[t]);
    return s;
}
template <int TPR>
__device__ __forceinline__ float finish_sum(const float* p, long long ld, int r, int T, float* red) {
    return block_sum<TPR>(fold_partials<TPR>(p, ld, r, T, 0.0f, AddPartial()), red);
}
template <int TPR>
__device__ __forceinline__ float finish_max(const float* p, long long ld, int r, int T, float* red) {
    return block_max<TPR>(fold_partials<TPR>(p, ld, r, T, coda::neg_inf(), MaxPartial()), red);
}
// The same in a GEMM epilogue's row stage, where the four lanes of a quad
// hold the same rows: each lane loads every fourth partial (the first 16
// of a row without a loop, so that the loads of all the thread's rows are
// in flight together: four rows of 16 partials had cost eight memory
// latencies one after the other), then the quad combines its four values
// by butterfly.  Every lane gets the same bits (the combination is
// commutative at each step).  All four lanes must call it with the same r.
template <class Op>
__device__ __forceinline__ float quad_fold_partials(const float* p, long long ld, int r, int T, float id, Op op) {
    const float* row = p + (long long)r * ld;
    const int q = (int)(threadIdx.x & 3u);
    float v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = q + 4 * u < T ? row[q + 4 * u] : id;
    float s = op(op(v[0], v[1]), op(v[2], v[3]));
#pragma unroll 1
    for (int t = q + 16; t < T; t += 4) s = op(s, row[t]);
    s = op(s, coda::shfl_xor(s, 1));
    return op(s, coda::shfl_xor(s, 2));
}
__device__ __forceinline__ float finish_sum_quad(const float* p, long long ld, int r, int T) {
    return quad_fold_partials(p, ld, r, T, 0.0f, AddPartial());
}
__device__ __forceinline__ float finish_max_quad(const float* p, long long ld, int r, int T) {
    return quad_fold_partials(p, ld, r, T, coda::neg_inf(), MaxPartial());
}
template <int TPR>
__device__ __forceinline__ float finish_lse(const float* pm, const float* ps, long long ld, int r, int T, float* red) {
    float m = coda::neg_inf(), s = 0.0f, bad = 0.0f;
    for (int t = lane<TPR>(); t < T; t += TPR) {
        const float pmax = pm[(long long)r * ld + t];
        if (pmax != pmax) bad = pmax;
        else coda::lse_merge(m, s, pmax, ps[(long long)r * ld + t]);
    }
    bad = block_sum<TPR>(bad != 0.0f ? 1.0f : 0.0f, red);
    block_lse<TPR>(m, s, red);
    return lse_finish(m, s, bad);
}

// Column vectors of a GEMM epilogue (gains, biases: one value per output
// column) staged per tile, so that the pair loop reads them from shared
// memory instead of waiting on one global load per column pair (measured
// as the largest epilogue stall of an out-projection + residual + RMSNorm
// kernel on the H100).  Slot s of the area after the scratch's first
// t.smem_bytes bytes holds elements [tile_n0, tile_n0 + BN) of the vector,
// BN * 4 bytes per slot.  stage_col_async (from the functor's prefetch)
// issues 4-byte cp.async copies of the tile's slice (elements past cols
// read as 0); stage_cols_finish (every thread, before the pair loop) waits
// for them; col_pair reads the pair at column k (the thread's own) from the
// slot, with no other path in the pair loop.  A vector whose base is not
// 4-byte aligned (uniform over the CTA, and rare) is copied into its slot
// element by element, synchronously, in a loop that is not unrolled: a
// global-memory fallback in every pair had made the out-projection's
// epilogue a third longer and its NVRTC compile 0.94 instead of 0.64 s.
// A mainloop without private scratch reads the vector from global memory.
template <class T, class Frag>
__device__ __forceinline__ void stage_col_elements(const Frag& f, const coda::TileInfo& t, char* slot_base,
                                                   const T* p, int cols) {
    static_assert(sizeof(T) == 2 || sizeof(T) == 4, "a staged column vector has 16- or 32-bit elements");
    typedef typename coda::conditional<sizeof(T) == 2, unsigned short, unsigned>::type Bits;
#pragma unroll 1
    for (int e = f.thread_index(); e < Frag::BN; e += Frag::kThreads) {
        const int c = t.tile_n0 + e;
        const Bits v = c < cols ? *reinterpret_cast<const Bits*>(p + c) : (Bits)0;
        *reinterpret_cast<Bits*>(slot_base + e * (int)sizeof(T)) = v;
    }
}
template <class T, class Frag>
__device__ __forceinline__ void stage_col_async(const Frag& f, const coda::TileInfo& t, int slot, float* smem,
                                                const T* p, int cols) {
    if constexpr (!Frag::kAsyncStage) return;
    if ((reinterpret_cast<unsigned long long>(p) & 3ull) != 0) {
        stage_col_elements(f, t, reinterpret_cast<char*>(smem) + t.smem_bytes + slot * Frag::BN * 4, p, cols);
        return;
    }
    constexpr int kWords = Frag::BN * (int)sizeof(T) / 4;
    const unsigned area = static_cast<unsigned>(__cvta_generic_to_shared(smem)) + (unsigned)t.smem_bytes +
                          (unsigned)(slot * Frag::BN * 4);
    const char* base = reinterpret_cast<const char*>(p);
    const long long end = (long long)cols * (long long)sizeof(T);
    for (int w = f.thread_index(); w < kWords; w += Frag::kThreads) {
        const long long at = (long long)t.tile_n0 * (long long)sizeof(T) + 4ll * w;
        const int valid = at >= end ? 0 : (end - at >= 4 ? 4 : (int)(end - at));
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(area + 4u * w),
                     "l"(valid > 0 ? base + at : base), "r"(valid)
                     : "memory");
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <class Frag>
__device__ __forceinline__ void stage_cols_finish(const Frag& f) {
    if (!Frag::kAsyncStage) return;
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    f.sync();
}
// The slots' base (after the scratch proper), and column k's pair of slot
// `slot` (k - tile_n0 even).
__device__ __forceinline__ const char* col_area(const coda::TileInfo& t, const float* smem) {
    return reinterpret_cast<const char*>(smem) + t.smem_bytes;
}
template <class Frag, class T>
__device__ __forceinline__ float2 col_pair(const coda::TileInfo& t, const char* area, int slot, const T* p,
                                           long long ld, int m, int k, int rows, int cols) {
    if constexpr (!Frag::kAsyncStage) return load2(p, ld, m, k, rows, cols);
    const char* at = area + slot * Frag::BN * 4 + (k - t.tile_n0) * (int)sizeof(T);
    if constexpr (coda::is_same<T, float>::value) return *reinterpret_cast<const float2*>(at);
    else return coda::unpack_pair<T>(*reinterpret_cast<const unsigned*>(at));
}

// ---------------------------------------------------------------------------
// Grid reductions of a row kernel (see docs/codegen.md): the n values of a
// CTA's rows (v[0..n), in row order) give the CTA's partial; after thread 0
// wrote every partial of the CTA, grid_last() takes a ticket and is true in
// the CTA that arrives last, which then reduces the G partials with
// grid_sum / grid_max (all threads; a fixed order for a given G) and resets
// the counter.
// ---------------------------------------------------------------------------
__device__ __forceinline__ float cta_sum(const float* v, int n) {
    float s = v[0];
    for (int r = 1; r < n; ++r) s += v[r];
    return s;
}
__device__ __forceinline__ float cta_max(const float* v, int n) {
    float s = v[0];
    for (int r = 1; r < n; ++r) s = maximum(s, v[r]);
    return s;
}
// Called by every thread of the CTA, after thread 0 wrote the CTA's
// partials. The fence before the ticket publishes
// the CTA's partials; the fence after it (in the last CTA) orders the reads
// of the others' partials after their tickets.
__device__ __forceinline__ bool grid_last(int* counter) {
    __shared__ int last;
    if (threadIdx.x == 0) {
        __threadfence();
        last = atomicAdd(counter, 1) == (int)gridDim.x - 1;
    }
    __syncthreads();
    if (last) __threadfence();
    return last != 0;
}
template <int T>
__device__ __forceinline__ float grid_sum(const float* part, int G, float* red) {
    float s = 0.0f;
    for (int b = (int)threadIdx.x; b < G; b += T) s += __ldcg(part + b);
    return block_sum<T>(s, red);
}
template <int T>
__device__ __forceinline__ float grid_max(const float* part, int G, float* red) {
    float s = coda::neg_inf();
    for (int b = (int)threadIdx.x; b < G; b += T) s = maximum(s, __ldcg(part + b));
    return block_max<T>(s, red);
}


// ---------------------------------------------------------------------------
// Quad streams (Hopper epilogues without a staged store): the quad loads of
// the pair loop (cg::load4's four elements at column k of row m, the even
// and odd columns of a tensor in pair layout) copied ahead into shared
// memory by cp.async, kSlots - 1 column pairs ahead of the loop. A load in
// the loop waited for its data (the registers beside the accumulators allow
// one load in flight), which made such epilogues latency-bound; a cp.async
// needs no register. Each thread copies only what it reads itself, so the
// stream needs no barrier: cp.async.wait_group makes a thread's copies
// visible to it. Slot (stream s, slot q, row i) of a thread: 16 bytes at
// float offset ((s * kSlots + q) * RI + i) * kThreads * 4 + thread * 4 of
// the epilogue scratch, which nothing else uses during the loop (the
// emitter streams only when no store is staged through it).
// ---------------------------------------------------------------------------
// Slots per stream: as many as the staged-store scratch (BM * (BN + 8) * 2
// bytes) holds, at most 8.
template <class Frag>
__host__ __device__ constexpr int stream_slots(int streams) {
    return Frag::BM * (Frag::BN + 8) * 2 / (streams * Frag::RI * 16 * Frag::kThreads) < 8
               ? Frag::BM * (Frag::BN + 8) * 2 / (streams * Frag::RI * 16 * Frag::kThreads)
               : 8;
}
template <class Frag, int kSlots>
__device__ __forceinline__ unsigned stream_slot(const Frag& f, float* smem, int s, int q, int i) {
    const float* at = smem + (((s * kSlots + q) * Frag::RI + i) * Frag::kThreads + f.thread_index()) * 4;
    return static_cast<unsigned>(__cvta_generic_to_shared(at));
}
// Copies the quad at (m, k) into slot (s, q, i). A quad that is not whole
// (ragged edge, misaligned buffer) is read here instead, element by element
// (zeros outside the buffer), and stored into the slot by this thread, so
// stream_quad reads every quad from shared memory and the pair loop holds
// no element fallback. With kAligned (a buffer aligned by construction, see
// load4_aligned) the copy is always one cp.async, reading the quad's
// elements inside the buffer and zero-filling the rest.
template <class Frag, int kSlots, bool kAligned, class T>
__device__ __forceinline__ void stream_issue(const Frag& f, float* smem, int s, int q, int i, const T* p, long long ld,
                                             int m, int k, int rows, int cols) {
    const unsigned dst = stream_slot<Frag, kSlots>(f, smem, s, q, i);
    const T* src = p + (long long)m * ld + k;
    if constexpr (kAligned) {
        const bool in = inside(m, k, rows, cols);
        const int bytes = in ? (cols - k < 4 ? cols - k : 4) * (int)sizeof(T) : 0;
        if constexpr (sizeof(T) == 4) {
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(in ? src : p), "r"(bytes)
                         : "memory");
        } else {
            asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(in ? src : p), "r"(bytes)
                         : "memory");
        }
        return;
    }
    if (whole_quad(p, ld, m, k, rows, cols)) {
        if constexpr (sizeof(T) == 4) {
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
        } else {
            asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(dst), "l"(src) : "memory");
        }
        return;
    }
    unsigned each = 0;
#pragma unroll
    for (int d = 0; d < 4; ++d) each |= inside(m, k + d, rows, cols) ? 1u << d : 0u;
    if constexpr (sizeof(T) == 4) {
        const uint4 w = ldg_w4_if(src, false, each);
        asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst), "r"(w.x), "r"(w.y), "r"(w.z), "r"(w.w)
                     : "memory");
    } else {
        const uint2 w = ldg_h4_if(src, false, each);
        asm volatile("st.shared.v2.b32 [%0], {%1, %2};\n" ::"r"(dst), "r"(w.x), "r"(w.y) : "memory");
    }
}
// An L2 prefetch of columns [k0, k0 + width) of the rows of the tile that
// this thread writes (f.row_writer(): one thread per tile row), one bulk
// prefetch per row (cp.async.bulk.prefetch.L2: no register holds the data,
// nothing waits for it). For buffers aligned by construction (16-byte base,
// rows padded to 16 bytes), so the range, aligned down at its start and
// rounded up at its end to 16 bytes, stays inside the row's allocation.
// Subtiled epilogues call it for their quad reads before the pair loop.
template <class Frag, class T>
__device__ __forceinline__ void prefetch_rows_l2(const Frag& f, const T* p, long long ld, int rows, int cols, int k0,
                                                 int width) {
    if (!f.row_writer()) return;
    constexpr int kAlign = 16 / (int)sizeof(T);
    const int lo = (k0 < 0 ? 0 : k0) & ~(kAlign - 1);
    const int hi = k0 + width < cols ? k0 + width : cols;
    if (hi <= lo) return;
    const unsigned bytes = (unsigned)(((hi - lo) * (int)sizeof(T) + 15) & ~15);
#pragma unroll
    for (int i = 0; i < Frag::RI; ++i) {
        if (f.row(i) < rows) {
            const T* at = p + (long long)f.row(i) * ld + lo;
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(at), "r"(bytes) : "memory");
        }
    }
}
__device__ __forceinline__ void stream_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void stream_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
// The quad of slot (s, q, i) as floats (after stream_wait), of element
// type T (p only names it).
template <class Frag, int kSlots, class T>
__device__ __forceinline__ float4 stream_quad(const Frag& f, float* smem, int s, int q, int i, const T*) {
    const unsigned at = stream_slot<Frag, kSlots>(f, smem, s, q, i);
    if constexpr (sizeof(T) == 4) {
        float4 v;
        asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(at));
        return v;
    } else {
        uint2 w;
        asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n" : "=r"(w.x), "=r"(w.y) : "r"(at));
        return quad_floats<T>(w);
    }
}

}  // namespace cg

#endif  // CODA_CODEGEN_CUH
