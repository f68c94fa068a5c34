#!/usr/bin/env python3
"""Times the Llama-3 layer shapes of docs/benchmarks.md with PyTorch on the GPU
(cuBLAS GEMMs alone, eager PyTorch, torch.compile) and, given the JSON of
`codac bench` from the same machine, the ratio of each to codac.

Cases (M tokens, default 8192; weights are nn.Linear [out, in], bf16):
  out_proj  x1 = x0 + attn @ w_o.T, then h = rmsnorm(x1) * g   (M x D x D)
  gate_up   z = h @ w_gu.T, y = silu(z[:, :F]) * z[:, F:]       (M x 2F x D)
  down      x2 = x1 + y @ w_down.T                              (M x D x F)
  qkv       u = rmsnorm(x2) * g @ w_qkv.T, RoPE (half) on q, k  (M x Q x D)
  block     all four in order
  step      a training step of the block: forward, then backward
Every case is at the 8B shapes; with the suffix _1b (block_1b, step_1b,
...) at the 1B ones.
"cuBLAS" is the case's matrix products alone (torch.mm on operands of the
same shapes); "eager" is the case written in plain PyTorch; "compile" is
the same function through torch.compile (default mode, no CUDA graphs).

The training step is the `grad` declaration of examples/llama3_block.coda
(bench/llama3_1b_block.coda declares the same): gradients of attn, x0, w_o,
g_ffn, w_gu, w_down, g_attn and w_qkv from given gradients of both outputs,
dx2 [M, D] and dqkv [M, Q] (random like the activations, never zeros).
  eager    the block above on inputs that require gradients, then
           torch.autograd.backward((x2, rotated q/k heads, v), (dx2, the
           matching views of dqkv)): autograd runs the backward of every
           forward op and writes the eight gradients into .grad;
  compile  torch.compile of the block's forward function, then the same
           backward call, which runs the backward graph AOTAutograd
           compiled with it (what a user does: compile the model, call
           backward on its outputs);
  cuBLAS   the step's 12 GEMMs alone under no_grad: the forward's 4 and,
           for each weight, the dgrad (gradient @ W) and the wgrad
           (gradient.T @ input), on operands of the right shapes.
Each eager or compiled step first sets the eight .grad fields to None (what
optimizer.zero_grad() does by default), a host-side reset: the backward
then writes fresh gradients, as codac's backward does, instead of adding
to the last ones, and memory holds at most one set of gradients per copy.
Before any timing, the eager and compiled steps run once on the same
inputs and every gradient must agree within GRADIENT_TOLERANCE of its
largest magnitude (the check codac bench applies to cuBLAS), so that both
time the same work; the JSON records each gradient's difference. A step
whose gradients differ is not timed, and the script exits with status 1
after the other cases.

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
  python3 bench/compare.py [--m 8192] [--iters 200] [--codac 8b.json --codac 1b.json ...]
                           [--cases out_proj,gate_up,down,qkv,block,block_1b,step,step_1b]
                           [--no-compile] [--json OUT.json]
  python3 bench/compare.py --device cpu --m 64     # dry run of the code paths
The last lines are a table: time in ms of each variant, then codac's time and
the ratios variant / codac (above 1: codac is faster), and codac over its
bare GEMMs. codac's per-kernel times are matched by GEMM shape (M, N, K);
note that codac defers the RMSNorm of out_proj into the next GEMM, so its
out_proj kernel does less and its gate_up kernel more than the eager cases
of those names; the block and step times compare the same work. codac's
step is `codac bench --grad`'s: its saving forward plus its backward.
With --device cpu, every model shrinks to tiny widths and each variant runs
once, timed by the host clock: a check that the code runs, not a benchmark.
"""

import argparse
import json
import math
import sys
import time
from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F

