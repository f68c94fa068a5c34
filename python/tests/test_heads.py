"""Per-head norms (QK-norm) against PyTorch written as the model code
writes them: q and k viewed as ``[M, heads, head_dim]``, an RMSNorm over
the last axis with a ``[head_dim]`` weight (Qwen3, Gemma-3) or a LayerNorm
with weight and bias (Persimmon), then rotate-half RoPE; outputs and the
gradients of every float input, on CPU tensors (codac's interpreter)."""

from __future__ import annotations

from typing import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

import codac

HEAD = 16
Q_HEADS = 4
KV_HEADS = 2
BASE = 1_000_000.0

SOURCE = f"""
dim M
dim HD = {HEAD}
dim QH = {Q_HEADS}
dim KVH = {KV_HEADS}
block attn_in(q_proj: f32[M, QH * HD], k_proj: f32[M, KVH * HD], g_q: f32[HD], g_k: f32[HD], b_k: f32[HD],
              pos: i32[M]) -> (q: f32[M, QH * HD], k: f32[M, KVH * HD]) {{
    let qn = rmsnorm(q_proj, g_q, 1e-6, head_dim=HD)
    let kn = layernorm(k_proj, g_k, b_k, 1e-5, head_dim=HD)
    q = rope(qn, pos, head_dim=HD, base={BASE})
    k = rope(kn, pos, head_dim=HD, base={BASE})
}}
grad attn_in_grad = attn_in wrt (q_proj, k_proj, g_q, g_k, b_k)
"""


def rotate_half(x: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rotary(x: Tensor, pos: Tensor, width: int, base: float) -> Tensor:
    """Hugging Face's rotary embedding of `x: [M, heads, width]`, with the
    frequencies of a head of `width` features."""
    inv_freq = 1.0 / (base ** (torch.arange(0, width, 2, dtype=torch.float64) / width))
    angles = pos.to(torch.float64)[:, None] * inv_freq[None, :]
    emb = torch.cat((angles, angles), dim=-1)[:, None, :]
    return x * emb.cos() + rotate_half(x) * emb.sin()


def rope(x: Tensor, pos: Tensor) -> Tensor:
    """`x: [M, heads, head_dim]`, Hugging Face's rotary embedding."""
    return rotary(x, pos, HEAD, BASE)


def reference(q_proj: Tensor, k_proj: Tensor, g_q: Tensor, g_k: Tensor, b_k: Tensor,
              pos: Tensor) -> tuple[Tensor, Tensor]:
    m = q_proj.shape[0]
    q = q_proj.view(m, Q_HEADS, HEAD)
    variance = q.pow(2).mean(-1, keepdim=True)
    q = g_q * (q * torch.rsqrt(variance + 1e-6))
    k = F.layer_norm(k_proj.view(m, KV_HEADS, HEAD), (HEAD,), g_k, b_k, 1e-5)
    return rope(q, pos).reshape(m, -1), rope(k, pos).reshape(m, -1)


@pytest.mark.parametrize("m", [1, 7, 33])
def test_per_head_norms_match_the_model_code(m: int) -> None:
    gen = torch.Generator().manual_seed(m)
    shapes = [(m, Q_HEADS * HEAD), (m, KV_HEADS * HEAD), (HEAD,), (HEAD,), (HEAD,)]
    floats = [torch.randn(s, generator=gen, dtype=torch.float64) for s in shapes]
    floats[2] = 1.0 + 0.1 * floats[2]
    floats[3] = 1.0 + 0.1 * floats[3]
    pos = torch.randint(0, 4096, (m,), generator=gen, dtype=torch.int32)

    ours = [x.float().requires_grad_() for x in floats]
    q, k = codac.load(SOURCE).block("attn_in")(*ours, pos)
    theirs = [x.clone().requires_grad_() for x in floats]
    q_ref, k_ref = reference(*theirs, pos)

    for got, expected in [(q, q_ref), (k, k_ref)]:
        torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-5)

    dq = torch.randn(q_ref.shape, generator=gen, dtype=torch.float64)
    dk = torch.randn(k_ref.shape, generator=gen, dtype=torch.float64)
    torch.autograd.backward([q, k], [dq.float(), dk.float()])
    torch.autograd.backward([q_ref, k_ref], [dq, dk])
    for name, got, expected in zip(["q_proj", "k_proj", "g_q", "g_k", "b_k"], ours, theirs):
        assert got.grad is not None, name
        torch.testing.assert_close(got.grad.double(), expected.grad, rtol=1e-4, atol=1e-4, msg=name)


