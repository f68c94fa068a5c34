#!/usr/bin/env python3
"""Times real architectures' layers with PyTorch on the GPU (cuBLAS's GEMMs
alone, eager PyTorch, torch.compile) beside `codac bench` of the same
examples, forward and training step, in the protocol of bench/compare.py.

Layers, written as their Hugging Face modeling code runs them in bf16 (the
checkpoints' separate gate_proj/up_proj and q_proj/k_proj/v_proj weights,
nn.Linear [out, in]), from the attention output of layer l to the RoPE'd
q, k and v of layer l+1, as examples/<layer>_layer.coda declares them:
  qwen3   Qwen3 8B: o_proj + residual, post_attention_layernorm, SwiGLU
          MLP + residual, input_layernorm, q/k/v, q_norm and k_norm per
          head (Qwen3RMSNorm over head_dim), RoPE (base 1e6)
  gemma2  Gemma-2 2B: sandwich norms (post_attention_layernorm before the
          residual add, pre/post_feedforward_layernorm around the MLP,
          every gain 1 + w, norms in float32 as Gemma2RMSNorm), the
          tanh-GELU gated MLP, input_layernorm, q/k/v, RoPE (base 1e4)
  lm_head Llama-3's end (LlamaForCausalLM): the final norm (LlamaRMSNorm),
          lm_head over the 128256-token vocabulary, the logits upcast to
          float32 and the mean cross-entropy (ignore_index -100), as
          examples/lm_head_ce.coda
and the other examples' layers, as examples/<name>.coda writes them:
  gpt2       GPT-2 small: projection with bias and residual, LayerNorm,
             tanh-GELU MLP with biases and residual, LayerNorm, fused QKV
             with bias (gpt2_block.coda)
  gemma_mlp  out-projection and residual, a (1 + w) RMSNorm in float32,
             the erf-GeGLU MLP over a fused [gate; up] weight and residual
  parallel   a parallel block (GPT-J/PaLM): two projections into one
             residual, one RMSNorm feeding SwiGLU and QKV, interleaved
             RoPE on q and k (parallel_block.coda)
Each in two passes: `fwd` (the layer) and `step` (the layer, then backward
to every float input, the examples' `grad` declarations: from random
gradients of every output, or from the loss). "cuBLAS" is the pass's
GEMMs alone as torch.mm on operands of the same shapes (a step adds each
weight's dgrad and wgrad to the forward's). RoPE reads cos/sin tables
[M, head_dim] that a model computes once per forward, not timed.
python/tests/test_bench_layers.py checks on the CPU that each layer here
computes its example's outputs and gradients, as codac's interpreter does.

Before timing a step, the eager and compiled steps run once on the same
inputs and every gradient must agree within compare.GRADIENT_TOLERANCE.

Usage (codac's figures from `codac bench FILE --dims M=8192 --json` and
the same with --grad, on the same machine):
  python3 bench/compare_layers.py --codac qwen3.json --codac qwen3-grad.json ...
  python3 bench/compare_layers.py --device cpu --m 64     # dry run, tiny widths
The last lines are a table in ms with the ratios compile / codac (above 1:
codac faster) and codac over its own bare GEMMs.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F

import compare

LAYERS = {
    "qwen3": dict(D=4096, F=12288, HD=128, QH=32, KVH=8, eps=1e-6, base=1e6),
    "gemma2": dict(D=2304, F=9216, HD=256, QH=8, KVH=4, eps=1e-6, base=1e4),
    "lm_head": dict(D=4096, V=128256, eps=1e-5),
    "gpt2": dict(D=768, H=3072),
    "gemma_mlp": dict(D=3072, F=24576),
    "parallel": dict(D=2048, F=5632, HD=64, H=32, base=1e4),
}
TINY = {
    "qwen3": dict(D=128, F=256, HD=32, QH=4, KVH=2, eps=1e-6, base=1e6),
    "gemma2": dict(D=128, F=256, HD=64, QH=2, KVH=1, eps=1e-6, base=1e4),
    "lm_head": dict(D=128, V=512, eps=1e-5),
    "gpt2": dict(D=64, H=256),
    "gemma_mlp": dict(D=64, F=128),
    "parallel": dict(D=128, F=192, HD=32, H=4, base=1e4),
}


class Layer(NamedTuple):
    forward: Callable  # (*inputs, *extras) -> its outputs, or a scalar loss
    gemms: Callable  # the forward's GEMMs as torch.mm
    step_gemms: Callable  # the step's GEMMs as torch.mm
    inputs: tuple[str, ...]  # the differentiated inputs, in the block's order
    extras: tuple[str, ...]  # the other arguments (RoPE tables, targets)
    grads: tuple[str, ...]  # the outputs' gradients, in order; none: backward from the loss
    block: str  # the example's block
    shapes: Callable  # (p, m) -> {name: (kind, shape)}
    example: str  # the file that declares the block


def rope_heads(x, heads, hd, cos, sin):
    """Rotate-half RoPE on [M, heads * hd] as heads [M, heads, hd]."""
    x = x.view(x.shape[0], heads, hd)
    half = hd // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


def qwen3(p):
    D, HD, eps = p["D"], p["HD"], p["eps"]

    def forward(attn, x0, w_o, g_post, w_gate, w_up, w_down, g_in, w_q, w_k, w_v, g_q, g_k, cos, sin):
        x1 = x0 + F.linear(attn, w_o)
        h = F.rms_norm(x1, (D,), g_post, eps)
        x2 = x1 + F.linear(F.silu(F.linear(h, w_gate)) * F.linear(h, w_up), w_down)
        hn = F.rms_norm(x2, (D,), g_in, eps)
        q = F.rms_norm(F.linear(hn, w_q).view(x2.shape[0], -1, HD), (HD,), g_q, eps)
        k = F.rms_norm(F.linear(hn, w_k).view(x2.shape[0], -1, HD), (HD,), g_k, eps)
        q = rope_heads(q, p["QH"], HD, cos, sin)
        k = rope_heads(k, p["KVH"], HD, cos, sin)
        return x2, q, k, F.linear(hn, w_v)

    names = ("attn", "x0", "w_o", "g_post", "w_gate", "w_up", "w_down", "g_in", "w_q", "w_k", "w_v", "g_q", "g_k")
    return block_layer(forward, names, "qwen3_layer", "examples/qwen3_layer.coda")


def gemma_norm(x, w, eps):
    """Gemma2RMSNorm: float32 statistics and gain (1 + w), back to x's dtype."""
    y = F.rms_norm(x.float(), (x.shape[-1],), eps=eps)
    return (y * (1.0 + w.float())).type_as(x)


