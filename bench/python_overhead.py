"""Host time per eager call of a codac block from PyTorch.

Runs the Llama-3 layer at tiny widths and few tokens, so that launching, not
the GPU, is the bottleneck, and reports the median over rounds of the host
time per call (no synchronization inside a round) for: the plain forward
under ``torch.no_grad()``, the differentiated forward (saving forward and
autograd bookkeeping), and as a yardstick, one ``torch.nn.functional.linear``.

    python bench/python_overhead.py [--calls 64] [--rounds 101]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any, Callable

import torch

import codac

DIMS = {"D": 128, "F": 256, "HD": 64, "QH": 1, "KVH": 1}


def per_call_us(fns: list[Callable[[], object]], calls: int, rounds: int) -> list[float]:
    """Median host time per call of each of ``fns``, over ``rounds`` bursts
    of ``calls`` calls each.

    A burst must not fill CUDA's queue of pending launches: then the host
    waits for the GPU and the time measured is the kernels', not the
    host's. So bursts are short, and the GPU drains between them, untimed.
    Each round times one burst of every function in turn, so a slow spell
    of the machine touches every row alike instead of the rows timed then.
    """
    for fn in fns:
        for _ in range(20):
            fn()
    torch.cuda.synchronize()
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for fn, out in zip(fns, samples):
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            out.append((time.perf_counter() - start) / calls * 1e6)
            torch.cuda.synchronize()
    return [statistics.median(out) for out in samples]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=64, help="calls per timed burst")
    parser.add_argument("--rounds", type=int, default=101, help="bursts; the median is reported")
    parser.add_argument("--profile", action="store_true", help="print cProfile's top entries for the no_grad and the differentiated call")
    args = parser.parse_args()
    root = Path(__file__).resolve().parents[1]
    layer = codac.load(root / "examples/llama3_block.coda", dims=DIMS).block("llama3_layer")
    m, d, f, q = 16, DIMS["D"], DIMS["F"], (DIMS["QH"] + 2 * DIMS["KVH"]) * DIMS["HD"]
    g = torch.Generator(device="cuda").manual_seed(0)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device="cuda", generator=g).to(torch.bfloat16)

    inputs = [rand(m, d), rand(m, d), rand(d, d) * d**-0.5, rand(d) * 0.1 + 1, rand(2 * f, d) * d**-0.5,
              rand(d, f) * f**-0.5, rand(d) * 0.1 + 1, rand(q, d) * d**-0.5,
              torch.arange(m, dtype=torch.int32, device="cuda")]
    leaves = [t.clone().requires_grad_(t.is_floating_point()) for t in inputs]
    x, w = rand(m, d), rand(d, d)

    def no_grad() -> None:
        with torch.no_grad():
            layer(*inputs)

    def with_grad() -> None:
        layer(*leaves)

    # Two layers' weights in turn, as a model calls the block: each call's
    # kernels read other addresses than the call before.
    other = inputs[:2] + [t.clone() for t in inputs[2:8]] + inputs[8:]
    turn = [inputs, other]

    def two_layers() -> None:
        turn.reverse()
        with torch.no_grad():
            layer(*turn[0])

    def linear() -> None:
        with torch.no_grad():
            torch.nn.functional.linear(x, w)

    def empty() -> None:
        torch.empty(16, device="cuda")

    a, b, c = rand(16), rand(16), rand(16)

    def add() -> None:
        torch.add(a, b, out=c)

    # The parts of a call: the latest call recognised, then launch_cuda
    # (outputs allocated, the extension's launch) on a found layout.
    from codac._cuda import find_layout, launch_cuda

    no_grad()
    with_grad()
    stream = torch.cuda.current_stream().cuda_stream
    forward_layout = find_layout(layer.forward, inputs)
    saving_layout = find_layout(layer.gradient.saving, leaves)
    outputs = forward_layout.empty_outputs()
    ptrs = [t.data_ptr() for t in inputs + outputs]
    kept = forward_layout.kept.get(stream)

    def never(nbytes: int, reusable: bool) -> int:
        raise AssertionError("the kept workspace should serve")

    def native_launch() -> None:
        forward_layout.executor.launch(forward_layout.native, ptrs, stream, never, kept[1] if kept else (0, 0))

    def latest_call() -> None:
        latest = layer.latest_call
        assert latest is not None and latest[0] is torch.is_grad_enabled() and latest[2](*leaves)

    def forward_launch() -> None:
        launch_cuda(forward_layout, inputs)

    def saving_launch() -> None:
        launch_cuda(saving_layout, inputs)

    class Identity(torch.autograd.Function):
        @staticmethod
        def forward(ctx: object, t: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
            return t.view_as(t)

        @staticmethod
        def backward(ctx: object, g: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
            return g

    leaf = rand(16).requires_grad_()

    def identity() -> None:
        Identity.apply(leaf)

    # PyTorch's share of a differentiated call: an autograd.Function with
    # the block's inputs, which allocates the saving forward's outputs and
    # saves what the block saves, but launches nothing.
    from codac._ops import _keep

    gradient = layer.gradient

    class Allocating(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:  # type: ignore[override]
            everything = saving_layout.empty_outputs()
            ctx.save_for_backward(*_keep(gradient, tensors, everything))
            return tuple(everything[: gradient.n_outputs])

        @staticmethod
        def backward(ctx: Any, *grads: torch.Tensor) -> tuple[None, ...]:  # type: ignore[override]
            return (None,) * len(leaves)

    def allocating() -> None:
        Allocating.apply(*leaves)

    if args.profile:
        import cProfile
        import pstats

        for name, fn in [("no_grad", no_grad), ("with grad", with_grad)]:
            profiler = cProfile.Profile()
            profiler.enable()
            for _ in range(args.calls):
                fn()
            profiler.disable()
            torch.cuda.synchronize()
            print(f"cProfile of the {name} call, {args.calls} calls:")
            pstats.Stats(profiler).sort_stats("tottime").print_stats(16)

    named = [
        ("codac block, no_grad (4 kernels in one graph)", no_grad),
        ("codac block, no_grad, two layers' weights in turn", two_layers),
        ("codac block, with grad (saving forward)", with_grad),
        ("torch.nn.functional.linear, no_grad", linear),
        ("torch.empty(16, device='cuda')", empty),
        ("torch.add(out=) on 16 elements (1 launch)", add),
        ("torch.autograd.Function, identity on one tensor", identity),
        ("torch.autograd.Function, the block's inputs, outputs and saves, no launch", allocating),
        ("  part: the latest call, recognised by its guard", latest_call),
        ("  part: launch_cuda, forward (2 outputs)", forward_launch),
        ("  part: launch_cuda, saving forward (4 outputs)", saving_launch),
        ("  part: Executor.launch (plan, graph launch)", native_launch),
    ]
    times = per_call_us([fn for _, fn in named], args.calls, args.rounds)
    rows = [(name, us) for (name, _), us in zip(named, times)]
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    width = max(len(name) for name, _ in rows)
    print(f"{'call':<{width}} {'host us/call':>12}")
    for name, us in rows:
        print(f"{name:<{width}} {us:>12.1f}")


if __name__ == "__main__":
    main()
