// coda_gemm_sm80.cuh -- portable GEMM mainloop v1 for codac (sm_80 and newer;
// also compiled for sm_90a and run on H100).
//
// Embedded verbatim after coda_common.cuh and coda_epilogue.cuh.
//
// Computes acc = A (M x K) * B (K x N) in fp32 from bf16 or f16 operands with
// mma.sync.aligned.m16n8k16 (inline PTX), then hands the accumulators to an
// epilogue functor (see coda_epilogue.cuh).  Pipeline: cp.async 16-byte
// copies into a `kStages`-deep ring of shared-memory tiles, ldmatrix (.trans
// where the operand is stored M/N-contiguous) into mma fragments.
//
// ---------------------------------------------------------------------------
// Operand layouts (template tags)
// ---------------------------------------------------------------------------
//   A_MxK : A[m][k] at a[m * lda + k]   (row-major M x K)
//   A_KxM : A[m][k] at a[k * lda + m]   (A stored transposed, K x M row-major)
//   B_KxN : B[k][n] at b[k * ldb + n]   (row-major K x N)
//   B_NxK : B[k][n] at b[n * ldb + k]   (N x K row-major: nn.Linear weight, x @ w.T)
// Requirements (checked by the host, not here): lda and ldb are multiples of
// 8 elements and a, b are 16-byte aligned, so that every 16-byte chunk of 8
// elements that starts at a multiple of 8 along the contiguous dimension is
// aligned.  M, N, K are otherwise arbitrary (>= 1): out-of-range chunks, and
// the out-of-range tail of a chunk that straddles M, N or K, are zero-filled
// by cp.async's src-size operand, so they contribute 0 to the products.
//
// ---------------------------------------------------------------------------
// Kernel entry convention (host side)
// ---------------------------------------------------------------------------
//   extern "C" __global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
//   name(coda::GemmArgs g, Epi::Params e) {
//       coda::gemm_sm80<Cfg, coda::A_MxK, coda::B_NxK, __nv_bfloat16, Epi>(g, e);
//   }
//   grid  = dim3(ceil(M / BM) * ceil(N / BN), 1, 1)  (1D; the kernel maps the
//           linear block index to a tile, grouped by kGroupM tiles along M
//           for L2 reuse)
//   block = dim3(Cfg::kThreads, 1, 1)
//   dynamic shared memory bytes =
//           max(kStages * (BM + BN) * BK * 2,  4 * Epi::kSmemFloats)
//           (= coda::gemm_smem_bytes<Cfg, Epi>()); above 48 KiB the host must
//           raise CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES first.
//   Do not launch when M or N is 0 (empty grid).  K = 0 gives acc = 0.
//   K loop: Cfg::kFragDoubleBuffer selects mainloop_pipelined (1 CTA/SM
//   configs) or mainloop_simple (128-register configs); see below.
//
// ---------------------------------------------------------------------------
// Shared-memory tile layout and swizzle
// ---------------------------------------------------------------------------
// A stage holds one BM x BK tile of A and one BN x BK tile of B, each stored
// in the same orientation as in global memory: a "K-contiguous" operand
// (A_MxK, B_NxK) as MN rows of BK elements, an "MN-contiguous" operand
// (A_KxM, B_KxN) as BK rows of MN elements.  A row is split into 16-byte
// chunks (8 elements); chunk c of row r is stored at chunk position
//     c ^ ((r / R) & (W - 1)),   W = min(chunks per row, 8), R = 8 / W
// i.e. XOR-swizzled within each aligned group of 8 chunks (128 bytes = all
// 32 banks).  ldmatrix reads 8 rows x 16 bytes per 8x8 matrix; those 8 rows
// are 8 consecutive rows at the same logical chunk, which the swizzle spreads
// over 8 distinct 16-byte bank groups (for 4-chunk rows, two rows share a
// 128-byte line and the XOR with r/2 covers the remaining 4 positions).  The
// cp.async writes of 8 consecutive threads cover 128 contiguous bytes of
// logical chunks, permuted within their line: also conflict-free.
// Memory map: [stage 0 A][stage 1 A]...[stage S-1 A][stage 0 B]...[stage S-1 B].
#ifndef CODA_GEMM_SM80_CUH
#define CODA_GEMM_SM80_CUH

#ifndef CODA_EPILOGUE_CUH
#error "coda_gemm_sm80.cuh needs coda_common.cuh and coda_epilogue.cuh before it"
#endif