def gemma2(p):
    HD, eps = p["HD"], p["eps"]

    def forward(attn, x0, w_o, g_post_attn, g_pre_ffn, w_gate, w_up, w_down, g_post_ffn, g_in, w_q, w_k, w_v,
                cos, sin):
        x1 = x0 + gemma_norm(F.linear(attn, w_o), g_post_attn, eps)
        h = gemma_norm(x1, g_pre_ffn, eps)
        mlp = F.linear(F.gelu(F.linear(h, w_gate), approximate="tanh") * F.linear(h, w_up), w_down)
        x2 = x1 + gemma_norm(mlp, g_post_ffn, eps)
        hn = gemma_norm(x2, g_in, eps)
        q = rope_heads(F.linear(hn, w_q), p["QH"], HD, cos, sin)
        k = rope_heads(F.linear(hn, w_k), p["KVH"], HD, cos, sin)
        return x2, q, k, F.linear(hn, w_v)

    names = ("attn", "x0", "w_o", "g_post_attn", "g_pre_ffn", "w_gate", "w_up", "w_down", "g_post_ffn", "g_in",
             "w_q", "w_k", "w_v")
    return block_layer(forward, names, "gemma2_layer", "examples/gemma2_layer.coda")


def block_layer(forward, names, block, example):
    """A layer from attention output to the next layer's q, k and v."""
    return Layer(forward, mm_forward, mm_step, names, ("cos", "sin"), ("dx2", "dq", "dk", "dv"), block,
                 lambda p, m: shapes(p, m, names), example)