MODELS = {
    "8b": dict(D=4096, F=14336, HD=128, QH=32, KVH=8),
    "1b": dict(D=2048, F=8192, HD=64, QH=32, KVH=8),
}
# Widths of the --device cpu dry run, one model per real one.
TINY_MODELS = {
    "8b": dict(D=256, F=512, HD=64, QH=4, KVH=2),
    "1b": dict(D=128, F=384, HD=32, QH=4, KVH=2),
}
DEFAULT_CASES = "out_proj,gate_up,down,qkv,block,block_1b,step,step_1b"
ROTATION_BYTES = 256 << 20
SPIN_UP_S = 0.3
EPS = 1e-5
ROPE_BASE = 500000.0
# Largest difference of an eager and a compiled gradient, over the eager
# one's largest magnitude.
GRADIENT_TOLERANCE = 1 / 32
# The inputs a training step differentiates, in the block's parameter order.
WRT = ("attn", "x0", "w_o", "g_ffn", "w_gu", "w_down", "g_attn", "w_qkv")
STEP_INPUTS = WRT + ("cos", "sin", "dx2", "dqkv")

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


class Case(NamedTuple):
    eager: Callable
    gemms: Callable
    inputs: tuple
    compiled: Callable  # () -> the torch.compile variant
    wrt: tuple = ()  # the inputs that get gradients (training steps)


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


def make_step(p, forward):
    """The training step around `forward` (the block, eager or compiled):
    takes STEP_INPUTS, leaves the gradients of WRT in their .grad."""
    qk_cols = (p["QH"] + p["KVH"]) * p["HD"]

    def step(*inputs):
        leaves, (cos, sin, dx2, dqkv) = inputs[: len(WRT)], inputs[len(WRT) :]
        for t in leaves:
            t.grad = None
        x2, (qk, v) = forward(*leaves, cos, sin)
        torch.autograd.backward((x2, qk, v), (dx2, dqkv[:, :qk_cols].view(qk.shape), dqkv[:, qk_cols:]))

    return step


def make_mm_step(p):
    """The step's 12 GEMMs alone: the forward's four, then for each weight W
    (input a, output gradient g) the dgrad g @ W and the wgrad g.T @ a. A
    GEMM's output stands in for an operand of the same shape that the real
    step computes otherwise (z for dz, dy for y, dh for dx1)."""
    Fw = p["F"]

    @torch.no_grad()
    def mm_step(attn, x0, w_o, g_ffn, w_gu, w_down, g_attn, w_qkv, cos, sin, dx2, dqkv):
        x1 = torch.mm(attn, w_o.T)
        z = torch.mm(x1, w_gu.T)
        x2 = torch.mm(z[:, :Fw], w_down.T)
        torch.mm(x2, w_qkv.T)
        dn = torch.mm(dqkv, w_qkv)  # qkv: dgrad, wgrad
        torch.mm(dqkv.T, x2)
        dy = torch.mm(dx2, w_down)  # down
        torch.mm(dx2.T, dy)
        dh = torch.mm(z, w_gu)  # gate_up
        torch.mm(z.T, x1)
        torch.mm(dh, w_o)  # out_proj
        return dn, torch.mm(dh.T, attn)

    return mm_step


def make_cases(p):
    """Case name (without the model suffix) -> Case."""
    ops = make_ops(p)
    cases = {
        name: Case(fn, mm, names, lambda fn=fn: torch.compile(fn, dynamic=False))
        for name, (fn, mm, names) in ops.items()
    }
    block = ops["block"][0]
    cases["step"] = Case(
        make_step(p, block),
        make_mm_step(p),
        STEP_INPUTS,
        lambda: make_step(p, torch.compile(block, dynamic=False)),
        WRT,
    )
    return cases


def shapes(p, m):
    D, Fw, HD = p["D"], p["F"], p["HD"]
    Q = (p["QH"] + 2 * p["KVH"]) * HD
    act = lambda cols: ("act", (m, cols))
    return {
        "attn": act(D), "x0": act(D), "h": act(D), "x1": act(D), "x2": act(D), "y": act(Fw),
        "dx2": act(D), "dqkv": act(Q),
        "w_o": ("weight", (D, D)), "w_gu": ("weight", (2 * Fw, D)),
        "w_down": ("weight", (D, Fw)), "w_qkv": ("weight", (Q, D)),
        "g_ffn": ("gain", (D,)), "g_attn": ("gain", (D,)),
        "cos": ("cos", (m, HD)), "sin": ("sin", (m, HD)),
    }


