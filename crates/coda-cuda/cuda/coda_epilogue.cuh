// coda_epilogue.cuh -- the epilogue interface between a GEMM mainloop and the
// epilogue functor that codac emits, plus the helpers such functors call.
//
// Embedded verbatim after coda_common.cuh and before coda_gemm_sm80.cuh.
// Nothing here depends on the mainloop: a future Hopper (wgmma) mainloop
// presents its accumulators through the same AccFrag and calls the same
// functor.
//
// ---------------------------------------------------------------------------
// The accumulator fragment (what one thread holds after the K loop)
// ---------------------------------------------------------------------------
// frag.acc[i][j][e], i < RI, j < CJ, e < 2, is the fp32 value of output
// element (frag.row(i), frag.col(j) + e).  Columns come in pairs: col(j) is
// always even relative to the tile origin, and (col(j), col(j)+1) are held by
// the same thread -- that is the native register layout of both mma.sync
// m16n8k16 and wgmma m64nNk16: with lane = 4*g + t,
//     row(i) = warp_row0 + (i / 2) * kRowBlockStride + (i % 2) * 8 + g
//     col(j) = warp_col0 + j * 8 + 2 * t
// (kRowBlockStride = 16 for mma.sync, 64 for a wgmma m64 slab).  Hence the 4
// lanes of a quad share rows and the 8 lanes with equal t share columns.
// row_in(i) / col_in(j, e) are the bounds predicates against M and N; values
// outside the bounds are garbage-free (0 from zero-filled operands) but must
// not be stored, and must be masked out of reductions by the functor.
//
// ---------------------------------------------------------------------------
// The functor contract (what codac emits)
// ---------------------------------------------------------------------------
//   struct Epi_xxx {
//     struct Params { ... POD: pointers, leading dims, scalars ... };
//     static constexpr int kSmemFloats = 0;  // extra scratch needed (floats)
//     template <class Frag, class Tile>
//     static __device__ void apply(const Params& p, Frag& f, const Tile& t,
//                                  float* smem);
//   };
// apply() is called once per CTA by ALL threads of the CTA, after the K loop,
// with the mainloop's shared memory drained and synchronized; `smem` points to
// the start of the CTA's dynamic shared memory (at least
// max(mainloop bytes, 4 * kSmemFloats) bytes).  The reduction helpers below
// use smem as scratch and need at most Frag::kReduceFloats floats (always
// <= the mainloop's smem; checked by static_assert), so a functor that only
// uses the helpers declares kSmemFloats = 0.
//
// Reductions and store_tile_staged contain barriers (f.sync(), which is
// __syncthreads() under gemm_sm80): call them unconditionally from every
// thread (never inside a row_in/col_in branch), in the same order.  Each
// helper starts with a barrier, so helpers may be called back to back; a
// functor that writes smem itself must f.sync() first.
//
// All helpers are deterministic: fixed combination order, no atomics.
// Partial buffers (one value per row per N-tile, or per column per M-tile)
// are finished by a consumer in fixed order with finish_row_partials /
// finish_col_partials.
#ifndef CODA_EPILOGUE_CUH
#define CODA_EPILOGUE_CUH

#ifndef CODA_COMMON_CUH
#error "coda_epilogue.cuh needs coda_common.cuh before it"
#endif

namespace coda {

// Where the CTA's output tile lies.
struct TileInfo {
    int tile_m0, tile_n0;          // global row / column of the tile's (0, 0)
    int tile_m_idx, tile_n_idx;    // tile coordinates
    int num_m_tiles, num_n_tiles;  // ceil(M / BM), ceil(N / BN)
    int m, n;                      // problem size M, N
    int smem_bytes;                // dynamic shared memory available as scratch
};

// The per-thread accumulator fragment.  BM x BN is the CTA tile; the CTA's
// warps form a kWarpsM x kWarpsN grid, and the warps with the same warp_m
// hold the same rows (they split N), those with the same warp_n the same
// columns.
template <int RI_, int CJ_, int ROW_BLOCK_STRIDE, int BM_, int BN_, int WARPS_M, int WARPS_N>
struct AccFrag {
    static constexpr int RI = RI_;   // rows held per thread
    static constexpr int CJ = CJ_;   // column pairs held per thread
    static constexpr int kRowBlockStride = ROW_BLOCK_STRIDE;
    static constexpr int BM = BM_;
    static constexpr int BN = BN_;
    static constexpr int kWarpsM = WARPS_M;
    static constexpr int kWarpsN = WARPS_N;
    static constexpr int kThreads = 32 * WARPS_M * WARPS_N;
    // Scratch (floats) needed by the reduction helpers.
    static constexpr int kRowReduceFloats = BM * kWarpsN;      // row_reduce<Op>
    static constexpr int kRowLseFloats = 2 * BM * kWarpsN;     // row_reduce_lse
    static constexpr int kColReduceFloats = BN * kWarpsM;      // col_reduce<Op>
    static constexpr int kReduceFloats =
        kRowLseFloats > kColReduceFloats ? kRowLseFloats : kColReduceFloats;
    // Whether the epilogue scratch is free during the K loop, so that a
    // tile operand can be staged asynchronously (stage_tile_async).
    static constexpr bool kAsyncStage = false;
    // Columns the staged stores hold in shared memory at a time (the whole
    // tile here; a Hopper configuration may stage subtiles).
    static constexpr int kStageN = BN;
    static constexpr int kStageRegions = 1;

    float acc[RI][CJ][2];
    int lrow0, lcol0;      // tile-local row of acc[0], column of acc[*][0][0]
    int grow0, gcol0;      // the same, global
    int m, n;              // problem bounds
    int lane, warp_m, warp_n;

