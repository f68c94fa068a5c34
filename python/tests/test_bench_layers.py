"""The PyTorch side of bench/compare_layers.py computes what codac computes:
each layer, at tiny widths on the CPU, against its example run by codac's
interpreter, outputs and gradients. A baseline that computed something else
(another RoPE style, a missing bias, a norm in the wrong place) would time
other work than codac's."""

from __future__ import annotations

import pathlib
import sys

import pytest
import torch

import codac

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import compare_layers  # noqa: E402

M = 24
# bf16 storage on the PyTorch side (every F.linear rounds its output)
# against float64 arithmetic rounded where the program stores.
TOLERANCE = 3e-2


def relative_distance(got: torch.Tensor, expected: torch.Tensor) -> float:
    got, expected = got.detach().double().flatten(), expected.detach().double().flatten()
    return float((got - expected).norm() / expected.norm().clamp(min=1e-30))


def as_tuple(x: torch.Tensor | tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    return x if isinstance(x, tuple) else (x,)


@pytest.mark.parametrize("name", list(compare_layers.BUILDERS))
def test_bench_layer_computes_its_example(name: str) -> None:
    p = compare_layers.TINY[name]
    layer = compare_layers.BUILDERS[name](p)
    sets, _ = compare_layers.make_sets(layer, p, M, seed=1, dev="cpu", rotation_bytes=0)
    s = sets[0]

    torch_in = {n: s[n].detach().clone().requires_grad_() for n in layer.inputs}
    torch_out = as_tuple(layer.forward(*(torch_in[n] for n in layer.inputs), *(s[n] for n in layer.extras)))

    dims = {k: v for k, v in p.items() if k.isupper()}
    block = codac.load(str(ROOT / layer.example), dims=dims).block(layer.block)
    codac_in = {n: s[n].detach().clone().requires_grad_() for n in layer.inputs}
    if "cos" in layer.extras:
        codac_in["pos"] = s["pos"].to(torch.int32)
    if "targets" in layer.extras:
        codac_in["targets"] = s["targets"].to(torch.int32)
    codac_out = as_tuple(block(**codac_in))[: len(torch_out)]

    for j, (t, c) in enumerate(zip(torch_out, codac_out)):
        assert relative_distance(t.reshape(c.shape), c) < TOLERANCE, f"{name}: output {j}"

    if layer.grads:
        grads = [s[g] for g in layer.grads]
        torch.autograd.backward(torch_out, [g.view(t.shape) for g, t in zip(grads, torch_out)])
        torch.autograd.backward(codac_out, [g.view(c.shape) for g, c in zip(grads, codac_out)])
    else:
        torch_out[0].backward()
        codac_out[0].backward()
    for n in layer.inputs:
        t, c = torch_in[n].grad, codac_in[n].grad
        assert t is not None and c is not None, f"{name}: no gradient of {n}"
        assert relative_distance(t, c) < TOLERANCE, f"{name}: gradient of {n}"