namespace coda {

// Kernel argument block (first kernel parameter, by value).
struct GemmArgs {
    const void* a;
    const void* b;
    int m, n, k;
    long long lda, ldb;
    // A B stacked from two weights (a row map's kStack > 0): the second and
    // its row stride, else b and ldb.
    const void* b2;
    long long ldb2;
};

// The parts of a product over a concatenated inner dimension,
// acc = A0 @ B0 + A1 @ B1 [+ A2 @ B2] (a sum of products that the
// reparameterizer made one): GemmArgs's a, b, lda and ldb are the first
// part's, whose K is k0; parts 1 and 2 follow in the K loop, in the first
// part's layouts (k2 = 0 and a2, b2 = a1, b1 with two parts).
struct GemmKParts {
    const void* a1;
    const void* b1;
    const void* a2;
    const void* b2;
    long long lda1, ldb1, lda2, ldb2;
    int k0, k1, k2;
};

// Row maps of a K-contiguous operand (B_NxK: one row per accumulator
// column): the loader reads row map(n) for tile row n.  PairRows is the pair
// layout of codac's reparameterizer: in each group of GROUP rows in
// [START, END), rows i and i + GROUP/2 become neighbours 2i, 2i + 1.  With
// STACK > 0 the operand is two weights stacked (GemmArgs::b2): rows from
// STACK on are read from the second.
struct IdentityRows {
    static constexpr bool kIdentity = true;
    static constexpr int kStack = 0;
    static __device__ __forceinline__ int map(int n) { return n; }
};
template <int STACK>
struct StackedRows {
    static constexpr bool kIdentity = false;
    static constexpr int kStack = STACK;
    static __device__ __forceinline__ int map(int n) { return n; }
};
template <int START, int END, int GROUP, int STACK = 0>
struct PairRows {
    static_assert(GROUP >= 2 && GROUP % 2 == 0 && (END - START) % GROUP == 0, "bad pair layout");
    static constexpr bool kIdentity = false;
    static constexpr int kStack = STACK;
    static __device__ __forceinline__ int map(int n) {
        if (n < START || n >= END) return n;
        const int local = n - START, j = local % GROUP;
        return START + (local - j) + (j & 1) * (GROUP / 2) + (j >> 1);
    }
};

// Operand layout tags.
struct A_MxK { static constexpr bool kKContiguous = true; };
struct A_KxM { static constexpr bool kKContiguous = false; };
struct B_KxN { static constexpr bool kKContiguous = false; };
struct B_NxK { static constexpr bool kKContiguous = true; };

// Tile configuration.  The CTA computes a BM x BN tile with kWarpsM x kWarpsN
// warps, each owning a (BM / kWarpsM) x (BN / kWarpsN) warp tile made of
// 16 x 8 mma tiles; K advances BK at a time through kStages smem buffers.
template <int BM_, int BN_, int BK_, int WARPS_M, int WARPS_N, int STAGES, int MIN_BLOCKS = 1,
          bool FRAG_DOUBLE_BUFFER = (MIN_BLOCKS == 1), int GROUP_M = 8>
struct GemmConfig {
    static constexpr int BM = BM_;
    static constexpr int BN = BN_;
    static constexpr int BK = BK_;
    static constexpr int kWarpsM = WARPS_M;
    static constexpr int kWarpsN = WARPS_N;
    static constexpr int kStages = STAGES;
    static constexpr int kMinBlocks = MIN_BLOCKS;  // for __launch_bounds__
    static constexpr int kGroupM = GROUP_M;        // rasterization group (tiles along M)
    static constexpr bool kFragDoubleBuffer = FRAG_DOUBLE_BUFFER;  // K-loop variant
    static constexpr int kThreads = 32 * kWarpsM * kWarpsN;
    static constexpr int WM = BM / kWarpsM;        // warp tile rows
    static constexpr int WN = BN / kWarpsN;        // warp tile columns
    static constexpr int kMmaM = WM / 16;          // m16 tiles per warp
    static constexpr int kMmaN = WN / 8;           // n8 tiles per warp
    static constexpr int kStageBytesA = BM * BK * 2;
    static constexpr int kStageBytesB = BN * BK * 2;
    static constexpr int kSmemBytes = kStages * (kStageBytesA + kStageBytesB);