    __device__ __forceinline__ int local_row(int i) const {
        return lrow0 + (i >> 1) * kRowBlockStride + (i & 1) * 8;
    }
    __device__ __forceinline__ int local_col(int j) const { return lcol0 + j * 8; }
    __device__ __forceinline__ int row(int i) const {
        return grow0 + (i >> 1) * kRowBlockStride + (i & 1) * 8;
    }
    __device__ __forceinline__ int col(int j) const { return gcol0 + j * 8; }
    __device__ __forceinline__ bool row_in(int i) const { return row(i) < m; }
    __device__ __forceinline__ bool col_in(int j, int e) const { return col(j) + e < n; }
    // Exactly one thread per tile row has row_writer() (lane t == 0 of the
    // warp with warp_n == 0); one thread per tile column pair col_writer().
    __device__ __forceinline__ bool row_writer() const { return (lane & 3) == 0 && warp_n == 0; }
    __device__ __forceinline__ bool col_writer() const { return (lane >> 2) == 0 && warp_m == 0; }
    // Index of this thread among the kThreads threads holding the tile.
    __device__ __forceinline__ int thread_index() const { return (warp_m * kWarpsN + warp_n) * 32 + lane; }
    // Barrier over the threads holding the tile (all of the CTA for
    // gemm_sm80; a warp-specialized mainloop would use a named barrier).
    __device__ __forceinline__ void sync() const { __syncthreads(); }
};

// ---------------------------------------------------------------------------
// Reduction operators
// ---------------------------------------------------------------------------
struct SumOp {
    static __device__ __forceinline__ float identity() { return 0.0f; }
    static __device__ __forceinline__ float combine(float a, float b) { return a + b; }
};
struct MaxOp {
    static __device__ __forceinline__ float identity() { return neg_inf(); }
    static __device__ __forceinline__ float combine(float a, float b) { return fmaxf(a, b); }
};

// Online log-sum-exp state: the pair (max, sum of exp(x - max)).  The empty
// state is (-inf, 0).  merge is symmetric in its two operands, so quad and
// warp butterflies give identical results in every lane.
__device__ __forceinline__ void lse_merge(float& m, float& s, float m2, float s2) {
    float mx = fmaxf(m, m2);
    if (mx == neg_inf()) {  // both empty
        m = mx;
        s = 0.0f;
        return;
    }
    s = s * exp_fast(m - mx) + s2 * exp_fast(m2 - mx);
    m = mx;
}
// Add one element x to the state (m, s).
__device__ __forceinline__ void lse_add(float& m, float& s, float x) { lse_merge(m, s, x, 1.0f); }
// log(sum exp) of a state; -inf for the empty state.
__device__ __forceinline__ float lse_value(float m, float s) {
    return m == neg_inf() ? m : m + logf(s);
}

// ---------------------------------------------------------------------------
// Row reductions: per-thread row partials -> one value per (row, CTA tile)
// ---------------------------------------------------------------------------
// In: v[i] = this thread's partial for row(i) (the functor masks out-of-range
// columns itself, e.g. by starting from Op::identity() and skipping
// !col_in(j, e)).  Out: v[i] = the reduction over the whole CTA tile row, in
// every thread holding that row.  Order: quad butterfly (xor 1, xor 2), then
// warps along N in increasing warp_n.  Scratch: Frag::kRowReduceFloats.
template <class Op, class Frag>
__device__ __forceinline__ void row_reduce(const Frag& f, float (&v)[Frag::RI], float* scratch) {
#pragma unroll
    for (int i = 0; i < Frag::RI; ++i) {
        v[i] = Op::combine(v[i], shfl_xor(v[i], 1));
        v[i] = Op::combine(v[i], shfl_xor(v[i], 2));
    }
    if (Frag::kWarpsN == 1) return;
    f.sync();  // scratch may still be read by an earlier step
    // scratch layout: [warp_n][local row], Frag::BM floats per warp column.
    if ((f.lane & 3) == 0) {
#pragma unroll
        for (int i = 0; i < Frag::RI; ++i) scratch[f.warp_n * Frag::BM + f.local_row(i)] = v[i];
    }
    f.sync();
#pragma unroll
    for (int i = 0; i < Frag::RI; ++i) {
        const int r = f.local_row(i);
        float x = scratch[r];
#pragma unroll
        for (int w = 1; w < Frag::kWarpsN; ++w) x = Op::combine(x, scratch[w * Frag::BM + r]);
        v[i] = x;
    }
}

// Log-sum-exp row reduction over (max, sumexp) pairs; same contract as
// row_reduce.  Build the per-thread state with lse_add (or lse_merge);
// out-of-range columns are simply not added.  Scratch: Frag::kRowLseFloats.
template <class Frag>
__device__ __forceinline__ void row_reduce_lse(const Frag& f, float (&mx)[Frag::RI], float (&se)[Frag::RI],
                                               float* scratch) {
#pragma unroll
    for (int i = 0; i < Frag::RI; ++i) {
        lse_merge(mx[i], se[i], shfl_xor(mx[i], 1), shfl_xor(se[i], 1));
        lse_merge(mx[i], se[i], shfl_xor(mx[i], 2), shfl_xor(se[i], 2));
    }
    if (Frag::kWarpsN == 1) return;
    f.sync();
    // scratch layout: [0 = max, 1 = sumexp][warp_n][local row]
    float* smax = scratch;
    float* ssum = scratch + Frag::kWarpsN * Frag::BM;
    if ((f.lane & 3) == 0) {
#pragma unroll
        for (int i = 0; i < Frag::RI; ++i) {
            smax[f.warp_n * Frag::BM + f.local_row(i)] = mx[i];
            ssum[f.warp_n * Frag::BM + f.local_row(i)] = se[i];
        }
    }
    f.sync();
#pragma unroll
    for (int i = 0; i < Frag::RI; ++i) {
        const int r = f.local_row(i);
        float a = smax[r], b = ssum[r];
#pragma unroll
        for (int w = 1; w < Frag::kWarpsN; ++w) lse_merge(a, b, smax[w * Frag::BM + r], ssum[w * Frag::BM + r]);
        mx[i] = a;
        se[i] = b;
    }
}

// ---------------------------------------------------------------------------
// Column reductions: per-thread column partials -> one value per (col, tile)
// ---------------------------------------------------------------------------
// In: v[j][e] = this thread's partial over its rows for column col(j)+e (the
// functor masks out-of-range rows, !row_in(i)).  Out: the reduction over the
// CTA tile's BM rows, in every thread holding that column.  Order: butterfly
// over the 8 lanes sharing the column (xor 4, 8, 16), then warps along M in
// increasing warp_m.  Scratch: Frag::kColReduceFloats.
template <class Op, class Frag>
__device__ __forceinline__ void col_reduce(const Frag& f, float (&v)[Frag::CJ][2], float* scratch) {
#pragma unroll
    for (int j = 0; j < Frag::CJ; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            float x = v[j][e];
            x = Op::combine(x, shfl_xor(x, 4));
            x = Op::combine(x, shfl_xor(x, 8));
            x = Op::combine(x, shfl_xor(x, 16));
            v[j][e] = x;
        }
    }
    if (Frag::kWarpsM == 1) return;
    f.sync();
    // scratch layout: [warp_m][local column], Frag::BN floats per warp row.
    if ((f.lane >> 2) == 0) {
#pragma unroll
        for (int j = 0; j < Frag::CJ; ++j) {
            scratch[f.warp_m * Frag::BN + f.local_col(j)] = v[j][0];
            scratch[f.warp_m * Frag::BN + f.local_col(j) + 1] = v[j][1];
        }
    }
    f.sync();
#pragma unroll
    for (int j = 0; j < Frag::CJ; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int c = f.local_col(j) + e;
            float x = scratch[c];
#pragma unroll
            for (int w = 1; w < Frag::kWarpsM; ++w) x = Op::combine(x, scratch[w * Frag::BN + c]);
            v[j][e] = x;
        }
    }
}

// Column reductions without a [CJ][2] array live through the whole pair
// loop (which, beside 128 accumulators per thread, spills): after the rows
// of column pair j, col_keep reduces the thread's sums (x[0], x[1]) over the
// 8 lanes sharing the pair (xor 4, 8, 16) and lane group g = lane / 4 keeps
// pair j = 8q + g in kept[q].  col_reduce_kept then combines the warps along
// M in increasing warp_m and leaves the tile's column totals in
// scratch[local column] for every column of the tile.  Same order, hence
// the same bits, as col_reduce.  Scratch: Frag::kColReduceFloats.
template <class Op, class Frag>
__device__ __forceinline__ void col_keep(const Frag& f, int j, const float (&x)[2],
                                         float (&kept)[(Frag::CJ + 7) / 8][2]) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
        float v = x[e];
        v = Op::combine(v, shfl_xor(v, 4));
        v = Op::combine(v, shfl_xor(v, 8));
        v = Op::combine(v, shfl_xor(v, 16));
        if ((f.lane >> 2) == (j & 7)) kept[j >> 3][e] = v;
    }
}
template <class Op, class Frag>
__device__ __forceinline__ void col_reduce_kept(const Frag& f, const float (&kept)[(Frag::CJ + 7) / 8][2],
                                                float* scratch) {
    f.sync();  // scratch may still be read by an earlier step
#pragma unroll
    for (int q = 0; q < (Frag::CJ + 7) / 8; ++q) {
        const int j = q * 8 + (f.lane >> 2);
        if (j < Frag::CJ) {
            scratch[f.warp_m * Frag::BN + f.local_col(j)] = kept[q][0];
            scratch[f.warp_m * Frag::BN + f.local_col(j) + 1] = kept[q][1];
        }
    }
    f.sync();
    // One thread per column: it alone reads and writes that column.
    for (int c = f.thread_index(); c < Frag::BN; c += Frag::kThreads) {
        float x = scratch[c];
#pragma unroll
        for (int w = 1; w < Frag::kWarpsM; ++w) x = Op::combine(x, scratch[w * Frag::BN + c]);
        scratch[c] = x;
    }
    f.sync();
}

