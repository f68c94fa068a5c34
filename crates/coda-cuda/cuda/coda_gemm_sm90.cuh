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
// Grid:  1D, min(num_tiles, #SMs) CTAs, num_tiles = ceil(M/BM) * ceil(N/BN)
//        (persistent: CTA b takes tiles b, b + gridDim.x, ...; any grid size
//        >= 1 is correct, #SMs is the fast one).  Do not launch when M or N
//        is 0.  K = 0 gives acc = 0.
//        Clusters (Cfg::kClusterM = 2): the entry point carries
//        __cluster_dims__(2, 1, 1) and the grid must be a multiple of 2; the
//        fast one is 2 * (the clusters that fit at once,
//        cuOccupancyMaxActiveClusters), any even size >= 2 is correct.
// Block: Cfg::kThreads = 384 threads (1 producer + 2 consumer warpgroups),
//        512 with an epilogue warpgroup (Cfg::kEpiWG).
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
//        With an epilogue warpgroup the scratch is the hand-off buffer
//        (BM / 2 * BN * 4 bytes) followed by the same round_up(...) for
//        32-row tiles, no column-vector slots, and 32 more bytes of
//        mbarriers.
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
//   epilogue warpgroup (kEpiWG, Sm90Cfg128x192ew): cooperative consumers
//     that store each tile's accumulators into shared memory, one consumer
//     warpgroup's 64-row slab at a time, and go on with the next tile's K
//     loop while warpgroup 3 loads them and runs the functor on 32-row
//     fragments (see sm90_epilogue_warpgroup).  512 threads leave 128
//     registers per thread at launch, which ptxas needs to cover every
//     wgmma: m64n192 (96 accumulators) compiles, m64n256 does not (C7602),
//     hence BN = 192; the 48 KiB hand-off buffer leaves room for
//     a 4-stage ring (3 stages of 128 x 192 measured 10-19% slower).
//   clusters (kClusterM = 2, Sm90Cfg128x256c2): the two CTAs of a cluster
//     take row tiles 2 tmc and 2 tmc + 1 of one tile column, so they need
//     the same B tile; each producer loads its own A and half of B's 64-row
//     boxes with TMA multicast into both CTAs' slot, completing on both
//     CTAs' "full" mbarriers (each expects the whole stage's bytes).  A
//     slot may be refilled only when the consumers of both CTAs are done
//     with it, so consumers release a slot in both CTAs (remote arrive
//     through mapa) and "empty" counts 2 arrives per consumer warpgroup.
//     This halves what B costs the L2 per CTA (48 KiB a k block become
//     32 KiB).  Cluster barriers after the mbarrier initialization and
//     before exit keep remote arrives inside the partner's lifetime.
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
// <= 128.  GROUP_M: rasterization group (tiles along M).
template <int BM_, int BN_, int STAGES, bool PINGPONG, int GROUP_M = 16, bool EPI_WG = false, int CLUSTER_M = 1,
          int STAGE_N = 0, int STAGE_REGIONS = 1>
struct Sm90Config {
    static constexpr bool kIsSm90 = true;
    static constexpr int BM = BM_;
    static constexpr int BN = BN_;
    static constexpr int BK = 64;
    static constexpr int kStages = STAGES;
    static constexpr bool kPingPong = PINGPONG;
    static constexpr int kGroupM = GROUP_M;
    // An epilogue warpgroup (see the design notes): the consumers hand each
    // tile's accumulators to it through shared memory and go on with the
    // next tile's K loop.
    static constexpr bool kEpiWG = EPI_WG;
    // Thread-block clusters of kClusterM CTAs along M (see the design
    // notes): the CTAs of a cluster work on vertically adjacent tiles of one
    // tile column and each loads 1 / kClusterM of the shared B tile,
    // multicast into every CTA of the cluster.
    static constexpr int kClusterM = CLUSTER_M;
    // Columns the epilogue stages through shared memory at a time: the
    // whole tile (0), or subtiles of kStageN columns in kStageRegions
    // regions (coda::sub_put: a staged operand's and outputs'), whose
    // smaller scratch leaves room for a deeper ring.
    static constexpr int kStageN = STAGE_N ? STAGE_N : BN_;
    static constexpr int kStageRegions = STAGE_REGIONS;
    static constexpr int kThreads = EPI_WG ? 512 : 384;
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
    // What the functor sees: the whole tile on the consumers' threads, or,
    // with an epilogue warpgroup, 32-row tiles on its 128 threads (a warp
    // per 8 rows: RI = 1), two per consumer warpgroup's slab of 64 rows.
    static constexpr int kEpiBM = EPI_WG ? 32 : BM;
    static constexpr int kEpiRI = EPI_WG ? 1 : 2 * kSlabs;
    static constexpr int kEpiThreads = EPI_WG ? 128 : kUnitThreads;
    static constexpr int kEpiWarpsM = kEpiThreads / 32;
    // The hand-off buffer (epilogue warpgroup only) holds one consumer
    // warpgroup's slab (64 x BN floats) at a time, laid out as the two
    // 32-row fragments the epilogue warpgroup loads: [pass][warp][float4
    // q][lane], 16-byte accesses by consecutive lanes (no bank conflicts).
    static constexpr int kPassFloat4s = BN / 8 * 2 / 4;  // 8 rows per warp, 1 per lane: CJ pairs
    static constexpr int kSlabBytes = EPI_WG ? kWgRows * BN * 4 : 0;
    // Register split (setmaxnreg): 24 + 2 * 240 = 3 * 168, the per-thread
    // count of a 384-thread CTA at one CTA per SM; with the epilogue
    // warpgroup 24 + 2 * 144 + 200 = 4 * 128 (96 accumulators per consumer
    // thread; the epilogue warpgroup holds a slab's two fragments).
    static constexpr int kProducerRegs = 24;
    static constexpr int kConsumerRegs = EPI_WG ? 144 : 240;
    static constexpr int kEpilogueRegs = EPI_WG ? 200 : 0;

