"""``embedding(ids, table)`` against ``F.embedding`` on CPU tensors: the
rows the ids name (repeated ids included), and the table's gradient, where
the rows of repeated ids add up."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import codac

SOURCE = """
dim M
dim V = 50
dim D = 12
block embed(ids: i32[M], table: f32[V, D], g: f32[D]) -> (y: f32[M, D]) {
    y = rmsnorm(embedding(ids, table), g, 1e-6)
}
grad embed_grad = embed wrt (table, g)
"""


def test_embedding_and_its_gradient_match_pytorch() -> None:
    gen = torch.Generator().manual_seed(5)
    ids = torch.randint(0, 50, (40,), generator=gen, dtype=torch.int32)
    ids[:4] = 7  # repeated ids: their gradients add in one table row
    table = torch.randn((50, 12), generator=gen, dtype=torch.float64)
    g = 1.0 + 0.1 * torch.randn((12,), generator=gen, dtype=torch.float64)

    ours = [table.float().requires_grad_(), g.float().requires_grad_()]
    y = codac.load(SOURCE).block("embed")(ids, *ours)
    theirs = [table.clone().requires_grad_(), g.clone().requires_grad_()]
    x = F.embedding(ids.long(), theirs[0])
    y_ref = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * theirs[1]
    torch.testing.assert_close(y.double(), y_ref, rtol=1e-5, atol=1e-5)

    dy = torch.randn(y_ref.shape, generator=gen, dtype=torch.float64)
    y.backward(dy.float())
    y_ref.backward(dy)
    for name, a, b in zip(["table", "g"], ours, theirs):
        assert a.grad is not None and b.grad is not None, name
        torch.testing.assert_close(a.grad.double(), b.grad, rtol=1e-5, atol=1e-5, msg=name)