def make_tensor(kind, shape, gen, hd, dev):
    if kind == "act":
        return torch.randn(shape, generator=gen, device=dev, dtype=torch.float32).to(torch.bfloat16)
    if kind == "weight":
        std = 1.0 / math.sqrt(shape[1])
        return (torch.randn(shape, generator=gen, device=dev) * std).to(torch.bfloat16)
    if kind == "gain":
        return (1.0 + 0.1 * torch.randn(shape, generator=gen, device=dev)).to(torch.bfloat16)
    pos = torch.randint(0, 1024, (shape[0],), generator=gen, device=dev)
    cos, sin = rope_tables(pos, hd, torch.float32)
    return (cos if kind == "cos" else sin).to(torch.bfloat16)


def rope_tables(pos, hd, dtype, base=ROPE_BASE):
    """Hugging Face's cos and sin tables [len(pos), hd] of the positions
    `pos`, computed in `dtype`: what the .coda's rope(pos, ...) computes."""
    inv = base ** (-torch.arange(0, hd, 2, device=pos.device, dtype=dtype) / hd)
    ang = pos.to(dtype)[:, None] * inv[None, :]
    ang = torch.cat((ang, ang), dim=-1)
    return ang.cos(), ang.sin()


def make_copies(case, table, hd, seed, dev, rotation_bytes):
    """Copies of the case's inputs, enough to cycle through rotation_bytes
    (at least 3); the inputs of `case.wrt` require gradients."""
    one = sum(math.prod(table[n][1]) * 2 for n in case.inputs)
    copies = max(3, math.ceil(rotation_bytes / one))
    gen = torch.Generator(device=dev)
    gen.manual_seed(seed)
    sets = []
    for _ in range(copies):
        inputs = tuple(make_tensor(*table[n], gen, hd, dev) for n in case.inputs)
        for t in inputs[: len(case.wrt)]:
            t.requires_grad_(True)
        sets.append(inputs)
    return sets, one


def check_gradients(case, compiled, inputs):
    """Runs the eager and the compiled step once on the same inputs; returns
    each gradient's largest difference over the eager one's largest
    magnitude (infinite where a gradient is missing or zero)."""
    leaves = inputs[: len(case.wrt)]
    grads = []
    for step in (case.eager, compiled):
        step(*inputs)
        grads.append([None if t.grad is None else t.grad.detach().float() for t in leaves])
    differences = {}
    for name, eager, comp in zip(case.wrt, *grads):
        scale = 0.0 if eager is None or comp is None else eager.abs().max().item()
        differences[name] = (eager - comp).abs().max().item() / scale if scale > 0 else math.inf
    return differences


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


def dry_run_ms(fn, sets, warmup, iters):
    """One run by the host clock (--device cpu): proves the code path runs."""
    start = time.perf_counter()
    fn(*sets[0])
    return (time.perf_counter() - start) * 1e3


def model_width(block):
    """D of a codac bench block: the width of its square GEMM (w_o's)."""
    m = block["dims"].get("M")
    gemms = [k["gemm"] for k in block["kernels"] if k.get("gemm")]
    return {g["n"] for g in gemms if g["m"] == m and g["n"] == g["k"]}


def codac_times(paths):
    """The codac bench JSON files, as dicts: kernels (M, N, K) -> figures,
    blocks (M, D) -> figures, steps (M, D) -> figures; and a line per file.
    The blocks of a training step (--grad) count only as the step."""
    kernels, blocks, steps, meta = {}, {}, {}, []
    for path in paths or []:
        with open(path) as f:
            doc = json.load(f)
        meta.append(f"{path}: {doc['device']['name']}, codac {doc['codac_version']}")
        by_name = {b["block"]: b for b in doc["blocks"]}
        in_steps = {s[k] for s in doc.get("steps", []) for k in ("forward", "backward")}
        for b in doc["blocks"]:
            if b["block"] in in_steps:
                continue
            for k in b["kernels"]:
                g = k.get("gemm")
                if g:
                    kernels[(g["m"], g["n"], g["k"])] = dict(ms=k["time"]["median_ms"], over_bare=k.get("epilogue_cost"))
            median, bare = b["time"]["median_ms"], b.get("sum_bare_gemms_ms")
            for d in model_width(b):
                blocks[(b["dims"].get("M"), d)] = dict(ms=median, over_bare=median / bare if bare else None)
        for s in doc.get("steps", []):
            fwd, bwd = by_name.get(s["forward"]), by_name.get(s["backward"])
            if fwd is None or bwd is None:
                continue
            figures = dict(
                ms=s["time_ms"], over_bare=s["ratio"], bare_ms=s["bare_gemms_ms"],
                forward_ms=fwd["time"]["median_ms"], backward_ms=bwd["time"]["median_ms"],
                cublas_gemms_ms=s.get("cublas_gemms_ms"), vendor_bare_ms=s.get("vendor_bare_ms"),
            )
            for d in model_width(fwd):
                steps[(fwd["dims"].get("M"), d)] = figures
    return kernels, blocks, steps, meta