    static_assert(kWgRows % 64 == 0 && kSlabs >= 1, "rows per consumer warpgroup must be a multiple of 64");
    static_assert(BN == 64 || BN == 128 || BN == 192 || BN == 256, "BN must be 64, 128, 192 or 256");
    // Cooperative tiles keep at most 128 accumulators per consumer thread;
    // a ping-pong warpgroup owns its whole tile and may hold 192 (the
    // 192x128 and 128x192 tiles): 240 registers leave 48 for the K loop
    // and the epilogue.
    static_assert(kSlabs * BN <= (PINGPONG ? 384 : 256),
                  "at most 128 accumulators per consumer thread (192 for ping-pong)");
    static_assert(kStages >= 2, "at least 2 stages");
    static_assert(BN % kStageN == 0 && kStageN % 16 == 0, "staged subtiles must divide the tile in 16-column steps");
    static_assert(kClusterM == 1 || (kClusterM == 2 && !PINGPONG && !EPI_WG && (BN / 64) % kClusterM == 0),
                  "clusters of 2 CTAs along M, cooperative mainloop only");
    static_assert(!EPI_WG || (!PINGPONG && kSlabs == 1 && BN <= 192),
                  "the epilogue warpgroup takes cooperative m64 slabs of at most 96 accumulators (a 512-thread CTA "
                  "has at most 128 registers per thread at launch, below what m64n256 needs)");
    static_assert(kProducerRegs + 2 * kConsumerRegs + kEpilogueRegs <= (kThreads / 128) * (65536 / kThreads),
                  "register split over the CTA's budget");
};

// Predefined configurations (TFLOP/s: scripts/gemm-harness/NOTES.md, "sm90").
// bf16, A_MxK * B_NxK, store_tile_staged epilogue, H100 SXM (cuBLAS 804 / 810):
//   name              tile      mode         stages  smem bytes       TFLOP/s 4096^3  8192x4096x4096
//   Sm90Cfg128x256    128x256   cooperative  3       216112           777             778   <- default
//   Sm90Cfg256x128    256x128   cooperative  3       218160           654             663
//   Sm90Cfg128x128    128x128   cooperative  5       199760           648             620
//   Sm90Cfg128x128pp  128x128   ping-pong    4       201792           683             694
//   Sm90Cfg64x256pp   64x256    ping-pong    3       191536           515             519
//   Sm90Cfg192x128pp  192x128   ping-pong    3       228416           562 (bench, M = 8192, session 16)
//   Sm90Cfg128x192pp  128x192   ping-pong    3       226368
//   Sm90Cfg128x192ew  128x192   epi. warpgroup 4       226928
//   Sm90Cfg128x256c2  128x256   cooperative, 3       216128
//                               clusters of 2 along M, B multicast
//     (Sm90Cfg128x192ew: bare GEMMs at the Llama-3 8B shapes 1.01-1.06x the
//     time of Sm90Cfg128x256 interleaved on the H100, docs/benchmarks.md.)
// (smem bytes for Epi::kSmemFloats = 0.)
typedef Sm90Config<128, 256, 3, false> Sm90Cfg128x256;
typedef Sm90Config<256, 128, 3, false, 8> Sm90Cfg256x128;
typedef Sm90Config<128, 128, 5, false> Sm90Cfg128x128;
typedef Sm90Config<128, 128, 4, true> Sm90Cfg128x128pp;
typedef Sm90Config<64, 256, 3, true> Sm90Cfg64x256pp;
typedef Sm90Config<192, 128, 3, true, 8> Sm90Cfg192x128pp;
typedef Sm90Config<128, 192, 3, true> Sm90Cfg128x192pp;
typedef Sm90Config<128, 192, 4, false, 16, true> Sm90Cfg128x192ew;
typedef Sm90Config<128, 256, 3, false, 16, false, 2> Sm90Cfg128x256c2;
// Ping-pong with staged subtiles: two 18 KiB scratches (64 columns at a
// time, one region) instead of two full tiles leave room for 4 ring stages
// (5 stages of 32-column subtiles measured slower: more barriers).
typedef Sm90Config<128, 192, 4, true, 16, false, 1, 64, 1> Sm90Cfg128x192pps;
// Two regions of 32 columns (a staged operand's subtile beside an output's,
// or two outputs') and a 4-stage ring.
typedef Sm90Config<128, 192, 4, true, 16, false, 1, 32, 2> Sm90Cfg128x192pps2;

// The epilogue fragment: AccFrag (same layout and members) whose sync() is a
// named barrier over the threads running the epilogue.  Without an epilogue
// warpgroup it is also the consumers' accumulator fragment; with one, the
// epilogue warpgroup sees kEpiBM-row tiles.
template <class Cfg>
struct Sm90Frag : AccFrag<Cfg::kEpiRI, Cfg::BN / 8, 64, Cfg::kEpiBM, Cfg::BN, Cfg::kEpiWarpsM, 1> {
    // Private scratch per tile in flight; the epilogue warpgroup's scratch
    // is the hand-off buffer, busy during the next tile's K loop.
    static constexpr bool kAsyncStage = !Cfg::kEpiWG;
    static constexpr int kStageN = Cfg::kStageN;
    static constexpr int kStageRegions = Cfg::kStageRegions;
    int bar_id;  // named barrier of this tile's threads (1 or 2)
    __device__ __forceinline__ void sync() const {
        asm volatile("bar.sync %0, %1;\n" ::"r"(bar_id), "n"(Cfg::kEpiThreads) : "memory");
    }
};