    static_assert(BM % (16 * kWarpsM) == 0, "warp tile rows must be a multiple of 16");
    static_assert(BN % (16 * kWarpsN) == 0, "warp tile columns must be a multiple of 16");
    static_assert(BK % 32 == 0, "BK must be a multiple of 32 (>= 4 chunks per smem row)");
    static_assert(BM % 32 == 0 && BN % 32 == 0, "BM, BN must be multiples of 32");
    static_assert(kStages >= 2, "at least 2 stages");
};

// Predefined configurations.  "db" = kFragDoubleBuffer K loop.  TFLOP/s:
// bare bf16 GEMM, 4096^3, A_MxK * B_NxK, on an H100 SXM (cuBLAS: 787).
//   name           BMxBNxBK    warps stages CTAs/SM loop threads smem     TFLOP/s
//   Cfg64x64       64x64x32    2x2   3      4       sb   128     24 KiB   251 (tiny shapes)
//   Cfg128x128     128x128x32  2x4   4      2       sb   256     64 KiB   360
//   Cfg128x128w4   128x128x32  2x2   4      2       db   128     64 KiB   428
//   Cfg128x256     128x256x64  2x4   3      1       db   256     144 KiB  449
//   Cfg256x128     256x128x64  4x2   3      1       db   256     144 KiB  456
//   Cfg128x256k32  128x256x32  2x4   4      1       db   256     96 KiB   377
// All fit the 164 KiB of an A100 and the 227 KiB of an H100 per CTA.
typedef GemmConfig<64, 64, 32, 2, 2, 3, 4> Cfg64x64;
typedef GemmConfig<128, 128, 32, 2, 4, 4, 2> Cfg128x128;
typedef GemmConfig<128, 128, 32, 2, 2, 4, 2, true> Cfg128x128w4;
typedef GemmConfig<128, 256, 64, 2, 4, 3, 1> Cfg128x256;
typedef GemmConfig<256, 128, 64, 4, 2, 3, 1> Cfg256x128;
typedef GemmConfig<128, 256, 32, 2, 4, 4, 1> Cfg128x256k32;

// The fragment type the epilogue of a gemm_sm80<Cfg, ...> receives.
template <class Cfg>
struct Sm80Frag {
    typedef AccFrag<2 * Cfg::kMmaM, Cfg::kMmaN, 16, Cfg::BM, Cfg::BN, Cfg::kWarpsM, Cfg::kWarpsN> type;
};

// Dynamic shared memory the kernel needs (bytes); the host mirrors this.
template <class Cfg, class Epi>
__host__ __device__ constexpr int gemm_smem_bytes() {
    return Cfg::kSmemBytes > 4 * Epi::kSmemFloats ? Cfg::kSmemBytes : 4 * Epi::kSmemFloats;
}

extern __shared__ __align__(128) unsigned char coda_dyn_smem[];

// ---------------------------------------------------------------------------
// PTX wrappers
// ---------------------------------------------------------------------------
__device__ __forceinline__ unsigned smem_u32(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16-byte global->shared copy; bytes [src_bytes, 16) of the destination are
// zero-filled (src_bytes = 0: nothing is read, all 16 bytes are zeroed).
__device__ __forceinline__ void cp_async_16(unsigned dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// d (16x8 fp32) += a (16x16) * b (16x8).  Fragment layout, lane = 4g + t:
//   a[0]: (g, 2t..2t+1)  a[1]: (g+8, 2t..)  a[2]: (g, 2t+8..)  a[3]: (g+8, 2t+8..)
//   b0: (k 2t..2t+1, n g)  b1: (k 2t+8.., n g)
//   d_lo[0..1]: (row g, cols 2t..2t+1)   d_hi[0..1]: (row g+8, cols 2t..2t+1)
template <class Elem> struct Mma16816;
template <> struct Mma16816<bf16> {
    static __device__ __forceinline__ void run(float (&d_lo)[2], float (&d_hi)[2], const unsigned (&a)[4],
                                               unsigned b0, unsigned b1) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
            "{%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(d_lo[0]), "+f"(d_lo[1]), "+f"(d_hi[0]), "+f"(d_hi[1])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};
template <> struct Mma16816<f16> {
    static __device__ __forceinline__ void run(float (&d_lo)[2], float (&d_hi)[2], const unsigned (&a)[4],
                                               unsigned b0, unsigned b1) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
            "{%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(d_lo[0]), "+f"(d_lo[1]), "+f"(d_hi[0]), "+f"(d_hi[1])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};

// ---------------------------------------------------------------------------
// Shared-memory tile geometry of one operand (one stage)
// ---------------------------------------------------------------------------
// MN = BM for A, BN for B.  K_CONTIG: MN rows of BK elements; otherwise BK
// rows of MN elements.
template <bool K_CONTIG, int MN, int BK>
struct SmemTile {
    static constexpr int kRows = K_CONTIG ? MN : BK;
    static constexpr int kRowElems = K_CONTIG ? BK : MN;
    static constexpr int kChunksPerRow = kRowElems / 8;
    static constexpr int kRowBytes = kRowElems * 2;
    static constexpr int kBytes = kRows * kRowBytes;
    static constexpr int kSwzWidth = kChunksPerRow < 8 ? kChunksPerRow : 8;  // W
    static constexpr int kRowsPerLine = 8 / kSwzWidth;                       // R
    static_assert(kChunksPerRow >= 4, "smem rows must be at least 64 bytes");

    static __device__ __forceinline__ int swizzle(int row) { return (row / kRowsPerLine) & (kSwzWidth - 1); }
    // Byte offset of logical chunk `chunk` of smem row `row` within a stage.
    static __device__ __forceinline__ unsigned offset(int row, int chunk) {
        return (unsigned)(row * kRowBytes + ((chunk ^ swizzle(row)) << 4));
    }
};

// ---------------------------------------------------------------------------
// Global -> shared loader of one operand (cp.async, predicated)
// ---------------------------------------------------------------------------
// Thread tid copies chunk (tid % C) of smem rows tid / C + it * kRowStep,
// it < kIters, where C = chunks per smem row and kRowStep = threads / C.  So
// consecutive threads read consecutive 16-byte chunks of one global row.
// Loads must be issued for k tiles 0, 1, 2, ... in order (the loader keeps
// the running global pointer).
template <class Cfg, bool K_CONTIG, int MN, class Elem, class RowMap = IdentityRows>
struct TileLoader {
    static_assert(RowMap::kIdentity || K_CONTIG, "a row map needs a K-contiguous operand");
    typedef SmemTile<K_CONTIG, MN, Cfg::BK> Tile;
    static constexpr int C = Tile::kChunksPerRow;
    static_assert(Cfg::kThreads % C == 0, "threads must cover whole smem rows");
    static constexpr int kRowStep = Cfg::kThreads / C;
    static_assert(Tile::kRows % kRowStep == 0, "tile rows must be a multiple of the row step");
    static constexpr int kIters = Tile::kRows / kRowStep;

    const Elem* ptr;       // this thread's first chunk in the current k tile
    long long step;        // elements between the thread's successive rows
    long long tile_step;   // elements to advance per k tile
    int mn_rem;            // K_CONTIG: MN rows left from the thread's first row
                           // else:     MN elements left from the chunk start
    int k_rem;             // K_CONTIG: K elements left from the chunk start
                           // else:     K rows left from the thread's first row
    unsigned soff[kIters]; // smem byte offsets within a stage
    const Elem* mapped[kIters];  // RowMap only: the thread's row pointers

    __device__ __forceinline__ TileLoader(const Elem* b, long long ld, int mn_total, int k_total, int mn0,
                                          int tid, const Elem* b2 = nullptr, long long ld2 = 0) {
        const int row = tid / C, chunk = tid % C;
        step = (long long)kRowStep * ld;
        if (K_CONTIG) {  // smem row = mn index, chunk = 8 k's
            ptr = b + (long long)(mn0 + row) * ld + chunk * 8;
            tile_step = Cfg::BK;
            mn_rem = mn_total - mn0 - row;
            k_rem = k_total - chunk * 8;
            if (!RowMap::kIdentity) {
#pragma unroll
                for (int it = 0; it < kIters; ++it) {
                    const int n = mn0 + row + it * kRowStep;
                    // Rows past the operand are never read (zero bytes copied).
                    const int r = n < mn_total ? RowMap::map(n) : n;
                    const bool second = RowMap::kStack > 0 && r >= RowMap::kStack;
                    mapped[it] = (second ? b2 + (long long)(r - RowMap::kStack) * ld2 : b + (long long)r * ld) + chunk * 8;
                }
            }
        } else {  // smem row = k index, chunk = 8 mn's
            ptr = b + (long long)row * ld + mn0 + chunk * 8;
            tile_step = (long long)Cfg::BK * ld;
            mn_rem = mn_total - mn0 - chunk * 8;
            k_rem = k_total - row;
        }
#pragma unroll
        for (int it = 0; it < kIters; ++it) soff[it] = Tile::offset(row + it * kRowStep, chunk);
    }

    // Issue the copies of the next k tile into the stage at smem address `stage`.
    __device__ __forceinline__ void load(unsigned stage) {
#pragma unroll
        for (int it = 0; it < kIters; ++it) {
            int bytes;
            if (K_CONTIG) {
                const int kv = k_rem < 0 ? 0 : (k_rem > 8 ? 8 : k_rem);
                bytes = (it * kRowStep < mn_rem) ? 2 * kv : 0;
            } else {
                const int mv = mn_rem < 0 ? 0 : (mn_rem > 8 ? 8 : mn_rem);
                bytes = (it * kRowStep < k_rem) ? 2 * mv : 0;
            }
            // With bytes == 0 the (possibly out-of-range) address is not read.
            const Elem* src = RowMap::kIdentity ? ptr + it * step : mapped[it];
            cp_async_16(stage + soff[it], src, bytes);
            if (!RowMap::kIdentity) mapped[it] += tile_step;
        }
        ptr += tile_step;
        k_rem -= Cfg::BK;  // K elements (K_CONTIG) or K rows (otherwise)
    }
};

// ---------------------------------------------------------------------------
// Shared -> register fragment loader (ldmatrix)
// ---------------------------------------------------------------------------
// load16x16(stage, mn0, k0, r) loads the 16 (mn) x 16 (k) block at (mn0, k0)
// (mn0, k0 multiples of 16) as four 8x8 matrices, each lane receiving 2
// consecutive k of one mn per matrix (the mma fragment orientation):
//   operand A (IS_B = false), r = a[0..3] of one m16k16 mma fragment:
//     r[0] = (mn 0-7, k 0-7)   r[1] = (mn 8-15, k 0-7)
//     r[2] = (mn 0-7, k 8-15)  r[3] = (mn 8-15, k 8-15)
//   operand B (IS_B = true), r = b[0..1] of the n8 tile at mn0, then of mn0+8:
//     r[0] = (mn 0-7, k 0-7)   r[1] = (mn 0-7, k 8-15)
//     r[2] = (mn 8-15, k 0-7)  r[3] = (mn 8-15, k 8-15)
// (so each register pair handed to mma is consecutive: no moves).
// Lane l supplies the row address of matrix q = l / 8, row l % 8 of it;
// matrix q starts at (mn0 + mo(q), k0 + ko(q)) with (mo, ko) = ((q&1)*8,
// (q>>1)*8) for A and ((q>>1)*8, (q&1)*8) for B.
// K-contiguous smem rows are mn: the lane addresses smem row mn0 + mo + l%8,
// chunk (k0 + ko)/8, and plain ldmatrix gives lane 4g+t (mn g, k 2t..2t+1).
// MN-contiguous smem rows are k: the lane addresses smem row k0 + ko + l%8,
// chunk (mn0 + mo)/8, and ldmatrix.trans delivers the transpose, again
// (mn g, k 2t..2t+1) per lane.
// Since mn0 and k0 are multiples of 16, the swizzle term of every row a lane
// addresses depends only on the lane, and the chunk's base part (k0/8 or
// mn0/8) is even, so chunk position = base ^ lane_chunk.
template <bool K_CONTIG, int MN, int BK, bool IS_B>
struct FragLoader {
    typedef SmemTile<K_CONTIG, MN, BK> Tile;
    int lane_row;    // smem row offset of this lane's address
    int lane_chunk;  // (chunk offset within the 16x16 block) ^ swizzle

    __device__ __forceinline__ explicit FragLoader(int lane) {
        const int q = lane >> 3, r = lane & 7;
        const int mo = IS_B ? (q >> 1) : (q & 1);  // in units of 8
        const int ko = IS_B ? (q & 1) : (q >> 1);
        if (K_CONTIG) {
            lane_row = mo * 8 + r;
            lane_chunk = ko ^ Tile::swizzle(lane_row);
        } else {
            lane_row = ko * 8 + r;
            lane_chunk = mo ^ Tile::swizzle(lane_row);
        }
    }
    __device__ __forceinline__ void load16x16(unsigned stage, int mn0, int k0, unsigned (&r)[4]) const {
        if (K_CONTIG) {
            const unsigned addr =
                stage + (unsigned)((mn0 + lane_row) * Tile::kRowBytes + (((k0 >> 3) ^ lane_chunk) << 4));
            ldmatrix_x4(r, addr);
        } else {
            const unsigned addr =
                stage + (unsigned)((k0 + lane_row) * Tile::kRowBytes + (((mn0 >> 3) ^ lane_chunk) << 4));
            ldmatrix_x4_trans(r, addr);
        }
    }
};

// Linear CTA index -> (tile_m, tile_n), grouped along M: consecutive CTAs
// walk down a column of up to `group` M-tiles before moving to the next
// N-tile, so a wave of CTAs shares A rows and B columns in L2.
__device__ __forceinline__ void raster_grouped(int pid, int tiles_m, int tiles_n, int group, int& tm, int& tn) {
    const int span = group * tiles_n;  // CTAs per group of M-tiles
    const int first_m = (pid / span) * group;
    const int rows = (tiles_m - first_m) < group ? (tiles_m - first_m) : group;
    const int in_group = pid % span;
    tm = first_m + in_group % rows;
    tn = in_group / rows;
}

// Loads the A and B fragments of one 16-wide k step (k offset k0 within
// the stage) for this warp's tile.
template <class Cfg, class FA, class FB>
__device__ __forceinline__ void load_fragments(const FA& frag_a, const FB& frag_b, unsigned sa, unsigned sb, int k0,
                                               int warp_m, int warp_n, unsigned (&af)[Cfg::kMmaM][4],
                                               unsigned (&bfr)[Cfg::kMmaN / 2][4]) {
#pragma unroll
    for (int mi = 0; mi < Cfg::kMmaM; ++mi) frag_a.load16x16(sa, warp_m * Cfg::WM + mi * 16, k0, af[mi]);
#pragma unroll
    for (int np = 0; np < Cfg::kMmaN / 2; ++np) frag_b.load16x16(sb, warp_n * Cfg::WN + np * 16, k0, bfr[np]);
}

// The warp's kMmaM x kMmaN mma.sync tiles for one 16-wide k step.
template <class Cfg, class Elem, class Frag>
__device__ __forceinline__ void mma_step(Frag& f, const unsigned (&af)[Cfg::kMmaM][4],
                                         const unsigned (&bfr)[Cfg::kMmaN / 2][4]) {
#pragma unroll
    for (int mi = 0; mi < Cfg::kMmaM; ++mi) {
#pragma unroll
        for (int nj = 0; nj < Cfg::kMmaN; ++nj) {
            // Serpentine over nj so consecutive mmas share a B fragment.
            const int n = (mi & 1) ? (Cfg::kMmaN - 1 - nj) : nj;
            Mma16816<Elem>::run(f.acc[2 * mi][n], f.acc[2 * mi + 1][n], af[mi], bfr[n >> 1][2 * (n & 1)],
                                bfr[n >> 1][2 * (n & 1) + 1]);
        }
    }
}

// K loop, variant 1 (kFragDoubleBuffer = true): fragment registers are
// double-buffered over the 16-wide k steps and the barrier sits before the
// last k step of a tile, so the ldmatrix of the next tile's first step
// overlaps the last step's mmas.  Costs 2x the fragment registers: meant for
// 1-CTA/SM configurations with room below 255 registers.
template <class Cfg, class Elem, class Frag, class LA, class LB, class FA, class FB>
__device__ __forceinline__ void mainloop_pipelined(Frag& f, LA& load_a, LB& load_b, const FA& frag_a, const FB& frag_b,
                                                   unsigned smem_a, unsigned smem_b, int ktiles, int warp_m,
                                                   int warp_n) {
    constexpr int S = Cfg::kStages;
    // Fragment registers, double-buffered over the 16-wide k steps:
    // af[b][mi] = a[0..3] of m16 tile mi; bfr[b][p] = b[0..1] of n8 tiles
    // 2p and 2p+1.  With KK = BK/16 (even) steps per k tile, step kk uses
    // buffer kk % 2 and prefetches step kk+1 into the other buffer.
    constexpr int KK = Cfg::BK / 16;
    unsigned af[2][Cfg::kMmaM][4];
    unsigned bfr[2][Cfg::kMmaN / 2][4];

    int read_stage = 0;
    int write_stage = S - 1;
    unsigned sa = smem_a, sb = smem_b;  // stage being read

    // Tile 0 must be resident before its first fragments are read.
    cp_async_wait<S - 2>();
    __syncthreads();
    load_fragments<Cfg>(frag_a, frag_b, sa, sb, 0, warp_m, warp_n, af[0], bfr[0]);

    for (int kt = 0; kt < ktiles; ++kt) {
#pragma unroll
        for (int kk = 0; kk < KK; ++kk) {
            if (kk == KK - 1) {
                // Next k tile: wait for its copies (groups committed: S-1+kt+1;
                // tile kt+1 is group kt+1, so S-2 may stay pending), then a
                // barrier that (a) publishes it to all warps and (b) marks
                // that every warp has finished reading stage kt%S's fragments
                // except the ones already in registers -- the stage refilled
                // at kk == 0 of the next iteration is the one read here.
                cp_async_wait<S - 2>();
                __syncthreads();
                read_stage = (read_stage + 1 == S) ? 0 : read_stage + 1;
                sa = smem_a + read_stage * Cfg::kStageBytesA;
                sb = smem_b + read_stage * Cfg::kStageBytesB;
            }
            // Prefetch the fragments of the next k step (for kk == KK-1: step
            // 0 of the next tile; on the last tile they are unused).
            load_fragments<Cfg>(frag_a, frag_b, sa, sb, ((kk + 1) % KK) * 16, warp_m, warp_n, af[(kk + 1) & 1],
                                bfr[(kk + 1) & 1]);
            if (kk == 0) {
                // Refill the stage read in the previous iteration (all warps
                // passed the barrier after their last read of it) with tile
                // kt + S - 1.  Always commit, to keep the group count uniform.
                if (kt + S - 1 < ktiles) {
                    load_a.load(smem_a + write_stage * Cfg::kStageBytesA);
                    load_b.load(smem_b + write_stage * Cfg::kStageBytesB);
                }
                cp_async_commit();
                write_stage = (write_stage + 1 == S) ? 0 : write_stage + 1;
            }
            mma_step<Cfg, Elem>(f, af[kk & 1], bfr[kk & 1]);
        }
    }

}

// K loop, variant 2 (kFragDoubleBuffer = false): one barrier at the top of
// each k tile, fragments loaded per k step (ptxas still overlaps the ldmatrix
// of step kk+1 with the mmas of step kk within a tile).  Fewer registers: for
// 2-CTA/SM configurations capped at 128 registers.
template <class Cfg, class Elem, class Frag, class LA, class LB, class FA, class FB>
__device__ __forceinline__ void mainloop_simple(Frag& f, LA& load_a, LB& load_b, const FA& frag_a, const FB& frag_b,
                                                unsigned smem_a, unsigned smem_b, int ktiles, int warp_m,
                                                int warp_n) {
    constexpr int S = Cfg::kStages;
    int read_stage = 0;
    int write_stage = S - 1;
    for (int kt = 0; kt < ktiles; ++kt) {
        // Groups committed so far: S-1+kt; tile kt is group kt, so at most
        // S-2 may still be pending.  The barrier publishes tile kt to all
        // warps and also guarantees that everybody finished reading the stage
        // computed in iteration kt-1, which is the one refilled just below.
        cp_async_wait<S - 2>();
        __syncthreads();
        if (kt + S - 1 < ktiles) {
            load_a.load(smem_a + write_stage * Cfg::kStageBytesA);
            load_b.load(smem_b + write_stage * Cfg::kStageBytesB);
        }
        cp_async_commit();
        write_stage = (write_stage + 1 == S) ? 0 : write_stage + 1;

        const unsigned sa = smem_a + read_stage * Cfg::kStageBytesA;
        const unsigned sb = smem_b + read_stage * Cfg::kStageBytesB;
#pragma unroll
        for (int kk = 0; kk < Cfg::BK; kk += 16) {
            unsigned af[Cfg::kMmaM][4];
            unsigned bfr[Cfg::kMmaN / 2][4];
            load_fragments<Cfg>(frag_a, frag_b, sa, sb, kk, warp_m, warp_n, af, bfr);
            mma_step<Cfg, Elem>(f, af, bfr);
        }
        read_stage = (read_stage + 1 == S) ? 0 : read_stage + 1;
    }
}

// ---------------------------------------------------------------------------
// The GEMM: one CTA computes one BM x BN output tile, then calls Epi::apply.
// ---------------------------------------------------------------------------
// KPARTS > 1: a product over a concatenated inner dimension (GemmKParts;
// g.k is then ignored), its parts' K loops one after the other into the
// same accumulators.
template <class Cfg, class LayoutA, class LayoutB, class Elem, class Epi, class RowMapB = IdentityRows,
          int KPARTS = 1>
__device__ __forceinline__ void gemm_sm80(const GemmArgs& g, const typename Epi::Params& ep,
                                          const GemmKParts& kp = GemmKParts()) {
    static_assert(KPARTS >= 1 && KPARTS <= 3, "one to three K parts");
    static_assert(KPARTS == 1 || RowMapB::kIdentity, "K parts read their weights' rows in order");
    static_assert(is_same<Elem, bf16>::value || is_same<Elem, f16>::value, "Elem must be bf16 or f16");
    typedef typename Sm80Frag<Cfg>::type Frag;
    static_assert(Frag::kReduceFloats * 4 <= Cfg::kSmemBytes, "epilogue reduction scratch exceeds smem");
    constexpr bool kAK = LayoutA::kKContiguous;
    constexpr bool kBK = LayoutB::kKContiguous;
    constexpr int S = Cfg::kStages;

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int warp = tid >> 5;
    const int warp_m = warp / Cfg::kWarpsN;
    const int warp_n = warp % Cfg::kWarpsN;

    const int tiles_m = (g.m + Cfg::BM - 1) / Cfg::BM;
    const int tiles_n = (g.n + Cfg::BN - 1) / Cfg::BN;
    int tm, tn;
    raster_grouped(blockIdx.x, tiles_m, tiles_n, Cfg::kGroupM, tm, tn);
    const int m0 = tm * Cfg::BM;
    const int n0 = tn * Cfg::BN;

    const FragLoader<kAK, Cfg::BM, Cfg::BK, false> frag_a(lane);
    const FragLoader<kBK, Cfg::BN, Cfg::BK, true> frag_b(lane);

    const unsigned smem_a = smem_u32(coda_dyn_smem);
    const unsigned smem_b = smem_a + S * Cfg::kStageBytesA;

    Frag f;
#pragma unroll
    for (int i = 0; i < Frag::RI; ++i)
#pragma unroll
        for (int j = 0; j < Frag::CJ; ++j) f.acc[i][j][0] = f.acc[i][j][1] = 0.0f;
    f.lane = lane;

    // The K loop of one operand pair, accumulating into f; it leaves the
    // shared memory free (for the next part's loads or the epilogue).
    auto k_loop = [&](const void* a, long long lda, const void* b, long long ldb, int k) {
        TileLoader<Cfg, kAK, Cfg::BM, Elem> load_a(static_cast<const Elem*>(a), lda, g.m, k, m0, tid);
        TileLoader<Cfg, kBK, Cfg::BN, Elem, RowMapB> load_b(static_cast<const Elem*>(b), ldb, g.n, k, n0, tid,
                                                              static_cast<const Elem*>(g.b2), g.ldb2);
        const int ktiles = (k + Cfg::BK - 1) / Cfg::BK;

        // Prologue: tiles 0 .. S-2 in flight, one commit group each (empty
        // groups when K is short keep the group count uniform).
#pragma unroll
        for (int s = 0; s < S - 1; ++s) {
            if (s < ktiles) {
                load_a.load(smem_a + s * Cfg::kStageBytesA);
                load_b.load(smem_b + s * Cfg::kStageBytesB);
            }
            cp_async_commit();
        }

        if (Cfg::kFragDoubleBuffer)
            mainloop_pipelined<Cfg, Elem>(f, load_a, load_b, frag_a, frag_b, smem_a, smem_b, ktiles, warp_m, warp_n);
        else
            mainloop_simple<Cfg, Elem>(f, load_a, load_b, frag_a, frag_b, smem_a, smem_b, ktiles, warp_m, warp_n);

        // Drain (only empty groups can remain) and make the smem free.
        cp_async_wait<0>();
        __syncthreads();
    };
    if (KPARTS == 1) {
        k_loop(g.a, g.lda, g.b, g.ldb, g.k);
    } else {
        k_loop(g.a, g.lda, g.b, g.ldb, kp.k0);
        k_loop(kp.a1, kp.lda1, kp.b1, kp.ldb1, kp.k1);
        if (KPARTS > 2) k_loop(kp.a2, kp.lda2, kp.b2, kp.ldb2, kp.k2);
    }

    const int g8 = lane >> 2, t4 = lane & 3;
    f.lrow0 = warp_m * Cfg::WM + g8;
    f.lcol0 = warp_n * Cfg::WN + 2 * t4;
    f.grow0 = m0 + f.lrow0;
    f.gcol0 = n0 + f.lcol0;
    f.m = g.m;
    f.n = g.n;
    f.lane = lane;
    f.warp_m = warp_m;
    f.warp_n = warp_n;

    // Fields in declaration order: origin, tile coordinates, tile counts, M, N,
    // scratch bytes.
    const TileInfo t{m0, n0, tm, tn, tiles_m, tiles_n, g.m, g.n, gemm_smem_bytes<Cfg, Epi>()};

    Epi::apply(ep, f, t, reinterpret_cast<float*>(coda_dyn_smem));
}

}  // namespace coda

#endif  // CODA_GEMM_SM80_CUH