def codac_for(case, p, m, kernels, blocks, steps):
    """codac's figures for the case: {ms, over_bare, ...}, or None."""
    D, Fw = p["D"], p["F"]
    Q = (p["QH"] + 2 * p["KVH"]) * p["HD"]
    if case in ("block", "step"):
        return (blocks if case == "block" else steps).get((m, D))
    key = {"out_proj": (m, D, D), "gate_up": (m, 2 * Fw, D), "down": (m, D, Fw), "qkv": (m, Q, D)}[case]
    return kernels.get(key)


def add_run_arguments(ap):
    """The options every comparison script takes: tokens, timing and seed,
    and codac's JSON documents."""
    ap.add_argument("--m", type=int, default=8192)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--codac", action="append", help="JSON of codac bench, with or without --grad (repeatable)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_arguments(ap)
    ap.add_argument("--cases", default=DEFAULT_CASES)
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile (and the step's gradient check)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cpu: a dry run at tiny widths, each variant once (default: cuda)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    dry = args.device == "cpu"
    known = [f"{c}{suffix}" for suffix in ("", "_1b") for c in make_cases(MODELS["8b"])]
    unknown = [c for c in args.cases.split(",") if c not in known]
    if unknown:
        sys.exit(f"error: unknown case(s) {', '.join(map(repr, unknown))}; cases: {', '.join(known)}")
    if args.iters < 100 and not dry:
        sys.exit("error: --iters must be at least 100")
    if not dry and not torch.cuda.is_available():
        sys.exit("error: no GPU: PyTorch sees no CUDA device")

    if dry:
        device_name = "CPU (dry run at tiny widths: times are not benchmarks)"
        models, timer, sync, rotation = TINY_MODELS, dry_run_ms, lambda: None, 0
    else:
        props = torch.cuda.get_device_properties(0)
        device_name = f"{props.name}, {props.multi_processor_count} SMs"
        models, timer, sync, rotation = MODELS, time_ms, torch.cuda.synchronize, ROTATION_BYTES
    print(f"device: {device_name}; torch {torch.__version__}, CUDA {torch.version.cuda}")
    kernels, blocks, steps, meta = codac_times(args.codac)
    for line in meta:
        print(f"codac: {line}")
    rows, failures = [], 0
    for case_name in args.cases.split(","):
        model, name = ("1b", case_name[: -len("_1b")]) if case_name.endswith("_1b") else ("8b", case_name)
        p = models[model]
        case = make_cases(p)[name]
        sets, one = make_copies(case, shapes(p, args.m), p["HD"], args.seed, args.device, rotation)
        t0 = time.time()
        res = {"case": case_name, "model": model, "m": args.m, "copies": len(sets), "bytes_per_copy": one}
        compiled = None
        if not args.no_compile:
            compiled = case.compiled()
            tc = time.time()
            compiled(*sets[0])
            sync()
            res["compile_build_s"] = time.time() - tc
            if case.wrt:
                res["gradient_difference"] = differences = check_gradients(case, compiled, sets[0])
                res["gradients_agree"] = all(d <= GRADIENT_TOLERANCE for d in differences.values())
        if res.get("gradients_agree", True):
            res["cublas_ms"] = timer(case.gemms, sets, args.warmup, args.iters)
            res["eager_ms"] = timer(case.eager, sets, args.warmup, args.iters)
            if compiled is not None:
                res["compile_ms"] = timer(compiled, sets, args.warmup, args.iters)
        else:
            failures += 1
            print(f"error: {case_name}: the eager and compiled gradients differ, not timed: "
                  f"{res['gradient_difference']}", file=sys.stderr)
        res["codac"] = codac_for(name, p, args.m, kernels, blocks, steps)
        res["codac_ms"] = res["codac"] and res["codac"]["ms"]
        res["reference"] = REFERENCE.get(case_name)
        timed = ", ".join(f"{k[:-3]} {res[k]:.3f} ms" for k in ("cublas_ms", "eager_ms", "compile_ms") if k in res)
        build = f", compile build {res['compile_build_s']:.0f} s" if "compile_build_s" in res else ""
        print(f"{case_name}: {len(sets)} copies of {one / 1e6:.1f} MB, {time.time() - t0:.1f} s{build}; {timed}",
              flush=True)
        del sets, compiled
        if not dry:
            torch.cuda.empty_cache()
        rows.append(res)
    if args.json:
        with open(args.json, "w") as f:
            doc = {"device": device_name, "torch": torch.__version__, "m": args.m, "iters": args.iters, "rows": rows}
            json.dump(doc, f, indent=2)
    print_table(rows)
    if failures:
        sys.exit(f"error: {failures} case(s) not timed: their eager and compiled gradients differ")


def fmt(v):
    """A time in ms for the tables, or "-"."""
    return "-" if v is None else f"{v:.3f}"


def ratio(a, b):
    """a / b for the tables, or "-"."""
    return "-" if a is None or not b else f"{a / b:.2f}"


def print_aligned(title, table):
    """`title`, then the rows of `table` (lists of strings) in aligned columns."""
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    print(title)
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())


