"""Per-head norms (QK-norm) against PyTorch written as the model code
writes them: q and k viewed as ``[M, heads, head_dim]``, an RMSNorm over
the last axis with a ``[head_dim]`` weight (Qwen3, Gemma-3) or a LayerNorm
with weight and bias (Persimmon), then rotate-half RoPE; outputs and the
gradients of every float input, on CPU tensors (codac's interpreter)."""

from __future__ import annotations

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


def rope(x: Tensor, pos: Tensor) -> Tensor:
    """`x: [M, heads, head_dim]`, Hugging Face's rotary embedding."""
    inv_freq = 1.0 / (BASE ** (torch.arange(0, HEAD, 2, dtype=torch.float64) / HEAD))
    angles = pos.to(torch.float64)[:, None] * inv_freq[None, :]
    emb = torch.cat((angles, angles), dim=-1)[:, None, :]
    return x * emb.cos() + rotate_half(x) * emb.sin()


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
