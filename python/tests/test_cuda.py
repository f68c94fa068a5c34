"""The package on a GPU: results against the interpreter, streams, no
synchronization, CUDA graphs, torch.compile, memory and devices.

Every test here needs CUDA and says "skipped: no GPU" without it.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

import codac

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="skipped: no GPU"),
]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# Llama-3 widths small enough for the CPU interpreter at M = 333, with
# tiles of every kind: 4 query heads and 2 KV heads of width 64.
SMALL = {"D": 512, "F": 1024, "HD": 64, "QH": 4, "KVH": 2}


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double().cpu(), b.double().cpu()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def llama_inputs(m: int, dims: dict[str, int], device: str, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    d, f, q = dims["D"], dims["F"], (dims["QH"] + 2 * dims["KVH"]) * dims["HD"]

    def normal(*shape: int, std: float) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * std).to(torch.bfloat16).to(device)

    return {
        "attn": normal(m, d, std=1.0),
        "x0": normal(m, d, std=1.0),
        "w_o": normal(d, d, std=d**-0.5),
        "g_ffn": (1 + 0.1 * torch.randn(d, generator=g)).to(torch.bfloat16).to(device),
        "w_gu": normal(2 * f, d, std=d**-0.5),
        "w_down": normal(d, f, std=f**-0.5),
        "g_attn": (1 + 0.1 * torch.randn(d, generator=g)).to(torch.bfloat16).to(device),
        "w_qkv": normal(q, d, std=d**-0.5),
        "pos": torch.randint(0, 4096, (m,), generator=g, dtype=torch.int32).to(device),
    }


@pytest.fixture(scope="module")
def layer() -> codac.BlockFunction:
    return codac.load(EXAMPLES / "llama3_block.coda", dims=SMALL).block("llama3_layer")


def step(fn: codac.BlockFunction, inputs: dict[str, torch.Tensor], seed: int) -> tuple[list[torch.Tensor], dict]:
    """Forward, then backward from fixed random output gradients."""
    leaves = {k: (v.detach().clone().requires_grad_(v.is_floating_point())) for k, v in inputs.items()}
    outputs = fn(**leaves)
    g = torch.Generator().manual_seed(seed)
    grads = [torch.randn(o.shape, generator=g).to(o.dtype).to(o.device) for o in outputs]
    torch.autograd.backward(outputs, grads)
    return [o.detach() for o in outputs], {k: v.grad for k, v in leaves.items() if v.grad is not None}


@pytest.mark.parametrize("m", [333, 1000])
def test_forward_and_gradients_match_the_interpreter(layer: codac.BlockFunction, m: int) -> None:
    inputs = llama_inputs(m, SMALL, "cuda", seed=m)
    gpu_out, gpu_grads = step(layer, inputs, seed=1)
    cpu_out, cpu_grads = step(layer, {k: v.cpu() for k, v in inputs.items()}, seed=1)
    for a, b in zip(gpu_out, cpu_out):
        assert a.isfinite().all()
        assert relative_error(a, b) < 2e-2
    assert gpu_grads.keys() == cpu_grads.keys()
    for name in cpu_grads:
        assert gpu_grads[name].dtype == inputs[name].dtype
        assert relative_error(gpu_grads[name], cpu_grads[name]) < 3e-2, name


def test_a_non_default_stream_gives_the_same_results(layer: codac.BlockFunction) -> None:
    inputs = llama_inputs(333, SMALL, "cuda", seed=5)
    with torch.no_grad():
        expected = layer(**inputs)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            got = layer(**inputs)
        torch.cuda.current_stream().wait_stream(side)
    for a, b in zip(got, expected):
        assert torch.equal(a, b)


def on_fresh_streams(layer: codac.BlockFunction, calls: list[dict[str, torch.Tensor]]) -> list[tuple[torch.Tensor, ...]]:
    """Each call's outputs from a graph built for it alone (a fresh stream
    has no graphs yet)."""
    results = []
    with torch.no_grad():
        for inputs in calls:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                results.append(layer(**inputs))
            torch.cuda.current_stream().wait_stream(side)
    return results


def assert_same_outputs(got: list, expected: list) -> None:
    for outputs, reference in zip(got, expected):
        for a, b in zip(outputs, reference):
            assert torch.equal(a, b)
    assert not torch.equal(got[0][0], got[1][0])


def test_calls_at_new_addresses_give_what_a_fresh_graph_gives(layer: codac.BlockFunction) -> None:
    """A layout's calls on one stream replay one CUDA graph, whose kernel
    arguments change with the tensors' addresses; each call must give
    exactly what a graph built for it gives."""
    first = llama_inputs(333, SMALL, "cuda", seed=11)
    second = llama_inputs(333, SMALL, "cuda", seed=12)
    with torch.no_grad():
        got = [layer(**first), layer(**second), layer(**first)]
    assert_same_outputs(got, on_fresh_streams(layer, [first, second, first]))
    assert [layout.native.graph_failure for layout in layer.forward.layouts.values()] == [None]


def test_calls_at_recurring_addresses_give_what_a_fresh_graph_gives(layer: codac.BlockFunction) -> None:
    """Outputs freed after each call come back at the same addresses, as a
    training loop's do, so later calls launch the graph that holds their
    addresses as it is, without filling the plan again; each must give
    exactly what a graph built for it gives."""
    first = llama_inputs(333, SMALL, "cuda", seed=13)
    second = llama_inputs(333, SMALL, "cuda", seed=14)
    order = [first, second, first, second, first]
    with torch.no_grad():
        got = [[o.clone() for o in layer(**inputs)] for inputs in order]
    assert_same_outputs(got, on_fresh_streams(layer, order))


def test_more_layers_than_kept_graphs_give_the_same_results_each_step(layer: codac.BlockFunction) -> None:
    """A plan keeps up to 64 graphs per stream, one per set of arguments;
    70 layers' arguments in turn make each call of the second step set a
    reused graph's arguments, and the results must not change."""
    sets = [llama_inputs(64, SMALL, "cuda", seed=100 + i) for i in range(70)]
    with torch.no_grad():
        steps = [[layer(**inputs) for inputs in sets] for _ in range(2)]
    for first, second in zip(*steps):
        for a, b in zip(first, second):
            assert torch.equal(a, b)
    assert not torch.equal(steps[0][0][0], steps[0][1][0])