NEOX_HEAD = 32
NEOX_HEADS = 3
NEOX_ROTARY = 8  # rotary_pct = 0.25
NEOX_BASE = 10_000.0

NEOX_SOURCE = f"""
dim M
dim HD = {NEOX_HEAD}
dim H = {NEOX_HEADS}
block neox_rope(q_proj: f32[M, H * HD], pos: i32[M]) -> (q: f32[M, H * HD]) {{
    q = rope(q_proj, pos, head_dim=HD, rotary_dim={NEOX_ROTARY}, base={NEOX_BASE})
}}
grad neox_rope_grad = neox_rope wrt (q_proj)
"""


def neox_reference(q_proj: Tensor, pos: Tensor) -> Tensor:
    """GPT-NeoX's partial rotary: the first `rotary_ndims` features of each
    head turn with the frequencies of a head of that width."""
    m = q_proj.shape[0]
    q = q_proj.view(m, NEOX_HEADS, NEOX_HEAD)
    q_rot, q_pass = q[..., :NEOX_ROTARY], q[..., NEOX_ROTARY:]
    q_rot = rotary(q_rot, pos, NEOX_ROTARY, NEOX_BASE)
    return torch.cat((q_rot, q_pass), dim=-1).reshape(m, -1)


NEOX_QKV_SOURCE = f"""
dim M
dim HD = {NEOX_HEAD}
dim H = {NEOX_HEADS}
block neox_attn_in(qkv: f32[M, H * 3 * HD], pos: i32[M]) -> (q: f32[M, H * HD], k: f32[M, H * HD], v: f32[M, H * HD]) {{
    q = rope(head_slice(qkv, cols=0:HD, head_dim=3 * HD), pos, head_dim=HD, rotary_dim={NEOX_ROTARY}, base={NEOX_BASE})
    k = rope(head_slice(qkv, cols=HD:2 * HD, head_dim=3 * HD), pos, head_dim=HD, rotary_dim={NEOX_ROTARY}, base={NEOX_BASE})
    v = head_slice(qkv, cols=2 * HD:3 * HD, head_dim=3 * HD)
}}
grad neox_attn_in_grad = neox_attn_in wrt (qkv)
"""


def test_per_head_qkv_split_matches_gpt_neox() -> None:
    """GPT-NeoX views its fused projection as `[M, heads, 3 * head]` and
    chunks each head into q, k and v."""
    m = 11
    gen = torch.Generator().manual_seed(7)
    qkv = torch.randn((m, NEOX_HEADS * 3 * NEOX_HEAD), generator=gen, dtype=torch.float64)
    pos = torch.randint(0, 2048, (m,), generator=gen, dtype=torch.int32)
    ours = qkv.float().requires_grad_()
    got = codac.load(NEOX_QKV_SOURCE).block("neox_attn_in")(ours, pos)
    theirs = qkv.clone().requires_grad_()
    q, k, v = theirs.view(m, NEOX_HEADS, 3 * NEOX_HEAD).chunk(3, dim=-1)
    expected = (neox_reference(q.reshape(m, -1), pos), neox_reference(k.reshape(m, -1), pos), v.reshape(m, -1))
    for a, b in zip(got, expected):
        torch.testing.assert_close(a.double(), b, rtol=1e-5, atol=1e-5)
    grads = [torch.randn(b.shape, generator=gen, dtype=torch.float64) for b in expected]
    torch.autograd.backward(list(got), [g.float() for g in grads])
    torch.autograd.backward(list(expected), grads)
    assert ours.grad is not None and theirs.grad is not None
    torch.testing.assert_close(ours.grad.double(), theirs.grad, rtol=1e-5, atol=1e-5)


