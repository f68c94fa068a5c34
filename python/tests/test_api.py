"""The package's API on the CPU: loading, diagnostics, argument checks,
fake shapes against the interpreter, the custom ops, and ``nn.Block``."""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import pytest
import torch

import codac

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TINY = {"D": 64, "F": 96, "HD": 16, "QH": 2, "KVH": 1}
SOURCE = """
dim M
dim D = 8
block scale(x: f32[M, D], g: f32[D]) -> (y: f32[M, D], s: f32[M]) {
    y = x * g
    s = sum(x * x, axis=-1)
}
"""


@pytest.fixture(scope="module")
def layer() -> codac.BlockFunction:
    return codac.load(EXAMPLES / "llama3_block.coda", dims=TINY).block("llama3_layer")


def llama_inputs(m: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    d, f, q = TINY["D"], TINY["F"], (TINY["QH"] + 2 * TINY["KVH"]) * TINY["HD"]

    def normal(*shape: int, std: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * std).to(torch.bfloat16)

    return {
        "attn": normal(m, d), "x0": normal(m, d), "w_o": normal(d, d, std=d**-0.5),
        "g_ffn": (1 + 0.1 * torch.randn(d, generator=g)).to(torch.bfloat16),
        "w_gu": normal(2 * f, d, std=d**-0.5), "w_down": normal(d, f, std=f**-0.5),
        "g_attn": (1 + 0.1 * torch.randn(d, generator=g)).to(torch.bfloat16),
        "w_qkv": normal(q, d, std=d**-0.5),
        "pos": torch.randint(0, 1000, (m,), generator=g, dtype=torch.int32),
    }


def test_load_from_source_text_and_call() -> None:
    prog = codac.load(SOURCE)
    assert prog.blocks == ["scale"]
    x, g = torch.randn(5, 8), torch.randn(8)
    y, s = prog.block("scale")(x, g)
    torch.testing.assert_close(y, x * g)
    torch.testing.assert_close(s, (x * x).sum(-1))
    assert s.shape == (5,)


def test_a_program_with_errors_raises_codac_error_with_the_located_diagnostic() -> None:
    with pytest.raises(codac.CodacError) as info:
        codac.load("dim M\nblock b(x: f32[M, 4]) -> (y: f32[M, 4]) {\n    y = x + undefined_name\n}\n")
    message = str(info.value)
    assert isinstance(info.value, ValueError)
    assert "undefined_name" in message and "<string>:3:" in message


def test_an_evaluation_error_at_the_callers_dims_points_at_the_coda_line() -> None:
    prog = codac.load("dim M\ndim N\nblock b(x: f32[M, N]) -> (y: f32[M, 6]) {\n    y = x[:, 6:12]\n}\n")
    with pytest.raises(codac.CodacError) as info:
        prog.block("b")(torch.randn(2, 8))
    message = str(info.value)
    assert "E0703" in message and "<string>:4:" in message, message
    assert "x[:, 6:12]" in message and "%" not in message, message


def test_dims_override_the_file_and_unknown_dims_are_errors() -> None:
    prog = codac.load(EXAMPLES / "llama3_block.coda", dims={"D": 128})
    assert "bf16[M, 128]" in repr(prog.block("llama3_layer"))
    with pytest.raises(codac.CodacError, match="no dimension `Z` to fix"):
        codac.load(EXAMPLES / "llama3_block.coda", dims={"Z": 4})
    with pytest.raises(codac.CodacError, match="must be positive"):
        codac.load(EXAMPLES / "llama3_block.coda", dims={"D": 0})
    with pytest.raises(TypeError, match="dims"):
        codac.load(EXAMPLES / "llama3_block.coda", dims={"D": 2.5})  # type: ignore[dict-item]
    with pytest.raises(FileNotFoundError):
        codac.load("no/such/file.coda")


def test_explain_prints_the_fused_kernels() -> None:
    prog = codac.load(EXAMPLES / "llama3_block.coda", dims=TINY)
    out = io.StringIO()
    prog.explain(file=out)
    assert "// block `llama3_layer`" in out.getvalue()
    assert "kernels: 4 gemm, 0 elementwise, 0 reduction" in out.getvalue()
    assert "saved by the forward" in prog.explain_text(grad=True)


@pytest.mark.parametrize(
    "change, error, pattern",
    [
        (lambda i: i.update(attn=i["attn"].float()), TypeError, r"'attn' expected bf16\[M, 64\], got f32\[5, 64\]"),
        (lambda i: i.update(x0=i["x0"][:4]), ValueError, r"'x0' expected bf16\[M, 64\] = \[5, 64\] \(M = 5 from 'attn'\)"),
        (lambda i: i.update(w_o=i["w_o"][:, :32]), ValueError, r"'w_o' expected bf16\[64, 64\]"),
        (lambda i: i.update(g_ffn=i["g_ffn"][None]), ValueError, r"'g_ffn' expected bf16\[64\] \(1 dimension"),
        (lambda i: i.update(pos=i["pos"].long()), TypeError, r"'pos' expected i32\[M\]"),
        (lambda i: i.update(pos=i["pos"][:3]), ValueError, r"'pos' expected i32\[M\] = \[5\]"),
        (lambda i: i.update(w_qkv=[[1.0]]), TypeError, r"'w_qkv' must be a torch.Tensor"),
        (lambda i: i.pop("w_down"), TypeError, r"'w_down' \(bf16\[64, 96\]\) is missing"),
        (lambda i: i.update(bogus=i["x0"]), TypeError, r"no input 'bogus'"),
    ],
)
def test_bad_inputs_name_the_block_the_input_and_the_expectation(
    layer: codac.BlockFunction, change, error: type, pattern: str
) -> None:
    inputs = llama_inputs(5)
    change(inputs)
    with pytest.raises(error, match=r"codac block 'llama3_layer': .*" + pattern):
        layer(**inputs)


def test_too_many_positional_arguments(layer: codac.BlockFunction) -> None:
    with pytest.raises(TypeError, match="takes 9 inputs"):
        layer(*llama_inputs(3).values(), torch.zeros(1))


def test_inputs_requiring_grad_outside_the_declaration_are_refused() -> None:
    source = SOURCE + "grad scale_grad = scale wrt (x)\n"
    fn = codac.load(source).block("scale")
    with pytest.raises(ValueError, match="'g' require grad"):
        fn(torch.randn(3, 8, requires_grad=True), torch.randn(8, requires_grad=True))
    y, s = fn(torch.randn(3, 8, requires_grad=True), torch.randn(8))
    assert y.requires_grad


@pytest.mark.parametrize("m", [1, 7, 64])
def test_fake_shapes_equal_the_interpreters(layer: codac.BlockFunction, m: int) -> None:
    inputs = llama_inputs(m)
    tensors = [inputs[t.name] for t in layer.signature.inputs]
    real = torch.ops.codac.forward(layer.key, tensors)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fakes = [mode.from_tensor(t) for t in tensors]
        fake = torch.ops.codac.forward(layer.key, fakes)
        fake_saving = torch.ops.codac.saving(layer.key, fakes)
    real_saving = torch.ops.codac.saving(layer.key, tensors)
    assert [(t.shape, t.dtype) for t in fake] == [(t.shape, t.dtype) for t in real]
    assert [(t.shape, t.dtype) for t in fake_saving] == [(t.shape, t.dtype) for t in real_saving]


def test_opcheck(layer: codac.BlockFunction) -> None:
    inputs = llama_inputs(4)
    tensors = [inputs[t.name] for t in layer.signature.inputs]
    torch.library.opcheck(torch.ops.codac.forward.default, (layer.key, tensors))
    leaves = [t.clone().requires_grad_(t.is_floating_point()) for t in tensors]
    torch.library.opcheck(torch.ops.codac.saving.default, (layer.key, leaves))
    saved = torch.ops.codac.saving(layer.key, tensors)
    gradient = layer.gradient
    assert gradient is not None
    args = []
    for (kind, j), spec in zip(gradient.sources, gradient.backward.signature.inputs):
        args.append(tensors[j] if kind == "input" else saved[j] if kind == "saved" else torch.randn(saved[j].shape).to(spec.dtype))
    torch.library.opcheck(torch.ops.codac.backward.default, (layer.key, args))


def test_compiled_and_eager_calls_agree(layer: codac.BlockFunction) -> None:
    inputs = llama_inputs(6)
    leaves = {k: v.clone().requires_grad_(v.is_floating_point()) for k, v in inputs.items()}

    def loss(i: dict[str, torch.Tensor]) -> torch.Tensor:
        x2, qkv = layer(**i)
        return x2.float().square().mean() + qkv.float().square().mean()

    eager = loss(leaves)
    eager.backward()
    expected = {k: v.grad.clone() for k, v in leaves.items() if v.grad is not None}
    for v in leaves.values():
        v.grad = None
    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")(leaves)
    compiled.backward()
    torch.testing.assert_close(compiled, eager)
    for k, g in expected.items():
        torch.testing.assert_close(leaves[k].grad, g)


def test_nn_block_owns_parameters_and_trains() -> None:
    prog = codac.load(EXAMPLES / "llama3_block.coda", dims=TINY)
    params = ["w_o", "g_ffn", "w_gu", "w_down", "g_attn", "w_qkv"]
    block = codac.nn.Block(prog, "llama3_layer", params=params)
    assert [n for n, _ in block.named_parameters()] == params
    assert block.w_gu.shape == (2 * TINY["F"], TINY["D"]) and block.w_gu.dtype == torch.bfloat16
    assert torch.equal(block.g_ffn, torch.ones(TINY["D"], dtype=torch.bfloat16))
    inputs = llama_inputs(5)
    optimizer = torch.optim.AdamW(block.parameters(), lr=1e-2)
    before = {k: v.detach().clone() for k, v in block.state_dict().items()}
    x2, qkv = block(inputs["attn"], inputs["x0"], inputs["pos"])
    (x2.float().square().mean() + qkv.float().square().mean()).backward()
    optimizer.step()
    after = block.state_dict()
    assert all(not torch.equal(before[k], after[k]) for k in params)
    clone = codac.nn.Block(prog, "llama3_layer", params=params)
    clone.load_state_dict(after)
    restored = pickle.loads(pickle.dumps(block))
    for k in params:
        assert torch.equal(getattr(clone, k), getattr(block, k))
        assert torch.equal(getattr(restored, k), getattr(block, k))


def test_nn_block_argument_errors() -> None:
    prog = codac.load(EXAMPLES / "llama3_block.coda", dims=TINY)
    with pytest.raises(ValueError, match="'w_nope', which is not an input"):
        codac.nn.Block(prog, "llama3_layer", params=["w_nope"])
    with pytest.raises(ValueError, match="depends on the run-time dim 'M'"):
        codac.nn.Block(prog, "llama3_layer", params=["attn"])
    with pytest.raises(TypeError, match="codac.Program"):
        codac.nn.Block("llama3_block.coda", "llama3_layer", params=[])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no block named 'nope'"):
        codac.nn.Block(prog, "nope", params=[])
    block = codac.nn.Block(prog, "llama3_layer", params=["w_o"])
    with pytest.raises(TypeError, match="'w_o' is a parameter of the module"):
        block(w_o=torch.zeros(1))


def test_no_gpu_tests_skip_with_a_reason() -> None:
    # The GPU tests' skip reason is what CI's log shows without a GPU.
    text = (Path(__file__).parent / "test_cuda.py").read_text()
    assert 'reason="skipped: no GPU"' in text


def test_an_output_without_gradient_counts_as_zero(layer: codac.BlockFunction) -> None:
    inputs = llama_inputs(6, seed=3)
    leaves = {k: v.clone().requires_grad_(v.is_floating_point()) for k, v in inputs.items()}
    x2, _ = layer(**leaves)
    x2.float().sum().backward()
    eager = {k: v.grad for k, v in leaves.items() if v.grad is not None}
    for v in leaves.values():
        v.grad = None

    def only_x2(i: dict[str, torch.Tensor]) -> torch.Tensor:
        return layer(**i)[0].float().sum()

    torch.compile(only_x2, fullgraph=True, backend="aot_eager")(leaves).backward()
    for k, g in eager.items():
        torch.testing.assert_close(leaves[k].grad, g)


def test_positional_calls_check_their_arguments_too(layer: codac.BlockFunction) -> None:
    inputs = list(llama_inputs(5).values())
    inputs[7] = inputs[7].tolist()
    with pytest.raises(TypeError, match="'w_qkv' must be a torch.Tensor"):
        layer(*inputs)


def test_the_latest_layout_guard_refuses_every_other_layout() -> None:
    """A CUDA call reuses its variant's latest layout when that layout's
    guard accepts the tensors, so the guard must refuse any tensor whose
    dtype, shape, strides or device differ; and a block call reuses its
    latest choice of variant, which rests on which inputs require grad."""
    from codac._cuda import layout_guard

    def tensors() -> list[torch.Tensor]:
        return [torch.randn(4, 8).bfloat16(), torch.randn(8), torch.arange(4, dtype=torch.int32)]

    guard = layout_guard(tensors())
    if guard is None:
        pytest.skip("skipped: this PyTorch has no TensorGuards; every call takes the keyed path")
    assert guard(*tensors())
    changes = {
        "dtype": lambda t: t[:1] + [t[1].double()] + t[2:],
        "shape": lambda t: [t[0][:3]] + t[1:],
        "strides": lambda t: [t[0].t().contiguous().t()] + t[1:],
        "device": lambda t: [t[0].to("meta")] + t[1:],
        "requires_grad": lambda t: [t[0].requires_grad_(True)] + t[1:],
        "not a tensor": lambda t: t[:2] + [t[2].tolist()],
    }
    for what, change in changes.items():
        assert not guard(*change(tensors())), what
