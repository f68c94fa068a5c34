"""Plain-PyTorch references for the example blocks in ``examples/*.coda``.

Each function computes, with ordinary PyTorch operations, what one example
block computes, from the same inputs in the block's signature order, and
returns its outputs in the block's output order (one tensor, or a tuple).
They are written from the language's documented math (``docs/language.md``
§10–13, ``docs/interpreter.md``), not from codac's implementation, so that
they are an independent check of both the interpreter and the kernels.

Numerics, chosen to put the rounding where codac puts it under
``--bf16-rounding`` (and where a bf16 PyTorch model rounds):

* inputs are upcast to float32 and all arithmetic is float32;
* a ``bf16(...)`` cast in the source is ``.to(torch.bfloat16).float()``;
* a matrix product reads both operands as bf16 (a computed f32 operand such
  as a norm's output is rounded first) and accumulates in float32;
* every output is rounded to its declared storage dtype on store.

The functions are differentiable: a bf16 round trip passes gradients
through (rounding the gradient to bf16, as PyTorch's autograd does for a
bf16 tensor), so ``torch.autograd`` gives reference gradients for codac's
``grad`` declarations. Integer inputs (positions, targets) take no part in
differentiation.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "bf16",
    "linear",
    "rmsnorm",
    "layernorm",
    "swiglu",
    "geglu",
    "rope",
    "cross_entropy",
    "llama3_layer",
    "gpt2_layer",
    "lm_head_ce",
    "gemma_mlp",
    "parallel_block",
    "out_proj_residual_rms",
    "qwen2_layer",
    "gemma2_layer",
    "mistral_layer",
    "phi3_layer",
    "olmo2_layer",
]


# --------------------------------------------------------------------------
# Building blocks
# --------------------------------------------------------------------------


def bf16(x: Tensor) -> Tensor:
    """Round to bfloat16 and come back to float32 (the source's ``bf16(x)``)."""
    return x.to(torch.bfloat16).float()


def _f32(x: Tensor) -> Tensor:
    """A float input read as float32 (bf16 values are exact in float32)."""
    return x.float()


def linear(x: Tensor, w: Tensor) -> Tensor:
    """``x @ w.T`` for an ``nn.Linear``-style weight ``w: [out, in]``.

    The GEMM reads its operands as bf16 and accumulates in float32
    (language.md §9), so a computed float32 operand is rounded first.
    """
    return bf16(x) @ bf16(w).T


def rmsnorm(x: Tensor, g: Tensor, eps: float) -> Tensor:
    """``x · rsqrt(mean(x²) + eps) · g`` over the columns; eps inside the root."""
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * g


def layernorm(x: Tensor, g: Tensor, b: Tensor, eps: float) -> Tensor:
    """LayerNorm over the columns with the biased variance, eps inside the root."""
    mu = x.mean(dim=-1, keepdim=True)
    c = x - mu
    return c * torch.rsqrt(c.pow(2).mean(dim=-1, keepdim=True) + eps) * g + b


def _halves(z: Tensor) -> tuple[Tensor, Tensor]:
    """The ``[gate | up]`` halves of a fused gate/up projection ``[M, 2F]``."""
    f = z.shape[-1] // 2
    return z[:, :f], z[:, f:]


def swiglu(z: Tensor) -> Tensor:
    """``silu(gate) · up`` over the two column halves of ``z``."""
    gate, up = _halves(z)
    return F.silu(gate) * up


def geglu(z: Tensor) -> Tensor:
    """``gelu(gate) · up`` with the exact (erf) GELU."""
    gate, up = _halves(z)
    return F.gelu(gate) * up


def _rope_angles(
    pos: Tensor, head_dim: int, base: float, device: torch.device
) -> tuple[Tensor, Tensor]:
    """cos and sin of ``pos · base^(−2i/head_dim)``, ``[M, head_dim/2]``.

    The angles are formed in float64 (positions reach thousands, where a
    float32 product would already be off by ~1e-4 rad) and rounded once.
    """
    i = torch.arange(head_dim // 2, dtype=torch.float64, device=device)
    inv_freq = base ** (-2.0 * i / head_dim)
    angle = pos.to(torch.float64).reshape(-1, 1) * inv_freq
    return angle.cos().float(), angle.sin().float()


def rope(
    x: Tensor,
    pos: Tensor,
    head_dim: int,
    base: float,
    cols: tuple[int, int],
    style: str,
) -> Tensor:
    """Rotary embedding of the columns ``cols[0]:cols[1]`` of ``x``, head by head.

    ``style="half"`` is the Llama / Hugging Face "rotate half" convention
    (feature ``i`` pairs with ``i + head_dim/2``); ``style="interleaved"``
    is GPT-J's (feature ``2i`` pairs with ``2i + 1``). Columns outside the
    range pass through.
    """
    start, stop = cols
    m = x.shape[0]
    cos, sin = _rope_angles(pos, head_dim, base, x.device)
    cos, sin = cos[:, None, :], sin[:, None, :]  # broadcast over heads
    heads = x[:, start:stop].reshape(m, -1, head_dim)
    if style == "half":
        a, b = heads[..., : head_dim // 2], heads[..., head_dim // 2 :]
        rotated = torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)
    elif style == "interleaved":
        a, b = heads[..., 0::2], heads[..., 1::2]
        rotated = torch.stack([a * cos - b * sin, b * cos + a * sin], dim=-1)
    else:
        raise ValueError(f"unknown rope style {style!r}")
    return torch.cat([x[:, :start], rotated.reshape(m, -1), x[:, stop:]], dim=1)


def cross_entropy(logits: Tensor, targets: Tensor, ignore_index: int = -100) -> Tensor:
    """Mean softmax cross-entropy over the rows whose target is not ignored.

    A target outside ``0..V`` that is not ``ignore_index`` picks a logit of
    0 (language.md §12), so its row loss is the row's logsumexp; the tests
    only draw in-range or ignored targets, where this is
    ``F.cross_entropy``.
    """
    v = logits.shape[-1]
    t = targets.to(torch.int64).reshape(-1)
    keep = t != ignore_index
    in_range = (t >= 0) & (t < v)
    picked = logits.gather(1, t.clamp(0, v - 1)[:, None]).squeeze(1)
    picked = torch.where(in_range, picked, torch.zeros_like(picked))
    per_row = torch.logsumexp(logits, dim=-1) - picked
    per_row = torch.where(keep, per_row, torch.zeros_like(per_row))
    return per_row.sum() / keep.sum()


# --------------------------------------------------------------------------
# The examples
# --------------------------------------------------------------------------


def llama3_layer(
    attn: Tensor,
    x0: Tensor,
    w_o: Tensor,
    g_ffn: Tensor,
    w_gu: Tensor,
    w_down: Tensor,
    g_attn: Tensor,
    w_qkv: Tensor,
    pos: Tensor,
    *,
    head_dim: int = 128,
    q_heads: int = 32,
    kv_heads: int = 8,
) -> tuple[Tensor, Tensor]:
    """``examples/llama3_block.coda``: the non-attention half of a Llama-3 layer.

    Returns ``(x2, qkv)``, both rounded to bf16. The head counts are not in
    the shapes (``Q = (QH + 2·KVH)·HD`` only fixes their combination), so
    they are keyword arguments with the 8B model's defaults.
    """
    attn, x0, w_o, g_ffn, w_gu, w_down, g_attn, w_qkv = map(
        _f32, (attn, x0, w_o, g_ffn, w_gu, w_down, g_attn, w_qkv)
    )
    # The residual stream and the gate/up activations are bf16, as written.
    x1 = bf16(x0 + linear(attn, w_o))
    z = bf16(linear(rmsnorm(x1, g_ffn, 1e-5), w_gu))
    y = swiglu(z)
    x_out = bf16(x1 + linear(y, w_down))
    u = linear(rmsnorm(x_out, g_attn, 1e-5), w_qkv)
    # RoPE on the q and k heads only; the v heads pass through.
    qkv = rope(u, pos, head_dim, 500000.0, (0, (q_heads + kv_heads) * head_dim), "half")
    return bf16(x_out), bf16(qkv)


def gpt2_layer(
    attn: Tensor,
    x0: Tensor,
    w_proj: Tensor,
    b_proj: Tensor,
    ln2_g: Tensor,
    ln2_b: Tensor,
    w_fc: Tensor,
    b_fc: Tensor,
    w_out: Tensor,
    b_out: Tensor,
    ln1_g: Tensor,
    ln1_b: Tensor,
    w_qkv: Tensor,
    b_qkv: Tensor,
) -> tuple[Tensor, Tensor]:
    """``examples/gpt2_block.coda``: the non-attention half of a GPT-2 layer.

    Returns ``(x2, qkv)``, both rounded to bf16. The residual stream and
    the MLP's pre-activation are bf16, as written.
    """
    (attn, x0, w_proj, b_proj, ln2_g, ln2_b, w_fc, b_fc, w_out, b_out,
     ln1_g, ln1_b, w_qkv, b_qkv) = map(
        _f32,
        (attn, x0, w_proj, b_proj, ln2_g, ln2_b, w_fc, b_fc, w_out, b_out,
         ln1_g, ln1_b, w_qkv, b_qkv),
    )
    x1 = bf16(x0 + linear(attn, w_proj) + b_proj)
    a = F.gelu(bf16(linear(layernorm(x1, ln2_g, ln2_b, 1e-5), w_fc) + b_fc), approximate="tanh")
    x_out = bf16(x1 + linear(a, w_out) + b_out)
    qkv = linear(layernorm(x_out, ln1_g, ln1_b, 1e-5), w_qkv) + b_qkv
    return bf16(x_out), bf16(qkv)


def lm_head_ce(
    x: Tensor, g: Tensor, w_lm: Tensor, targets: Tensor
) -> tuple[Tensor, Tensor]:
    """``examples/lm_head_ce.coda``: final RMSNorm, LM head, mean cross-entropy.

    Returns ``(loss, lse)``: the scalar loss (0-dim) and the per-row
    logsumexp of the logits (``[M]``), both float32.
    """
    x, g, w_lm = map(_f32, (x, g, w_lm))
    logits = linear(rmsnorm(x, g, 1e-5), w_lm)
    loss = cross_entropy(logits, targets, ignore_index=-100)
    lse = torch.logsumexp(logits, dim=-1)
    return loss, lse


def gemma_mlp(
    attn: Tensor,
    x0: Tensor,
    w_o: Tensor,
    g: Tensor,
    w_gu: Tensor,
    w_down: Tensor,
) -> Tensor:
    """``examples/gemma_mlp.coda``: out-projection, (1 + g) RMSNorm, GeGLU MLP.

    Returns ``x2`` rounded to bf16. The residual stream ``x1`` and the
    gate/up activations ``z`` are bf16, as written.
    """
    attn, x0, w_o, g, w_gu, w_down = map(_f32, (attn, x0, w_o, g, w_gu, w_down))
    x1 = bf16(x0 + linear(attn, w_o))
    z = bf16(linear(rmsnorm(x1, 1.0 + g, 1e-6), w_gu))  # Gemma stores the gain as 1 + g
    x2 = x1 + linear(geglu(z), w_down)
    return bf16(x2)


def parallel_block(
    attn: Tensor,
    act: Tensor,
    x0: Tensor,
    w_o: Tensor,
    w_down: Tensor,
    g: Tensor,
    w_gu: Tensor,
    w_qkv: Tensor,
    pos: Tensor,
    *,
    head_dim: int = 64,
) -> tuple[Tensor, Tensor, Tensor]:
    """``examples/parallel_block.coda``: a GPT-J / PaLM-style parallel block.

    Returns ``(x1, y, qkv)`` rounded to bf16. One RMSNorm feeds both the
    next MLP's gate/up projection and the QKV projection, whose q and k
    parts (the first ``2·D`` columns) get interleaved RoPE.
    """
    attn, act, x0, w_o, w_down, g, w_gu, w_qkv = map(
        _f32, (attn, act, x0, w_o, w_down, g, w_gu, w_qkv)
    )
    d = x0.shape[1]
    x = bf16(x0 + linear(attn, w_o) + linear(act, w_down))
    h = rmsnorm(x, g, 1e-5)
    y = swiglu(bf16(linear(h, w_gu)))
    qkv = rope(linear(h, w_qkv), pos, head_dim, 10000.0, (0, 2 * d), "interleaved")
    return bf16(x), bf16(y), bf16(qkv)


def out_proj_residual_rms(
    attn: Tensor, w_o: Tensor, x0: Tensor, g: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """``examples/out_proj_kernel.coda``: the explicit out-projection kernel.

    ``x = attn @ w_o.T + x0``; returns ``(x1, h, sumsq)`` with ``x1 = x``
    and ``h = x · g`` rounded to bf16, and the float32 per-row ``Σ x²``
    (``[M]``) that the next RMSNorm needs.
    """
    attn, w_o, x0, g = map(_f32, (attn, w_o, x0, g))
    x = linear(attn, w_o) + x0
    h = x * g
    sumsq = x.pow(2).sum(dim=-1)
    return bf16(x), bf16(h), sumsq



# --------------------------------------------------------------------------
# Layers of published checkpoints, from their Hugging Face modeling code
# --------------------------------------------------------------------------
#
# Each is the non-attention part of one decoder layer as transformers'
# ``modeling_<name>.py`` writes it, from the attention output of layer l
# (before ``o_proj``) to the projections of layer l+1, with the checkpoint's
# weight layouts. Widths come from the shapes; head widths and RoPE bases
# are keyword arguments with the checkpoints' values.


def _rope_all(x: Tensor, pos: Tensor, head_dim: int, base: float) -> Tensor:
    """``apply_rotary_pos_emb`` on every head of ``x`` (rotate-half)."""
    return rope(x, pos, head_dim, base, (0, x.shape[1]), "half")


def _gemma_rmsnorm(x: Tensor, w: Tensor, eps: float) -> Tensor:
    """``Gemma2RMSNorm``: the normalised input times ``1 + weight``."""
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * (1.0 + w)


def _gated_mlp(
    x: Tensor, w_gate: Tensor, w_up: Tensor, w_down: Tensor, act: Callable[[Tensor], Tensor] = F.silu
) -> Tensor:
    """Hugging Face's MLP on separate weights,
    ``down_proj(act_fn(gate_proj(x)) * up_proj(x))``, with the gate and up
    projections bf16 tensors as in the model."""
    gate = bf16(linear(x, w_gate))
    up = bf16(linear(x, w_up))
    return linear(act(gate) * up, w_down)


def qwen2_layer(
    attn: Tensor,
    x0: Tensor,
    w_o: Tensor,
    g_post: Tensor,
    w_gate: Tensor,
    w_up: Tensor,
    w_down: Tensor,
    g_in: Tensor,
    w_q: Tensor,
    b_q: Tensor,
    w_k: Tensor,
    b_k: Tensor,
    w_v: Tensor,
    b_v: Tensor,
    pos: Tensor,
    *,
    head_dim: int = 128,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``examples/qwen2_layer.coda``: Qwen2.5 1.5B (``modeling_qwen2.py``).

    ``Qwen2DecoderLayer`` from the residual add after ``o_proj`` to the next
    layer's ``q_proj``/``k_proj``/``v_proj`` (with biases, added before
    RoPE, base 1e6). Returns ``(x2, q, k, v)`` rounded to bf16.
    """
    (attn, x0, w_o, g_post, w_gate, w_up, w_down, g_in,
     w_q, b_q, w_k, b_k, w_v, b_v) = map(
        _f32,
        (attn, x0, w_o, g_post, w_gate, w_up, w_down, g_in,
         w_q, b_q, w_k, b_k, w_v, b_v),
    )
    hidden = bf16(x0 + linear(attn, w_o))
    normed = rmsnorm(hidden, g_post, 1e-6)
    # Qwen2MLP, act_fn = silu
    hidden = bf16(hidden + _gated_mlp(normed, w_gate, w_up, w_down))
    # the next layer's input_layernorm and Qwen2Attention's projections
    normed = rmsnorm(hidden, g_in, 1e-6)
    q = _rope_all(linear(normed, w_q) + b_q, pos, head_dim, 1000000.0)
    k = _rope_all(linear(normed, w_k) + b_k, pos, head_dim, 1000000.0)
    v = linear(normed, w_v) + b_v
    return bf16(hidden), bf16(q), bf16(k), bf16(v)


def gemma2_layer(
    attn: Tensor,
    x0: Tensor,
    w_o: Tensor,
    g_post_attn: Tensor,
    g_pre_ffn: Tensor,
    w_gate: Tensor,
    w_up: Tensor,
    w_down: Tensor,
    g_post_ffn: Tensor,
    g_in: Tensor,
    w_q: Tensor,
    w_k: Tensor,
    w_v: Tensor,
    pos: Tensor,
    *,
    head_dim: int = 256,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``examples/gemma2_layer.coda``: Gemma-2 2B (``modeling_gemma2.py``).

    ``Gemma2DecoderLayer``'s sandwich norms: ``post_attention_layernorm`` on
    the ``o_proj`` output before the residual add, ``pre_feedforward_layernorm``
    and ``post_feedforward_layernorm`` around the MLP, every gain ``1 + w``;
    the MLP is ``gelu_pytorch_tanh(gate_proj(x)) * up_proj(x)``. Returns
    ``(x2, q, k, v)`` rounded to bf16.
    """
    (attn, x0, w_o, g_post_attn, g_pre_ffn, w_gate, w_up, w_down,
     g_post_ffn, g_in, w_q, w_k, w_v) = map(
        _f32,
        (attn, x0, w_o, g_post_attn, g_pre_ffn, w_gate, w_up, w_down,
         g_post_ffn, g_in, w_q, w_k, w_v),
    )
    eps = 1e-6
    hidden = bf16(x0 + _gemma_rmsnorm(bf16(linear(attn, w_o)), g_post_attn, eps))
    normed = _gemma_rmsnorm(hidden, g_pre_ffn, eps)
    mlp = bf16(_gated_mlp(normed, w_gate, w_up, w_down, act=lambda g: F.gelu(g, approximate="tanh")))
    hidden = bf16(hidden + _gemma_rmsnorm(mlp, g_post_ffn, eps))
    normed = _gemma_rmsnorm(hidden, g_in, eps)
    q = _rope_all(linear(normed, w_q), pos, head_dim, 10000.0)
    k = _rope_all(linear(normed, w_k), pos, head_dim, 10000.0)
    v = linear(normed, w_v)
    return bf16(hidden), bf16(q), bf16(k), bf16(v)


def mistral_layer(
    attn: Tensor,
    x0: Tensor,
    w_o: Tensor,
    g_post: Tensor,
    w_gate: Tensor,
    w_up: Tensor,
    w_down: Tensor,
    g_in: Tensor,
    w_q: Tensor,
    w_k: Tensor,
    w_v: Tensor,
    pos: Tensor,
    *,
    head_dim: int = 128,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``examples/mistral_layer.coda``: Mistral 7B v0.1 (``modeling_mistral.py``).

    The Llama layer with the checkpoint's separate ``gate_proj``/``up_proj``
    and ``q_proj``/``k_proj``/``v_proj`` weights, RMSNorm eps 1e-5, RoPE
    base 10000. Returns ``(x2, q, k, v)`` rounded to bf16.
    """
    attn, x0, w_o, g_post, w_gate, w_up, w_down, g_in, w_q, w_k, w_v = map(
        _f32, (attn, x0, w_o, g_post, w_gate, w_up, w_down, g_in, w_q, w_k, w_v)
    )
    hidden = bf16(x0 + linear(attn, w_o))
    normed = rmsnorm(hidden, g_post, 1e-5)
    hidden = bf16(hidden + _gated_mlp(normed, w_gate, w_up, w_down))
    normed = rmsnorm(hidden, g_in, 1e-5)
    q = _rope_all(linear(normed, w_q), pos, head_dim, 10000.0)
    k = _rope_all(linear(normed, w_k), pos, head_dim, 10000.0)
    v = linear(normed, w_v)
    return bf16(hidden), bf16(q), bf16(k), bf16(v)


def phi3_layer(
    attn: Tensor,
    x0: Tensor,
    w_o: Tensor,
    g_post: Tensor,
    w_gate_up: Tensor,
    w_down: Tensor,
    g_in: Tensor,
    w_qkv: Tensor,
    pos: Tensor,
    *,
    head_dim: int = 96,
) -> tuple[Tensor, Tensor]:
    """``examples/phi3_layer.coda``: Phi-3-mini 4k (``modeling_phi3.py``).

    ``Phi3MLP`` splits the fused ``gate_up_proj`` output with
    ``chunk(2, dim=-1)`` (gate first) and computes ``up * silu(gate)``;
    ``Phi3Attention`` slices the fused ``qkv_proj`` output into q, k and v
    (as many k and v heads as q heads) and applies RoPE (base 10000) to q
    and k. Returns ``(x2, qkv)`` rounded to bf16.
    """
    attn, x0, w_o, g_post, w_gate_up, w_down, g_in, w_qkv = map(
        _f32, (attn, x0, w_o, g_post, w_gate_up, w_down, g_in, w_qkv)
    )
    hidden = bf16(x0 + linear(attn, w_o))
    up_states = bf16(linear(rmsnorm(hidden, g_post, 1e-5), w_gate_up))
    gate, up_states = up_states.chunk(2, dim=-1)
    hidden = bf16(hidden + linear(up_states * F.silu(gate), w_down))
    qkv = linear(rmsnorm(hidden, g_in, 1e-5), w_qkv)
    query_pos = qkv.shape[1] // 3  # num_attention_heads * head_dim
    q = _rope_all(qkv[:, :query_pos], pos, head_dim, 10000.0)
    k = _rope_all(qkv[:, query_pos : 2 * query_pos], pos, head_dim, 10000.0)
    qkv = torch.cat([q, k, qkv[:, 2 * query_pos :]], dim=1)
    return bf16(hidden), bf16(qkv)


def olmo2_layer(
    attn: Tensor,
    x0: Tensor,
    w_o: Tensor,
    g_post_attn: Tensor,
    w_gate: Tensor,
    w_up: Tensor,
    w_down: Tensor,
    g_post_ffn: Tensor,
    w_q: Tensor,
    g_q: Tensor,
    w_k: Tensor,
    g_k: Tensor,
    w_v: Tensor,
    pos: Tensor,
    *,
    head_dim: int = 128,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``examples/olmo2_layer.coda``: OLMo-2 1B (``modeling_olmo2.py``).

    ``Olmo2DecoderLayer`` normalises each sublayer's output before the
    residual add and nothing before (the MLP and the next layer's
    projections read the residual stream); ``Olmo2Attention`` applies
    ``q_norm`` and ``k_norm`` to the whole q and k projections before the
    head reshape, then RoPE (base 500000). Returns ``(x2, q, k, v)`` rounded
    to bf16.
    """
    (attn, x0, w_o, g_post_attn, w_gate, w_up, w_down, g_post_ffn,
     w_q, g_q, w_k, g_k, w_v) = map(
        _f32,
        (attn, x0, w_o, g_post_attn, w_gate, w_up, w_down, g_post_ffn,
         w_q, g_q, w_k, g_k, w_v),
    )
    eps = 1e-6
    hidden = bf16(x0 + rmsnorm(bf16(linear(attn, w_o)), g_post_attn, eps))
    mlp = bf16(_gated_mlp(hidden, w_gate, w_up, w_down))
    hidden = bf16(hidden + rmsnorm(mlp, g_post_ffn, eps))
    q = _rope_all(rmsnorm(bf16(linear(hidden, w_q)), g_q, eps), pos, head_dim, 500000.0)
    k = _rope_all(rmsnorm(bf16(linear(hidden, w_k)), g_k, eps), pos, head_dim, 500000.0)
    v = linear(hidden, w_v)
    return bf16(hidden), bf16(q), bf16(k), bf16(v)


def _per_head_rmsnorm(x: Tensor, w: Tensor, head_dim: int, eps: float) -> Tensor:
    """``Qwen3RMSNorm(head_dim)`` applied to ``x.view(M, heads, head_dim)``."""
    m = x.shape[0]
    heads = x.reshape(m, -1, head_dim)
    normed = heads * torch.rsqrt(heads.pow(2).mean(dim=-1, keepdim=True) + eps) * w
    return normed.reshape(m, -1)


def qwen3_layer(
    attn: Tensor,
    x0: Tensor,
    w_o: Tensor,
    g_post: Tensor,
    w_gate: Tensor,
    w_up: Tensor,
    w_down: Tensor,
    g_in: Tensor,
    w_q: Tensor,
    w_k: Tensor,
    w_v: Tensor,
    g_q: Tensor,
    g_k: Tensor,
    pos: Tensor,
    *,
    head_dim: int = 128,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``examples/qwen3_layer.coda``: Qwen3 8B (``modeling_qwen3.py``).

    ``Qwen3DecoderLayer`` from the residual add after ``o_proj`` to the next
    layer's ``q_proj``/``k_proj``/``v_proj``; ``Qwen3Attention`` applies
    ``q_norm`` and ``k_norm`` (RMSNorms over ``head_dim`` with a
    ``[head_dim]`` weight) to each head before RoPE (base 1e6). Returns
    ``(x2, q, k, v)`` rounded to bf16.
    """
    (attn, x0, w_o, g_post, w_gate, w_up, w_down, g_in, w_q, w_k, w_v, g_q, g_k) = map(
        _f32, (attn, x0, w_o, g_post, w_gate, w_up, w_down, g_in, w_q, w_k, w_v, g_q, g_k)
    )
    eps = 1e-6
    hidden = bf16(x0 + linear(attn, w_o))
    normed = rmsnorm(hidden, g_post, eps)
    hidden = bf16(hidden + _gated_mlp(normed, w_gate, w_up, w_down))
    normed = rmsnorm(hidden, g_in, eps)
    q = _rope_all(_per_head_rmsnorm(bf16(linear(normed, w_q)), g_q, head_dim, eps), pos, head_dim, 1000000.0)
    k = _rope_all(_per_head_rmsnorm(bf16(linear(normed, w_k)), g_k, head_dim, eps), pos, head_dim, 1000000.0)
    v = linear(normed, w_v)
    return bf16(hidden), bf16(q), bf16(k), bf16(v)


def _neox_rope(x: Tensor, pos: Tensor, head_dim: int, rotary: int, base: float) -> Tensor:
    """GPT-NeoX's partial rotary: the first ``rotary`` features of each head
    turn (rotate-half over them, with the frequencies of a head of that
    width); the rest pass through."""
    m = x.shape[0]
    heads = x.reshape(m, -1, head_dim)
    turned = rope(heads[..., :rotary].reshape(m, -1), pos, rotary, base, (0, heads.shape[1] * rotary), "half")
    return torch.cat([turned.reshape(m, -1, rotary), heads[..., rotary:]], dim=-1).reshape(m, -1)


def gptneox_layer(
    attn: Tensor,
    x0: Tensor,
    w_o: Tensor,
    b_o: Tensor,
    g_mlp: Tensor,
    b_mlp: Tensor,
    w_in: Tensor,
    b_in: Tensor,
    w_out: Tensor,
    b_out: Tensor,
    g_attn: Tensor,
    b_attn: Tensor,
    w_qkv: Tensor,
    b_qkv: Tensor,
    pos: Tensor,
    *,
    head_dim: int = 128,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``examples/gptneox_layer.coda``: Pythia 1.4B (``modeling_gpt_neox.py``).

    ``GPTNeoXLayer`` with ``use_parallel_residual``: the attention output
    projection and the MLP both read the residual entering the layer; then
    the next layer's ``input_layernorm`` and ``query_key_value``, viewed as
    ``[M, heads, 3 * head_dim]`` and chunked into q, k and v, with rotary
    on the first quarter of each head of q and k. Returns ``(x2, q, k, v)``
    rounded to bf16.
    """
    (attn, x0, w_o, b_o, g_mlp, b_mlp, w_in, b_in, w_out, b_out, g_attn, b_attn, w_qkv, b_qkv) = map(
        _f32, (attn, x0, w_o, b_o, g_mlp, b_mlp, w_in, b_in, w_out, b_out, g_attn, b_attn, w_qkv, b_qkv)
    )
    eps = 1e-5
    mlp = linear(bf16(F.gelu(linear(layernorm(x0, g_mlp, b_mlp, eps), w_in) + b_in)), w_out) + b_out
    hidden = bf16(x0 + (linear(attn, w_o) + b_o) + mlp)
    qkv = linear(layernorm(hidden, g_attn, b_attn, eps), w_qkv) + b_qkv
    m = qkv.shape[0]
    q, k, v = qkv.reshape(m, -1, 3 * head_dim).chunk(3, dim=-1)
    rotary = head_dim // 4
    q = _neox_rope(q.reshape(m, -1), pos, head_dim, rotary, 10000.0)
    k = _neox_rope(k.reshape(m, -1), pos, head_dim, rotary, 10000.0)
    return bf16(hidden), bf16(q), bf16(k), bf16(v.reshape(m, -1))
