"""fp8 casts in the interpreter against PyTorch's own conversions, bit for
bit: rounding to nearest even, subnormals, e4m3's saturation at ±448 (no
infinity), e5m2's overflow to infinity, signed zeros and NaN; an fp8
linear layer's forward, and its backward from a `grad` declaration."""

from __future__ import annotations

import pytest
import torch

import codac

SOURCE = """
dim M
dim N = 256
block quantize(x: f32[M, N]) -> (a: f32[M, N], b: f32[M, N]) {
    a = f32(e4m3(x))
    b = f32(e5m2(x))
}
"""


def sweep() -> torch.Tensor:
    """Floats of both signs across every binade that reaches fp8 (2^-28 up to
    2^32), 256 mantissas in each (the top bits swept, the low bits varied),
    the halfway points and edges of the fp8 formats, and the specials."""
    exponents = torch.arange(127 - 28, 127 + 33, dtype=torch.int64)
    mantissas = torch.arange(256, dtype=torch.int64) * (1 << 15) + torch.arange(256, dtype=torch.int64) * 97
    bits = (exponents[:, None] << 23) | mantissas[None, :]
    magnitudes = bits.to(torch.int32).view(torch.float32).flatten()
    edges = torch.tensor(
        [0.0, 448.0, 464.0, 479.99, 480.0, 57344.0, 61439.0, 61440.0, 65536.0, 2.0**-9, 2.0**-10, 2.0**-16, 2.0**-17,
         1.0625, 1.1875, float("inf"), float("nan")],
        dtype=torch.float32,
    )
    values = torch.cat([magnitudes, -magnitudes, edges, -edges])
    padding = (-values.numel()) % 256
    return torch.cat([values, torch.zeros(padding)]).reshape(-1, 256)


def same_floats(got: torch.Tensor, expected: torch.Tensor) -> None:
    assert torch.equal(got.isnan(), expected.isnan())
    keep = ~expected.isnan()
    assert torch.equal(got[keep].view(torch.int32), expected[keep].view(torch.int32))


def test_fp8_casts_round_as_pytorch_converts() -> None:
    x = sweep()
    a, b = codac.load(SOURCE).block("quantize")(x)
    same_floats(a, x.to(torch.float8_e4m3fn).to(torch.float32))
    same_floats(b, x.to(torch.float8_e5m2).to(torch.float32))


LINEAR = """
dim M
dim D = 64
dim N = 32
block fp8_linear(x: bf16[M, D], w: e4m3[N, D], w_scale: f32) -> (y: bf16[M, N], xq: e4m3[M, D]) {
    let x_scale = 448.0 / max(abs(x))
    let q = e4m3(x * x_scale)
    xq = q
    y = (q @ w.T) / (x_scale * w_scale)
}
"""


