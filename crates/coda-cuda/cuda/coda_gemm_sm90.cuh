// coda_gemm_sm90.cuh -- Hopper (sm_90a) GEMM mainloop for codac: TMA loads
// into an mbarrier-guarded shared-memory ring, one producer warpgroup, two
// consumer warpgroups issuing wgmma.mma_async, a persistent grid, and the
// same epilogue functor interface as gemm_sm80 (see coda_epilogue.cuh).
//
// Embedded verbatim after coda_common.cuh, coda_epilogue.cuh and
// coda_gemm_sm80.cuh (it reuses GemmArgs, the layout tags, smem_u32 and
// raster_grouped from the latter).  Compile for sm_90a only
// (--gpu-architecture=sm_90a with NVRTC, -gencode=arch=compute_90a,code=sm_90a
// with nvcc): wgmma and setmaxnreg do not exist on plain sm_90.
//
// ===========================================================================
// Host contract
// ===========================================================================
// Entry point (emitted):
//   extern "C" __global__ void __launch_bounds__(Cfg::kThreads, 1)
//   name(const __grid_constant__ coda::TmaDesc ta, const __grid_constant__ coda::TmaDesc tb,
//        coda::GemmArgs g, Epi::Params e) {
//       coda::gemm_sm90<Cfg, coda::A_MxK, coda::B_NxK, __nv_bfloat16, Epi>(ta, tb, g, e);
//   }
// Parameters, in this order:
//   ta, tb : the CUtensorMap (128 bytes, 128-byte aligned in CUDA 13's
//            cuda.h) of A and of B, by value: parameter offsets 0 and 128.
//            coda::TmaDesc is an opaque struct of the same size and alignment
//            (NVRTC has no cuda.h).  g then starts at offset 256.
//   g      : coda::GemmArgs as for gemm_sm80; the kernel reads only m, n, k
//            (a, b, lda, ldb are carried by the tensor maps; pass them
//            anyway, they are ignored).
//   e      : Epi::Params.
// A product over a concatenated inner dimension (KPARTS > 1, Sm90KParts)
// takes ta1, tb1 (and ta2, tb2) after tb, and coda::GemmKParts after g.
// Grid:  1D, min(num_tiles, #SMs) CTAs, num_tiles = ceil(M/BM) * ceil(N/BN)
//        (persistent: CTA b takes tiles b, b + gridDim.x, ...; any grid size
//        >= 1 is correct, #SMs is the fast one).  Do not launch when M or N
//        is 0.  K = 0 gives acc = 0.
// Block: Cfg::kThreads = 384 threads (1 producer + 2 consumer warpgroups).
// Dynamic shared memory: coda::gemm_sm90_smem_bytes<Cfg, Epi>() bytes
//        (always > 48 KiB: set CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
//        first) =
//          1024                                   (alignment slack)
//        + kStages * (BM + BN) * 64 * 2           (the TMA ring)
//        + kUnits * scratch                       (epilogue scratch per tile in flight)
//        + 16 * kStages + 16                      (mbarriers)
//        scratch = round_up(max(BM * (BN + 8) * 2, 4 * Epi::kSmemFloats,
//                               4 * Frag::kReduceFloats), 128)
//        (Frag::kReduceFloats = max(2 * BM, BN * kWarpsM) here, always below
//        the first term); kUnits = 2 for ping-pong configs, 1 otherwise.
//        The table below lists the value for kSmemFloats = 0.
// Tensor maps (cuTensorMapEncodeTiled), one per operand, independent of the
// tile configuration:
//   tensorDataType   CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 (bf16) / _FLOAT16 (f16)
//   tensorRank       2
//   globalAddress    a (resp. b); 16-byte aligned
//   globalDim        {inner, outer} in elements, innermost first:
//                      A_MxK: {K, M}   A_KxM: {M, K}   B_NxK: {K, N}   B_KxN: {N, K}
//   globalStrides    {ld * 2} bytes (ld = lda resp. ldb, a multiple of 8
//                    elements: the stride must be a multiple of 16 bytes)
//   boxDim           {64, 64}
//   elementStrides   {1, 1}
//   interleave       CU_TENSOR_MAP_INTERLEAVE_NONE
//   swizzle          CU_TENSOR_MAP_SWIZZLE_128B
//   l2Promotion      CU_TENSOR_MAP_L2_PROMOTION_L2_256B
//   oobFill          CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE (out-of-range elements
//                    read as zero: this is what makes ragged M, N, K work)
//
// ===========================================================================
// Design
// ===========================================================================
// Warpgroup 0 is the producer: it lowers its registers (setmaxnreg.dec) and
// one thread issues, for every k block (BK = 64) of every tile of this CTA,
// the TMA copies of the A tile (BM x 64) and the B tile (BN x 64) into ring
// slot s, after waiting for the slot's "empty" mbarrier; the copies complete
// on the slot's "full" mbarrier (expect-tx of the stage's byte count).
// Warpgroups 1 and 2 are consumers (setmaxnreg.inc): they wait on "full",
// issue 4 wgmma.mma_async m64nBNk16 per 64-row slab, commit, keep one
// commit group in flight (wgmma.wait_group 1) and release the previous slot
// (one arrive per warpgroup on its "empty" mbarrier).
//   cooperative (kPingPong = false): both consumer warpgroups work on one
//     BM x BN tile, warpgroup w on rows [w*BM/2, (w+1)*BM/2); the epilogue
//     runs on 256 threads (named barrier 1) while the producer already loads
//     the next tile.
//   ping-pong (kPingPong = true): each consumer warpgroup owns whole tiles
//     (the CTA's tiles alternate between them); since the ring is filled in
//     tile order, one warpgroup's epilogue overlaps the other's mainloop.
//     The epilogue runs on 128 threads (named barrier 1 + warpgroup).  A
//     warpgroup starts waiting on its tile's slots only after the other one
//     has issued its last k block (mbarrier turn[unit]): mbarrier phases are
//     tracked by parity, so no waiter may run more than one phase ahead of
//     a slot, and the hand-off also keeps the two mainloops from interleaving.
// Every tile in flight has its own epilogue scratch region in shared memory
// (the ring is never reused as scratch, since the producer runs ahead).
//
// Shared-memory operand layout (what the TMA writes with SWIZZLE_128B and
// the wgmma descriptors describe): per stage, A then B; each operand is a
// sequence of 8 KiB sub-tiles of 64 x 64 elements, each sub-tile 64 rows of
// 128 bytes (16-byte chunks XOR-swizzled by row % 8; 1024-byte aligned).
//   K-contiguous operand (A_MxK, B_NxK): sub-tile i = rows mn 64i..64i+63,
//     each row the 64 k of one mn.  wgmma K-major: start = row * 128 +
//     kk * 32 bytes (k16 step kk), SBO = 1024 (8 rows), LBO unused (1).
//   MN-contiguous operand (A_KxM, B_KxN): sub-tile i = mn 64i..64i+63, each
//     row the 64 mn of one k.  wgmma MN-major (transpose bit set): start =
//     i * 8192 + kk * 2048, SBO = 1024 (8 k rows), LBO = 8192 (next 64 mn).
//
// Accumulators: the wgmma m64nNk16 D fragment of warp w (of its warpgroup),
// lane 4g + t, holds (row 16w + g + 8h, col 8j + 2t + e) in register
// 4j + 2h + e, which is AccFrag's acc[2s + h][j][e] for slab s (row block
// stride 64).  So the functor sees exactly the AccFrag layout:
//   RI = 2 * (rows per warpgroup / 64), CJ = BN / 8, kWarpsM = warps holding
//   the tile (8 cooperative, 4 ping-pong), kWarpsN = 1, and f.sync() is a
//   named barrier over those warps only.
#ifndef CODA_GEMM_SM90_CUH
#define CODA_GEMM_SM90_CUH