def lm_head(p):
    D, eps = p["D"], p["eps"]

    def forward(x, g, w_lm, targets):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        logits = F.linear(g * h.to(x.dtype), w_lm)
        return F.cross_entropy(logits.float(), targets, ignore_index=-100)

    @torch.no_grad()
    def gemms(w):
        return torch.mm(w["x"], w["w_lm"].T)

    @torch.no_grad()
    def step_gemms(w):
        logits = gemms(w)
        torch.mm(logits, w["w_lm"])
        torch.mm(logits.T, w["x"])

    def table(p, m):
        return {"x": ("act", (m, D)), "g": ("gain", (D,)), "w_lm": ("weight", (p["V"], D)),
                "targets": ("targets", (m,))}

    return Layer(forward, gemms, step_gemms, ("x", "g", "w_lm"), ("targets",), (), "lm_head_ce", table,
                 "examples/lm_head_ce.coda")


def gpt2(p):
    D, H = p["D"], p["H"]

    def forward(attn, x0, w_proj, b_proj, ln2_g, ln2_b, w_fc, b_fc, w_out, b_out, ln1_g, ln1_b, w_qkv, b_qkv):
        x1 = x0 + F.linear(attn, w_proj, b_proj)
        a = F.gelu(F.linear(F.layer_norm(x1, (D,), ln2_g, ln2_b, 1e-5), w_fc, b_fc), approximate="tanh")
        x2 = x1 + F.linear(a, w_out, b_out)
        return x2, F.linear(F.layer_norm(x2, (D,), ln1_g, ln1_b, 1e-5), w_qkv, b_qkv)

    names = ("attn", "x0", "w_proj", "b_proj", "ln2_g", "ln2_b", "w_fc", "b_fc", "w_out", "b_out", "ln1_g", "ln1_b",
             "w_qkv", "b_qkv")
    weights = {"w_proj": (D, D), "w_fc": (H, D), "w_out": (D, H), "w_qkv": (3 * D, D)}
    # (weight, its input, its output): the GEMMs in order.
    chain = (("w_proj", "attn", "x0"), ("w_fc", "x0", "h"), ("w_out", "h", "x0"), ("w_qkv", "x0", "dqkv"))

    def table(p, m):
        t = {n: ("weight", s) for n, s in weights.items()}
        t.update({n: ("gain", (D,)) for n in ("ln2_g", "ln1_g")})
        t.update({n: ("bias", (w[0],)) for n, w in (("b_proj", weights["w_proj"]), ("b_fc", weights["w_fc"]),
                                                   ("b_out", weights["w_out"]), ("b_qkv", weights["w_qkv"]),
                                                   ("ln2_b", (D,)), ("ln1_b", (D,)))})
        t.update(attn=("act", (m, D)), x0=("act", (m, D)), h=("act", (m, H)), dx2=("act", (m, D)),
                 dqkv=("act", (m, 3 * D)))
        return t

    return Layer(forward, *chain_gemms(chain), names, (), ("dx2", "dqkv"), "gpt2_layer", table,
                 "examples/gpt2_block.coda")


def gemma_mlp(p):
    D, Fw = p["D"], p["F"]

    def forward(attn, x0, w_o, g, w_gu, w_down):
        x1 = x0 + F.linear(attn, w_o)
        gate, up = F.linear(gemma_norm(x1, g, 1e-6), w_gu).chunk(2, dim=-1)
        return (x1 + F.linear(F.gelu(gate) * up, w_down),)

    names = ("attn", "x0", "w_o", "g", "w_gu", "w_down")
    chain = (("w_o", "attn", "x0"), ("w_gu", "x0", "z"), ("w_down", "h", "x0"))

    def table(p, m):
        return {"attn": ("act", (m, D)), "x0": ("act", (m, D)), "w_o": ("weight", (D, D)), "g": ("gain", (D,)),
                "w_gu": ("weight", (2 * Fw, D)), "w_down": ("weight", (D, Fw)), "z": ("act", (m, 2 * Fw)),
                "h": ("act", (m, Fw)), "dx2": ("act", (m, D))}

    return Layer(forward, *chain_gemms(chain), names, (), ("dx2",), "gemma_mlp", table, "examples/gemma_mlp.coda")


