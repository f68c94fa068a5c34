#!/usr/bin/env python3
"""Times the Llama-3 layer shapes of docs/benchmarks.md with PyTorch on the GPU
(cuBLAS GEMM alone, eager PyTorch, torch.compile) and, given the JSON of
`codac bench` from the same machine, the ratio of each to codac.

Cases (M tokens, default 8192; weights are nn.Linear [out, in], bf16):
  out_proj  x1 = x0 + attn @ w_o.T, then h = rmsnorm(x1) * g   (M x D x D)
  gate_up   z = h @ w_gu.T, y = silu(z[:, :F]) * z[:, F:]       (M x 2F x D)
  down      x2 = x1 + y @ w_down.T                              (M x D x F)
  qkv       u = rmsnorm(x2) * g @ w_qkv.T, RoPE (half) on q, k  (M x Q x D)
  block     all four in order
Every case is at the 8B shapes; with the suffix _1b (block_1b, gate_up_1b,
...) at the 1B ones.
"cuBLAS" is the case's matrix products alone (torch.mm on the same
operands); "eager" is the case written in plain PyTorch; "compile" is the
same function through torch.compile (default mode, no CUDA graphs).

Protocol, the same as `codac bench`: random normal data (activations N(0,1),
weights N(0, 1/in), gains 1 + 0.1 N(0,1)), never zeros; several copies of
every input (at least 3, and at least 256 MiB over the copies), cycled; 300
ms of spin-up and 10 warm-up runs before each timing loop, then the timed
runs enqueued back to back, each between its own pair of CUDA events (as
codac bench does: the host's launch latency stays out of the samples); the
median is reported. RMSNorm is
F.rms_norm; RoPE is Hugging Face's rotate-half form in bf16, with its cos/sin
tables as inputs (computed once per forward in a model), not timed.

Usage:
  python3 bench/compare.py [--m 8192] [--iters 200] [--codac 8b.json --codac 1b.json]
                           [--cases out_proj,gate_up,down,qkv,block,block_1b]
                           [--no-compile] [--json OUT.json]
The last lines are a table: time in ms of each variant, then codac's time and
the ratios variant / codac (above 1: codac is faster). codac's per-kernel
times are matched by GEMM shape (M, N, K); note that codac defers the
RMSNorm of out_proj into the next GEMM, so its out_proj kernel does less and
its gate_up kernel more than the eager cases of those names; the block
times compare the same work.
"""

import argparse
import json
import math
import sys
import time

import torch
import torch.nn.functional as F

MODELS = {
    "8b": dict(D=4096, F=14336, HD=128, QH=32, KVH=8),
    "1b": dict(D=2048, F=8192, HD=64, QH=32, KVH=8),
}
ROTATION_BYTES = 256 << 20
SPIN_UP_S = 0.3
EPS = 1e-5
ROPE_BASE = 500000.0

# Reference figures (H100, PyTorch 2.11, median of 200) from the issue:
# (cuBLAS, eager, compile); None where not given.
REFERENCE = {
    "out_proj": (0.387, 0.493, 0.453),
    "gate_up": (2.694, 3.334, 2.990),
    "down": (1.369, 1.423, None),
    "qkv": (0.625, 1.096, 0.641),
    "block": (4.459, 5.229, 4.742),
    "block_1b": (1.338, 1.763, 1.500),
}


def rmsnorm(x, g):
    """PyTorch's fused RMSNorm (fp32 statistics), as a model would call it."""
    return F.rms_norm(x, (x.shape[-1],), weight=g, eps=EPS)