#ifndef CODA_GEMM_SM80_CUH
#error "coda_gemm_sm90.cuh needs coda_common.cuh, coda_epilogue.cuh and coda_gemm_sm80.cuh before it"
#endif

namespace coda {

// Opaque stand-in for CUtensorMap (cuda.h is not available under NVRTC): the
// same 128 bytes and the same 128-byte alignment as CUDA 13's cuda.h (the
// hardware needs 64).
struct alignas(128) TmaDesc {
    unsigned long long opaque[16];
};

// ---------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------
// BM x BN output tile, BK = 64, kStages ring slots.  Cooperative: the two
// consumer warpgroups split BM (BM = 128: m64 per warpgroup; BM = 256: two
// m64 slabs per warpgroup).  Ping-pong: one warpgroup per tile (BM = 64 or
// 128).  Accumulators per consumer thread: (BM / warpgroups per tile) * BN / 128
// <= 128 (192 for ping-pong).  GROUP_M: rasterization group (tiles along M).
template <int BM_, int BN_, int STAGES, bool PINGPONG, int GROUP_M = 16, int STAGE_N = 0, int STAGE_REGIONS = 1>
struct Sm90Config {
    static constexpr bool kIsSm90 = true;
    static constexpr int BM = BM_;
    static constexpr int BN = BN_;
    static constexpr int BK = 64;
    static constexpr int kStages = STAGES;
    static constexpr bool kPingPong = PINGPONG;
    static constexpr int kGroupM = GROUP_M;
    // Columns the epilogue stages through shared memory at a time: the
    // whole tile (0), or subtiles of kStageN columns in kStageRegions
    // regions (coda::sub_put: a staged operand's and outputs'), whose
    // smaller scratch leaves room for a deeper ring.
    static constexpr int kStageN = STAGE_N ? STAGE_N : BN_;
    static constexpr int kStageRegions = STAGE_REGIONS;
    static constexpr int kThreads = 384;
    static constexpr int kMinBlocks = 1;
    static constexpr int kUnitWGs = PINGPONG ? 1 : 2;   // consumer warpgroups per tile
    static constexpr int kUnits = 2 / kUnitWGs;         // tiles in flight per CTA
    static constexpr int kUnitThreads = 128 * kUnitWGs;
    static constexpr int kWgRows = BM / kUnitWGs;       // tile rows per consumer warpgroup
    static constexpr int kSlabs = kWgRows / 64;         // m64 wgmma slabs per warpgroup
    static constexpr int kStageBytesA = BM * BK * 2;
    static constexpr int kStageBytesB = BN * BK * 2;
    static constexpr int kStageBytes = kStageBytesA + kStageBytesB;
    static constexpr int kRingBytes = kStages * kStageBytes;
    // Register split (setmaxnreg): 24 + 2 * 240 = 3 * 168, the per-thread
    // count of a 384-thread CTA at one CTA per SM.
    static constexpr int kProducerRegs = 24;
    static constexpr int kConsumerRegs = 240;

