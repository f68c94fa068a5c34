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
from typing import Callable

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

    # The parts of a no_grad call: argument checks and dims, then the
    # extension's launch (plan filled, kernels enqueued) on ready arguments.
    from codac._cuda import find_layout, launch_cuda

    variant = layer.forward
    executor = variant.executor(0)
    dims = variant.signature.bind(inputs)
    outputs = [torch.empty(spec.shape(dims), dtype=spec.dtype, device="cuda") for spec in variant.signature.outputs]
    everything = inputs + outputs
    ptrs = [t.data_ptr() for t in everything]
    layout = executor.layout(dict(dims), ptrs, [list(t.shape) for t in everything], [list(t.stride()) for t in everything])
    stream = torch.cuda.current_stream().cuda_stream
    keep = []

    def alloc(n: int, reusable: bool) -> int:
        t = torch.empty(n, dtype=torch.uint8, device="cuda")
        keep.append(t)
        return t.data_ptr()

    def bind() -> None:
        variant.signature.bind(inputs)

    def native_launch() -> None:
        executor.launch(layout, ptrs, stream, alloc)
        keep.clear()

    def keyed_layout() -> None:
        find_layout(variant, inputs)

    def guarded_layout() -> None:
        latest = variant.latest_layout
        assert latest is not None and latest[0](*inputs)

    ready = find_layout(variant, inputs)

    def python_launch() -> None:
        launch_cuda(ready, inputs)

    saving = layer.gradient.saving

    def saving_run() -> None:
        with torch.no_grad():
            saving.run(inputs)

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
        ("  part: Signature.bind (checks, dims)", bind),
        ("  part: the layout, found by its key", keyed_layout),
        ("  part: the latest layout, recognised by its guard", guarded_layout),
        ("  part: launch_cuda (outputs, workspace, launch)", python_launch),
        ("  part: Executor.launch (plan, workspace, graph launch)", native_launch),
        ("  part: saving forward without autograd", saving_run),
    ]
    times = per_call_us([fn for _, fn in named], args.calls, args.rounds)
    rows = [(name, us) for (name, _), us in zip(named, times)]
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"{'call':<50} {'host us/call':>12}")
    for name, us in rows:
        print(f"{name:<50} {us:>12.1f}")


if __name__ == "__main__":
    main()