def rope_half(u, cos, sin, cols, hd):
    """Rotate-half RoPE on the q and k heads (the first `cols` columns of u,
    heads of width hd) in the activation dtype, as Hugging Face's Llama does;
    returns the rotated q and k heads and the untouched v columns (a view)."""
    m = u.shape[0]
    qk = u[:, :cols].view(m, cols // hd, hd)
    half = hd // 2
    rotated = torch.cat((-qk[..., half:], qk[..., :half]), dim=-1)
    out = qk * cos[:, None, :] + rotated * sin[:, None, :]
    return out, u[:, cols:]


def make_ops(p):
    D, Fw, HD = p["D"], p["F"], p["HD"]
    qk_cols = (p["QH"] + p["KVH"]) * HD

    def out_proj(attn, x0, w_o, g_ffn):
        x1 = x0 + attn @ w_o.T
        return x1, rmsnorm(x1, g_ffn)

    def gate_up(h, w_gu):
        z = h @ w_gu.T
        return F.silu(z[:, :Fw]) * z[:, Fw:]

    def down(y, x1, w_down):
        return x1 + y @ w_down.T

    def qkv(x2, g_attn, w_qkv, cos, sin):
        u = rmsnorm(x2, g_attn) @ w_qkv.T
        return rope_half(u, cos, sin, qk_cols, HD)

    def block(attn, x0, w_o, g_ffn, w_gu, w_down, g_attn, w_qkv, cos, sin):
        x1, h = out_proj(attn, x0, w_o, g_ffn)
        x2 = down(gate_up(h, w_gu), x1, w_down)
        return x2, qkv(x2, g_attn, w_qkv, cos, sin)

    def mm_out_proj(attn, x0, w_o, g_ffn):
        return torch.mm(attn, w_o.T)

    def mm_gate_up(h, w_gu):
        return torch.mm(h, w_gu.T)

    def mm_down(y, x1, w_down):
        return torch.mm(y, w_down.T)

    def mm_qkv(x2, g_attn, w_qkv, cos, sin):
        return torch.mm(x2, w_qkv.T)

    def mm_block(attn, x0, w_o, g_ffn, w_gu, w_down, g_attn, w_qkv, cos, sin):
        x1 = torch.mm(attn, w_o.T)
        z = torch.mm(x1, w_gu.T)
        x2 = torch.mm(z[:, :Fw], w_down.T)
        return torch.mm(x2, w_qkv.T)

    return {
        "out_proj": (out_proj, mm_out_proj, ("attn", "x0", "w_o", "g_ffn")),
        "gate_up": (gate_up, mm_gate_up, ("h", "w_gu")),
        "down": (down, mm_down, ("y", "x1", "w_down")),
        "qkv": (qkv, mm_qkv, ("x2", "g_attn", "w_qkv", "cos", "sin")),
        "block": (block, mm_block, ("attn", "x0", "w_o", "g_ffn", "w_gu", "w_down", "g_attn", "w_qkv", "cos", "sin")),
    }


def shapes(p, m):
    D, Fw, HD = p["D"], p["F"], p["HD"]
    Q = (p["QH"] + 2 * p["KVH"]) * HD
    act = lambda cols: ("act", (m, cols))
    return {
        "attn": act(D), "x0": act(D), "h": act(D), "x1": act(D), "x2": act(D), "y": act(Fw),
        "w_o": ("weight", (D, D)), "w_gu": ("weight", (2 * Fw, D)),
        "w_down": ("weight", (D, Fw)), "w_qkv": ("weight", (Q, D)),
        "g_ffn": ("gain", (D,)), "g_attn": ("gain", (D,)),
        "cos": ("cos", (m, HD)), "sin": ("sin", (m, HD)),
    }


def make_tensor(kind, shape, gen, hd):
    dev = "cuda"
    if kind == "act":
        return torch.randn(shape, generator=gen, device=dev, dtype=torch.float32).to(torch.bfloat16)
    if kind == "weight":
        std = 1.0 / math.sqrt(shape[1])
        return (torch.randn(shape, generator=gen, device=dev) * std).to(torch.bfloat16)
    if kind == "gain":
        return (1.0 + 0.1 * torch.randn(shape, generator=gen, device=dev)).to(torch.bfloat16)
    pos = torch.randint(0, 1024, (shape[0],), generator=gen, device=dev).float()
    inv = ROPE_BASE ** (-torch.arange(0, hd, 2, device=dev).float() / hd)
    ang = pos[:, None] * inv[None, :]
    ang = torch.cat((ang, ang), dim=-1)
    return (ang.cos() if kind == "cos" else ang.sin()).to(torch.bfloat16)


def make_copies(names, table, hd, seed):
    one = sum(math.prod(table[n][1]) * 2 for n in names)
    copies = max(3, math.ceil(ROTATION_BYTES / one))
    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed)
    sets = [tuple(make_tensor(*table[n], gen, hd) for n in names) for _ in range(copies)]
    return sets, one


