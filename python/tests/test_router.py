"""``topk`` and ``topk_indices`` against ``torch.topk`` on CPU tensors, in
a Mixtral router: softmax over the experts' logits, the top 2 experts and
their weights renormalized; outputs, and the gradients of the logits'
inputs through the chosen weights."""

from __future__ import annotations

import torch

import codac

SOURCE = """
dim M
dim E = 8
block router(logits: f32[M, E], scale: f32[E]) -> (weights: f32[M, 2], experts: i32[M, 2]) {
    let probs = softmax(logits * scale)
    let top = topk(probs, 2)
    weights = top / sum(top, axis=-1)
    experts = topk_indices(probs, 2)
}
grad router_grad = router wrt (logits, scale)
"""


def test_router_matches_torch_topk() -> None:
    gen = torch.Generator().manual_seed(11)
    logits = torch.randn((37, 8), generator=gen, dtype=torch.float64)
    scale = 1.0 + 0.1 * torch.randn((8,), generator=gen, dtype=torch.float64)
    ours = [logits.float().requires_grad_(), scale.float().requires_grad_()]
    weights, experts = codac.load(SOURCE).block("router")(*ours)
    assert experts.dtype == torch.int32

    theirs = [logits.clone().requires_grad_(), scale.clone().requires_grad_()]
    probs = torch.softmax(theirs[0] * theirs[1], dim=-1)
    top, chosen = torch.topk(probs, 2, dim=-1)
    expected = top / top.sum(dim=-1, keepdim=True)
    assert torch.equal(experts.long(), chosen)
    torch.testing.assert_close(weights.double(), expected, rtol=1e-5, atol=1e-6)

    dw = torch.randn(expected.shape, generator=gen, dtype=torch.float64)
    weights.backward(dw.float())
    expected.backward(dw)
    for name, a, b in zip(["logits", "scale"], ours, theirs):
        assert a.grad is not None and b.grad is not None, name
        torch.testing.assert_close(a.grad.double(), b.grad, rtol=1e-4, atol=1e-5, msg=name)