def rope_interleaved(x, hd, cos, sin):
    """GPT-J's RoPE on [M, heads * hd]: features 2i and 2i+1 of each head
    rotate together by angle i; `cos`/`sin` are Hugging Face's half-style
    tables [M, hd] (angle i at columns i and i + hd/2)."""
    x = x.view(x.shape[0], -1, hd)
    c = cos[:, None, : hd // 2].repeat_interleave(2, dim=-1)
    s = sin[:, None, : hd // 2].repeat_interleave(2, dim=-1)
    rotated = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
    return (x * c + rotated * s).flatten(1)


def parallel(p):
    D, Fw, HD = p["D"], p["F"], p["HD"]

    def forward(attn, act, x0, w_o, w_down, g, w_gu, w_qkv, cos, sin):
        x1 = x0 + F.linear(attn, w_o) + F.linear(act, w_down)
        h = F.rms_norm(x1, (D,), g, 1e-5)
        gate, up = F.linear(h, w_gu).chunk(2, dim=-1)
        qkv = F.linear(h, w_qkv)
        qk = rope_interleaved(qkv[:, : 2 * D], HD, cos, sin)
        return x1, F.silu(gate) * up, torch.cat((qk, qkv[:, 2 * D:]), dim=-1)

    names = ("attn", "act", "x0", "w_o", "w_down", "g", "w_gu", "w_qkv")
    chain = (("w_o", "attn", "x0"), ("w_down", "act", "x0"), ("w_gu", "x0", "dy2"), ("w_qkv", "x0", "dqkv"))

    def table(p, m):
        return {"attn": ("act", (m, D)), "act": ("act", (m, Fw)), "x0": ("act", (m, D)), "w_o": ("weight", (D, D)),
                "w_down": ("weight", (D, Fw)), "g": ("gain", (D,)), "w_gu": ("weight", (2 * Fw, D)),
                "w_qkv": ("weight", (3 * D, D)), "cos": ("cos", (m, HD)), "sin": ("sin", (m, HD)),
                "dx1": ("act", (m, D)), "dy": ("act", (m, Fw)), "dy2": ("act", (m, 2 * Fw)),
                "dqkv": ("act", (m, 3 * D))}

    return Layer(forward, *chain_gemms(chain), names, ("cos", "sin"), ("dx1", "dy", "dqkv"), "parallel_block",
                 table, "examples/parallel_block.coda")


def chain_gemms(chain):
    """The forward's and the step's GEMMs as torch.mm, from (weight W, an
    operand of W's input width, a tensor of W's output width) per GEMM:
    the forward's `a @ W.T`, then per weight the dgrad `g @ W` and the
    wgrad `g.T @ a`."""

    @torch.no_grad()
    def forward(w):
        for weight, a, _ in chain:
            torch.mm(w[a], w[weight].T)

    @torch.no_grad()
    def step(w):
        forward(w)
        for weight, a, g in chain:
            torch.mm(w[g], w[weight])
            torch.mm(w[g].T, w[a])

    return forward, step


@torch.no_grad()
def mm_forward(tensors):
    """The forward's 7 GEMMs (o, gate, up, down, q, k, v) as torch.mm; a
    GEMM's output stands in for an operand the layer computes otherwise."""
    w = tensors
    x1 = torch.mm(w["attn"], w["w_o"].T)
    gate = torch.mm(x1, w["w_gate"].T)
    torch.mm(x1, w["w_up"].T)
    x2 = torch.mm(gate, w["w_down"].T)
    return [x1, gate, x2, torch.mm(x2, w["w_q"].T), torch.mm(x2, w["w_k"].T), torch.mm(x2, w["w_v"].T)]


@torch.no_grad()
def mm_step(tensors):
    """The step's 21 GEMMs: the forward's 7, then per weight W (input a,
    output gradient g) the dgrad g @ W and the wgrad g.T @ a."""
    w = tensors
    x1, gate, x2, q, k, v = mm_forward(tensors)
    for out, weight, a in ((q, "w_q", x2), (k, "w_k", x2), (v, "w_v", x2), (x2, "w_down", gate),
                           (gate, "w_gate", x1), (gate, "w_up", x1), (x1, "w_o", w["attn"])):
        torch.mm(out, w[weight])
        torch.mm(out.T, a)


def shapes(p, m, names):
    D, Fw, HD = p["D"], p["F"], p["HD"]
    QD, KD = p["QH"] * HD, p["KVH"] * HD
    weights = {"w_o": (D, QD), "w_gate": (Fw, D), "w_up": (Fw, D), "w_down": (D, Fw), "w_q": (QD, D),
               "w_k": (KD, D), "w_v": (KD, D)}
    table = {}
    for n in names:
        if n in weights:
            table[n] = ("weight", weights[n])
        elif n.startswith("g_"):
            table[n] = ("gain", (HD,) if n in ("g_q", "g_k") else (D,))
        else:
            table[n] = ("act", (m, QD if n == "attn" else D))
    table.update(cos=("cos", (m, HD)), sin=("sin", (m, HD)))
    table.update(dx2=("act", (m, D)), dq=("act", (m, QD)), dk=("act", (m, KD)), dv=("act", (m, KD)))
    return table


def make_sets(layer, p, m, seed, dev, rotation_bytes):
    """Copies of the step's inputs (the differentiated ones require grad),
    enough to cycle through rotation_bytes, at least 3."""
    table = layer.shapes(p, m)
    one = sum(math.prod(shape) * (8 if kind == "targets" else 2) for kind, shape in table.values())
    gen = torch.Generator(device=dev)
    gen.manual_seed(seed)
    sets = []
    for _ in range(max(3, math.ceil(rotation_bytes / one))):
        # One position per token, for both tables (and for codac's `pos`).
        s = {"pos": torch.randint(0, 4096, (m,), generator=gen, device=dev)}
        for n, (kind, shape) in table.items():
            if kind in ("cos", "sin"):
                cos, sin = compare.rope_tables(s["pos"], shape[1], torch.float32, p["base"])
                s[n] = (cos if kind == "cos" else sin).to(torch.bfloat16)
            elif kind == "bias":
                s[n] = (0.1 * torch.randn(shape, generator=gen, device=dev)).to(torch.bfloat16)
            elif kind == "targets":
                # Next-token ids, every 17th row without a target.
                s[n] = torch.randint(0, p["V"], shape, generator=gen, device=dev)
                s[n][::17] = -100
            else:
                s[n] = compare.make_tensor(kind, shape, gen, p.get("HD"), dev)
        for n in layer.inputs:
            s[n].requires_grad_(True)
        sets.append(s)
    return sets, one


def passes(layer, forward):
    """(fwd, step) closures over one input set for the layer's `forward`."""

    def fwd(s):
        with torch.no_grad():
            return forward(*(s[n] for n in layer.inputs + layer.extras))

    def step(s):
        for n in layer.inputs:
            s[n].grad = None
        outputs = forward(*(s[n] for n in layer.inputs + layer.extras))
        if layer.grads:
            torch.autograd.backward(outputs, [s[g].view(o.shape) for g, o in zip(layer.grads, outputs)])
        else:
            outputs.backward()

    return fwd, step


def gradient_differences(layer, eager_step, compiled_step, s):
    grads = []
    for step in (eager_step, compiled_step):
        step(s)
        grads.append([s[n].grad.detach().float() if s[n].grad is not None else None for n in layer.inputs])
    out = {}
    for n, a, b in zip(layer.inputs, *grads):
        scale = 0.0 if a is None or b is None else a.abs().max().item()
        out[n] = (a - b).abs().max().item() / scale if scale > 0 else math.inf
    return out


BUILDERS = {"qwen3": qwen3, "gemma2": gemma2, "lm_head": lm_head, "gpt2": gpt2, "gemma_mlp": gemma_mlp,
            "parallel": parallel}


def codac_figures(paths):
    """`codac bench --json` documents -> {(block name, pass): {ms, bare_ms}}."""
    figures = {}
    for path in paths or []:
        with open(path) as f:
            doc = json.load(f)
        by_name = {b["block"]: b for b in doc["blocks"]}
        in_steps = set()
        for s in doc.get("steps", []):
            in_steps.update((s["forward"], s["backward"]))
            layer = by_name[s["forward"]]["block"].removesuffix("_saving")
            figures[(layer, "step")] = dict(ms=s["time_ms"], bare_ms=s["bare_gemms_ms"])
        for b in doc["blocks"]:
            if b["block"] not in in_steps:
                figures[(b["block"], "fwd")] = dict(ms=b["time"]["median_ms"], bare_ms=b.get("sum_bare_gemms_ms"))
    return figures


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    compare.add_run_arguments(ap)
    ap.add_argument("--layers", default=",".join(BUILDERS))
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    dry = args.device == "cpu"
    unknown = [n for n in args.layers.split(",") if n not in LAYERS]
    if unknown:
        sys.exit(f"error: unknown layer(s) {', '.join(map(repr, unknown))}; layers: {', '.join(LAYERS)}")
    if not dry and not torch.cuda.is_available():
        sys.exit("error: no GPU: PyTorch sees no CUDA device")
    timer = compare.dry_run_ms if dry else compare.time_ms
    rotation = 0 if dry else compare.ROTATION_BYTES
    device_name = "CPU (dry run at tiny widths)" if dry else torch.cuda.get_device_name(0)
    print(f"device: {device_name}; torch {torch.__version__}")
    codac = codac_figures(args.codac)
    rows, failures = [], 0
    for name in args.layers.split(","):
        p = (TINY if dry else LAYERS)[name]
        layer = BUILDERS[name](p)
        sets, one = make_sets(layer, p, args.m, args.seed, args.device, rotation)
        t0 = time.time()
        compiled = torch.compile(layer.forward, dynamic=False)
        (e_fwd, e_step), (c_fwd, c_step) = passes(layer, layer.forward), passes(layer, compiled)
        differences = gradient_differences(layer, e_step, c_step, sets[0])
        agree = all(d <= compare.GRADIENT_TOLERANCE for d in differences.values())
        build = time.time() - t0
        timed = (("fwd", e_fwd, c_fwd, layer.gemms), ("step", e_step, c_step, layer.step_gemms))
        for pass_name, eager, comp, gemms in timed:
            res = {"layer": name, "pass": pass_name, "m": args.m, "copies": len(sets), "bytes_per_copy": one}
            if pass_name == "step":
                res["gradient_difference"], res["gradients_agree"] = differences, agree
            if pass_name == "fwd" or agree:
                for key, fn in (("cublas_ms", gemms), ("eager_ms", eager), ("compile_ms", comp)):
                    res[key] = timer(fn, [(s,) for s in sets], args.warmup, args.iters)
            else:
                failures += 1
                print(f"error: {name} step: eager and compiled gradients differ, not timed: {differences}",
                      file=sys.stderr)
            res["codac"] = codac.get((layer.block, pass_name))
            rows.append(res)
        print(f"{name}: {len(sets)} copies of {one / 1e6:.1f} MB, torch.compile build and check {build:.0f} s, "
              f"{time.time() - t0:.0f} s in all", flush=True)
        del sets, compiled
        if not dry:
            torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device_name, "torch": torch.__version__, "m": args.m, "rows": rows}, f, indent=2)
    print_table(rows)
    if failures:
        sys.exit(f"error: {failures} step(s) not timed: their eager and compiled gradients differ")


def print_table(rows):
    fmt, ratio = compare.fmt, compare.ratio
    table = [["layer", "pass", "cuBLAS", "eager", "compile", "codac", "compile/codac", "codac/bare"]]
    for r in rows:
        c = r["codac"] or {}
        table.append([r["layer"], r["pass"], fmt(r.get("cublas_ms")), fmt(r.get("eager_ms")),
                      fmt(r.get("compile_ms")), fmt(c.get("ms")), ratio(r.get("compile_ms"), c.get("ms")),
                      ratio(c.get("ms"), c.get("bare_ms"))])
    m = rows[0]["m"] if rows else "?"
    compare.print_aligned(f"\ntimes in ms at M={m} (median; compile/codac above 1: codac faster)", table)
    for r in rows:
        if "gradient_difference" in r:
            n, worst = max(r["gradient_difference"].items(), key=lambda kv: kv[1])
            print(f"{r['layer']} step: eager and compiled gradients {'agree' if r['gradients_agree'] else 'DIFFER'}; "
                  f"largest difference {worst:.2g} of the largest magnitude ({n})")


if __name__ == "__main__":
    main()