// ---------------------------------------------------------------------------
// Partial buffers
// ---------------------------------------------------------------------------
// Row partials: fp32 [M][num_n_tiles], element (row, tile_n_idx).
// Column partials: fp32 [N'][num_m_tiles], element (col, tile_m_idx), where
// N' is the number of (output) columns reduced.
__device__ __forceinline__ float* row_partial_ptr(const TileInfo& t, float* partial, int row) {
    return partial + (long long)row * t.num_n_tiles + t.tile_n_idx;
}
__device__ __forceinline__ float* col_partial_ptr(const TileInfo& t, float* partial, int col) {
    return partial + (long long)col * t.num_m_tiles + t.tile_m_idx;
}

// Write the result of row_reduce: one thread per row writes v[i].
template <class Frag>
__device__ __forceinline__ void store_row_partial(const Frag& f, const TileInfo& t, const float (&v)[Frag::RI],
                                                  float* partial) {
    if (!f.row_writer()) return;
#pragma unroll
    for (int i = 0; i < Frag::RI; ++i)
        if (f.row_in(i)) *row_partial_ptr(t, partial, f.row(i)) = v[i];
}

// Write the result of col_reduce: one thread per column pair writes v[j][*].
template <class Frag>
__device__ __forceinline__ void store_col_partial(const Frag& f, const TileInfo& t, const float (&v)[Frag::CJ][2],
                                                  float* partial) {
    if (!f.col_writer()) return;
#pragma unroll
    for (int j = 0; j < Frag::CJ; ++j) {
        if (f.col_in(j, 0)) *col_partial_ptr(t, partial, f.col(j)) = v[j][0];
        if (f.col_in(j, 1)) *col_partial_ptr(t, partial, f.col(j) + 1) = v[j][1];
    }
}

// Column partials of a pair-gated (half-width) output, e.g. SwiGLU where
// output column c comes from GEMM columns (2c, 2c+1): writes v[j][0] at
// output column col(j) / 2, when col(j) + 1 < N.
template <class Frag>
__device__ __forceinline__ void store_col_partial_half(const Frag& f, const TileInfo& t,
                                                       const float (&v)[Frag::CJ][2], float* partial) {
    if (!f.col_writer()) return;
#pragma unroll
    for (int j = 0; j < Frag::CJ; ++j)
        if (f.col_in(j, 1)) *col_partial_ptr(t, partial, f.col(j) >> 1) = v[j][0];
}

// Finish row partials written by an earlier kernel, [M][T] fp32: out[i] =
// sum over t = 0..T-1 (in that order) of partial[row(i)][t]; 0 for rows out
// of range.  Every thread of a quad computes the same value.
template <class Frag>
__device__ __forceinline__ void finish_row_partials(const Frag& f, const float* partial, int T,
                                                    float (&out)[Frag::RI]) {
#pragma unroll
    for (int i = 0; i < Frag::RI; ++i) {
        float s = 0.0f;
        if (f.row_in(i)) {
            const float* p = partial + (long long)f.row(i) * T;
            for (int k = 0; k < T; ++k) s += __ldg(p + k);
        }
        out[i] = s;
    }
}
// Same for (max, sumexp) partial pairs stored in two [M][T] buffers:
// out[i] = log-sum-exp of the row, merged in order t = 0..T-1.
template <class Frag>
__device__ __forceinline__ void finish_row_lse(const Frag& f, const float* pmax, const float* psum, int T,
                                               float (&out)[Frag::RI]) {
#pragma unroll
    for (int i = 0; i < Frag::RI; ++i) {
        float m = neg_inf(), s = 0.0f;
        if (f.row_in(i)) {
            const long long o = (long long)f.row(i) * T;
            for (int k = 0; k < T; ++k) lse_merge(m, s, __ldg(pmax + o + k), __ldg(psum + o + k));
        }
        out[i] = lse_value(m, s);
    }
}
// Column version: [N][T] fp32 partials; out[j][e] for column col(j)+e.
template <class Frag>
__device__ __forceinline__ void finish_col_partials(const Frag& f, const float* partial, int T,
                                                    float (&out)[Frag::CJ][2]) {
#pragma unroll
    for (int j = 0; j < Frag::CJ; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            float s = 0.0f;
            if (f.col_in(j, e)) {
                const float* p = partial + (long long)(f.col(j) + e) * T;
                for (int k = 0; k < T; ++k) s += __ldg(p + k);
            }
            out[j][e] = s;
        }
    }
}

// ---------------------------------------------------------------------------
// Stores
// ---------------------------------------------------------------------------
// Row-major output `out` with leading dimension ld (elements).  Requirement:
// out 16-byte aligned and ld even (codac uses multiples of 8), so that a
// pair at an even column is 4-byte (bf16/f16) / 8-byte (f32) aligned.

// Store (v0, v1) at (row, col), (row, col+1), bounded by rows x cols.
template <class T>
__device__ __forceinline__ void store_pair_at(T* out, long long ld, int row, int col, int rows, int cols, float v0,
                                              float v1) {
    if (row >= rows || col >= cols) return;
    T* p = out + (long long)row * ld + col;
    if (col + 1 < cols) store2(p, v0, v1);
    else store1(p, v0);
}
// D += (v0, v1): read-modify-write of an existing output (not atomic; each
// element is owned by exactly one thread of one CTA).
template <class T>
__device__ __forceinline__ void accum_pair_at(T* out, long long ld, int row, int col, int rows, int cols, float v0,
                                              float v1) {
    if (row >= rows || col >= cols) return;
    T* p = out + (long long)row * ld + col;
    if (col + 1 < cols) {
        float2 o = load2_rw(p);
        store2(p, o.x + v0, o.y + v1);
    } else {
        store1(p, load1_rw(p) + v0);
    }
}
// Single element, bounded.
template <class T>
__device__ __forceinline__ void store_at(T* out, long long ld, int row, int col, int rows, int cols, float v) {
    if (row < rows && col < cols) store1(out + (long long)row * ld + col, v);
}
// store_pair_at without its requirement: element stores when ld is odd or
// out not aligned to a pair (an output that is not codac's own buffer).
template <class T>
__device__ __forceinline__ void store_pair_any(T* out, long long ld, int row, int col, int rows, int cols, float v0,
                                               float v1) {
    if ((ld & 1) == 0 && (reinterpret_cast<unsigned long long>(out) & (2 * sizeof(T) - 1)) == 0) {
        store_pair_at(out, ld, row, col, rows, cols, v0, v1);
        return;
    }
    store_at(out, ld, row, col, rows, cols, v0);
    store_at(out, ld, row, col + 1, rows, cols, v1);
}