    static_assert(kWgRows % 64 == 0 && kSlabs >= 1, "rows per consumer warpgroup must be a multiple of 64");
    static_assert(BN == 64 || BN == 128 || BN == 192 || BN == 256, "BN must be 64, 128, 192 or 256");
    // Cooperative tiles keep at most 128 accumulators per consumer thread;
    // a ping-pong warpgroup owns its whole tile and may hold 192 (the
    // 128x192 tiles): 240 registers leave 48 for the K loop and the
    // epilogue.
    static_assert(kSlabs * BN <= (PINGPONG ? 384 : 256),
                  "at most 128 accumulators per consumer thread (192 for ping-pong)");
    static_assert(kStages >= 2, "at least 2 stages");
    static_assert(BN % kStageN == 0 && kStageN % 16 == 0, "staged subtiles must divide the tile in 16-column steps");
    static_assert(kProducerRegs + 2 * kConsumerRegs <= (kThreads / 128) * (65536 / kThreads),
                  "register split over the CTA's budget");
};

// Predefined configurations (bf16, A_MxK * B_NxK, store_tile_staged
// epilogue, H100 SXM; measurements in docs/decisions/hopper-mainloop.md and
// docs/decisions/ping-pong.md):
//   name                tile      mode         stages  smem bytes
//   Sm90Cfg128x256      128x256   cooperative  3       216112   <- default
//   Sm90Cfg128x128      128x128   cooperative  5       199760
//   Sm90Cfg128x128pp    128x128   ping-pong    4       201792
//   Sm90Cfg128x192pps   128x192   ping-pong    4       (staged subtiles)
//   Sm90Cfg128x192pps2  128x192   ping-pong    4       (staged subtiles)
//   Sm90Cfg128x192pps3  128x192   ping-pong    4       (staged subtiles)
// (smem bytes for Epi::kSmemFloats = 0.)
typedef Sm90Config<128, 256, 3, false> Sm90Cfg128x256;
typedef Sm90Config<128, 128, 5, false> Sm90Cfg128x128;
typedef Sm90Config<128, 128, 4, true> Sm90Cfg128x128pp;
// Ping-pong with staged subtiles: two 18 KiB scratches (64 columns at a
// time, one region) instead of two full tiles leave room for 4 ring stages
// (5 stages of 32-column subtiles measured slower: more barriers).
typedef Sm90Config<128, 192, 4, true, 16, 64, 1> Sm90Cfg128x192pps;
// Two regions of 32 columns (a staged operand's subtile beside an output's,
// or two outputs') and a 4-stage ring.
typedef Sm90Config<128, 192, 4, true, 16, 32, 2> Sm90Cfg128x192pps2;
// Three regions of 32 columns (three outputs, or a staged operand's subtile
// and three outputs): 226384 bytes of the 232448 an SM offers a CTA.
typedef Sm90Config<128, 192, 4, true, 16, 32, 3> Sm90Cfg128x192pps3;

// The accumulator fragment: AccFrag (same layout and members) whose sync()
// is a named barrier over the threads of the tile.
template <class Cfg>
struct Sm90Frag : AccFrag<2 * Cfg::kSlabs, Cfg::BN / 8, 64, Cfg::BM, Cfg::BN, 4 * Cfg::kUnitWGs, 1> {
    // Private scratch per tile in flight.
    static constexpr bool kAsyncStage = true;
    static constexpr int kStageN = Cfg::kStageN;
    static constexpr int kStageRegions = Cfg::kStageRegions;
    int bar_id;  // named barrier of this tile's threads (1 or 2)
    __device__ __forceinline__ void sync() const {
        asm volatile("bar.sync %0, %1;\n" ::"r"(bar_id), "n"(Cfg::kUnitThreads) : "memory");
    }
};

// Column vectors the functor stages per tile (static constexpr int
// kColVecs = n): n slots of BN * 4 bytes after each tile's scratch.
template <class E, class = void>
struct EpiColVecs {
    static constexpr int value = 0;
};
template <class E>
struct EpiColVecs<E, decltype(void(E::kColVecs))> {
    static constexpr int value = E::kColVecs;
};

// Epilogue scratch bytes per tile in flight (see the host contract): the
// scratch proper (TileInfo::smem_bytes), then the column-vector slots.
template <class Cfg, class Epi>
__host__ __device__ constexpr int sm90_scratch_core_bytes() {
    typedef Sm90Frag<Cfg> F;
    constexpr int a = Cfg::kStageRegions * staged_store_bytes<Cfg::BM, Cfg::kStageN, bf16>();
    constexpr int b = 4 * Epi::kSmemFloats;
    constexpr int c = 4 * F::kReduceFloats;
    constexpr int m = a > b ? (a > c ? a : c) : (b > c ? b : c);
    return (m + 127) / 128 * 128;
}
template <class Cfg, class Epi>
__host__ __device__ constexpr int sm90_scratch_bytes() {
    return sm90_scratch_core_bytes<Cfg, Epi>() + EpiColVecs<Epi>::value * Cfg::BN * 4;
}
// Dynamic shared memory of gemm_sm90<Cfg, ..., Epi> (bytes); the host mirrors this.
template <class Cfg, class Epi>
__host__ __device__ constexpr int gemm_sm90_smem_bytes() {
    return 1024 + Cfg::kRingBytes + Cfg::kUnits * sm90_scratch_bytes<Cfg, Epi>() + 16 * Cfg::kStages + 16;
}

// Whether the functor has prefetch(p, f, t, smem) (static constexpr bool
// kPrefetch = true): then the mainloop calls it before each tile's K loop,
// after a barrier over the tile's threads.
template <class E, class = void>
struct EpiPrefetch {
    static constexpr bool value = false;
};
template <class E>
struct EpiPrefetch<E, decltype(void(E::kPrefetch))> {
    static constexpr bool value = E::kPrefetch;
};

extern __shared__ __align__(1024) unsigned char coda_dyn_smem_sm90[];

// ---------------------------------------------------------------------------
// PTX wrappers: mbarrier, TMA, wgmma, setmaxnreg
// ---------------------------------------------------------------------------
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}
// Blocks until the phase with the given parity has completed.
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "CODA_MBAR_WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        "@!p bra CODA_MBAR_WAIT;\n"
        "}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
}
// 2D tiled TMA load of box (c0, c1) (innermost coordinate first) into smem
// address dst, completing on mbarrier bar.
__device__ __forceinline__ void tma_load_2d(unsigned dst, const TmaDesc& desc, unsigned bar, int c0, int c1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], "
        "[%2];\n" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(&desc)), "r"(bar), "r"(c0), "r"(c1)
        : "memory");
}
// 4D tiled TMA load of box (c0, c1, c2, c3) (innermost first): the pair-order
// view of a weight (see Sm90PairRows).
__device__ __forceinline__ void tma_load_4d(unsigned dst, const TmaDesc& desc, unsigned bar, int c0, int c1, int c2,
                                            int c3) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, "
        "%6}], [%2];\n" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(&desc)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
        : "memory");
}
__device__ __forceinline__ void tma_prefetch_desc(const TmaDesc& desc) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<unsigned long long>(&desc)) : "memory");
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accesses of an accumulator register across
// the wgmma fence / wait points (no instruction is emitted).
__device__ __forceinline__ void reg_fence(float& x) { asm volatile("" : "+f"(x)::"memory"); }

// The tiles one CTA of the persistent grid works on: blockIdx.x,
// + gridDim.x, ... as raster_grouped orders them.
template <class Cfg>
struct TileWalk {
    int first, stride, count, tiles_m, tiles_n;
    __device__ __forceinline__ TileWalk(int tiles_m_, int tiles_n_) {
        tiles_m = tiles_m_;
        tiles_n = tiles_n_;
        first = (int)blockIdx.x;
        stride = (int)gridDim.x;
        count = tiles_m * tiles_n;
    }
    __device__ __forceinline__ void at(int ct, int& tm, int& tn) const {
        raster_grouped(ct, tiles_m, tiles_n, Cfg::kGroupM, tm, tn);
    }
};