def test_nothing_synchronizes(layer: codac.BlockFunction) -> None:
    inputs = llama_inputs(333, SMALL, "cuda", seed=6)
    step(layer, inputs, seed=2)  # compile and load first
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        leaves = {k: v.detach().clone().requires_grad_(v.is_floating_point()) for k, v in inputs.items()}
        x2, qkv = layer(**leaves)
        (x2.float().sum() + qkv.float().sum()).backward()
        with torch.no_grad():
            layer(**inputs)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_the_latest_call_decides_nothing_for_other_grad_settings(layer: codac.BlockFunction) -> None:
    """An eager call takes the latest call's variant when that layout's
    guard accepts its tensors. Calls of one layout that differ only in
    grad mode or in which inputs require grad must still each get their
    own: gradients where asked for, none otherwise."""
    inputs = llama_inputs(333, SMALL, "cuda", seed=8)
    leaves = {k: v.detach().clone().requires_grad_(v.is_floating_point()) for k, v in inputs.items()}
    for _ in range(2):
        with torch.no_grad():
            assert all(not o.requires_grad for o in layer(**leaves))
        assert all(not o.requires_grad for o in layer(**inputs))
        outputs = layer(**leaves)
        assert all(o.requires_grad for o in outputs)
        sum(o.float().sum() for o in outputs).backward()
        assert all(v.grad is not None for v in leaves.values() if v.is_floating_point())
        for v in leaves.values():
            v.grad = None
    _, expected = step(layer, inputs, seed=3)
    leaves = {k: v.detach().clone().requires_grad_(v.is_floating_point()) for k, v in inputs.items()}
    outputs = layer(**leaves)
    g = torch.Generator().manual_seed(3)
    torch.autograd.backward(outputs, [torch.randn(o.shape, generator=g).to(o.dtype).to(o.device) for o in outputs])
    for k, grad in expected.items():
        assert torch.equal(leaves[k].grad, grad), k


def test_cuda_graph_replay_matches_eager_on_new_values(layer: codac.BlockFunction) -> None:
    static = llama_inputs(333, SMALL, "cuda", seed=7)
    with torch.no_grad():
        layer(**static)  # compile before capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = layer(**static)
        fresh = llama_inputs(333, SMALL, "cuda", seed=8)
        for k, v in fresh.items():
            static[k].copy_(v)
        graph.replay()
        expected = layer(**fresh)
    for a, b in zip(captured, expected):
        assert torch.equal(a, b)


def test_capture_before_compiling_raises_a_clear_error() -> None:
    fn = codac.load(EXAMPLES / "llama3_block.coda", dims={**SMALL, "F": 768}).block("llama3_layer")
    inputs = llama_inputs(64, {**SMALL, "F": 768}, "cuda", seed=9)
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="before capturing"):
        with torch.no_grad(), torch.cuda.graph(graph):
            fn(**inputs)