// Fragment forms: element pair (i, j) of the accumulator grid, bounded by
// the GEMM's M x N.
template <class Frag, class T>
__device__ __forceinline__ void store_pair(const Frag& f, int i, int j, T* out, long long ld, float v0, float v1) {
    store_pair_at(out, ld, f.row(i), f.col(j), f.m, f.n, v0, v1);
}
template <class Frag, class T>
__device__ __forceinline__ void accum_pair(const Frag& f, int i, int j, T* out, long long ld, float v0, float v1) {
    accum_pair_at(out, ld, f.row(i), f.col(j), f.m, f.n, v0, v1);
}

// Shared-memory-staged tile store: writes the fragment-shaped array v (for
// example f.acc after the functor transformed it in place) as T to the
// row-major output through shared memory, so that every global store is a
// coalesced 16-byte vector (8 bf16/f16 or 4 f32); the ragged right edge is
// stored element by element, rows >= M are skipped.  All threads must call it.
// Scratch: staged_store_bytes<BM, BN, T>() = BM * (BN + 8) * sizeof(T) bytes
// (rows padded by 8 elements so that the fragment writes are bank-conflict
// free).  Falls back to direct pair stores when the scratch does not fit in
// t.smem_bytes, or when out / ld do not allow aligned 16-byte stores.
template <int BM, int BN, class T>
__host__ __device__ constexpr int staged_store_bytes() {
    return BM * (BN + 8) * (int)sizeof(T);
}
template <class T> struct PairBits;  // 2 adjacent elements as one word
template <> struct PairBits<bf16> {
    typedef unsigned type;
    static __device__ __forceinline__ unsigned pack(float a, float b) { return pack2_bf16(a, b); }
};
template <> struct PairBits<f16> {
    typedef unsigned type;
    static __device__ __forceinline__ unsigned pack(float a, float b) { return pack2_f16(a, b); }
};
template <> struct PairBits<float> {
    typedef float2 type;
    static __device__ __forceinline__ float2 pack(float a, float b) { return make_float2(a, b); }
};
__device__ __forceinline__ float2 unpack_pair(unsigned u, bf16) { return unpack2_bf16(u); }
__device__ __forceinline__ float2 unpack_pair(unsigned u, f16) { return unpack2_f16(u); }

// The second half of every staged store: the BM x W tile in scratch (rows
// of (BN + 8) elements) to out[tile_m0 + r][origin + c], consecutive threads
// taking consecutive 16-byte chunks of a row; element stores at the ragged
// right edge (columns >= out_cols), rows >= M skipped.
// How the tile's threads share BM rows of kChunksPerRow 16-byte chunks in
// the interior fast paths: with kWholeRows, each thread keeps the chunk
// column col(f) and takes rows row(f), row(f) + kRowStep, ... (the same
// assignment as chunk c = thread + k * kThreads of the generic loops).
template <class Frag, int kChunksPerRow>
struct RowChunks {
    static constexpr bool kWholeRows =
        Frag::kThreads % kChunksPerRow == 0 && Frag::BM % (Frag::kThreads / kChunksPerRow) == 0;
    static constexpr int kRowStep = Frag::kThreads / kChunksPerRow;
    static __device__ __forceinline__ int col(const Frag& f) { return f.thread_index() % kChunksPerRow; }
    static __device__ __forceinline__ int row(const Frag& f) { return f.thread_index() / kChunksPerRow; }
};

// A tile wholly inside the output (the common case) takes a loop without
// bounds checks whose addresses advance by a constant stride: each thread
// keeps one chunk column and steps down the rows, so the per-chunk index
// arithmetic (and the registers it pinned) is gone.
template <class T, class Frag, int W, int PITCH = Frag::BN + 8>
__device__ __forceinline__ void store_staged_rows(const Frag& f, const TileInfo& t, const unsigned char* s, T* out,
                                                  long long ld, int origin, int out_cols) {
    constexpr int kVec = 16 / (int)sizeof(T);
    constexpr int kRowBytes = PITCH * (int)sizeof(T);
    constexpr int kChunksPerRow = W / kVec;
    constexpr int kChunks = Frag::BM * kChunksPerRow;
    typedef RowChunks<Frag, kChunksPerRow> Chunks;
    if constexpr (Chunks::kWholeRows) {
        constexpr int kRowStep = Chunks::kRowStep;
        if (t.tile_m0 + Frag::BM <= t.m && origin + W <= out_cols) {  // uniform over the CTA
            const int ch = Chunks::col(f), r0 = Chunks::row(f);
            const unsigned char* src = s + r0 * kRowBytes + ch * 16;
            T* dst = out + (long long)(t.tile_m0 + r0) * ld + origin + ch * kVec;
            const long long step = (long long)kRowStep * ld;
#pragma unroll 4  // 4 chunks in flight: the accumulators may still be live (a second output before store_tile_staged)
            for (int r = 0; r < Frag::BM / kRowStep; ++r)
                *reinterpret_cast<uint4*>(dst + r * step) =
                    *reinterpret_cast<const uint4*>(src + r * kRowStep * kRowBytes);
            return;
        }
    }
#pragma unroll 1  // edge tiles only
    for (int c0 = 0; c0 < kChunks; c0 += Frag::kThreads) {
        const int c = c0 + f.thread_index();
        if (kChunks % Frag::kThreads != 0 && c >= kChunks) break;
        const int r = c / kChunksPerRow, ch = c % kChunksPerRow;
        const int grow = t.tile_m0 + r, gcol = origin + ch * kVec;
        if (grow >= t.m || gcol >= out_cols) continue;
        const T* src = reinterpret_cast<const T*>(s + r * kRowBytes) + ch * kVec;
        T* dst = out + (long long)grow * ld + gcol;
        if (gcol + kVec <= out_cols) {
            *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
        } else {
#pragma unroll
            for (int k = 0; k < kVec; ++k)
                if (gcol + k < out_cols) dst[k] = src[k];
        }
    }
}

// The staged tile in scratch to the output: store_staged_rows when out and
// ld allow aligned 16-byte stores (uniform over the CTA), else bounded
// element stores in a loop that is not unrolled (a rare path: an output
// that is not codac's own, kept small so that it does not slow the compile).
template <class T, class Frag, int W, int PITCH = Frag::BN + 8>
__device__ __forceinline__ void store_staged_out(const Frag& f, const TileInfo& t, const unsigned char* s, T* out,
                                                 long long ld, int origin, int out_cols) {
    constexpr int kVec = 16 / (int)sizeof(T);
    constexpr int kRowBytes = PITCH * (int)sizeof(T);
    if ((ld % kVec) == 0 && (reinterpret_cast<unsigned long long>(out) & 15) == 0) {
        store_staged_rows<T, Frag, W, PITCH>(f, t, s, out, ld, origin, out_cols);
        return;
    }
#pragma unroll 1
    for (int e = f.thread_index(); e < Frag::BM * W; e += Frag::kThreads) {
        const int r = e / W, c = e % W;
        const int grow = t.tile_m0 + r, gcol = origin + c;
        if (grow < t.m && gcol < out_cols)
            out[(long long)grow * ld + gcol] = reinterpret_cast<const T*>(s + r * kRowBytes)[c];
    }
}

