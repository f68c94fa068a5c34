#!/usr/bin/env python3
"""Session 17 experiment (not part of the compiler): inserts clock64 phase
marks into a generated Hopper GEMM kernel, to be loaded through
CODAC_KERNEL_OVERRIDE_DIR. Thread 0 of the first consumer warpgroup of
every CTA adds up, per tile, the cycles of
    0 pre    from the end of the previous tile's epilogue until the
             residual prefetch has been issued,
    1 ring   the wait for the tile's first ring slot,
    2 kloop  the rest of the K loop (until its last wgmma is done),
    3..6     marks in the functor, where the generated code has them (after
             the staged operand arrived / the row set-up, before and after
             the first staged store, after the second), each from the mark
             before,
    7 end    the rest of the epilogue,
and, unless --tile-only, 8 the waits for ring slots inside the K loop, 9
the waits for wgmmas, 10 the producer's waits for free slots (these marks
cost the K loop 10-15% of its cycles). The last CTA writes the tiles per
CTA and the averages per tile (cycles, as bf16) into the first twelve
elements of OUT_FIELD (a 16-bit output of the functor's Params; make it a
block output, e.g. a block of bench/k5_parts.coda, so that `codac run
--out` saves it) and resets the sums. No printf: a call in the kernel makes
ptxas serialize the wgmmas (C7510).

    python3 instrument_phases.py GENERATED.cu OUT.cu OUT_FIELD [--tile-only]
"""
import sys

src, dst, out = sys.argv[1], sys.argv[2], sys.argv[3]
per_kblock = "--tile-only" not in sys.argv[4:]
s = open(src).read()

PRELUDE = r'''
__device__ unsigned long long coda_prof_acc[16];
__device__ unsigned int coda_prof_ticket;
__device__ __forceinline__ long long& coda_prof_last() { __shared__ long long last; return last; }
__device__ __forceinline__ void coda_mark(int k) {
    const long long t = clock64();
    atomicAdd(&coda_prof_acc[k], (unsigned long long)(t - coda_prof_last()));
    coda_prof_last() = t;
}
#define CODA_MARK_F(f, k) do { if ((f).thread_index() == 0 && (f).bar_id == 1) coda_mark(k); } while (0)
'''
first = s.index('#ifndef')
s = s[:first] + PRELUDE + s[first:]

def sub(old, new, count=1):
    global s
    assert s.count(old) >= 1, old
    s = s.replace(old, new, count)

ME = "(ctid == 0 && cw == 0)"
sub("""#pragma unroll 1
    for (int ct = walk.first; ct < walk.count; ct += walk.stride, ++seq, kdone += ktiles) {""",
    f"""if {ME} coda_prof_last() = clock64();
#pragma unroll 1
    for (int ct = walk.first; ct < walk.count; ct += walk.stride, ++seq, kdone += ktiles) {{""")
sub("""        if (Cfg::kPingPong && seq > 0) {""",
    f"""        if {ME} coda_mark(0);
        if (Cfg::kPingPong && seq > 0) {{""")
if per_kblock:
    sub("""            for (int kb = 0; kb < ktiles; ++kb) {
                    mbar_wait(bars + 8 * slot, phase);""",
        f"""            for (int kb = 0; kb < ktiles; ++kb) {{
                    const long long w0 = clock64();
                    mbar_wait(bars + 8 * slot, phase);
                    if (kb > 0 && {ME}) atomicAdd(&coda_prof_acc[8], (unsigned long long)(clock64() - w0));
                    if (kb == 0 && {ME}) coda_mark(1);""")
    sub("""                wgmma_wait<1>();""", f"""                const long long w1 = clock64();
                    wgmma_wait<1>();
                    if ({ME}) atomicAdd(&coda_prof_acc[9], (unsigned long long)(clock64() - w1));""")
    sub("""                    mbar_wait(bars + 8 * (S + slot), phase ^ 1u);""", """                    const long long p0 = clock64();
                        mbar_wait(bars + 8 * (S + slot), phase ^ 1u);
                        atomicAdd(&coda_prof_acc[10], (unsigned long long)(clock64() - p0));""")
else:
    sub("""            for (int kb = 0; kb < ktiles; ++kb) {
                mbar_wait(bars + 8 * slot, phase);""",
        f"""            for (int kb = 0; kb < ktiles; ++kb) {{
                mbar_wait(bars + 8 * slot, phase);
                if (kb == 0 && {ME}) coda_mark(1);""")
sub("""        wgmma_wait<0>();
        if (prev_slot >= 0 && release_thread)""",
    f"""        wgmma_wait<0>();
        if {ME} coda_mark(2);
        if (prev_slot >= 0 && release_thread)""")
sub("""            Epi::apply(ep, f, t, scratch);
        }
    }""",
    f"""            Epi::apply(ep, f, t, scratch);
            if {ME} {{ coda_mark(7); atomicAdd(&coda_prof_acc[15], 1ull); }}
        }}
    }}
    if {ME} {{
        __threadfence();
        if (atomicAdd(&coda_prof_ticket, 1u) == gridDim.x - 1) {{
            const float n = (float)coda_prof_acc[15];
            __nv_bfloat16* o = ep.{out};
            o[0] = __float2bfloat16(n / gridDim.x);
            for (int i = 0; i < 11; ++i) o[1 + i] = __float2bfloat16((float)coda_prof_acc[i] / n);
            for (int i = 0; i < 16; ++i) coda_prof_acc[i] = 0;
            coda_prof_ticket = 0;
            __threadfence();
        }}
    }}""")

# functor marks (k5-like functors; absent markers are skipped)
def opt(old, new):
    global s
    if old in s:
        s = s.replace(old, new, 1)
opt("        cg::stage_cols_finish(f);\n", "        cg::stage_cols_finish(f);\n        CODA_MARK_F(f, 3);\n")
opt("        f.sync();  // the loop writes the scratch\n", "        f.sync();  // the loop writes the scratch\n        CODA_MARK_F(f, 3);\n")
i = s.find("        coda::staged_put_finish<")
if i >= 0:
    s = s[:i] + "        CODA_MARK_F(f, 4);\n" + s[i:]
    j = s.index("\n", i + len("        CODA_MARK_F(f, 4);\n")) + 1
    s = s[:j] + "        CODA_MARK_F(f, 5);\n" + s[j:]
i = s.find("        coda::store_tile_staged(f, t, f.acc")
if i >= 0:
    j = s.index("\n", i) + 1
    s = s[:j] + "        CODA_MARK_F(f, 6);\n" + s[j:]
open(dst, "w").write(s)