def test_torch_compile_has_no_graph_breaks_and_no_recompiles(layer: codac.BlockFunction) -> None:
    class Model(torch.nn.Module):
        def forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
            x2, qkv = layer(**inputs)
            return x2.float().square().mean() + qkv.float().square().mean()

    model = Model()
    inputs = llama_inputs(1000, SMALL, "cuda", seed=10)
    explanation = torch._dynamo.explain(model)(inputs)
    assert explanation.graph_break_count == 0
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, dynamic=True)
    from torch._dynamo.utils import counters

    counters.clear()
    for m in (1000, 4096, 8192):
        batch = llama_inputs(m, SMALL, "cuda", seed=m)
        leaves = {k: v.requires_grad_(v.is_floating_point()) for k, v in batch.items()}
        loss = compiled(leaves)
        loss.backward()
        eager = model({k: v.detach() for k, v in batch.items()})
        assert relative_error(loss.detach(), eager) < 1e-2
    assert counters["stats"]["unique_graphs"] == 1
    # The kernels are M-generic: one executor per variant, whatever M was.
    assert list(layer.forward._executors) == [0]


def test_memory_does_not_grow_over_calls(layer: codac.BlockFunction) -> None:
    inputs = llama_inputs(333, SMALL, "cuda", seed=11)
    with torch.no_grad():
        layer(**inputs)
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        for _ in range(1000):
            outputs = layer(**inputs)
        del outputs
        torch.cuda.synchronize()
        assert torch.cuda.memory_allocated() == before


def test_workspace_memory_comes_from_the_caching_allocator(layer: codac.BlockFunction) -> None:
    # The 2-row input has a misaligned row stride, so the block stages a
    # copy of it: that and every output show in PyTorch's statistics.
    # A token count no other test uses: the call's layout is new, so it
    # allocates its workspace.
    inputs = llama_inputs(335, SMALL, "cuda", seed=12)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    with torch.no_grad():
        outputs = layer(**inputs)
    torch.cuda.synchronize()
    out_bytes = sum(o.numel() * o.element_size() for o in outputs)
    assert torch.cuda.max_memory_allocated() > base + out_bytes


def test_a_small_workspace_is_kept_for_the_next_call_on_its_stream(layer: codac.BlockFunction) -> None:
    inputs = llama_inputs(8, SMALL, "cuda", seed=15)

    def allocations() -> int:
        return torch.cuda.memory_stats()["allocation.all.allocated"]

    with torch.no_grad():
        first = layer(**inputs)
        before = allocations()
        second = layer(**inputs)
        # The two outputs only: the workspace of the first call is reused.
        assert allocations() - before == 2
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            before = allocations()
            third = layer(**inputs)
            # Another stream gets a workspace of its own.
            assert allocations() - before == 3
        torch.cuda.current_stream().wait_stream(side)
    for a, b, c in zip(first, second, third):
        assert torch.equal(a, b) and torch.equal(a, c)


def test_misaligned_and_strided_inputs(layer: codac.BlockFunction) -> None:
    inputs = llama_inputs(333, SMALL, "cuda", seed=13)
    with torch.no_grad():
        expected = layer(**inputs)
        odd = dict(inputs)
        # A view one element into a larger buffer: 2-byte aligned, not 16.
        big = torch.empty(333 * SMALL["D"] + 1, dtype=torch.bfloat16, device="cuda")
        odd["attn"] = big[1:].view(333, SMALL["D"])
        odd["attn"].copy_(inputs["attn"])
        # A transposed weight: the binding copies it to a readable layout.
        odd["w_o"] = inputs["w_o"].t().contiguous().t()
        got = layer(**odd)
    for a, b in zip(got, expected):
        assert torch.equal(a, b)


def test_inputs_on_two_devices_are_refused(layer: codac.BlockFunction) -> None:
    inputs = llama_inputs(8, SMALL, "cuda", seed=14)
    inputs["w_o"] = inputs["w_o"].cpu()
    with pytest.raises(ValueError, match="w_o"):
        layer(**inputs)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="skipped: needs 2 GPUs")
def test_tensors_on_the_second_gpu_run_there(layer: codac.BlockFunction) -> None:
    inputs = llama_inputs(333, SMALL, "cuda:0", seed=15)
    with torch.no_grad():
        expected = layer(**inputs)
        got = layer(**{k: v.to("cuda:1") for k, v in inputs.items()})
    assert got[0].device == torch.device("cuda:1")
    for a, b in zip(got, expected):
        assert torch.equal(a.cpu(), b.cpu())


def test_opcheck_on_cuda(layer: codac.BlockFunction) -> None:
    inputs = llama_inputs(40, SMALL, "cuda", seed=16)
    tensors = [inputs[t.name] for t in layer.signature.inputs]
    torch.library.opcheck(torch.ops.codac.forward.default, (layer.key, tensors))
    leaves = [t.clone().requires_grad_(t.is_floating_point()) for t in tensors]
    torch.library.opcheck(torch.ops.codac.saving.default, (layer.key, leaves))