template <class T, class Frag>
__device__ __forceinline__ void store_tile_staged(const Frag& f, const TileInfo& t,
                                                  const float (&v)[Frag::RI][Frag::CJ][2], T* out, long long ld,
                                                  float* smem) {
    constexpr int kRowBytes = (Frag::BN + 8) * (int)sizeof(T);  // padded smem row
    const bool fits = staged_store_bytes<Frag::BM, Frag::BN, T>() <= t.smem_bytes;
    if (!fits) {  // a static property of the configuration
#pragma unroll
        for (int i = 0; i < Frag::RI; ++i)
#pragma unroll
            for (int j = 0; j < Frag::CJ; ++j)
                store_pair_any(out, ld, f.row(i), f.col(j), f.m, f.n, v[i][j][0], v[i][j][1]);
        return;
    }
    unsigned char* s = reinterpret_cast<unsigned char*>(smem);
    f.sync();  // scratch may still be in use
#pragma unroll
    for (int i = 0; i < Frag::RI; ++i)
#pragma unroll
        for (int j = 0; j < Frag::CJ; ++j)
            *reinterpret_cast<typename PairBits<T>::type*>(s + f.local_row(i) * kRowBytes +
                                                            f.local_col(j) * (int)sizeof(T)) =
                PairBits<T>::pack(v[i][j][0], v[i][j][1]);
    f.sync();
    store_staged_out<T, Frag, Frag::BN>(f, t, s, out, ld, t.tile_n0, t.n);
}

// A 16-bit output held in the accumulators until the pair loop ends: each
// pair (i, j), once the loop has read its accumulators, keeps the output's
// two values rounded and packed in f.acc[i][j][kSlot] (pack_acc), so an
// epilogue can hold two such outputs (slots 0 and 1) while the scratch
// streams its tile operands; store_tile_packed then writes slot kSlot
// through the scratch with 16-byte stores to out[tile_m0 + r][origin + c]
// (c < BN), columns bounded by out_cols (a concatenation part's end) and
// rows by M.  Same barriers and call rules as store_tile_staged; copies
// into the scratch still in flight are waited for first.
template <class T>
__device__ __forceinline__ float pack_acc(float v0, float v1) {
    static_assert(sizeof(T) == 2, "a packed output is 16-bit");
    return __uint_as_float(PairBits<T>::pack(v0, v1));
}
template <class T, int kSlot, class Frag>
__device__ __forceinline__ void store_tile_packed(const Frag& f, const TileInfo& t, T* out, long long ld, int origin,
                                                  int out_cols, float* smem) {
    static_assert(sizeof(T) == 2 && (kSlot == 0 || kSlot == 1), "two 16-bit outputs per accumulator pair");
    constexpr int kRowBytes = (Frag::BN + 8) * (int)sizeof(T);
    if (staged_store_bytes<Frag::BM, Frag::BN, T>() > t.smem_bytes) {  // a static property of the configuration
#pragma unroll
        for (int i = 0; i < Frag::RI; ++i)
#pragma unroll
            for (int j = 0; j < Frag::CJ; ++j) {
                const float2 v = unpack_pair(__float_as_uint(f.acc[i][j][kSlot]), T());
                store_pair_any(out, ld, f.row(i), origin + f.local_col(j), f.m, out_cols, v.x, v.y);
            }
        return;
    }
    unsigned char* s = reinterpret_cast<unsigned char*>(smem);
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    f.sync();  // scratch may still be in use
#pragma unroll
    for (int i = 0; i < Frag::RI; ++i)
#pragma unroll
        for (int j = 0; j < Frag::CJ; ++j)
            *reinterpret_cast<unsigned*>(s + f.local_row(i) * kRowBytes + f.local_col(j) * (int)sizeof(T)) =
                __float_as_uint(f.acc[i][j][kSlot]);
    f.sync();
    store_staged_out<T, Frag, Frag::BN>(f, t, s, out, ld, origin, out_cols);
}

// Staged store with a column map: like store_tile_staged, for outputs whose
// columns are not the accumulator's own.  Map gives, for slot e of the
// tile-local accumulator column lc, the output column relative to the
// output tile's origin Map::origin(tile_n0), or -1 when that slot is not
// stored; the output tile is Map::width<BN>() columns wide and must contain
// every mapped column of its accumulator tile.  Values are written to
// shared memory element by element, then stored with 16-byte coalesced
// vectors (element stores at the ragged right edge, bounded by out_cols);
// falls back to bounded element stores when the scratch does not fit or
// out / ld are misaligned.  Same scratch, barriers and call rules as
// store_tile_staged.
//   StagedHalfCols: a pair operation's output (one value per column pair,
//     slot 0): pair (lc, lc + 1) goes to output column lc / 2.
//   StagedUnpermuteCols<START, END, GROUP>: an accumulator in the pair
//     layout of PairRows put back in order: column c of [START, END) goes to
//     its source column (pair_source); needs START % GROUP == 0 and
//     BN % GROUP == 0 so that every group lies inside one tile.
struct StagedHalfCols {
    template <int BN>
    __host__ __device__ static constexpr int width() { return BN / 2; }
    static __device__ __forceinline__ int origin(int n0) { return n0 / 2; }
    static __device__ __forceinline__ int dest(int, int lc, int e) { return e == 0 ? lc / 2 : -1; }
};
template <int START, int END, int GROUP>
struct StagedUnpermuteCols {
    static_assert(START % GROUP == 0 && (END - START) % GROUP == 0 && GROUP % 2 == 0, "bad pair layout");
    static constexpr int kGroup = GROUP;
    template <int BN>
    __host__ __device__ static constexpr int width() { return BN; }
    static __device__ __forceinline__ int origin(int n0) { return n0; }
    static __device__ __forceinline__ int dest(int n0, int lc, int e) {
        const int c = n0 + lc + e;
        if (c < START || c >= END) return lc + e;
        const int local = c - START, j = local % GROUP;
        return START + (local - j) + (j & 1) * (GROUP / 2) + (j >> 1) - n0;
    }
};
//   StagedOwnCols: the accumulator's own columns (the map form of
//     store_tile_staged, for staged_put).
struct StagedOwnCols {
    template <int BN>
    __host__ __device__ static constexpr int width() { return BN; }
    static __device__ __forceinline__ int origin(int n0) { return n0; }
    static __device__ __forceinline__ int dest(int, int lc, int e) { return lc + e; }
};