def time_ms(fn, sets, warmup, iters):
    """Spin-up (at least SPIN_UP_S of runs, so the clocks settle), `warmup`
    more runs, then `iters` runs enqueued back to back, each between its own
    pair of events, as codac bench does (coda_runtime's timing::bench_cycle);
    returns the median in ms."""
    start = time.time()
    i = 0
    while time.time() - start < SPIN_UP_S:
        for _ in range(len(sets)):
            fn(*sets[i % len(sets)])
            i += 1
        torch.cuda.synchronize()
    for i in range(warmup):
        fn(*sets[i % len(sets)])
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for i in range(iters):
        s = sets[(warmup + i) % len(sets)]
        starts[i].record()
        fn(*s)
        ends[i].record()
    torch.cuda.synchronize()
    samples = sorted(a.elapsed_time(b) for a, b in zip(starts, ends))
    n = len(samples)
    return samples[n // 2] if n % 2 else 0.5 * (samples[n // 2 - 1] + samples[n // 2])


def codac_times(paths):
    """(M, N, K) -> kernel median ms, and (D, 'block') -> block median ms, from codac bench JSON files."""
    kernels, blocks, meta = {}, {}, []
    for path in paths or []:
        with open(path) as f:
            doc = json.load(f)
        meta.append(f"{path}: {doc['device']['name']}, codac {doc['codac_version']}")
        for b in doc["blocks"]:
            widths = set()
            for k in b["kernels"]:
                g = k.get("gemm")
                if g:
                    kernels[(g["m"], g["n"], g["k"])] = k["time"]["median_ms"]
                    if g["n"] == g["k"]:
                        widths.add(g["n"])
            for d in widths:
                blocks[(b["dims"].get("M"), d)] = b["time"]["median_ms"]
    return kernels, blocks, meta


def codac_for(case, p, m, kernels, blocks):
    D, Fw = p["D"], p["F"]
    Q = (p["QH"] + 2 * p["KVH"]) * p["HD"]
    if case == "block":
        return blocks.get((m, D))
    key = {"out_proj": (m, D, D), "gate_up": (m, 2 * Fw, D), "down": (m, D, Fw), "qkv": (m, Q, D)}[case]
    return kernels.get(key)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", type=int, default=8192)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--codac", action="append", help="JSON of codac bench (repeatable)")
    ap.add_argument("--cases", default="out_proj,gate_up,down,qkv,block,block_1b")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    if args.iters < 100:
        sys.exit("error: --iters must be at least 100")
    if not torch.cuda.is_available():
        sys.exit("error: no GPU: PyTorch sees no CUDA device")

    props = torch.cuda.get_device_properties(0)
    print(f"device: {props.name}, {props.multi_processor_count} SMs; torch {torch.__version__}, CUDA {torch.version.cuda}")
    kernels, blocks, meta = codac_times(args.codac)
    for line in meta:
        print(f"codac: {line}")
    rows = []
    for case in args.cases.split(","):
        model, name = ("1b", case[: -len("_1b")]) if case.endswith("_1b") else ("8b", case)
        p = MODELS[model]
        fn, mm, names = make_ops(p)[name]
        sets, one = make_copies(names, shapes(p, args.m), p["HD"], args.seed)
        t0 = time.time()
        res = {"case": case, "model": model, "m": args.m, "copies": len(sets), "bytes_per_copy": one}
        res["cublas_ms"] = time_ms(mm, sets, args.warmup, args.iters)
        res["eager_ms"] = time_ms(fn, sets, args.warmup, args.iters)
        if not args.no_compile:
            compiled = torch.compile(fn, dynamic=False)
            tc = time.time()
            compiled(*sets[0])
            torch.cuda.synchronize()
            res["compile_build_s"] = time.time() - tc
            res["compile_ms"] = time_ms(compiled, sets, args.warmup, args.iters)
        res["codac_ms"] = codac_for(name, p, args.m, kernels, blocks)
        res["reference"] = REFERENCE.get(case)
        print(f"{case}: {len(sets)} copies of {one / 1e6:.1f} MB, {time.time() - t0:.1f} s", flush=True)
        del sets
        torch.cuda.empty_cache()
        rows.append(res)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": props.name, "torch": torch.__version__, "m": args.m, "iters": args.iters, "rows": rows}, f, indent=2)
    print_table(rows)


def print_table(rows):
    fmt = lambda v: "-" if v is None else f"{v:.3f}"
    ratio = lambda a, b: "-" if a is None or not b else f"{a / b:.2f}"
    header = ["case", "cuBLAS", "eager", "compile", "codac", "cuBLAS/codac", "eager/codac", "compile/codac", "ref cuBLAS/eager/compile"]
    table = [header]
    for r in rows:
        c = r.get("codac_ms")
        ref = r["reference"] or (None, None, None)
        table.append([
            r["case"], fmt(r["cublas_ms"]), fmt(r["eager_ms"]), fmt(r.get("compile_ms")), fmt(c),
            ratio(r["cublas_ms"], c), ratio(r["eager_ms"], c), ratio(r.get("compile_ms"), c),
            "/".join(fmt(v) for v in ref),
        ])
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    print(f"\ntimes in ms at M={rows[0]['m'] if rows else '?'} (median; ratios above 1: codac faster)")
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())


if __name__ == "__main__":
    main()