def test_tensorwise_fp8_linear_matches_its_recipe() -> None:
    """Current tensorwise scaling as torchao's float8 linear computes it: the
    activation scaled so its amax lands on e4m3's largest value, cast, the
    product of the two fp8 operands accumulated in fp32, and the result
    divided by both scales; fp8 tensors in and out of the block."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn((9, 64), generator=gen).to(torch.bfloat16)
    w_hp = torch.randn((32, 64), generator=gen) * 0.05
    w_scale = 448.0 / w_hp.abs().max()
    w = (w_hp * w_scale).to(torch.float8_e4m3fn)
    y, xq = codac.load(LINEAR).block("fp8_linear")(x, w, w_scale)
    assert xq.dtype == torch.float8_e4m3fn and y.dtype == torch.bfloat16

    x_scale = 448.0 / x.float().abs().max()
    expected_q = (x.float() * x_scale).to(torch.float8_e4m3fn)
    same_floats(xq.float(), expected_q.float())
    expected = ((expected_q.double() @ w.double().T) / (x_scale.double() * w_scale.double())).to(torch.bfloat16)
    torch.testing.assert_close(y.float(), expected.float(), rtol=1e-2, atol=1e-3)


TRAINING = """
dim M
dim D = 64
dim N = 48
block tensorwise(x: bf16[M, D], w: bf16[N, D]) -> (y: bf16[M, N]) {
    let sx = 448.0 / max(abs(detach(x)))
    let sw = 448.0 / max(abs(detach(w)))
    y = (e4m3(x * sx) @ e4m3(w * sw).T) / (sx * sw)
}
block rowwise(x: bf16[M, D], w: bf16[N, D]) -> (y: bf16[M, N]) {
    let sx = 448.0 / max(abs(detach(x)), axis=-1)
    let sw = 448.0 / max(abs(detach(w)), axis=-1)
    y = (e4m3(x * sx) @ e4m3(w * sw).T) / (sx * sw.T)
}
block tensorwise_sugar(x: bf16[M, D], w: bf16[N, D]) -> (y: bf16[M, N]) {
    y = fp8_linear(x, w)
}
block rowwise_sugar(x: bf16[M, D], w: bf16[N, D]) -> (y: bf16[M, N]) {
    y = fp8_linear(x, w, recipe=rowwise)
}
grad tensorwise_grad = tensorwise wrt (x, w)
grad rowwise_grad = rowwise wrt (x, w)
grad tensorwise_sugar_grad = tensorwise_sugar wrt (x, w)
grad rowwise_sugar_grad = rowwise_sugar wrt (x, w)
"""


def quantized(t: torch.Tensor, dim: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """`t` scaled so that the amax of each slice along `dim` (of all of `t`
    for None) lands on e4m3's largest value, cast to e4m3, and the scale."""
    amax = t.abs().amax() if dim is None else t.abs().amax(dim=dim, keepdim=True)
    scale = 448.0 / amax.clamp(min=1e-12)
    return (t * scale).to(torch.float8_e4m3fn).double(), scale


def relative_distance(got: torch.Tensor, expected: torch.Tensor) -> float:
    return float((got.double() - expected.double()).norm() / expected.double().norm())


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
@pytest.mark.parametrize("sugar", [False, True], ids=["written", "fp8_linear"])
def test_fp8_products_quantize_their_gradients(recipe: str, sugar: bool) -> None:
    """The backward of a block written with fp8 casts, from its `grad`
    declaration: the forward's scales are detached (constants, as in
    torchao), and each backward product reads the output gradient in e4m3
    too, scaled per row for the input's gradient and per column for the
    weight's (torchao's rowwise recipe for the gradient). Computed here with
    PyTorch's own float8 casts; an unscaled gradient would round to zero.
    `fp8_linear(x, w, recipe=…)` is the same block as sugar."""
    gen = torch.Generator().manual_seed(5)
    x = torch.randn((40, 64), generator=gen).to(torch.bfloat16)
    w = (torch.randn((48, 64), generator=gen) * 0.05).to(torch.bfloat16)
    dy = (torch.randn((40, 48), generator=gen) * 1e-3).to(torch.bfloat16)
    layer = codac.load(TRAINING).block(recipe + "_sugar" if sugar else recipe)
    xl, wl = x.clone().requires_grad_(), w.clone().requires_grad_()
    layer(xl, wl).backward(dy)
    assert xl.grad is not None and wl.grad is not None

    dim = None if recipe == "tensorwise" else 1
    qx, sx = quantized(x.double(), dim)
    qw, sw = quantized(w.double(), dim)
    g = dy.double() / (sx * (sw if recipe == "tensorwise" else sw.T))
    qr, r = quantized(g, 1)
    qc, c = quantized(g, 0)
    dx = (qr @ qw) / r * sx
    dw = (qc.T @ qx) / c.T * sw
    # Up to the bf16 rounding of the gradients (about 2e-3 here).
    assert relative_distance(xl.grad, dx) < 5e-3
    assert relative_distance(wl.grad, dw) < 5e-3
    # fp8's rounding of both operands keeps them near the exact ones (3.5%).
    assert relative_distance(xl.grad, dy.double() @ w.double()) < 0.1
    assert relative_distance(wl.grad, dy.double().T @ x.double()) < 0.1
