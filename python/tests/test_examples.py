"""Example-level tests of the codac Python package against plain PyTorch.

For every example program in ``examples/`` this loads the block through
``codac.load``, runs it on fresh random inputs, and compares its outputs,
and the gradients of every input its ``grad`` declaration names, with the
plain-PyTorch references of ``reference.py`` (written from the language's
documented math and checked separately against ``codac eval``).

* On CPU tensors codac runs its exact interpreter, so the examples are
  loaded at small widths (``dims=``) and run at several token counts M.
* The ``gpu`` tests run the compiled kernels on CUDA tensors at the
  examples' real widths, at a ragged M (333) and a large one (8192).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor

# Deliberately a plain import: a missing or broken package must fail these
# tests, never skip them.
import codac

import reference

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "examples"

# --------------------------------------------------------------------------
# Tolerances, as relative errors ‖codac − ref‖ / ‖ref‖ over a whole tensor.
#
# The reference applies the program's rounding points (bf16 casts, bf16 GEMM
# operands, stores), so the two differ only where a float32 (reference) and
# a float64 (interpreter) or differently ordered float32 (kernels) value
# lands on the other side of a rounding boundary, plus, for gradients, the
# bf16 rounding of gradients that PyTorch's autograd and codac place
# slightly differently.
#
# Measured against the CLI interpreter (`codac eval --bf16-rounding`, the
# computation codac runs on CPU tensors) at these small widths, over 20
# seeds × M ∈ {1, 5, 33, 64}: worst 6.7e-4 on bf16 outputs, 1.7e-7 on f32
# outputs, 6.7e-3 on gradients (Llama-3's; the other blocks' 3.9e-3–5.7e-3).
# The layers of published checkpoints (Qwen2.5 to OLMo-2 below), measured
# the same way through this package: worst 2.2e-3 on bf16 outputs (a few
# elements of a 32-column output at M = 1) and 6.9e-3 on gradients, but
# for one draw of 80: Qwen2.5's dg_post (64 elements) at M = 1, 1.03e-2.
# At the seeds the tests draw, the gradients' worst is 6.3e-3.
#
# * bf16 outputs: one bf16 ulp is at most 2^-8 ≈ 3.9e-3 relative and only
#   rare elements flip, so 1e-2 leaves room for the GPU's reordered sums
#   and deferred norms (there codac rounds x·g, not x·rsqrt(·)·g, as the
#   GEMM operand: a different rounding point for every element).
# * f32 outputs (loss, logsumexp, Σx²) are never stored in 16 bits: 1e-5 on
#   the CPU; on the GPU the logits come from operands rounded at other
#   points (above), which moves a logsumexp of ~10 by far less than 1e-3.
# * gradients are stored in bf16 (the inputs' dtype) after a chain of bf16
#   roundings (of the backward GEMMs' operands, of the gradients of bf16
#   casts) that float32 autograd places slightly differently: 1.2e-2, about
#   twice the worst seen, since these are bf16 numbers throughout.
# --------------------------------------------------------------------------
BF16_OUTPUT_RTOL = 1e-2
F32_OUTPUT_RTOL = {"cpu": 1e-5, "cuda": 1e-3}
GRAD_RTOL = 1.2e-2

CPU_TOKEN_COUNTS = (1, 5, 33)
GPU_TOKEN_COUNTS = (333, 8192)

# Positions span a long context, so RoPE's angles are large (up to 8191 rad
# for the first frequency): the test then also checks their accuracy.
MAX_POSITION = 8192
IGNORE_INDEX = -100


# --------------------------------------------------------------------------
# The examples' signatures
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Arg:
    """One block input: its name, its shape as dim expressions, and its role.

    ``kind`` decides how the test draws it (see ``draw_input``):
    ``act`` (activations, N(0, 1)), ``weight`` (N(0, 1/fan_in)), ``gain``
    (1 + 0.1·N), ``gain_offset`` (0.1·N, Gemma's gain stored as 1 + g),
    ``bias`` (0.1·N), ``pos`` (positions) and ``targets`` (token ids, some
    ignored). All float inputs of the examples are bf16; ``pos`` and
    ``targets`` are i32.
    """

    name: str
    shape: tuple[str, ...]
    kind: str

    @property
    def dtype(self) -> torch.dtype:
        return torch.int32 if self.kind in ("pos", "targets") else torch.bfloat16


@dataclass(frozen=True)
class Out:
    """One block output: name, shape as dim expressions, storage dtype."""

    name: str
    shape: tuple[str, ...]
    dtype: torch.dtype = torch.bfloat16


@dataclass(frozen=True)
class Example:
    """An example program, its block, and what the test needs to run it."""

    file: str
    block: str
    args: tuple[Arg, ...]
    outputs: tuple[Out, ...]
    wrt: tuple[str, ...]  # the inputs of the file's `grad` declaration
    differentiated: tuple[str, ...]  # the outputs it differentiates
    small_dims: dict[str, int]  # passed to codac.load on the CPU
    real_dims: dict[str, int]  # the file's own constants, for the shapes
    reference: Callable[..., Any]
    reference_kwargs: Callable[[dict[str, int]], dict[str, Any]] = field(
        default=lambda dims: {}
    )

    @property
    def path(self) -> Path:
        return EXAMPLES_DIR / self.file


def _act(name: str, cols: str) -> Arg:
    return Arg(name, ("M", cols), "act")


LLAMA3 = Example(
    file="llama3_block.coda",
    block="llama3_layer",
    args=(
        _act("attn", "D"),
        _act("x0", "D"),
        Arg("w_o", ("D", "D"), "weight"),
        Arg("g_ffn", ("D",), "gain"),
        Arg("w_gu", ("2 * F", "D"), "weight"),
        Arg("w_down", ("D", "F"), "weight"),
        Arg("g_attn", ("D",), "gain"),
        Arg("w_qkv", ("(QH + 2 * KVH) * HD", "D"), "weight"),
        Arg("pos", ("M",), "pos"),
    ),
    outputs=(Out("x2", ("M", "D")), Out("qkv", ("M", "(QH + 2 * KVH) * HD"))),
    wrt=("attn", "x0", "w_o", "g_ffn", "w_gu", "w_down", "g_attn", "w_qkv"),
    differentiated=("x2", "qkv"),
    # Q = (QH + 2·KVH)·HD = 64 follows from the overridden dims.
    small_dims={"D": 64, "F": 96, "HD": 16, "QH": 2, "KVH": 1},
    real_dims={"D": 4096, "F": 14336, "HD": 128, "QH": 32, "KVH": 8},
    reference=reference.llama3_layer,
    reference_kwargs=lambda d: {
        "head_dim": d["HD"],
        "q_heads": d["QH"],
        "kv_heads": d["KVH"],
    },
)

GPT2 = Example(
    file="gpt2_block.coda",
    block="gpt2_layer",
    args=(
        _act("attn", "D"),
        _act("x0", "D"),
        Arg("w_proj", ("D", "D"), "weight"),
        Arg("b_proj", ("D",), "bias"),
        Arg("ln2_g", ("D",), "gain"),
        Arg("ln2_b", ("D",), "bias"),
        Arg("w_fc", ("H", "D"), "weight"),
        Arg("b_fc", ("H",), "bias"),
        Arg("w_out", ("D", "H"), "weight"),
        Arg("b_out", ("D",), "bias"),
        Arg("ln1_g", ("D",), "gain"),
        Arg("ln1_b", ("D",), "bias"),
        Arg("w_qkv", ("3 * D", "D"), "weight"),
        Arg("b_qkv", ("3 * D",), "bias"),
    ),
    outputs=(Out("x2", ("M", "D")), Out("qkv", ("M", "3 * D"))),
    wrt=(
        "attn", "x0", "w_proj", "b_proj", "ln2_g", "ln2_b", "w_fc", "b_fc",
        "w_out", "b_out", "ln1_g", "ln1_b", "w_qkv", "b_qkv",
    ),
    differentiated=("x2", "qkv"),
    small_dims={"D": 64, "H": 128},
    real_dims={"D": 768, "H": 3072},
    reference=reference.gpt2_layer,
)

LM_HEAD_CE = Example(
    file="lm_head_ce.coda",
    block="lm_head_ce",
    args=(
        _act("x", "D"),
        Arg("g", ("D",), "gain"),
        Arg("w_lm", ("V", "D"), "weight"),
        Arg("targets", ("M",), "targets"),
    ),
    outputs=(Out("loss", (), torch.float32), Out("lse", ("M",), torch.float32)),
    wrt=("x", "g", "w_lm"),
    differentiated=("loss",),  # `lse` is a by-product, not differentiated
    small_dims={"D": 64, "V": 200},
    real_dims={"D": 4096, "V": 128256},
    reference=reference.lm_head_ce,
)

GEMMA_MLP = Example(
    file="gemma_mlp.coda",
    block="gemma_mlp",
    args=(
        _act("attn", "D"),
        _act("x0", "D"),
        Arg("w_o", ("D", "D"), "weight"),
        Arg("g", ("D",), "gain_offset"),
        Arg("w_gu", ("2 * F", "D"), "weight"),
        Arg("w_down", ("D", "F"), "weight"),
    ),
    outputs=(Out("x2", ("M", "D")),),
    wrt=("attn", "x0", "w_o", "g", "w_gu", "w_down"),
    differentiated=("x2",),
    small_dims={"D": 64, "F": 96},
    real_dims={"D": 3072, "F": 24576},
    reference=reference.gemma_mlp,
)

PARALLEL = Example(
    file="parallel_block.coda",
    block="parallel_block",
    args=(
        _act("attn", "D"),
        _act("act", "F"),
        _act("x0", "D"),
        Arg("w_o", ("D", "D"), "weight"),
        Arg("w_down", ("D", "F"), "weight"),
        Arg("g", ("D",), "gain"),
        Arg("w_gu", ("2 * F", "D"), "weight"),
        Arg("w_qkv", ("3 * D", "D"), "weight"),
        Arg("pos", ("M",), "pos"),
    ),
    outputs=(
        Out("x1", ("M", "D")),
        Out("y", ("M", "F")),
        Out("qkv", ("M", "3 * D")),
    ),
    wrt=("attn", "act", "x0", "w_o", "w_down", "g", "w_gu", "w_qkv"),
    differentiated=("x1", "y", "qkv"),
    # H (heads) is declared but unused by the math; keep it consistent.
    small_dims={"D": 64, "F": 96, "HD": 16, "H": 4},
    real_dims={"D": 2048, "F": 5632, "HD": 64, "H": 32},
    reference=reference.parallel_block,
    reference_kwargs=lambda d: {"head_dim": d["HD"]},
)

OUT_PROJ = Example(
    file="out_proj_kernel.coda",
    block="out_proj_residual_rms",
    args=(
        _act("attn", "D"),
        Arg("w_o", ("D", "D"), "weight"),
        _act("x0", "D"),
        Arg("g", ("D",), "gain"),
    ),
    outputs=(
        Out("x1", ("M", "D")),
        Out("h", ("M", "D")),
        Out("sumsq", ("M",), torch.float32),
    ),
    wrt=("attn", "w_o", "x0", "g"),
    differentiated=("x1", "h", "sumsq"),
    small_dims={"D": 64},
    real_dims={"D": 4096},
    reference=reference.out_proj_residual_rms,
)


def _head_kwargs(dims: dict[str, int]) -> dict[str, Any]:
    return {"head_dim": dims["HD"]}


# Layers of published checkpoints (issue 33), with the checkpoints' weight
# layouts: separate q, k and v projections (Qwen2.5, Gemma-2, Mistral,
# OLMo-2) or a fused one (Phi-3).

QWEN2 = Example(
    file="qwen2_layer.coda",
    block="qwen2_layer",
    args=(
        _act("attn", "QH * HD"),
        _act("x0", "D"),
        Arg("w_o", ("D", "QH * HD"), "weight"),
        Arg("g_post", ("D",), "gain"),
        Arg("w_gate", ("F", "D"), "weight"),
        Arg("w_up", ("F", "D"), "weight"),
        Arg("w_down", ("D", "F"), "weight"),
        Arg("g_in", ("D",), "gain"),
        Arg("w_q", ("QH * HD", "D"), "weight"),
        Arg("b_q", ("QH * HD",), "bias"),
        Arg("w_k", ("KVH * HD", "D"), "weight"),
        Arg("b_k", ("KVH * HD",), "bias"),
        Arg("w_v", ("KVH * HD", "D"), "weight"),
        Arg("b_v", ("KVH * HD",), "bias"),
        Arg("pos", ("M",), "pos"),
    ),
    outputs=(
        Out("x2", ("M", "D")),
        Out("q", ("M", "QH * HD")),
        Out("k", ("M", "KVH * HD")),
        Out("v", ("M", "KVH * HD")),
    ),
    wrt=(
        "attn", "x0", "w_o", "g_post", "w_gate", "w_up", "w_down", "g_in",
        "w_q", "b_q", "w_k", "b_k", "w_v", "b_v",
    ),
    differentiated=("x2", "q", "k", "v"),
    small_dims={"D": 64, "F": 96, "HD": 16, "QH": 4, "KVH": 2},
    real_dims={"D": 1536, "F": 8960, "HD": 128, "QH": 12, "KVH": 2},
    reference=reference.qwen2_layer,
    reference_kwargs=_head_kwargs,
)

GEMMA2 = Example(
    file="gemma2_layer.coda",
    block="gemma2_layer",
    args=(
        _act("attn", "QH * HD"),
        _act("x0", "D"),
        Arg("w_o", ("D", "QH * HD"), "weight"),
        Arg("g_post_attn", ("D",), "gain_offset"),
        Arg("g_pre_ffn", ("D",), "gain_offset"),
        Arg("w_gate", ("F", "D"), "weight"),
        Arg("w_up", ("F", "D"), "weight"),
        Arg("w_down", ("D", "F"), "weight"),
        Arg("g_post_ffn", ("D",), "gain_offset"),
        Arg("g_in", ("D",), "gain_offset"),
        Arg("w_q", ("QH * HD", "D"), "weight"),
        Arg("w_k", ("KVH * HD", "D"), "weight"),
        Arg("w_v", ("KVH * HD", "D"), "weight"),
        Arg("pos", ("M",), "pos"),
    ),
    outputs=(
        Out("x2", ("M", "D")),
        Out("q", ("M", "QH * HD")),
        Out("k", ("M", "KVH * HD")),
        Out("v", ("M", "KVH * HD")),
    ),
    wrt=(
        "attn", "x0", "w_o", "g_post_attn", "g_pre_ffn", "w_gate", "w_up",
        "w_down", "g_post_ffn", "g_in", "w_q", "w_k", "w_v",
    ),
    differentiated=("x2", "q", "k", "v"),
    # QH·HD = 64 against D = 72, as 2048 against 2304 in the checkpoint.
    small_dims={"D": 72, "F": 96, "HD": 16, "QH": 4, "KVH": 2},
    real_dims={"D": 2304, "F": 9216, "HD": 256, "QH": 8, "KVH": 4},
    reference=reference.gemma2_layer,
    reference_kwargs=_head_kwargs,
)

MISTRAL = Example(
    file="mistral_layer.coda",
    block="mistral_layer",
    args=(
        _act("attn", "QH * HD"),
        _act("x0", "D"),
        Arg("w_o", ("D", "QH * HD"), "weight"),
        Arg("g_post", ("D",), "gain"),
        Arg("w_gate", ("F", "D"), "weight"),
        Arg("w_up", ("F", "D"), "weight"),
        Arg("w_down", ("D", "F"), "weight"),
        Arg("g_in", ("D",), "gain"),
        Arg("w_q", ("QH * HD", "D"), "weight"),
        Arg("w_k", ("KVH * HD", "D"), "weight"),
        Arg("w_v", ("KVH * HD", "D"), "weight"),
        Arg("pos", ("M",), "pos"),
    ),
    outputs=(
        Out("x2", ("M", "D")),
        Out("q", ("M", "QH * HD")),
        Out("k", ("M", "KVH * HD")),
        Out("v", ("M", "KVH * HD")),
    ),
    wrt=("attn", "x0", "w_o", "g_post", "w_gate", "w_up", "w_down", "g_in", "w_q", "w_k", "w_v"),
    differentiated=("x2", "q", "k", "v"),
    small_dims={"D": 64, "F": 96, "HD": 16, "QH": 4, "KVH": 2},
    real_dims={"D": 4096, "F": 14336, "HD": 128, "QH": 32, "KVH": 8},
    reference=reference.mistral_layer,
    reference_kwargs=_head_kwargs,
)

PHI3 = Example(
    file="phi3_layer.coda",
    block="phi3_layer",
    args=(
        _act("attn", "H * HD"),
        _act("x0", "D"),
        Arg("w_o", ("D", "H * HD"), "weight"),
        Arg("g_post", ("D",), "gain"),
        Arg("w_gate_up", ("2 * F", "D"), "weight"),
        Arg("w_down", ("D", "F"), "weight"),
        Arg("g_in", ("D",), "gain"),
        Arg("w_qkv", ("3 * H * HD", "D"), "weight"),
        Arg("pos", ("M",), "pos"),
    ),
    outputs=(Out("x2", ("M", "D")), Out("qkv", ("M", "3 * H * HD"))),
    wrt=("attn", "x0", "w_o", "g_post", "w_gate_up", "w_down", "g_in", "w_qkv"),
    differentiated=("x2", "qkv"),
    # A head width that is not a power of two, as Phi-3's 96.
    small_dims={"D": 48, "F": 64, "HD": 12, "H": 4},
    real_dims={"D": 3072, "F": 8192, "HD": 96, "H": 32},
    reference=reference.phi3_layer,
    reference_kwargs=_head_kwargs,
)

OLMO2 = Example(
    file="olmo2_layer.coda",
    block="olmo2_layer",
    args=(
        _act("attn", "H * HD"),
        _act("x0", "D"),
        Arg("w_o", ("D", "H * HD"), "weight"),
        Arg("g_post_attn", ("D",), "gain"),
        Arg("w_gate", ("F", "D"), "weight"),
        Arg("w_up", ("F", "D"), "weight"),
        Arg("w_down", ("D", "F"), "weight"),
        Arg("g_post_ffn", ("D",), "gain"),
        Arg("w_q", ("H * HD", "D"), "weight"),
        Arg("g_q", ("H * HD",), "gain"),
        Arg("w_k", ("H * HD", "D"), "weight"),
        Arg("g_k", ("H * HD",), "gain"),
        Arg("w_v", ("H * HD", "D"), "weight"),
        Arg("pos", ("M",), "pos"),
    ),
    outputs=(
        Out("x2", ("M", "D")),
        Out("q", ("M", "H * HD")),
        Out("k", ("M", "H * HD")),
        Out("v", ("M", "H * HD")),
    ),
    wrt=(
        "attn", "x0", "w_o", "g_post_attn", "w_gate", "w_up", "w_down",
        "g_post_ffn", "w_q", "g_q", "w_k", "g_k", "w_v",
    ),
    differentiated=("x2", "q", "k", "v"),
    small_dims={"D": 64, "F": 96, "HD": 16, "H": 4},
    real_dims={"D": 2048, "F": 8192, "HD": 128, "H": 16},
    reference=reference.olmo2_layer,
    reference_kwargs=_head_kwargs,
)

QWEN3 = Example(
    file="qwen3_layer.coda",
    block="qwen3_layer",
    args=(
        _act("attn", "QH * HD"),
        _act("x0", "D"),
        Arg("w_o", ("D", "QH * HD"), "weight"),
        Arg("g_post", ("D",), "gain"),
        Arg("w_gate", ("F", "D"), "weight"),
        Arg("w_up", ("F", "D"), "weight"),
        Arg("w_down", ("D", "F"), "weight"),
        Arg("g_in", ("D",), "gain"),
        Arg("w_q", ("QH * HD", "D"), "weight"),
        Arg("w_k", ("KVH * HD", "D"), "weight"),
        Arg("w_v", ("KVH * HD", "D"), "weight"),
        Arg("g_q", ("HD",), "gain"),
        Arg("g_k", ("HD",), "gain"),
        Arg("pos", ("M",), "pos"),
    ),
    outputs=(
        Out("x2", ("M", "D")),
        Out("q", ("M", "QH * HD")),
        Out("k", ("M", "KVH * HD")),
        Out("v", ("M", "KVH * HD")),
    ),
    wrt=(
        "attn", "x0", "w_o", "g_post", "w_gate", "w_up", "w_down", "g_in",
        "w_q", "w_k", "w_v", "g_q", "g_k",
    ),
    differentiated=("x2", "q", "k", "v"),
    small_dims={"D": 64, "F": 96, "HD": 16, "QH": 4, "KVH": 2},
    real_dims={"D": 4096, "F": 12288, "HD": 128, "QH": 32, "KVH": 8},
    reference=reference.qwen3_layer,
    reference_kwargs=_head_kwargs,
)

GPTNEOX = Example(
    file="gptneox_layer.coda",
    block="gptneox_layer",
    args=(
        _act("attn", "D"),
        _act("x0", "D"),
        Arg("w_o", ("D", "D"), "weight"),
        Arg("b_o", ("D",), "bias"),
        Arg("g_mlp", ("D",), "gain"),
        Arg("b_mlp", ("D",), "bias"),
        Arg("w_in", ("F", "D"), "weight"),
        Arg("b_in", ("F",), "bias"),
        Arg("w_out", ("D", "F"), "weight"),
        Arg("b_out", ("D",), "bias"),
        Arg("g_attn", ("D",), "gain"),
        Arg("b_attn", ("D",), "bias"),
        Arg("w_qkv", ("3 * D", "D"), "weight"),
        Arg("b_qkv", ("3 * D",), "bias"),
        Arg("pos", ("M",), "pos"),
    ),
    outputs=(
        Out("x2", ("M", "D")),
        Out("q", ("M", "D")),
        Out("k", ("M", "D")),
        Out("v", ("M", "D")),
    ),
    wrt=(
        "attn", "x0", "w_o", "b_o", "g_mlp", "b_mlp", "w_in", "b_in",
        "w_out", "b_out", "g_attn", "b_attn", "w_qkv", "b_qkv",
    ),
    differentiated=("x2", "q", "k", "v"),
    small_dims={"D": 64, "F": 96, "HD": 16},
    real_dims={"D": 2048, "F": 8192, "HD": 128},
    reference=reference.gptneox_layer,
    reference_kwargs=_head_kwargs,
)

EXAMPLES = (
    LLAMA3, GPT2, LM_HEAD_CE, GEMMA_MLP, PARALLEL, OUT_PROJ,
    QWEN2, GEMMA2, MISTRAL, PHI3, OLMO2, QWEN3, GPTNEOX,
)


# --------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------


def shape_of(dims_exprs: tuple[str, ...], dims: dict[str, int]) -> tuple[int, ...]:
    """Evaluate a shape's dim expressions (``"2 * F"``) under bound dims."""
    return tuple(int(eval(e, {"__builtins__": {}}, dict(dims))) for e in dims_exprs)


def seed_for(example: Example, m: int, device: str) -> int:
    """A stable seed per case (``hash()`` of a str changes between runs)."""
    return zlib.crc32(f"{example.block}/{m}/{device}".encode())


def draw_input(
    arg: Arg, dims: dict[str, int], gen: torch.Generator, device: str
) -> Tensor:
    """Fresh random values for one input, scaled like a real model's."""
    shape = shape_of(arg.shape, dims)
    if arg.kind == "pos":
        return torch.randint(0, MAX_POSITION, shape, generator=gen, device=device).int()
    if arg.kind == "targets":
        v = dims["V"]
        t = torch.randint(0, v, shape, generator=gen, device=device)
        # About one row in eight ignored, but never row 0: with every row
        # ignored the mean loss is 0/0 (M = 1 would otherwise hit it).
        ignored = torch.rand(shape, generator=gen, device=device) < 0.125
        ignored[0] = False
        return torch.where(ignored, torch.full_like(t, IGNORE_INDEX), t).int()
    n = torch.randn(shape, generator=gen, device=device)
    scaled = {
        "act": lambda: n,
        "weight": lambda: n / shape[-1] ** 0.5,  # std 1/sqrt(fan_in)
        "gain": lambda: 1.0 + 0.1 * n,
        "gain_offset": lambda: 0.1 * n,
        "bias": lambda: 0.1 * n,
    }[arg.kind]()
    return scaled.to(arg.dtype)


def draw_inputs(
    example: Example, dims: dict[str, int], seed: int, device: str
) -> dict[str, Tensor]:
    gen = torch.Generator(device=device).manual_seed(seed)
    return {a.name: draw_input(a, dims, gen, device) for a in example.args}


def draw_output_grads(
    example: Example, dims: dict[str, int], seed: int, device: str
) -> dict[str, Tensor]:
    """Random gradients for the differentiated outputs, in their dtypes."""
    gen = torch.Generator(device=device).manual_seed(seed ^ 0x5EED)
    grads = {}
    for out in example.outputs:
        if out.name in example.differentiated:
            n = torch.randn(shape_of(out.shape, dims), generator=gen, device=device)
            grads[out.name] = n.to(out.dtype)
    return grads


# --------------------------------------------------------------------------
# Comparison
# --------------------------------------------------------------------------


def rel_err(actual: Tensor, expected: Tensor) -> float:
    """‖actual − expected‖ / ‖expected‖ in float64."""
    a, e = actual.detach().double(), expected.detach().double()
    return ((a - e).norm() / e.norm()).item()


def as_tuple(result: Tensor | tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    return result if isinstance(result, tuple) else (result,)


def check_close(what: str, actual: Tensor, expected: Tensor, rtol: float) -> None:
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert torch.isfinite(actual).all(), f"{what}: non-finite values"
    err = rel_err(actual, expected)
    assert err <= rtol, f"{what}: relative error {err:.3e} > {rtol:.1e}"


def run_and_compare(
    example: Example,
    prog_dims: dict[str, int] | None,
    m: int,
    device: str,
) -> None:
    """Run one example through codac and the reference; compare everything."""
    dims = {**example.real_dims, **(prog_dims or {}), "M": m}
    seed = seed_for(example, m, device)
    inputs = draw_inputs(example, dims, seed, device)
    out_grads = draw_output_grads(example, dims, seed, device)

    # Without `dims` the file's own constants apply (the real widths).
    load_kwargs = {"dims": prog_dims} if prog_dims else {}
    prog = codac.load(str(example.path), **load_kwargs)
    block = prog.block(example.block)

    # codac: bf16 leaves, as a bf16 model would hold them.
    leaves = {
        k: (v.clone().requires_grad_() if k in example.wrt else v) for k, v in inputs.items()
    }
    outs = as_tuple(block(*[leaves[a.name] for a in example.args]))

    # reference: float32 copies of the same values, so its gradients are
    # unrounded float32 (codac's are rounded to bf16, the inputs' dtype).
    ref_leaves = {
        k: (v.detach().float().requires_grad_() if k in example.wrt else v)
        for k, v in inputs.items()
    }
    ref_outs = as_tuple(
        example.reference(
            *[ref_leaves[a.name] for a in example.args], **example.reference_kwargs(dims)
        )
    )

    assert len(outs) == len(example.outputs), f"{len(outs)} outputs, expected {len(example.outputs)}"
    for out, got, want in zip(example.outputs, outs, ref_outs):
        assert got.dtype == out.dtype, f"{out.name}: dtype {got.dtype}, expected {out.dtype}"
        assert got.device.type == device, f"{out.name}: on {got.device}, expected {device}"
        rtol = BF16_OUTPUT_RTOL if out.dtype == torch.bfloat16 else F32_OUTPUT_RTOL[device]
        check_close(f"{example.block}: output {out.name}", got, want, rtol)

    # Backward, as a training loop would call it: .backward() from the
    # differentiated outputs with random output gradients.
    by_name = dict(zip((o.name for o in example.outputs), outs))
    ref_by_name = dict(zip((o.name for o in example.outputs), ref_outs))
    names = list(out_grads)
    torch.autograd.backward([by_name[n] for n in names], [out_grads[n] for n in names])
    torch.autograd.backward(
        [ref_by_name[n] for n in names], [out_grads[n].float() for n in names]
    )
    for name in example.wrt:
        got, want = leaves[name].grad, ref_leaves[name].grad
        assert got is not None, f"{example.block}: no gradient for {name}"
        assert got.dtype == inputs[name].dtype, f"d{name}: dtype {got.dtype}, expected {inputs[name].dtype}"
        check_close(f"{example.block}: gradient d{name}", got, want, GRAD_RTOL)


# --------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------

_IDS = [e.block for e in EXAMPLES]


@pytest.mark.parametrize("m", CPU_TOKEN_COUNTS)
@pytest.mark.parametrize("example", EXAMPLES, ids=_IDS)
def test_example_cpu(example: Example, m: int) -> None:
    """The interpreter, at small widths, against the reference."""
    run_and_compare(example, example.small_dims, m, "cpu")


@pytest.mark.parametrize("example", EXAMPLES, ids=_IDS)
def test_example_by_keyword(example: Example) -> None:
    """Inputs passed by name give exactly what they give in order."""
    dims = {**example.real_dims, **example.small_dims, "M": 5}
    inputs = draw_inputs(example, dims, seed_for(example, 5, "cpu"), "cpu")
    block = codac.load(str(example.path), dims=example.small_dims).block(example.block)
    positional = as_tuple(block(*[inputs[a.name] for a in example.args]))
    # Reversed, so that a call that took keywords in order would fail too.
    by_name = as_tuple(block(**dict(reversed(list(inputs.items())))))
    for out, a, b in zip(example.outputs, positional, by_name):
        assert torch.equal(a, b), f"{example.block}: output {out.name} differs by keyword"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="skipped: no GPU")
@pytest.mark.parametrize("m", GPU_TOKEN_COUNTS)
@pytest.mark.parametrize("example", EXAMPLES, ids=_IDS)
def test_example_gpu(example: Example, m: int) -> None:
    """The compiled kernels, at the examples' real widths, in bf16 on CUDA.

    The reference's float32 GEMMs are exact even under TF32: their operands
    are bf16-rounded, and bf16's 8-bit significand fits TF32's 11 bits.
    """
    try:
        run_and_compare(example, None, m, "cuda")
    finally:
        torch.cuda.empty_cache()