// The consumers' accumulator fragment: Sm90Frag, except with an epilogue
// warpgroup, where the consumers hold a whole slab row (BN / 8 pairs) and
// run no functor (so it needs no barrier of its own).
template <class Cfg>
struct Sm90SlabFrag : AccFrag<2 * Cfg::kSlabs, Cfg::BN / 8, 64, Cfg::BM, Cfg::BN, 4 * Cfg::kUnitWGs, 1> {
    int bar_id;
};
template <class Cfg, bool EPI_WG = Cfg::kEpiWG>
struct Sm90ConsumerFrag {
    typedef Sm90Frag<Cfg> type;
};
template <class Cfg>
struct Sm90ConsumerFrag<Cfg, true> {
    typedef Sm90SlabFrag<Cfg> type;
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
    constexpr int a = Cfg::kStageRegions * staged_store_bytes<Cfg::kEpiBM, Cfg::kStageN, bf16>();
    constexpr int b = 4 * Epi::kSmemFloats;
    constexpr int c = 4 * F::kReduceFloats;
    constexpr int m = a > b ? (a > c ? a : c) : (b > c ? b : c);
    return (m + 127) / 128 * 128;
}
// With an epilogue warpgroup the hand-off buffer comes first (and no column
// vector slots: its fragment stages nothing asynchronously).
template <class Cfg, class Epi>
__host__ __device__ constexpr int sm90_scratch_bytes() {
    return Cfg::kEpiWG ? Cfg::kSlabBytes + sm90_scratch_core_bytes<Cfg, Epi>()
                       : sm90_scratch_core_bytes<Cfg, Epi>() + EpiColVecs<Epi>::value * Cfg::BN * 4;
}
// Dynamic shared memory of gemm_sm90<Cfg, ..., Epi> (bytes); the host mirrors this.
template <class Cfg, class Epi>
__host__ __device__ constexpr int gemm_sm90_smem_bytes() {
    return 1024 + Cfg::kRingBytes + Cfg::kUnits * sm90_scratch_bytes<Cfg, Epi>() + 16 * Cfg::kStages + 16 +
           (Cfg::kEpiWG ? 32 : 0);
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
// The same, multicast: the box lands at offset dst of every CTA of the
// cluster in `mask` (bit r: CTA rank r), completing on the mbarrier at
// offset bar of each.
__device__ __forceinline__ void tma_load_2d_multicast(unsigned dst, const TmaDesc& desc, unsigned bar, int c0, int c1,
                                                      unsigned short mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], "
        "[%1, {%3, %4}], [%2], %5;\n" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(&desc)), "r"(bar), "r"(c0), "r"(c1), "h"(mask)
        : "memory");
}
__device__ __forceinline__ void tma_load_4d_multicast(unsigned dst, const TmaDesc& desc, unsigned bar, int c0, int c1,
                                                      int c2, int c3, unsigned short mask) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], "
        "[%1, {%3, %4, %5, %6}], [%2], %7;\n" ::"r"(dst),
        "l"(reinterpret_cast<unsigned long long>(&desc)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "h"(mask)
        : "memory");
}
// Thread-block clusters: this CTA's rank, a barrier over every thread of
// the cluster (release / acquire at cluster scope), and an arrive on the
// mbarrier at offset bar of CTA `cta` of the cluster.  The arrive keeps the
// default (release, CTA scope) semantics, enough to order the consumer's
// completed wgmma reads before the producer's next write: the same arrive
// with .release.cluster made the whole GEMM 2.1x slower on the H100.
__device__ __forceinline__ unsigned cluster_ctarank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive_cluster(unsigned bar, unsigned cta) {
    asm volatile(
        "{\n.reg .b32 remote;\n"
        "mapa.shared::cluster.u32 remote, %0, %1;\n"
        "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(bar),
        "r"(cta)
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

// Releases a ring slot (an arrive on its "empty" mbarrier at offset bar):
// with clusters, in every CTA of the cluster, since each CTA's producer
// writes its share of B into this CTA's slot too.
template <class Cfg>
__device__ __forceinline__ void release_slot(unsigned bar) {
    if constexpr (Cfg::kClusterM == 1) {
        mbar_arrive(bar);
    } else {
#pragma unroll
        for (int r = 0; r < Cfg::kClusterM; ++r) mbar_arrive_cluster(bar, (unsigned)r);
    }
}

// The tiles one CTA of the persistent grid works on: cluster tiles first,
// first + stride, ... below count, each kClusterM row tiles of one tile
// column, rasterized in groups of kGroupM row tiles; CTA rank r of the
// cluster takes row tile kClusterM * tmc + r, which is past the last row
// tile on a ragged edge (the CTA then loads and multiplies zeros for its
// partner's sake and skips the epilogue).  Without clusters: tiles
// blockIdx.x, + gridDim.x, ... as raster_grouped orders them.
template <class Cfg>
struct TileWalk {
    int first, stride, count, tiles_mc, tiles_n, rank;
    __device__ __forceinline__ TileWalk(int tiles_m, int tiles_n_) {
        rank = Cfg::kClusterM == 1 ? 0 : (int)cluster_ctarank();
        tiles_mc = (tiles_m + Cfg::kClusterM - 1) / Cfg::kClusterM;
        tiles_n = tiles_n_;
        first = (int)blockIdx.x / Cfg::kClusterM;
        stride = (int)gridDim.x / Cfg::kClusterM;
        count = tiles_mc * tiles_n;
    }
    __device__ __forceinline__ void at(int ct, int& tm, int& tn) const {
        constexpr int kGroup = Cfg::kGroupM / Cfg::kClusterM > 0 ? Cfg::kGroupM / Cfg::kClusterM : 1;
        int tmc;
        raster_grouped(ct, tiles_mc, tiles_n, kGroup, tmc, tn);
        tm = tmc * Cfg::kClusterM + rank;
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

// The same with A from registers (RS): a[0..3] hold the warp's 16 x 16 A
// fragment in the mma.m16n8k16 layout (rows g / g + 8, k 2t.. / 2t + 8..).
// The registers must stay untouched until the wgmma completes (wait_group).
template <int N, class Elem, int TB>
struct WgmmaRS;
#define CODA_WGRS_DEFINE(N, ELEM, TY, REGS, OPS, ACCS)                                                       \
    template <int TB>                                                                                        \
    struct WgmmaRS<N, ELEM, TB> {                                                                            \
        static __device__ __forceinline__ void run(float (&lo)[N / 8][2], float (&hi)[N / 8][2],             \
                                                   const unsigned (&a)[4], unsigned long long db) {          \
            asm volatile("wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TY "." TY " {" REGS "}, " OPS     \
                         ";\n"                                                                               \
                         : ACCS                                                                              \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(TB));                    \
        }                                                                                                    \
    };
#define CODA_WGRS_OPS_64 "{%32, %33, %34, %35}, %36, 1, 1, 1, %37"
#define CODA_WGRS_OPS_128 "{%64, %65, %66, %67}, %68, 1, 1, 1, %69"
#define CODA_WGRS_OPS_192 "{%96, %97, %98, %99}, %100, 1, 1, 1, %101"
#define CODA_WGRS_OPS_256 "{%128, %129, %130, %131}, %132, 1, 1, 1, %133"
// Both forms (SS and RS) for every N and element type.
#define CODA_WG_BOTH(N, ELEM, TY)                                                                            \
    CODA_WG_DEFINE(N, ELEM, TY, CODA_WG_REGS_##N, CODA_WG_OPS_##N, CODA_WG_ACCS_##N)                         \
    CODA_WGRS_DEFINE(N, ELEM, TY, CODA_WG_REGS_##N, CODA_WGRS_OPS_##N, CODA_WG_ACCS_##N)
CODA_WG_BOTH(64, bf16, "bf16")
CODA_WG_BOTH(128, bf16, "bf16")
CODA_WG_BOTH(192, bf16, "bf16")
CODA_WG_BOTH(256, bf16, "bf16")
CODA_WG_BOTH(64, f16, "f16")
CODA_WG_BOTH(128, f16, "f16")
CODA_WG_BOTH(192, f16, "f16")
CODA_WG_BOTH(256, f16, "f16")
#undef CODA_WG_BOTH
#undef CODA_WGRS_OPS_64
#undef CODA_WGRS_OPS_128
#undef CODA_WGRS_OPS_192
#undef CODA_WGRS_OPS_256
#undef CODA_WGRS_DEFINE
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
// ld, GROUP * ld} from row START: a box {64, 2, 32, 1} is 64 consecutive rows
// of the pair order, written to shared memory exactly like a 2D box of 64
// rows (so the swizzle and the wgmma descriptors are unchanged).  Needs a
// K-contiguous B (B_NxK) and START, END, GROUP multiples of 64, so that no
// 64-row box straddles [START, END) or a group.
template <int START, int END, int GROUP>
struct Sm90PairRows {
    static_assert(START % 64 == 0 && END % 64 == 0 && GROUP % 64 == 0 && END > START && (END - START) % GROUP == 0,
                  "Sm90PairRows needs START, END and GROUP multiples of 64");
    static constexpr bool kIdentity = false;
    // The tensor-map coordinates {k0, half, i, group} of the 64 rows from
    // logical row n (a multiple of 64 in [START, END)).
    static __device__ __forceinline__ void coords(int n, int& i, int& group) {
        const int local = n - START;
        group = local / GROUP;
        i = (local % GROUP) / 2;
    }
    static __device__ __forceinline__ bool inside(int n) { return n >= START && n < END; }
};

// The gains one thread needs for the k block at k0: for k16 step kk,
// gp[kk][0] = s[k0 + 16 kk + 2t .. + 1] and gp[kk][1] = s[.. + 8 .. + 9].
// Loaded one k block ahead, so their latency hides behind the wgmmas.
template <class Pro, class Cfg, class P>
__device__ __forceinline__ void load_gains(unsigned (&gp)[Cfg::BK / 16][2], const P& ep, int k0, int lane) {
#pragma unroll
    for (int kk = 0; kk < Cfg::BK / 16; ++kk) {
        const int kc = k0 + 16 * kk + 2 * (lane & 3);
        gp[kk][0] = Pro::scale_pair(ep, kc);
        gp[kk][1] = Pro::scale_pair(ep, kc + 8);
    }
}

// The A prologue (see NoPrologue in coda_epilogue.cuh) on the Hopper
// mainloop: A goes through registers (RS wgmma) instead of being read by
// the tensor cores from shared memory.  Per k16 step kk and 64-row slab s,
// ldmatrix.x4 loads the warp's 16 x 16 A fragment: lane L addresses row
// 16 w + (L & 15) of the slab at 16-byte chunk 2 kk + (L >> 4), stored at
// chunk ^ (row & 7) (128B swizzle, rows of 128 bytes, 1024-aligned stage).
// The fragment's rows g and g + 8 are exactly the thread's accumulator rows
// i = 2 s and 2 s + 1, so row sums need only the quad at the end; the gain
// multiplies the registers (k 2t, 2t + 1 in registers 0 and 1, 2t + 8,
// 2t + 9 in 2 and 3).  Nothing is written back, so no proxy fence or
// barrier is needed.  A_MxK only.
template <class Cfg, class Elem, class Pro, class Frag>
__device__ __forceinline__ void prologue_fragment(unsigned (&a)[4], unsigned sa, int s, int kk, Frag& f,
                                                  const unsigned (&gp)[2], int warp_in_wg, int lane) {
    const int row = 16 * warp_in_wg + (lane & 15);
    const int chunk = (2 * kk + (lane >> 4)) ^ (row & 7);
    const unsigned addr = sa + (unsigned)(s * 64 * 128 + row * 128 + chunk * 16);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                 : "r"(addr));
#pragma unroll
    for (int r = 0; r < 4; ++r) {
        if constexpr (Pro::kRowSumSq) {
            const float2 x = unpack_pair<Elem>(a[r]);
            f.a_sumsq[2 * s + (r & 1)] += x.x * x.x + x.y * x.y;
        }
        if constexpr (Pro::kScale) a[r] = mul_pair<Elem>(a[r], gp[r >> 1]);
    }
}

// One k block of the A-prologue path: waits for its ring slot, loads and
// transforms this warpgroup's A fragments, issues the RS wgmmas, loads the
// next k block's gains (their latency hides behind the wgmmas), waits for
// the wgmmas and releases the slot.  The wait is wait_group 0: RS operands
// are read asynchronously, so the fragment registers may only be rewritten
// once the wgmmas are done (double-buffering them made ptxas serialize the
// wgmmas, C7513, and measured slower: 18.8 against 15.7 ms on the LM head);
// the other consumer warpgroup's wgmmas keep the tensor cores busy meanwhile.
template <class Cfg, class Elem, class Pro, bool kBK, class Frag, class P>
__device__ __forceinline__ void rs_kblock(unsigned (&gains)[Cfg::BK / 16][2], Frag& f, const P& ep, unsigned bars,
                                          unsigned ring, int& slot, unsigned& phase, unsigned a_wg_off, int kb,
                                          int warp_in_wg, int lane, bool release_thread) {
    constexpr int S = Cfg::kStages;
    mbar_wait(bars + 8 * slot, phase);
    const unsigned sa = ring + slot * Cfg::kStageBytes + a_wg_off;
    const unsigned sb = ring + slot * Cfg::kStageBytes + Cfg::kStageBytesA;
    unsigned af[Cfg::BK / 16][Cfg::kSlabs][4];
#pragma unroll
    for (int kk = 0; kk < Cfg::BK / 16; ++kk)
#pragma unroll
        for (int s = 0; s < Cfg::kSlabs; ++s)
            prologue_fragment<Cfg, Elem, Pro>(af[kk][s], sa, s, kk, f, gains[kk], warp_in_wg, lane);
    wgmma_fence();  // after the fragment registers are written
#pragma unroll
    for (int kk = 0; kk < Cfg::BK / 16; ++kk) {
        const unsigned long long db = wgmma_desc(sb + kk * WgmmaTile<kBK>::kKStep, WgmmaTile<kBK>::kLbo, 1024u);
#pragma unroll
        for (int s = 0; s < Cfg::kSlabs; ++s)
            WgmmaRS<Cfg::BN, Elem, kBK ? 0 : 1>::run(f.acc[2 * s], f.acc[2 * s + 1], af[kk][s], db);
    }
    wgmma_commit();
    if constexpr (Pro::kScale) load_gains<Pro, Cfg>(gains, ep, (kb + 1) * Cfg::BK, lane);
    wgmma_wait<0>();
    if (release_thread) release_slot<Cfg>(bars + 8 * (S + slot));
    if (++slot == S) {
        slot = 0;
        phase ^= 1u;
    }
}

// ---------------------------------------------------------------------------
// The epilogue warpgroup (Cfg::kEpiWG)
// ---------------------------------------------------------------------------
// Where thread `lane` of epilogue warp `warp` finds float4 q of pass `pass`
// of the slab in the hand-off buffer.
template <class Cfg>
__device__ __forceinline__ unsigned handoff_at(unsigned buf, int pass, int warp, int q, int lane) {
    return buf + (unsigned)((((pass * 4 + warp) * Cfg::kPassFloat4s + q) * 32 + lane) * 16);
}
// A consumer thread's slab into the hand-off buffer: its rows 16 w + g + 8 h
// (warp w, h = 0, 1) are row 8 w' + g of pass w / 2's fragment, w' = 2 (w %
// 2) + h; register pairs j, j + 1 of a row are float4 j / 2.
template <class Cfg, class Acc>
__device__ __forceinline__ void handoff_store(const Acc& acc, unsigned buf, int warp, int lane) {
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int q = 0; q < Cfg::kPassFloat4s; ++q) {
            const unsigned at = handoff_at<Cfg>(buf, warp >> 1, 2 * (warp & 1) + h, q, lane);
            asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(at), "f"(acc[h][2 * q][0]),
                         "f"(acc[h][2 * q][1]), "f"(acc[h][2 * q + 1][0]), "f"(acc[h][2 * q + 1][1])
                         : "memory");
        }
}
template <class Cfg, class Frag>
__device__ __forceinline__ void handoff_load(Frag& f, unsigned buf, int pass, int warp, int lane) {
#pragma unroll
    for (int q = 0; q < Cfg::kPassFloat4s; ++q) {
        const unsigned at = handoff_at<Cfg>(buf, pass, warp, q, lane);
        asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                     : "=f"(f.acc[0][2 * q][0]), "=f"(f.acc[0][2 * q][1]), "=f"(f.acc[0][2 * q + 1][0]),
                       "=f"(f.acc[0][2 * q + 1][1])
                     : "r"(at)
                     : "memory");
    }
}

// An epilogue fragment of warp `warp`: its rows 8 warp + g of a 32-row tile.
template <class Cfg, class Frag>
__device__ __forceinline__ void epilogue_fragment_init(Frag& f, const GemmArgs& g, int warp, int lane) {
    f.bar_id = 1;
    f.lane = lane;
    f.warp_m = warp;
    f.warp_n = 0;
    f.lrow0 = 8 * warp + (lane >> 2);
    f.lcol0 = 2 * (lane & 3);
    f.m = g.m;
    f.n = g.n;
    f.a_sumsq[0] = 0.0f;
}
// The functor on fragment f of the 32 rows from m0 (nothing past M).
template <class Cfg, class Epi, class Frag>
__device__ __forceinline__ void epilogue_fragment_apply(const typename Epi::Params& ep, Frag& f, const GemmArgs& g,
                                                        int m0, int n0, int tn, int tiles_n, float* scratch) {
    if (m0 >= g.m) return;  // uniform: no row of this fragment exists
    f.grow0 = m0 + f.lrow0;
    f.gcol0 = n0 + f.lcol0;
    const TileInfo t{m0, n0, m0 / Cfg::kEpiBM, tn, (g.m + Cfg::kEpiBM - 1) / Cfg::kEpiBM, tiles_n, g.m, g.n,
                     sm90_scratch_core_bytes<Cfg, Epi>()};
    Epi::apply(ep, f, t, scratch);
}
// The hand-off protocol (one slab in the buffer at a time): consumer
// warpgroup 0 stores its slab once the epilogue warpgroup has loaded the
// previous tile's slab 1 (loaded[1]), and arrives on filled[0]; the
// epilogue warpgroup loads it into registers and arrives on loaded[0];
// consumer warpgroup 1 then stores its slab and arrives on filled[1]; and
// so on.  Each barrier completes once per tile, so its phase parity is the
// tile's (this CTA's tile count t): loaded[0] phase t cannot complete
// before filled[1] phase t - 1, so no waiter is two phases behind.
// The epilogue warpgroup (warpgroup 3): for each tile, per slab: wait,
// load the slab's two 32-row fragments, release the buffer, run the functor
// on each fragment (skipping rows past M) with its own scratch.  The
// functor sees 32 x BN tiles; TileInfo's row-tile index and count are in 32
// rows (the host sizes column partials accordingly).
template <class Cfg, class Epi>
__device__ __forceinline__ void sm90_epilogue_warpgroup(const typename Epi::Params& ep, const GemmArgs& g,
                                                        unsigned buf, unsigned scratch_at, unsigned filled,
                                                        unsigned loaded, int tiles_m, int tiles_n, int num_tiles) {
    typedef Sm90Frag<Cfg> Frag;
    const int etid = threadIdx.x & 127, lane = etid & 31, warp = etid >> 5;
    Frag f0, f1;  // the slab's two fragments (separate objects: an array of them went to local memory)
    epilogue_fragment_init<Cfg>(f0, g, warp, lane);
    epilogue_fragment_init<Cfg>(f1, g, warp, lane);
    float* const scratch = reinterpret_cast<float*>(coda_dyn_smem_sm90 + (scratch_at - smem_u32(coda_dyn_smem_sm90)));
    unsigned phase = 0;
#pragma unroll 1
    for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x, phase ^= 1u) {
        int tm, tn;
        raster_grouped(tile, tiles_m, tiles_n, Cfg::kGroupM, tm, tn);
        const int n0 = tn * Cfg::BN;
#pragma unroll 1
        for (int slab = 0; slab < 2; ++slab) {
            mbar_wait(filled + 8 * slab, phase);
            handoff_load<Cfg>(f0, buf, 0, warp, lane);
            handoff_load<Cfg>(f1, buf, 1, warp, lane);
            mbar_arrive(loaded + 8 * slab);  // this thread has its registers: the buffer may be reused
            const int m0 = tm * Cfg::BM + slab * Cfg::kWgRows;
            epilogue_fragment_apply<Cfg, Epi>(ep, f0, g, m0, n0, tn, tiles_n, scratch);
            epilogue_fragment_apply<Cfg, Epi>(ep, f1, g, m0 + Cfg::kEpiBM, n0, tn, tiles_n, scratch);
        }
    }
}

template <class Cfg, class LayoutA, class LayoutB, class Elem, class Epi, class RowsB, class Pro = NoPrologue,
          class Pre = NoPrelude>
__device__ __forceinline__ void gemm_sm90_rows(const TmaDesc& ta, const TmaDesc& tb, const TmaDesc& tbp,
                                               const GemmArgs& g, const typename Epi::Params& ep,
                                               const typename Pre::Params& pp = typename Pre::Params());

// The plain Hopper GEMM (weight rows in order).
template <class Cfg, class LayoutA, class LayoutB, class Elem, class Epi>
__device__ __forceinline__ void gemm_sm90(const TmaDesc& ta, const TmaDesc& tb, const GemmArgs& g,
                                          const typename Epi::Params& ep) {
    gemm_sm90_rows<Cfg, LayoutA, LayoutB, Elem, Epi, IdentityRows>(ta, tb, tb, g, ep);
}

// The Hopper GEMM with a B row map (RowsB = IdentityRows or Sm90PairRows;
// tbp is the pair-order view, ignored for IdentityRows); Pro is the A
// prologue (NoPrologue, or one that needs A_MxK); Pre the row prelude
// (NoPrelude, or an emitted one whose arguments are pp).
template <class Cfg, class LayoutA, class LayoutB, class Elem, class Epi, class RowsB, class Pro, class Pre>
__device__ __forceinline__ void gemm_sm90_rows(const TmaDesc& ta, const TmaDesc& tb, const TmaDesc& tbp,
                                               const GemmArgs& g, const typename Epi::Params& ep,
                                               const typename Pre::Params& pp) {
    static_assert(RowsB::kIdentity || LayoutB::kKContiguous, "a B row map needs a K-contiguous B (B_NxK)");
    constexpr bool kPrologue = Pro::kScale || Pro::kRowSumSq;
    static_assert(!kPrologue || LayoutA::kKContiguous, "the A prologue needs a K-contiguous A (A_MxK)");
    static_assert(is_same<Elem, bf16>::value || is_same<Elem, f16>::value, "Elem must be bf16 or f16");
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(sizeof(Elem) == 0, "gemm_sm90 needs sm_90a (wgmma, setmaxnreg)");
#endif
    typedef typename Sm90ConsumerFrag<Cfg>::type Frag;
    constexpr int S = Cfg::kStages;
    constexpr bool kAK = LayoutA::kKContiguous;
    constexpr bool kBK = LayoutB::kKContiguous;
    constexpr int kScratch = sm90_scratch_bytes<Cfg, Epi>();
    static_assert(gemm_sm90_smem_bytes<Cfg, Epi>() <= 232448, "exceeds the 227 KiB of shared memory per CTA");

    static_assert(!Cfg::kEpiWG || (!kPrologue && !Pre::kActive),
                  "the epilogue warpgroup takes no A prologue and no row prelude");
    static_assert(Cfg::kClusterM == 1 || (!kPrologue && !Pre::kActive),
                  "clusters take no A prologue and no row prelude");
    constexpr int CM = Cfg::kClusterM;

    // Shared memory map (1024-aligned base): ring [stage][A | B], scratch per
    // unit (the hand-off buffer, then the scratch, with an epilogue
    // warpgroup), full[S], empty[S], turn[2], filled[2], loaded[2].
    const unsigned base = (smem_u32(coda_dyn_smem_sm90) + 1023u) & ~1023u;
    const unsigned ring = base;
    const unsigned scratch0 = ring + Cfg::kRingBytes;
    const unsigned bars = scratch0 + Cfg::kUnits * kScratch;
    // full[s] at bars + 8 s, empty[s] at bars + 8 (S + s), turn[u] at bars + 8 (2 S + u),
    // filled[c] at bars + 8 (2 S + 2 + c), loaded[c] at bars + 8 (2 S + 4 + c).
    const unsigned filled = bars + 8 * (2 * S + 2);
    const unsigned loaded = bars + 8 * (2 * S + 4);

    const int tid = threadIdx.x;
    const int wg = tid >> 7;  // 0 = producer, 1..2 = consumers, 3 = epilogue (kEpiWG)

    const int tiles_m = (g.m + Cfg::BM - 1) / Cfg::BM;
    const int tiles_n = (g.n + Cfg::BN - 1) / Cfg::BN;
    const int num_tiles = tiles_m * tiles_n;
    const int ktiles = (g.k + Cfg::BK - 1) / Cfg::BK;

    if (tid == 0) {
        tma_prefetch_desc(ta);
        tma_prefetch_desc(tb);
        if (!RowsB::kIdentity) tma_prefetch_desc(tbp);
#pragma unroll 1
        for (int s = 0; s < S; ++s) {
            mbar_init(bars + 8 * s, 1);                       // full: the producer's expect-tx arrive
            mbar_init(bars + 8 * (S + s), Cfg::kUnitWGs * CM);  // empty: one arrive per consuming warpgroup of the cluster
        }
        mbar_init(bars + 8 * (2 * S), 1);  // turn[0] (ping-pong hand-off)
        mbar_init(bars + 8 * (2 * S + 1), 1);  // turn[1]
        if (Cfg::kEpiWG) {
            for (int c = 0; c < 2; ++c) {
                mbar_init(filled + 8 * c, 128);  // every thread of consumer warpgroup c, once its slab is stored
                mbar_init(loaded + 8 * c, 128);  // every epilogue thread, once it has loaded slab c
            }
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    }
    // With clusters, every CTA's mbarriers are initialized before any
    // multicast or remote arrive reaches them.
    if constexpr (CM > 1) cluster_sync();
    else __syncthreads();
    const TileWalk<Cfg> walk(tiles_m, tiles_n);

    // Register split: a row prelude's helpers need more than the producer.
    constexpr int kProducerRegs = Pre::kActive ? 56 : Cfg::kProducerRegs;
    constexpr int kConsumerRegs = Pre::kActive ? 224 : Cfg::kConsumerRegs;
    static_assert(kProducerRegs + 2 * kConsumerRegs + Cfg::kEpilogueRegs <= (Cfg::kThreads / 128) * (65536 / Cfg::kThreads),
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
                    const int k0 = kb * Cfg::BK;
#pragma unroll
                    for (int i = 0; i < Cfg::BM / 64; ++i) {
                        if (kAK) tma_load_2d(sa + i * 8192, ta, full, k0, m0 + 64 * i);
                        else tma_load_2d(sa + i * 8192, ta, full, m0 + 64 * i, k0);
                    }
                    // B: this CTA's share of the tile's 64-row boxes (all of
                    // them without clusters), multicast to the whole cluster.
                    constexpr int kBoxes = Cfg::BN / 64 / CM;
#pragma unroll
                    for (int ib = 0; ib < kBoxes; ++ib) {
                        const int i = walk.rank * kBoxes + ib;
                        const int n = n0 + 64 * i;
                        const unsigned dst = sb + i * 8192;
                        if constexpr (!RowsB::kIdentity) {
                            if (RowsB::inside(n)) {
                                int pi, pg;
                                RowsB::coords(n, pi, pg);
                                if constexpr (CM > 1) tma_load_4d_multicast(dst, tbp, full, k0, 0, pi, pg, (1u << CM) - 1);
                                else tma_load_4d(dst, tbp, full, k0, 0, pi, pg);
                                continue;
                            }
                        }
                        const int c0 = kBK ? k0 : n, c1 = kBK ? n : k0;
                        if constexpr (CM > 1) tma_load_2d_multicast(dst, tb, full, c0, c1, (1u << CM) - 1);
                        else tma_load_2d(dst, tb, full, c0, c1);
                    }
                    if (++slot == S) {
                        slot = 0;
                        phase ^= 1u;
                    }
                }
            }
        }
        // No CTA of a cluster exits while another may still arrive on its
        // mbarriers.
        if constexpr (CM > 1) cluster_sync();
        return;
    }

    if (Cfg::kEpiWG && wg == 3) {
        // ---------------- epilogue warpgroup ----------------
        setmaxnreg_inc<Cfg::kEpilogueRegs>();
        sm90_epilogue_warpgroup<Cfg, Epi>(ep, g, scratch0, scratch0 + Cfg::kSlabBytes, filled, loaded, tiles_m,
                                          tiles_n, num_tiles);
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
    unsigned handoff_phase = 0;  // epilogue warpgroup only
    int seq = 0;      // index of the tile among this CTA's tiles
    int kdone = 0;    // k blocks of this CTA's tiles before the current one (ring position)
    unsigned turn_phase = 0;
#pragma unroll 1
    for (int ct = walk.first; ct < walk.count; ct += walk.stride, ++seq, kdone += ktiles) {
        if (Cfg::kPingPong && (seq & 1) != unit) continue;
        int tm, tn;
        walk.at(ct, tm, tn);
        // A cluster's CTA past the last row tile only multiplies for its partner.
        const bool has_rows = CM == 1 || tm < tiles_m;
        const int m0 = tm * Cfg::BM, n0 = tn * Cfg::BN;

#pragma unroll
        for (int i = 0; i < Frag::RI; ++i)
#pragma unroll
            for (int j = 0; j < Frag::CJ; ++j) {
                f.acc[i][j][0] = 0.0f;
                f.acc[i][j][1] = 0.0f;
            }
#pragma unroll
        for (int i = 0; i < Frag::RI; ++i) f.a_sumsq[i] = 0.0f;

        if constexpr (Pre::kActive) prelude_consumer<Pre>(pp, seen, tiles_m, tm, m0, min(Cfg::BM, g.m - m0), lane);

        f.grow0 = m0 + f.lrow0;
        f.gcol0 = n0 + f.lcol0;
        // Fields in declaration order: origin, tile coordinates, tile counts, M, N,
        // scratch bytes (the column-vector slots follow the scratch proper).
        const TileInfo t{m0, n0, tm, tn, tiles_m, tiles_n, g.m, g.n, sm90_scratch_core_bytes<Cfg, Epi>()};
        if constexpr (EpiPrefetch<Epi>::value && !Cfg::kEpiWG) {
            if (has_rows) {
                f.sync();  // the previous tile's epilogue is done with the scratch
                Epi::prefetch(ep, f, t, scratch);
            }
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
        if constexpr (kPrologue) {
            // A through registers (RS wgmma), gains loaded one k block ahead.
            unsigned gains[Cfg::BK / 16][2] = {};
            if constexpr (Pro::kScale) load_gains<Pro, Cfg>(gains, ep, 0, lane);
#pragma unroll 1
            for (int kb = 0; kb < ktiles; ++kb)
                rs_kblock<Cfg, Elem, Pro, kBK>(gains, f, ep, bars, ring, slot, phase, a_wg_off, kb, warp_in_wg, lane,
                                               release_thread);
        } else {
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
                if (prev_slot >= 0 && release_thread) release_slot<Cfg>(bars + 8 * (S + prev_slot));
                prev_slot = slot;
                if (++slot == S) {
                    slot = 0;
                    phase ^= 1u;
                }
            }
        }
        if (Cfg::kPingPong && release_thread) mbar_arrive(bars + 8 * (2 * S + (unit ^ 1)));  // hand-off
        wgmma_wait<0>();
        if (prev_slot >= 0 && release_thread) release_slot<Cfg>(bars + 8 * (S + prev_slot));
#pragma unroll
        for (int i = 0; i < Frag::RI; ++i)
#pragma unroll
            for (int j = 0; j < Frag::CJ; ++j) {
                reg_fence(f.acc[i][j][0]);
                reg_fence(f.acc[i][j][1]);
            }
        if constexpr (Pro::kRowSumSq) {
#pragma unroll
            for (int i = 0; i < Frag::RI; ++i) f.a_sumsq[i] = quad_sum(f.a_sumsq[i]);
        }

        if constexpr (Cfg::kEpiWG) {
            // Hand the slab over (see the protocol above) and go on with the next tile.
            if (cw == 0) mbar_wait(loaded + 8, handoff_phase ^ 1u);  // the previous tile's slab 1 (first: passes)
            else mbar_wait(loaded, handoff_phase);                   // this tile's slab 0
            handoff_store<Cfg>(f.acc, scratch0, warp_in_wg, lane);
            mbar_arrive(filled + 8 * cw);
            handoff_phase ^= 1u;
        } else if (has_rows) {
            Epi::apply(ep, f, t, scratch);
        }
    }
    if constexpr (Pre::kActive) prelude_done<Pre>(pp, tiles_m, 8, lane);
    if constexpr (CM > 1) cluster_sync();
}

}  // namespace coda

#endif  // CODA_GEMM_SM90_CUH