template <int REGS>
__device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS));
}
template <int REGS>
__device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS));
}

// wgmma descriptor constants of one operand's stage tile: K-major (K
// contiguous, 128-byte rows): LBO 16 (unused), k16 step 32 bytes; MN-major:
// LBO 8192 (next 64 mn), k16 step 2048 bytes (16 rows of 128 bytes). SBO is
// 1024 (8-row swizzle atoms) either way.
template <bool K_MAJOR>
struct WgmmaTile {
    static constexpr unsigned kLbo = K_MAJOR ? 16u : 8192u;
    static constexpr unsigned kKStep = K_MAJOR ? 32u : 2048u;
};

// wgmma shared-memory matrix descriptor: start address, LBO, SBO (all >> 4),
// layout type 1 = 128-byte swizzle (bits 62-63).
__device__ __forceinline__ unsigned long long wgmma_desc(unsigned addr, unsigned lbo, unsigned sbo) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)(lbo >> 4) << 16) |
           ((unsigned long long)(sbo >> 4) << 32) | (1ull << 62);
}

// One wgmma.mma_async m64nNk16 (fp32 accumulate) of one 64-row slab:
// lo = acc[2s], hi = acc[2s + 1] (rows g and g + 8 of the warp's 16).
// TA / TB: transpose bits (1 = operand stored MN-major in smem).
template <int N, class Elem, int TA, int TB>
struct Wgmma;