// A staged store written during the pair loop: staged_put puts the pair
// (i, j) (slot values v0, v1; slot 1 unused by StagedHalfCols) where Map
// sends it in the scratch, and staged_put_finish then stores the tile like
// store_tile_staged_map.  Unlike store_tile_staged(_map), no value waits in
// f.acc for a second pass, which keeps register pressure down in long
// epilogues.  The caller synchronizes the tile's threads before the loop,
// and during it nothing else writes the scratch; a staged operand may be
// read there only with StagedOwnCols, each thread reading its pair before
// putting its own in the same place (every position belongs to one thread,
// so no barrier is needed).  That is how an epilogue writes a second output
// beside store_tile_staged's, which then runs after staged_put_finish (it
// starts with a barrier).  Without room for the tile, staged_put stores
// directly (bounded) and the finish does nothing.
template <class T, class Map, class Frag>
__device__ __forceinline__ void staged_put(const Frag& f, const TileInfo& t, int i, int j, T* out, long long ld,
                                           int out_cols, float* smem, float v0, float v1) {
    constexpr int kRowBytes = (Frag::BN + 8) * (int)sizeof(T);
    if (staged_store_bytes<Frag::BM, Frag::BN, T>() > t.smem_bytes) {
        const int origin = Map::origin(t.tile_n0);
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int d = Map::dest(t.tile_n0, f.local_col(j), e);
            if (d >= 0) store_at(out, ld, f.row(i), origin + d, f.m, out_cols, e == 0 ? v0 : v1);
        }
        return;
    }
    unsigned char* row = reinterpret_cast<unsigned char*>(smem) + f.local_row(i) * kRowBytes;
    if constexpr (is_same<Map, StagedOwnCols>::value) {
        *reinterpret_cast<typename PairBits<T>::type*>(row + f.local_col(j) * (int)sizeof(T)) = PairBits<T>::pack(v0, v1);
    } else {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int d = Map::dest(t.tile_n0, f.local_col(j), e);
            if (d >= 0) store1(reinterpret_cast<T*>(row) + d, e == 0 ? v0 : v1);
        }
    }
}
template <class T, class Map, class Frag>
__device__ __forceinline__ void staged_put_finish(const Frag& f, const TileInfo& t, T* out, long long ld,
                                                  int out_cols, float* smem) {
    if (staged_store_bytes<Frag::BM, Frag::BN, T>() > t.smem_bytes) return;
    f.sync();
    store_staged_out<T, Frag, Map::template width<Frag::BN>()>(f, t, reinterpret_cast<const unsigned char*>(smem),
                                                               out, ld, Map::origin(t.tile_n0), out_cols);
}

template <class T, class Map, class Frag>
__device__ __forceinline__ void store_tile_staged_map(const Frag& f, const TileInfo& t,
                                                      const float (&v)[Frag::RI][Frag::CJ][2], T* out, long long ld,
                                                      int out_cols, float* smem) {
    constexpr int kW = Map::template width<Frag::BN>();
    constexpr int kVec = 16 / (int)sizeof(T);
    constexpr int kRowBytes = (Frag::BN + 8) * (int)sizeof(T);
    static_assert(kW % kVec == 0, "output tile width must be a multiple of 16 bytes");
    const int origin = Map::origin(t.tile_n0);
    const bool fits = staged_store_bytes<Frag::BM, Frag::BN, T>() <= t.smem_bytes;
    if (!fits) {  // a static property of the configuration
#pragma unroll
        for (int i = 0; i < Frag::RI; ++i)
#pragma unroll
            for (int j = 0; j < Frag::CJ; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int d = Map::dest(t.tile_n0, f.local_col(j), e);
                    if (d >= 0) store_at(out, ld, f.row(i), origin + d, f.m, out_cols, v[i][j][e]);
                }
        return;
    }
    unsigned char* s = reinterpret_cast<unsigned char*>(smem);
    f.sync();  // scratch may still be in use
#pragma unroll
    for (int i = 0; i < Frag::RI; ++i)
#pragma unroll
        for (int j = 0; j < Frag::CJ; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int d = Map::dest(t.tile_n0, f.local_col(j), e);
                if (d >= 0) store1(reinterpret_cast<T*>(s + f.local_row(i) * kRowBytes) + d, v[i][j][e]);
            }
    f.sync();
    store_staged_out<T, Frag, kW>(f, t, s, out, ld, origin, out_cols);
}

// The tile that the staged store just before (store_tile_staged,
// store_tile_staged_map or staged_put_finish, with the same T and Map)
// left in the scratch, to a second output: nothing has written the scratch
// since, and store_staged_out only reads it.  For the Hopper mainloop,
// whose scratch always holds the tile (the staged store was not a fallback).
template <class T, class Map, class Frag>
__device__ __forceinline__ void store_staged_again(const Frag& f, const TileInfo& t, T* out, long long ld,
                                                   int out_cols, float* smem) {
    store_staged_out<T, Frag, Map::template width<Frag::BN>()>(f, t, reinterpret_cast<const unsigned char*>(smem),
                                                               out, ld, Map::origin(t.tile_n0), out_cols);
}

// ---------------------------------------------------------------------------
// Staged tile operand: a 16-bit rows x cols matrix (e.g. a residual) read
// for the CTA's whole BM x BN tile through shared memory, in the padded
// layout of store_tile_staged: 16-byte coalesced loads (element loads at
// ragged edges or for a misaligned base / ld), then each thread reads its
// pairs from shared memory.  Keeps the operand's global loads out of the
// per-pair code (no long-latency loads hoisted into registers beside the
// accumulators).  Needs staged_store_bytes<BM, BN, T>() bytes of scratch
// (a static property of the configuration: check it before choosing this);
// contains barriers; out-of-range elements read as 0.  A later helper that
// writes scratch starts with a barrier, so the operand must be read (all
// staged_pair calls) before it.
// ---------------------------------------------------------------------------
// The 16-byte chunk of a 16-bit operand at (grow, gcol .. gcol + 7), 0
// outside rows x cols: one vector load when `vec` (an aligned base and ld)
// and the chunk is whole, else element by element.
template <class T>
__device__ __forceinline__ uint4 load_chunk8(const T* src, long long ld, int grow, int gcol, int rows, int cols,
                                             bool vec) {
    uint4 val = make_uint4(0u, 0u, 0u, 0u);
    if (grow < rows) {
        const T* p = src + (long long)grow * ld + gcol;
        if (vec && gcol + 8 <= cols) {
            val = __ldg(reinterpret_cast<const uint4*>(p));
        } else {
            unsigned short e[8];
#pragma unroll
            for (int k = 0; k < 8; ++k)
                e[k] = gcol + k < cols ? __ldg(reinterpret_cast<const unsigned short*>(p + k)) : (unsigned short)0;
            val.x = e[0] | ((unsigned)e[1] << 16);
            val.y = e[2] | ((unsigned)e[3] << 16);
            val.z = e[4] | ((unsigned)e[5] << 16);
            val.w = e[6] | ((unsigned)e[7] << 16);
        }
    }
    return val;
}
// The same chunk copied asynchronously into shared address dst (cp.async
// with a source size: the bytes outside the operand are zero-filled); needs
// an aligned base and ld.
template <class T>
__device__ __forceinline__ void cp_async_chunk8(unsigned dst, const T* src, long long ld, int grow, int gcol, int rows,
                                                int cols) {
    const bool in = grow < rows && gcol < cols;
    const int bytes = in ? 2 * (cols - gcol < 8 ? cols - gcol : 8) : 0;
    const T* p = in ? src + (long long)grow * ld + gcol : src;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(p), "r"(bytes) : "memory");
}

template <class T, class Frag>
__device__ __forceinline__ void stage_tile(const Frag& f, const TileInfo& t, const T* src, long long ld, int rows,
                                           int cols, float* smem) {
    static_assert(sizeof(T) == 2, "stage_tile is for 16-bit operands");
    constexpr int kVec = 8;
    constexpr int kRowBytes = (Frag::BN + 8) * 2;
    constexpr int kChunksPerRow = Frag::BN / kVec;
    constexpr int kChunks = Frag::BM * kChunksPerRow;
    const bool vec_ok = (ld % kVec) == 0 && (reinterpret_cast<unsigned long long>(src) & 15) == 0;
    unsigned char* s = reinterpret_cast<unsigned char*>(smem);
    f.sync();  // scratch may still be in use
#pragma unroll 8  // 8 loads in flight per thread (16 would spill beside 128 accumulators)
    for (int c0 = 0; c0 < kChunks; c0 += Frag::kThreads) {
        const int c = c0 + f.thread_index();
        if (kChunks % Frag::kThreads != 0 && c >= kChunks) break;
        const int r = c / kChunksPerRow, ch = c % kChunksPerRow;
        const int grow = t.tile_m0 + r, gcol = t.tile_n0 + ch * kVec;
        const uint4 val = load_chunk8(src, ld, grow, gcol, rows, cols, vec_ok);
        *reinterpret_cast<uint4*>(s + r * kRowBytes + ch * 16) = val;
    }
    f.sync();
}