NEOX_CAT_SOURCE = f"""
dim M
dim HD = {NEOX_HEAD}
dim H = {NEOX_HEADS}
dim R = {NEOX_ROTARY}
block neox_cat(q_proj: f32[M, H * HD], pos: i32[M]) -> (q: f32[M, H * HD]) {{
    let q_rot = rope(head_slice(q_proj, cols=0:R, head_dim=HD), pos, head_dim=R, base={NEOX_BASE})
    q = head_concat(q_rot, head_slice(q_proj, cols=R:HD, head_dim=HD), heads=H)
}}
grad neox_cat_grad = neox_cat wrt (q_proj)
"""


def assert_one_output_matches(block: Callable[..., Tensor], reference: Callable[..., Tensor], x: Tensor,
                              *rest: Tensor, gen: torch.Generator) -> None:
    """`block(x, *rest)` (float32, the interpreter) against `reference` (in
    float64): the output, and the gradient of `x` from a random output
    gradient."""
    ours = x.float().requires_grad_()
    got = block(ours, *rest)
    theirs = x.clone().requires_grad_()
    expected = reference(theirs, *rest)
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-5)
    dy = torch.randn(expected.shape, generator=gen, dtype=torch.float64)
    got.backward(dy.float())
    expected.backward(dy)
    assert ours.grad is not None and theirs.grad is not None
    torch.testing.assert_close(ours.grad.double(), theirs.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("m", [1, 13])
@pytest.mark.parametrize("source, block", [(NEOX_SOURCE, "neox_rope"), (NEOX_CAT_SOURCE, "neox_cat")])
def test_partial_rotary_matches_gpt_neox(source: str, block: str, m: int) -> None:
    """GPT-NeoX's partial rotary, written with `rotary_dim=` and as its code
    writes it: the rotated and the passed features of each head joined by
    `head_concat` (its `torch.cat((query_rot, query_pass), dim=-1)`)."""
    gen = torch.Generator().manual_seed(100 + m)
    q_proj = torch.randn((m, NEOX_HEADS * NEOX_HEAD), generator=gen, dtype=torch.float64)
    pos = torch.randint(0, 2048, (m,), generator=gen, dtype=torch.int32)
    assert_one_output_matches(codac.load(source).block(block), neox_reference, q_proj, pos, gen=gen)


GLM_HEAD = 16
GLM_HEADS = 3
GLM_BASE = 10_000.0

GLM_SOURCE = f"""
dim M
dim HD = {GLM_HEAD}
dim H = {GLM_HEADS}
block glm_rope(q_proj: f32[M, H * HD], pos: i32[M], block_pos: i32[M]) -> (q: f32[M, H * HD]) {{
    let a = rope(head_slice(q_proj, cols=0:HD / 2, head_dim=HD), pos, head_dim=HD / 2, base={GLM_BASE})
    let b = rope(head_slice(q_proj, cols=HD / 2:HD, head_dim=HD), block_pos, head_dim=HD / 2, base={GLM_BASE})
    q = head_concat(a, b, heads=H)
}}
grad glm_rope_grad = glm_rope wrt (q_proj)
"""


def glm_reference(q_proj: Tensor, pos: Tensor, block_pos: Tensor) -> Tensor:
    """ChatGLM-6B's 2-D rotary (modeling_chatglm.py): each head splits in
    halves (`chunk(2, dim=-1)`), the first turns with the token's position,
    the second with its block position, both with the frequencies of a head
    of half the width, and `torch.concat` joins them."""
    m, half = q_proj.shape[0], GLM_HEAD // 2
    q1, q2 = q_proj.view(m, GLM_HEADS, GLM_HEAD).chunk(2, dim=-1)
    turned = (rotary(q1, pos, half, GLM_BASE), rotary(q2, block_pos, half, GLM_BASE))
    return torch.concat(turned, dim=-1).reshape(m, -1)


@pytest.mark.parametrize("m", [1, 9])
def test_two_dimensional_rotary_matches_chatglm(m: int) -> None:
    gen = torch.Generator().manual_seed(200 + m)
    q_proj = torch.randn((m, GLM_HEADS * GLM_HEAD), generator=gen, dtype=torch.float64)
    pos = torch.randint(0, 2048, (m,), generator=gen, dtype=torch.int32)
    block_pos = torch.randint(0, 64, (m,), generator=gen, dtype=torch.int32)
    assert_one_output_matches(codac.load(GLM_SOURCE).block("glm_rope"), glm_reference, q_proj, pos, block_pos, gen=gen)