def print_table(rows):
    header = ["case", "cuBLAS", "eager", "compile", "codac", "cuBLAS/codac", "eager/codac", "compile/codac",
              "codac/bare", "ref cuBLAS/eager/compile"]
    table = [header]
    for r in rows:
        c = r.get("codac_ms")
        over_bare = (r.get("codac") or {}).get("over_bare")
        ref = r["reference"] or (None, None, None)
        table.append([
            r["case"], fmt(r.get("cublas_ms")), fmt(r.get("eager_ms")), fmt(r.get("compile_ms")), fmt(c),
            ratio(r.get("cublas_ms"), c), ratio(r.get("eager_ms"), c), ratio(r.get("compile_ms"), c),
            "-" if over_bare is None else f"{over_bare:.2f}", "/".join(fmt(v) for v in ref),
        ])
    print_aligned(f"\ntimes in ms at M={rows[0]['m'] if rows else '?'} (median; ratios above 1: codac faster)", table)
    for r in rows:
        print_step_notes(r)


def print_step_notes(r):
    """Below the table: what a step row's cuBLAS and codac figures are, and
    how closely the eager and compiled gradients agreed."""
    if not r["case"].startswith("step"):
        return
    c = r.get("codac")
    if c:
        vendor = ""
        if c.get("cublas_gemms_ms") is not None:
            vendor = (f"; side by side, codac's bare GEMMs {fmt(c['vendor_bare_ms'])} against "
                      f"cuBLAS's {fmt(c['cublas_gemms_ms'])}")
        print(f"{r['case']}: codac = saving forward {fmt(c['forward_ms'])} + backward {fmt(c['backward_ms'])}; "
              f"its bare GEMMs {fmt(c['bare_ms'])}{vendor}; cuBLAS column: the 12 GEMMs as torch.mm")
    if "gradient_difference" in r:
        name, worst = max(r["gradient_difference"].items(), key=lambda kv: kv[1])
        verdict = "agree" if r["gradients_agree"] else "DIFFER (not timed)"
        print(f"{r['case']}: eager and compiled gradients {verdict}; largest difference {worst:.2g} "
              f"of the largest magnitude ({name}), tolerance {GRADIENT_TOLERANCE:.3g}")
    else:
        print(f"{r['case']}: gradients not checked (--no-compile)")


if __name__ == "__main__":
    main()