// stage_tile for an operand whose base or leading dimension is not 16-byte
// aligned, beside an asynchronous mainloop (uniform over the CTA): element
// loads in a loop that is not unrolled, so that the fallback does not
// lengthen every fused kernel's code (an unrolled one had added a fifth to
// the out-projection's NVRTC compile). A defensive path since session 21:
// codac stages its tile operands from staging and scratch buffers, which
// are aligned by construction (docs/codegen.md).
template <class T, class Frag>
__device__ __forceinline__ void stage_tile_elements(const Frag& f, const TileInfo& t, const T* src, long long ld,
                                                    int rows, int cols, float* smem) {
    static_assert(sizeof(T) == 2, "stage_tile is for 16-bit operands");
    constexpr int kRowBytes = (Frag::BN + 8) * 2;
    unsigned char* s = reinterpret_cast<unsigned char*>(smem);
    f.sync();  // scratch may still be in use
#pragma unroll 1
    for (int e = f.thread_index(); e < Frag::BM * Frag::BN; e += Frag::kThreads) {
        const int r = e / Frag::BN, c = e % Frag::BN;
        const int grow = t.tile_m0 + r, gcol = t.tile_n0 + c;
        const unsigned short v = grow < rows && gcol < cols
                                     ? *reinterpret_cast<const unsigned short*>(src + (long long)grow * ld + gcol)
                                     : (unsigned short)0;
        *reinterpret_cast<unsigned short*>(s + r * kRowBytes + c * 2) = v;
    }
    f.sync();
}

// Asynchronous staging, for mainloops whose epilogue scratch is private
// (Frag::kAsyncStage: the Hopper one, where the ring is separate): the
// functor's prefetch(p, f, t, smem), which the mainloop calls before the K
// loop of each tile, issues the operand's 16-byte copies with cp.async
// (global -> shared, no registers held, out-of-range bytes zero-filled), so
// that their latency hides behind the tile's mainloop; apply then calls
// stage_tile_finish, which waits for them.  Same layout as stage_tile.  A
// base or leading dimension not 16-byte aligned (uniform for the CTA), or a
// mainloop without private scratch, stages synchronously in
// stage_tile_finish instead.  The caller of stage_tile_async must have
// synchronized the tile's threads after the previous tile's epilogue.
template <class T>
__device__ __forceinline__ bool stage_tile_vec_ok(const T* src, long long ld) {
    return (ld % 8) == 0 && (reinterpret_cast<unsigned long long>(src) & 15) == 0;
}
template <class T, class Frag>
__device__ __forceinline__ void stage_tile_async(const Frag& f, const TileInfo& t, const T* src, long long ld,
                                                 int rows, int cols, float* smem) {
    static_assert(sizeof(T) == 2, "stage_tile_async is for 16-bit operands");
    constexpr int kVec = 8;
    constexpr int kRowBytes = (Frag::BN + 8) * 2;
    constexpr int kChunksPerRow = Frag::BN / kVec;
    constexpr int kChunks = Frag::BM * kChunksPerRow;
    if (!Frag::kAsyncStage || !stage_tile_vec_ok(src, ld)) return;
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    typedef RowChunks<Frag, kChunksPerRow> Chunks;
    if constexpr (Chunks::kWholeRows) {
        // A tile wholly inside the operand: constant-stride addresses, no bounds.
        constexpr int kRowStep = Chunks::kRowStep;
        if (t.tile_m0 + Frag::BM <= rows && t.tile_n0 + Frag::BN <= cols) {  // uniform over the CTA
            const int ch = Chunks::col(f), r0 = Chunks::row(f);
            const unsigned dst = s + r0 * kRowBytes + ch * 16;
            const T* p = src + (long long)(t.tile_m0 + r0) * ld + t.tile_n0 + ch * kVec;
            const long long step = (long long)kRowStep * ld;
#pragma unroll
            for (int r = 0; r < Frag::BM / kRowStep; ++r)
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst + r * kRowStep * kRowBytes),
                             "l"(p + r * step)
                             : "memory");
            asm volatile("cp.async.commit_group;\n" ::: "memory");
            return;
        }
    }
#pragma unroll 1  // edge tiles only
    for (int c0 = 0; c0 < kChunks; c0 += Frag::kThreads) {
        const int c = c0 + f.thread_index();
        if (kChunks % Frag::kThreads != 0 && c >= kChunks) break;
        const int r = c / kChunksPerRow, ch = c % kChunksPerRow;
        const int grow = t.tile_m0 + r, gcol = t.tile_n0 + ch * kVec;
        const bool in = grow < rows && gcol < cols;
        const int bytes = in ? 2 * (cols - gcol < kVec ? cols - gcol : kVec) : 0;
        const T* p = in ? src + (long long)grow * ld + gcol : src;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s + r * kRowBytes + ch * 16), "l"(p),
                     "r"(bytes)
                     : "memory");
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <class T, class Frag>
__device__ __forceinline__ void stage_tile_finish(const Frag& f, const TileInfo& t, const T* src, long long ld,
                                                  int rows, int cols, float* smem) {
    if (Frag::kAsyncStage && stage_tile_vec_ok(src, ld)) {
        asm volatile("cp.async.wait_all;\n" ::: "memory");
        f.sync();
        return;
    }
    if constexpr (Frag::kAsyncStage) stage_tile_elements<T>(f, t, src, ld, rows, cols, smem);
    else stage_tile<T>(f, t, src, ld, rows, cols, smem);
}

// The pair (row(i), col(j)), (row(i), col(j) + 1) of a staged operand.
template <class T, class Frag>
__device__ __forceinline__ float2 staged_pair(const Frag& f, int i, int j, const float* smem) {
    constexpr int kRowBytes = (Frag::BN + 8) * 2;
    const unsigned char* s = reinterpret_cast<const unsigned char*>(smem);
    return unpack_pair(*reinterpret_cast<const unsigned*>(s + f.local_row(i) * kRowBytes + f.local_col(j) * 2), T());
}