// Register lists %0 .. %(N/2 - 1), 16 per chunk.
#define CODA_WG_R0 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
#define CODA_WG_R1 ", %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define CODA_WG_R2 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47"
#define CODA_WG_R3 ", %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define CODA_WG_R4 ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79"
#define CODA_WG_R5 ", %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define CODA_WG_R6 ", %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111"
#define CODA_WG_R7 ", %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
// Accumulator operands in D-register order: n8 block j = lo[j][0..1], hi[j][0..1].
#define CODA_WG_A1(j) "+f"(lo[j][0]), "+f"(lo[j][1]), "+f"(hi[j][0]), "+f"(hi[j][1])
#define CODA_WG_A4(j) CODA_WG_A1(j), CODA_WG_A1(j + 1), CODA_WG_A1(j + 2), CODA_WG_A1(j + 3)
#define CODA_WG_A8(j) CODA_WG_A4(j), CODA_WG_A4(j + 4)
// OPS: the positions of the two descriptors and the two transpose immediates.
#define CODA_WG_DEFINE(N, ELEM, TY, REGS, OPS, ACCS)                                                         \
    template <int TA, int TB>                                                                                \
    struct Wgmma<N, ELEM, TA, TB> {                                                                          \
        static __device__ __forceinline__ void run(float (&lo)[N / 8][2], float (&hi)[N / 8][2],             \
                                                   unsigned long long da, unsigned long long db) {           \
            asm volatile("wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " {" REGS "}, " OPS     \
                         ";\n"                                                                               \
                         : ACCS                                                                              \
                         : "l"(da), "l"(db), "n"(TA), "n"(TB));                                              \
        }                                                                                                    \
    };
#define CODA_WG_REGS_64 CODA_WG_R0 CODA_WG_R1
#define CODA_WG_REGS_128 CODA_WG_R0 CODA_WG_R1 CODA_WG_R2 CODA_WG_R3
#define CODA_WG_REGS_192 CODA_WG_R0 CODA_WG_R1 CODA_WG_R2 CODA_WG_R3 CODA_WG_R4 CODA_WG_R5
#define CODA_WG_REGS_256 CODA_WG_R0 CODA_WG_R1 CODA_WG_R2 CODA_WG_R3 CODA_WG_R4 CODA_WG_R5 CODA_WG_R6 CODA_WG_R7
#define CODA_WG_ACCS_64 CODA_WG_A8(0)
#define CODA_WG_ACCS_128 CODA_WG_A8(0), CODA_WG_A8(8)
#define CODA_WG_ACCS_192 CODA_WG_A8(0), CODA_WG_A8(8), CODA_WG_A8(16)
#define CODA_WG_ACCS_256 CODA_WG_A8(0), CODA_WG_A8(8), CODA_WG_A8(16), CODA_WG_A8(24)
#define CODA_WG_OPS_64 "%32, %33, 1, 1, 1, %34, %35"
#define CODA_WG_OPS_128 "%64, %65, 1, 1, 1, %66, %67"
#define CODA_WG_OPS_192 "%96, %97, 1, 1, 1, %98, %99"
#define CODA_WG_OPS_256 "%128, %129, 1, 1, 1, %130, %131"

// Every N and element type.
#define CODA_WG_FOR(N, ELEM, TY) CODA_WG_DEFINE(N, ELEM, TY, CODA_WG_REGS_##N, CODA_WG_OPS_##N, CODA_WG_ACCS_##N)
CODA_WG_FOR(64, bf16, "bf16")
CODA_WG_FOR(128, bf16, "bf16")
CODA_WG_FOR(192, bf16, "bf16")
CODA_WG_FOR(256, bf16, "bf16")
CODA_WG_FOR(64, f16, "f16")
CODA_WG_FOR(128, f16, "f16")
CODA_WG_FOR(192, f16, "f16")
CODA_WG_FOR(256, f16, "f16")
#undef CODA_WG_FOR
#undef CODA_WG_OPS_64
#undef CODA_WG_OPS_128
#undef CODA_WG_OPS_192
#undef CODA_WG_OPS_256
#undef CODA_WG_DEFINE
#undef CODA_WG_REGS_64
#undef CODA_WG_REGS_128
#undef CODA_WG_REGS_192
#undef CODA_WG_REGS_256
#undef CODA_WG_ACCS_64
#undef CODA_WG_ACCS_128
#undef CODA_WG_ACCS_192
#undef CODA_WG_ACCS_256
#undef CODA_WG_A8
#undef CODA_WG_A4
#undef CODA_WG_A1
#undef CODA_WG_R0
#undef CODA_WG_R1
#undef CODA_WG_R2
#undef CODA_WG_R3
#undef CODA_WG_R4
#undef CODA_WG_R5
#undef CODA_WG_R6
#undef CODA_WG_R7

// ---------------------------------------------------------------------------
// Row preludes
// ---------------------------------------------------------------------------
// A row kernel fused into the GEMM that reads its outputs only at the rows
// of its tiles (the norm of a block input before the LM head: x ⊙ g and
// the row's rsqrt statistic).  Pre (emitted) has kActive, Params (the row
// kernel's arguments, the entry's last parameter), row(p, m) computing row
// m with one warp, and ready(p): an int buffer of at least 1 + 2 tiles_m
// elements, all 0 before the launch:
//   ready[0]                  consumer warps that finished all their tiles
//   ready[1 + tm]             rows of row tile tm computed so far
//   ready[1 + tiles_m + tm]   the next row of row tile tm to hand out
// Rows are handed out one at a time (atomicAdd on the ticket), to any warp
// that asks: the three idle warps of the producer warpgroup walk the CTA's
// tiles ahead of the mainloop and compute rows of every row tile that still
// has some, so the rows are mostly done before a tile needs them, while
// the tensor cores work; consumer warps reaching a tile whose row tile is
// not finished take rows too (they would wait anyway).  A finished row is
// published with a release (fence + atomicAdd on the count).  The producer
// waits (acquire) for the whole row tile before its first TMA load of a
// tile and then fences the async proxy (the tensor copies read what generic
// stores of other SMs wrote).  The consumers need no wait of their own: the
// producer's acquire, then its release arrive on the stage's full barrier,
// then their acquire wait on it order the rows' stores before their
// epilogue's reads (made through L2, cg::load_cg, since L1 is not
// coherent).  Every side remembers the row tiles it has seen finished (or,
// for the helpers, handed out) in RowBlocksSeen, so the checks happen once
// per row tile and CTA, not per tile.  No deadlock and no need for the CTAs
// to be co-resident: a warp holding a row computes it at once, with no wait
// in between, and the helpers never wait.  The last consumer warp to
// finish zeroes the buffer, so it is 0 again for the next launch (graph
// replays included).  With a prelude the producer warpgroup keeps 56
// registers (the helpers' unrolled row loops; 40 spilled) and the consumers 224.
struct NoPrelude {
    static constexpr bool kActive = false;
    struct Params {};
    static __device__ __forceinline__ void row(const Params&, int) {}
    static __device__ __forceinline__ int* ready(const Params&) { return nullptr; }
};

// Row blocks known to be complete, as a bit mask over a window of 64
// consecutive row tiles (the rasterization keeps a CTA inside a group of
// kGroupM <= 64 row tiles for long stretches; a tile outside the window
// moves it and forgets the rest).
struct RowBlocksSeen {
    unsigned long long mask = 0;
    int base = 0;
    __device__ __forceinline__ bool has(int tm) const {
        return tm >= base && tm < base + 64 && ((mask >> (tm - base)) & 1ull);
    }
    __device__ __forceinline__ void add(int tm) {
        if (tm < base || tm >= base + 64) {
            base = tm & ~63;
            mask = 0;
        }
        mask |= 1ull << (tm - base);
    }
};

__device__ __forceinline__ int ld_acquire_gpu(const int* p) {
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}
// Spins until *count == want (one thread).
__device__ __forceinline__ void prelude_wait(const int* count, int want) {
    while (ld_acquire_gpu(count) != want) __nanosleep(100);
}
// Takes rows of row tile tm (m0 = its first row, want = its row count)
// until none is left, computing each with this warp.
template <class Pre>
__device__ __forceinline__ void prelude_rows(const typename Pre::Params& pp, int tiles_m, int tm, int m0, int want,
                                             int lane) {
    int* const ready = Pre::ready(pp);
#pragma unroll 1
    while (true) {
        int r = 0;
        if (lane == 0) r = atomicAdd(ready + 1 + tiles_m + tm, 1);
        r = __shfl_sync(0xffffffffu, r, 0);
        if (r >= want) return;
        Pre::row(pp, m0 + r);
        __syncwarp();
        if (lane == 0) {
            __threadfence();
            atomicAdd(ready + 1 + tm, 1);
        }
    }
}
// A consumer warp at the start of a tile: nothing once the row tile is
// known finished; otherwise it checks, and helps while it is not.
template <class Pre>
__device__ __forceinline__ void prelude_consumer(const typename Pre::Params& pp, RowBlocksSeen& seen, int tiles_m,
                                                 int tm, int m0, int want, int lane) {
    if (seen.has(tm)) return;
    int done = 0;
    if (lane == 0) done = *reinterpret_cast<volatile int*>(Pre::ready(pp) + 1 + tm);
    if (__shfl_sync(0xffffffffu, done, 0) == want) seen.add(tm);
    else prelude_rows<Pre>(pp, tiles_m, tm, m0, want, lane);
}
// The helper warps (1..3 of the producer warpgroup): rows of the CTA's
// tiles in tile order, skipping row tiles with no row left to hand out.
template <class Pre, class Cfg>
__device__ __forceinline__ void prelude_helper(const typename Pre::Params& pp, int tiles_m, int tiles_n, int num_tiles,
                                               int m, int lane) {
    const int* const tickets = Pre::ready(pp) + 1 + tiles_m;
    RowBlocksSeen seen;
#pragma unroll 1
    for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
        int tm, tn;
        raster_grouped(tile, tiles_m, tiles_n, Cfg::kGroupM, tm, tn);
        if (seen.has(tm)) continue;
        const int m0 = tm * Cfg::BM, want = min(Cfg::BM, m - m0);
        int handed = 0;
        if (lane == 0) handed = *reinterpret_cast<const volatile int*>(tickets + tm);
        if (__shfl_sync(0xffffffffu, handed, 0) < want) prelude_rows<Pre>(pp, tiles_m, tm, m0, want, lane);
        seen.add(tm);
    }
}
// The end of a consumer warp's tiles: the last of all zeroes the buffer.
template <class Pre>
__device__ __forceinline__ void prelude_done(const typename Pre::Params& pp, int tiles_m, int warps_per_cta, int lane) {
    int* const ready = Pre::ready(pp);
    int last = 0;
    if (lane == 0) {
        __threadfence();
        last = atomicAdd(ready, 1) == (int)gridDim.x * warps_per_cta - 1;
    }
    if (!__shfl_sync(0xffffffffu, last, 0)) return;
    __threadfence();
    for (int i = lane; i < 1 + 2 * tiles_m; i += 32) ready[i] = 0;
}

// ---------------------------------------------------------------------------
// The GEMM
// ---------------------------------------------------------------------------
// B row maps of the Hopper mainloop.  IdentityRows (coda_gemm_sm80.cuh): B
// row n is weight row n.  Sm90PairRows<START, END, GROUP>: the pair layout of
// PairRows (in each group of GROUP rows in [START, END), rows i and
// i + GROUP/2 become neighbours 2i, 2i + 1), loaded by TMA through a second,
// rank-4 tensor map of the same weight (tbp below), which lists the rows of
// [START, END) as {k, half, i, group} with strides {1, GROUP/2 * ld,
// ld, GROUP * ld} from row START: a box {64, 2, kBoxRows/2, 1} is kBoxRows
// consecutive rows of the pair order, written to shared memory exactly like
// a 2D box of as many rows (so the swizzle, whose pattern repeats every 8
// rows, and the wgmma descriptors are unchanged).  Needs a K-contiguous B
// (B_NxK), START and END multiples of 64 (no 64-row chunk straddles
// [START, END)) and GROUP a multiple of 32: boxes of 64 rows where GROUP is
// a multiple of 64, else two boxes of 32 rows per 64-row chunk (head width
// 96), so that no box straddles a group.  STACKED: B is two weights of
// GROUP/2 rows each (START 0, END GROUP), the halves of the one group; the
// host's map has the lower of their addresses as its base and their
// distance as the half stride, so where the second weight (GemmArgs::b2)
// lies below the first the halves arrive swapped, and the consumers swap
// each accumulator pair back before the epilogue.
template <int START, int END, int GROUP, bool STACKED = false>
struct Sm90PairRows {
    static_assert(START % 64 == 0 && END % 64 == 0 && GROUP % 32 == 0 && END > START && (END - START) % GROUP == 0,
                  "Sm90PairRows needs START and END multiples of 64 and GROUP a multiple of 32");
    static_assert(!STACKED || (START == 0 && END == GROUP), "stacked weights are the two halves of one group");
    static constexpr bool kIdentity = false;
    static constexpr bool kStacked = STACKED;
    static constexpr int kBoxRows = GROUP % 64 == 0 ? 64 : 32;
    // The tensor-map coordinates {k0, half, i, group} of the kBoxRows rows
    // from logical row n (a multiple of kBoxRows in [START, END)).
    static __device__ __forceinline__ void coords(int n, int& i, int& group) {
        const int local = n - START;
        group = local / GROUP;
        i = (local % GROUP) / 2;
    }
    static __device__ __forceinline__ bool inside(int n) { return n >= START && n < END; }
};

// The parts of a product over a concatenated inner dimension
// (acc = A0 @ B0 + A1 @ B1 [+ A2 @ B2], GemmKParts): every part's tensor maps
// (in the first part's layouts, each with its own K as its extent) and K.
// Part p's k blocks follow part p-1's in the K loop; a box past a part's K
// is zero-filled by the TMA unit, so a part's K need not be a multiple of
// BK (its last block multiplies zeros).
template <int KPARTS>
struct Sm90KParts {
    static_assert(KPARTS >= 1 && KPARTS <= 3, "one to three K parts");
    const TmaDesc* ta[KPARTS];
    const TmaDesc* tb[KPARTS];
    int k[KPARTS];
    // K blocks in all.
    template <int BK>
    __device__ __forceinline__ int ktiles() const {
        int n = 0;
#pragma unroll
        for (int p = 0; p < KPARTS; ++p) n += (k[p] + BK - 1) / BK;
        return n;
    }
    // The maps and the in-part K offset of K block kb.
    template <int BK>
    __device__ __forceinline__ void locate(int kb, const TmaDesc*& a, const TmaDesc*& b, int& k0) const {
#pragma unroll
        for (int p = 0; p < KPARTS; ++p) {
            const int blocks = (k[p] + BK - 1) / BK;
            if (kb < blocks || p == KPARTS - 1) {
                a = ta[p];
                b = tb[p];
                k0 = kb * BK;
                return;
            }
            kb -= blocks;
        }
    }
};

template <class Cfg, class LayoutA, class LayoutB, class Elem, class Epi, class RowsB, class Pre = NoPrelude,
          int KPARTS = 1>
__device__ __forceinline__ void gemm_sm90_rows(const TmaDesc& ta, const TmaDesc& tb, const TmaDesc& tbp,
                                               const GemmArgs& g, const typename Epi::Params& ep,
                                               const typename Pre::Params& pp = typename Pre::Params(),
                                               const Sm90KParts<KPARTS>* kparts = nullptr);

// The plain Hopper GEMM (weight rows in order).
template <class Cfg, class LayoutA, class LayoutB, class Elem, class Epi>
__device__ __forceinline__ void gemm_sm90(const TmaDesc& ta, const TmaDesc& tb, const GemmArgs& g,
                                          const typename Epi::Params& ep) {
    gemm_sm90_rows<Cfg, LayoutA, LayoutB, Elem, Epi, IdentityRows>(ta, tb, tb, g, ep);
}

// The Hopper GEMM with a B row map (RowsB = IdentityRows or Sm90PairRows;
// tbp is the pair-order view, ignored for IdentityRows); Pre the row
// prelude (NoPrelude, or an emitted one whose arguments are pp); KPARTS > 1
// a product over a concatenated inner dimension, whose parts are kparts
// (ta and tb are then its first part's maps, and g.k is ignored).
template <class Cfg, class LayoutA, class LayoutB, class Elem, class Epi, class RowsB, class Pre, int KPARTS>
__device__ __forceinline__ void gemm_sm90_rows(const TmaDesc& ta, const TmaDesc& tb, const TmaDesc& tbp,
                                               const GemmArgs& g, const typename Epi::Params& ep,
                                               const typename Pre::Params& pp, const Sm90KParts<KPARTS>* kparts) {
    static_assert(RowsB::kIdentity || LayoutB::kKContiguous, "a B row map needs a K-contiguous B (B_NxK)");
    static_assert(KPARTS == 1 || RowsB::kIdentity, "K parts read their weights' rows in order");
    static_assert(is_same<Elem, bf16>::value || is_same<Elem, f16>::value, "Elem must be bf16 or f16");
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(sizeof(Elem) == 0, "gemm_sm90 needs sm_90a (wgmma, setmaxnreg)");
#endif
    typedef Sm90Frag<Cfg> Frag;
    constexpr int S = Cfg::kStages;
    constexpr bool kAK = LayoutA::kKContiguous;
    constexpr bool kBK = LayoutB::kKContiguous;
    constexpr int kScratch = sm90_scratch_bytes<Cfg, Epi>();
    static_assert(gemm_sm90_smem_bytes<Cfg, Epi>() <= 232448, "exceeds the 227 KiB of shared memory per CTA");

    // Shared memory map (1024-aligned base): ring [stage][A | B], scratch per
    // unit, full[S], empty[S], turn[2].
    const unsigned base = (smem_u32(coda_dyn_smem_sm90) + 1023u) & ~1023u;
    const unsigned ring = base;
    const unsigned scratch0 = ring + Cfg::kRingBytes;
    const unsigned bars = scratch0 + Cfg::kUnits * kScratch;
    // full[s] at bars + 8 s, empty[s] at bars + 8 (S + s), turn[u] at bars + 8 (2 S + u).

    const int tid = threadIdx.x;
    const int wg = tid >> 7;  // 0 = producer, 1..2 = consumers

    const int tiles_m = (g.m + Cfg::BM - 1) / Cfg::BM;
    const int tiles_n = (g.n + Cfg::BN - 1) / Cfg::BN;
    const int num_tiles = tiles_m * tiles_n;
    const int ktiles = KPARTS == 1 ? (g.k + Cfg::BK - 1) / Cfg::BK : kparts->template ktiles<Cfg::BK>();

    if (tid == 0) {
        tma_prefetch_desc(ta);
        tma_prefetch_desc(tb);
        if (!RowsB::kIdentity) tma_prefetch_desc(tbp);
        if constexpr (KPARTS > 1) {
#pragma unroll
            for (int p = 1; p < KPARTS; ++p) {
                tma_prefetch_desc(*kparts->ta[p]);
                tma_prefetch_desc(*kparts->tb[p]);
            }
        }
#pragma unroll 1
        for (int s = 0; s < S; ++s) {
            mbar_init(bars + 8 * s, 1);                       // full: the producer's expect-tx arrive
            mbar_init(bars + 8 * (S + s), Cfg::kUnitWGs);   // empty: one arrive per consuming warpgroup
        }
        mbar_init(bars + 8 * (2 * S), 1);  // turn[0] (ping-pong hand-off)
        mbar_init(bars + 8 * (2 * S + 1), 1);  // turn[1]
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    }
    __syncthreads();
    const TileWalk<Cfg> walk(tiles_m, tiles_n);

    // Register split: a row prelude's helpers need more than the producer.
    constexpr int kProducerRegs = Pre::kActive ? 56 : Cfg::kProducerRegs;
    constexpr int kConsumerRegs = Pre::kActive ? 224 : Cfg::kConsumerRegs;
    static_assert(kProducerRegs + 2 * kConsumerRegs <= (Cfg::kThreads / 128) * (65536 / Cfg::kThreads),
                  "register split over the CTA's budget");
    if (wg == 0) {
        // ---------------- producer ----------------
        setmaxnreg_dec<kProducerRegs>();
        if constexpr (Pre::kActive) {
            if (tid >= 32) prelude_helper<Pre, Cfg>(pp, tiles_m, tiles_n, num_tiles, g.m, tid & 31);
        }
        if (tid == 0) {
            int slot = 0;
            unsigned phase = 0;
            RowBlocksSeen seen;  // row prelude only
#pragma unroll 1
            for (int ct = walk.first; ct < walk.count; ct += walk.stride) {
                int tm, tn;
                walk.at(ct, tm, tn);
                const int m0 = tm * Cfg::BM, n0 = tn * Cfg::BN;
                if (Pre::kActive && !seen.has(tm)) {
                    // The tile's rows are computed (by the consumers of some
                    // CTA); the tensor copies below may read them.
                    prelude_wait(Pre::ready(pp) + 1 + tm, min(Cfg::BM, g.m - m0));
                    asm volatile("fence.proxy.async.global;\n" ::: "memory");
                    seen.add(tm);
                }
#pragma unroll 1
                for (int kb = 0; kb < ktiles; ++kb) {
                    const unsigned full = bars + 8 * slot;
                    mbar_wait(bars + 8 * (S + slot), phase ^ 1u);  // slot free (first round: passes)
                    mbar_arrive_expect_tx(full, Cfg::kStageBytes);
                    const unsigned sa = ring + slot * Cfg::kStageBytes;
                    const unsigned sb = sa + Cfg::kStageBytesA;
                    const TmaDesc* pa = &ta;
                    const TmaDesc* pb = &tb;
                    int k0 = kb * Cfg::BK;
                    if constexpr (KPARTS > 1) kparts->template locate<Cfg::BK>(kb, pa, pb, k0);
#pragma unroll
                    for (int i = 0; i < Cfg::BM / 64; ++i) {
                        if (kAK) tma_load_2d(sa + i * 8192, *pa, full, k0, m0 + 64 * i);
                        else tma_load_2d(sa + i * 8192, *pa, full, m0 + 64 * i, k0);
                    }
#pragma unroll
                    for (int i = 0; i < Cfg::BN / 64; ++i) {
                        const int n = n0 + 64 * i;
                        const unsigned dst = sb + i * 8192;
                        if constexpr (!RowsB::kIdentity) {
                            if (RowsB::inside(n)) {
#pragma unroll
                                for (int r = 0; r < 64; r += RowsB::kBoxRows) {
                                    int pi, pg;
                                    RowsB::coords(n + r, pi, pg);
                                    tma_load_4d(dst + r * 128, tbp, full, k0, 0, pi, pg);
                                }
                                continue;
                            }
                        }
                        const int c0 = kBK ? k0 : n, c1 = kBK ? n : k0;
                        tma_load_2d(dst, *pb, full, c0, c1);
                    }
                    if (++slot == S) {
                        slot = 0;
                        phase ^= 1u;
                    }
                }
            }
        }
        return;
    }

    // ---------------- consumers ----------------
    setmaxnreg_inc<kConsumerRegs>();
    const int cw = wg - 1;                              // consumer warpgroup 0 / 1
    const int unit = Cfg::kPingPong ? cw : 0;           // which tile stream
    const int wg_in_unit = Cfg::kPingPong ? 0 : cw;     // row block within the tile
    const int ctid = tid & 127;
    const int lane = tid & 31;
    const int warp_in_wg = ctid >> 5;
    const bool release_thread = ctid == 0;

    Frag f;
    f.bar_id = 1 + unit;
    f.lane = lane;
    f.warp_m = wg_in_unit * 4 + warp_in_wg;
    f.warp_n = 0;
    f.lrow0 = wg_in_unit * Cfg::kWgRows + 16 * warp_in_wg + (lane >> 2);
    f.lcol0 = 2 * (lane & 3);
    f.m = g.m;
    f.n = g.n;
    float* const scratch = reinterpret_cast<float*>(coda_dyn_smem_sm90 + (scratch0 + unit * kScratch -
                                                                         smem_u32(coda_dyn_smem_sm90)));

    typedef WgmmaTile<kAK> TileA;
    typedef WgmmaTile<kBK> TileB;
    // Byte offset of this warpgroup's slab s (A) within a stage.
    const unsigned a_wg_off = kAK ? (unsigned)(wg_in_unit * Cfg::kWgRows * 128) : (unsigned)(wg_in_unit * Cfg::kWgRows / 64 * 8192);
    constexpr unsigned kSlabStrideA = kAK ? 64u * 128u : 8192u;

    RowBlocksSeen seen;  // row prelude only
    int seq = 0;      // index of the tile among this CTA's tiles
    int kdone = 0;    // k blocks of this CTA's tiles before the current one (ring position)
    unsigned turn_phase = 0;
#pragma unroll 1
    for (int ct = walk.first; ct < walk.count; ct += walk.stride, ++seq, kdone += ktiles) {
        if (Cfg::kPingPong && (seq & 1) != unit) continue;
        int tm, tn;
        walk.at(ct, tm, tn);
        const int m0 = tm * Cfg::BM, n0 = tn * Cfg::BN;

#pragma unroll
        for (int i = 0; i < Frag::RI; ++i)
#pragma unroll
            for (int j = 0; j < Frag::CJ; ++j) {
                f.acc[i][j][0] = 0.0f;
                f.acc[i][j][1] = 0.0f;
            }

        if constexpr (Pre::kActive) prelude_consumer<Pre>(pp, seen, tiles_m, tm, m0, min(Cfg::BM, g.m - m0), lane);

        f.grow0 = m0 + f.lrow0;
        f.gcol0 = n0 + f.lcol0;
        // Fields in declaration order: origin, tile coordinates, tile counts, M, N,
        // scratch bytes (the column-vector slots follow the scratch proper).
        const TileInfo t{m0, n0, tm, tn, tiles_m, tiles_n, g.m, g.n, sm90_scratch_core_bytes<Cfg, Epi>()};
        if constexpr (EpiPrefetch<Epi>::value) {
            f.sync();  // the previous tile's epilogue is done with the scratch
            Epi::prefetch(ep, f, t, scratch);
        }

        if (Cfg::kPingPong && seq > 0) {
            // Wait until the other warpgroup has issued its previous tile's
            // last k block (see the design notes).
            mbar_wait(bars + 8 * (2 * S + unit), turn_phase);
            turn_phase ^= 1u;
        }
        int slot = kdone % S;
        unsigned phase = (unsigned)(kdone / S) & 1u;
        int prev_slot = -1;
#pragma unroll 1
        for (int kb = 0; kb < ktiles; ++kb) {
            mbar_wait(bars + 8 * slot, phase);
            const unsigned sa = ring + slot * Cfg::kStageBytes + a_wg_off;
            const unsigned sb = ring + slot * Cfg::kStageBytes + Cfg::kStageBytesA;
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < Cfg::BK / 16; ++kk) {
                const unsigned long long db = wgmma_desc(sb + kk * TileB::kKStep, TileB::kLbo, 1024u);
#pragma unroll
                for (int s = 0; s < Cfg::kSlabs; ++s) {
                    const unsigned long long da =
                        wgmma_desc(sa + s * kSlabStrideA + kk * TileA::kKStep, TileA::kLbo, 1024u);
                    Wgmma<Cfg::BN, Elem, kAK ? 0 : 1, kBK ? 0 : 1>::run(f.acc[2 * s], f.acc[2 * s + 1], da, db);
                }
            }
            wgmma_commit();
            wgmma_wait<1>();  // the previous k block's wgmmas are done: release its slot
            if (prev_slot >= 0 && release_thread) mbar_arrive(bars + 8 * (S + prev_slot));
            prev_slot = slot;
            if (++slot == S) {
                slot = 0;
                phase ^= 1u;
            }
        }
        if (Cfg::kPingPong && release_thread) mbar_arrive(bars + 8 * (2 * S + (unit ^ 1)));  // hand-off
        wgmma_wait<0>();
        if (prev_slot >= 0 && release_thread) mbar_arrive(bars + 8 * (S + prev_slot));
#pragma unroll
        for (int i = 0; i < Frag::RI; ++i)
#pragma unroll
            for (int j = 0; j < Frag::CJ; ++j) {
                reg_fence(f.acc[i][j][0]);
                reg_fence(f.acc[i][j][1]);
            }

        if constexpr (!RowsB::kIdentity) {
            if (RowsB::kStacked && g.b2 < g.b) {
#pragma unroll
                for (int i = 0; i < Frag::RI; ++i)
#pragma unroll
                    for (int j = 0; j < Frag::CJ; ++j) {
                        const float x = f.acc[i][j][0];
                        f.acc[i][j][0] = f.acc[i][j][1];
                        f.acc[i][j][1] = x;
                    }
            }
        }

        Epi::apply(ep, f, t, scratch);
    }
    if constexpr (Pre::kActive) prelude_done<Pre>(pp, tiles_m, 8, lane);
}

}  // namespace coda

#endif  // CODA_GEMM_SM90_CUH