def test_module_parameters_train(layer: codac.BlockFunction) -> None:
    prog = codac.load(EXAMPLES / "llama3_block.coda", dims=SMALL)
    block = codac.nn.Block(prog, "llama3_layer", params=["w_o", "g_ffn", "w_gu", "w_down", "g_attn", "w_qkv"], device="cuda")
    reference = copy.deepcopy(block).cpu()
    inputs = llama_inputs(64, SMALL, "cuda", seed=17)
    data = {k: inputs[k] for k in ("attn", "x0", "pos")}
    x2, qkv = block(**data)
    (x2.float().square().mean() + qkv.float().square().mean()).backward()
    x2c, qkvc = reference(**{k: v.cpu() for k, v in data.items()})
    (x2c.float().square().mean() + qkvc.float().square().mean()).backward()
    for (name, p), (_, q) in zip(block.named_parameters(), reference.named_parameters()):
        assert p.grad is not None and p.grad.dtype == p.dtype
        assert relative_error(p.grad, q.grad) < 3e-2, name


# Separate gate and up weights, as checkpoints store them: one GEMM reads
# both where they are, whichever lies lower in memory (docs/codegen.md,
# "Stacked weights").
SEPARATE_GATE_UP = """
dim M
dim D = 512
dim F = 1024
block mlp(x: bf16[M, D], g: bf16[D], w_gate: bf16[F, D], w_up: bf16[F, D], w_down: bf16[D, F]) -> (y: bf16[M, D]) {
    let h = rmsnorm(x, g, 1e-5)
    let gate = bf16(h @ w_gate.T)
    let up = bf16(h @ w_up.T)
    y = bf16(x + (silu(gate) * up) @ w_down.T)
}
grad mlp_grad = mlp wrt (x, g, w_gate, w_up, w_down)
"""


@pytest.mark.parametrize("order", ["gate_below_up", "up_below_gate", "same_tensor", "up_misaligned"])
def test_separate_gate_and_up_weights_in_any_address_order(order: str) -> None:
    fn = codac.load(SEPARATE_GATE_UP, dims={}).block("mlp")
    d, f, m = 512, 1024, 333
    g = torch.Generator().manual_seed(21)
    x = torch.randn(m, d, generator=g).to(torch.bfloat16)
    gain = (1 + 0.1 * torch.randn(d, generator=g)).to(torch.bfloat16)
    w_gate = (torch.randn(f, d, generator=g) * d**-0.5).to(torch.bfloat16)
    w_up = w_gate if order == "same_tensor" else (torch.randn(f, d, generator=g) * d**-0.5).to(torch.bfloat16)
    w_down = (torch.randn(d, f, generator=g) * f**-0.5).to(torch.bfloat16)
    dy = torch.randn(m, d, generator=g).to(torch.bfloat16)

    # Both weights are views of one pool, placed as `order` says, so that
    # the GEMM reads them at known relative addresses; a misaligned `up`
    # (one element in: 2-byte aligned) is read through its staging copy.
    size = f * d
    pool = torch.zeros(2 * size + 8, dtype=torch.bfloat16, device="cuda")
    at = {"gate_below_up": (0, size), "up_below_gate": (size, 0), "same_tensor": (0, 0), "up_misaligned": (size + 8, 1)}
    gate_at, up_at = at[order]
    with torch.no_grad():
        pool[gate_at : gate_at + size].copy_(w_gate.flatten())
        pool[up_at : up_at + size].copy_(w_up.flatten())
    pool.requires_grad_(True)
    views = (pool[gate_at : gate_at + size].view(f, d), pool[up_at : up_at + size].view(f, d))
    rest = {"x": x, "g": gain, "w_down": w_down}
    gpu_rest = {k: v.cuda().requires_grad_(True) for k, v in rest.items()}
    y = fn(**gpu_rest, w_gate=views[0], w_up=views[1])
    y.backward(dy.cuda())

    cpu_rest = {k: v.clone().requires_grad_(True) for k, v in rest.items()}
    cpu_gate = w_gate.clone().requires_grad_(True)
    cpu_up = cpu_gate if order == "same_tensor" else w_up.clone().requires_grad_(True)
    expected = fn(**cpu_rest, w_gate=cpu_gate, w_up=cpu_up)
    expected.backward(dy)

    assert y.isfinite().all()
    assert relative_error(y, expected) < 2e-2
    for name in rest:
        assert relative_error(gpu_rest[name].grad, cpu_rest[name].grad) < 3e-2, name
    grad = pool.grad
    assert grad is not None
    if order == "same_tensor":
        assert relative_error(grad[:size].view(f, d), cpu_gate.grad) < 3e-2
    else:
        assert relative_error(grad[gate_at : gate_at + size].view(f, d), cpu_gate.grad) < 3e-2
        assert relative_error(grad[up_at : up_at + size].view(f, d), cpu_up.grad) < 3e-2