// ---------------------------------------------------------------------------
// Staged subtiles (a configuration whose Frag::kStageN < BN: the ping-pong
// Sm90Cfg128x192pps and Sm90Cfg128x192pps2): the scratch holds
// kStageRegions regions of BM x kStageN elements (rows padded to kStageN +
// 8), each a kStageN-column subtile of one output or of a tile operand,
// instead of whole tiles; the ring gets the shared memory saved.  The pair loop walks
// the columns in order (j outer), and every kStageN / 8 column pairs form
// subtile c = j / (kStageN / 8):
//   sub_begin      before subtile c > 0: the previous subtile's stores
//                  have read the scratch (subtile 0: the caller's barrier);
//   sub_load       then a 16-bit tile operand's subtile into region 0
//                  (16-byte copies, zero outside the operand), waited for;
//   sub_pair       the operand's pair (i, j) from region 0;
//   sub_put        an output's pair into region R, where Map sends it; a put
//                  into region 0 replaces the operand's pair, so each thread
//                  reads its pair before putting its own (every position
//                  belongs to one thread: no barrier needed);
//   sub_end        after the subtile's last pair: region R to the output
//                  (the first sub_end of a subtile, kSync, waits for every
//                  thread's puts).
// Maps: StagedOwnCols and StagedHalfCols keep a subtile's columns in one run
// of the output; StagedUnpermuteCols<START, END, GROUP> (GROUP a multiple of
// kStageN, START of GROUP) sends a subtile's even and odd columns to two
// runs of kStageN / 2 columns (the two halves of a rotary pair group), or,
// outside [START, END), keeps them as two runs in order.  The scratch always
// holds the regions: a configuration's scratch is sized for them
// (sm90_scratch_core_bytes), and only such configurations call these.
// ---------------------------------------------------------------------------
template <class Frag>
struct StagedSub {
    static_assert(Frag::kStageN < Frag::BN, "staged subtiles are narrower than the tile");
    static constexpr int kCols = Frag::kStageN;
    static constexpr int kPairs = kCols / 8;  // j per subtile
    static constexpr int kPitch = kCols + 8;  // elements per scratch row
    static constexpr int kRegionBytes = Frag::BM * kPitch * 2;
    static __device__ __forceinline__ int first_col(const TileInfo& t, int j) { return t.tile_n0 + j / kPairs * kCols; }
    static __device__ __forceinline__ int local_col(const Frag& f, int j) { return f.local_col(j) - j / kPairs * kCols; }
};
// Where a map sends subtile-local column lc + e (-1: not stored) and the
// output runs of a subtile whose first accumulator column is n0.
template <class Map, class Frag>
struct SubRuns {  // StagedOwnCols, StagedHalfCols: one run
    static constexpr int kRuns = 1;
    static constexpr int kWidth = Map::template width<StagedSub<Frag>::kCols>();
    static __device__ __forceinline__ int dest(int n0, int lc, int e) { return Map::dest(n0, lc, e); }
    static __device__ __forceinline__ int origin(int n0, int) { return Map::origin(n0); }
};
template <int START, int END, int GROUP, class Frag>
struct SubRuns<StagedUnpermuteCols<START, END, GROUP>, Frag> {
    static constexpr int kCols = StagedSub<Frag>::kCols;
    static_assert(GROUP % kCols == 0, "a rotary group must hold whole subtiles");
    static constexpr int kRuns = 2;
    static constexpr int kWidth = kCols / 2;
    static __device__ __forceinline__ bool paired(int n0) { return n0 >= START && n0 < END; }
    static __device__ __forceinline__ int dest(int n0, int lc, int e) {
        const int c = lc + e;
        return paired(n0) ? (c & 1) * kWidth + (c >> 1) : c;
    }
    static __device__ __forceinline__ int origin(int n0, int run) {
        if (!paired(n0)) return n0 + run * kWidth;
        const int local = n0 - START, j = local % GROUP;
        return START + (local - j) + run * (GROUP / 2) + j / 2;
    }
};
template <class Frag>
__device__ __forceinline__ void sub_begin(const Frag& f, const TileInfo& t, int j) {
    if (j > 0 && j % StagedSub<Frag>::kPairs == 0) f.sync();
}
template <class T, class Frag>
__device__ __forceinline__ void sub_load(const Frag& f, const TileInfo& t, int j, const T* src, long long ld, int rows,
                                         int cols, float* smem) {
    static_assert(sizeof(T) == 2, "a staged operand is 16-bit");
    typedef StagedSub<Frag> Sub;
    constexpr int kChunksPerRow = Sub::kCols / 8;
    constexpr int kChunks = Frag::BM * kChunksPerRow;
    if (j % Sub::kPairs != 0) return;
    const int n0 = Sub::first_col(t, j);
    const bool vec_ok = stage_tile_vec_ok(src, ld);
    unsigned char* s = reinterpret_cast<unsigned char*>(smem);
#pragma unroll
    for (int c0 = 0; c0 < kChunks; c0 += Frag::kThreads) {
        const int c = c0 + f.thread_index();
        if (kChunks % Frag::kThreads != 0 && c >= kChunks) break;
        const int r = c / kChunksPerRow, ch = c % kChunksPerRow;
        unsigned char* dst = s + r * Sub::kPitch * 2 + ch * 16;
        if (vec_ok)
            cp_async_chunk8(static_cast<unsigned>(__cvta_generic_to_shared(dst)), src, ld, t.tile_m0 + r, n0 + ch * 8,
                            rows, cols);
        else
            *reinterpret_cast<uint4*>(dst) = load_chunk8(src, ld, t.tile_m0 + r, n0 + ch * 8, rows, cols, false);
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    f.sync();
}
// (The operand's arguments, as sub_load's, name the operand region 0 holds;
// the pair is read from there.)
template <class T, class Frag>
__device__ __forceinline__ float2 sub_pair(const Frag& f, const TileInfo&, int i, int j, const T*, long long, int, int,
                                           const float* smem) {
    typedef StagedSub<Frag> Sub;
    const unsigned char* s = reinterpret_cast<const unsigned char*>(smem);
    return unpack_pair(*reinterpret_cast<const unsigned*>(s + f.local_row(i) * Sub::kPitch * 2 + Sub::local_col(f, j) * 2),
                       T());
}
template <class T, class Map, int R, class Frag>
__device__ __forceinline__ void sub_put(const Frag& f, const TileInfo& t, int i, int j, T* out, long long ld,
                                        int out_cols, float* smem, float v0, float v1) {
    typedef StagedSub<Frag> Sub;
    typedef SubRuns<Map, Frag> Runs;
    static_assert(sizeof(T) == 2 && R < Frag::kStageRegions, "16-bit outputs, one region each");
    const int n0 = Sub::first_col(t, j), lc = Sub::local_col(f, j);
    unsigned char* row = reinterpret_cast<unsigned char*>(smem) + R * Sub::kRegionBytes + f.local_row(i) * Sub::kPitch * 2;
    if constexpr (is_same<Map, StagedOwnCols>::value) {
        *reinterpret_cast<unsigned*>(row + lc * 2) = PairBits<T>::pack(v0, v1);
    } else {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int d = Runs::dest(n0, lc, e);
            if (d >= 0) store1(reinterpret_cast<T*>(row) + d, e == 0 ? v0 : v1);
        }
    }
}
template <class T, class Map, int R, bool kSync, class Frag>
__device__ __forceinline__ void sub_end(const Frag& f, const TileInfo& t, int j, T* out, long long ld, int out_cols,
                                        float* smem) {
    typedef StagedSub<Frag> Sub;
    typedef SubRuns<Map, Frag> Runs;
    if (j % Sub::kPairs != Sub::kPairs - 1) return;
    const int n0 = Sub::first_col(t, j);
    if (kSync) f.sync();
    const unsigned char* s = reinterpret_cast<const unsigned char*>(smem) + R * Sub::kRegionBytes;
#pragma unroll
    for (int run = 0; run < Runs::kRuns; ++run)
        store_staged_out<T, Frag, Runs::kWidth, Sub::kPitch>(f, t, s + run * Runs::kWidth * 2, out, ld,
                                                             Runs::origin(n0, run), out_cols);
}

}  // namespace coda

#endif  // CODA_EPILOGUE_CUH
