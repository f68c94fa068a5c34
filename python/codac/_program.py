"""Programs and their blocks as PyTorch callables.

``load`` checks a ``.coda`` program; ``Program.block(name)`` returns a
``BlockFunction``, which runs the block on CUDA tensors through its compiled
kernels and on CPU tensors through codac's exact interpreter, and which
autograd differentiates through the block's ``grad`` declaration.
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
from typing import Any, Mapping, Optional, TextIO, Union

import torch

from . import _native, _ops, _toolkit
from ._cuda import find_layout, launch_cuda
from ._interp import run_cpu
from ._signature import Signature

PathOrSource = Union[str, "os.PathLike[str]"]


def load(path_or_source: PathOrSource, dims: Optional[Mapping[str, int]] = None) -> "Program":
    """Checks a ``.coda`` program and returns it.

    ``path_or_source`` is a path (a ``PathLike``, or a string naming an
    existing file) or the program's text. ``dims`` fixes dims of the program:
    each value replaces the file's ``dim NAME`` declaration, so a file written
    for one model size serves another (``dims={"D": 2048, "F": 8192}``), and
    dims defined from them follow. A program with errors raises
    ``codac.CodacError`` carrying the rendered diagnostics.
    """
    if isinstance(path_or_source, os.PathLike) or (
        isinstance(path_or_source, str) and "\n" not in path_or_source and os.path.isfile(path_or_source)
    ):
        path = os.fspath(path_or_source)
        with open(path, encoding="utf-8") as f:
            source, name = f.read(), path
    elif isinstance(path_or_source, str):
        if path_or_source.strip().endswith(".coda") and "\n" not in path_or_source:
            raise FileNotFoundError(f"codac.load: no file {path_or_source!r}")
        source, name = path_or_source, "<string>"
    else:
        raise TypeError(
            f"codac.load: path_or_source must be a path or the program's text, got {type(path_or_source).__name__}"
        )
    fixed: dict[str, int] = {}
    for key, value in (dims or {}).items():
        if not isinstance(key, str) or isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"codac.load: dims must map dim names to ints, got {key!r}: {value!r}")
        fixed[key] = value
    return Program(name, source, fixed)


class Program:
    """A checked ``.coda`` program (see ``load``)."""

    def __init__(self, name: str, source: str, dims: Mapping[str, int]) -> None:
        self._native = _native.Program(name, source, dict(dims))
        self._source = source
        digest = hashlib.sha256(repr((name, source, sorted(dims.items()))).encode()).hexdigest()[:16]
        self.key = digest
        self.name = name
        self.dims = dict(dims)
        self._blocks: dict[str, BlockFunction] = {}
        if self._native.warnings:
            print(self._native.warnings, file=sys.stderr, end="")

    @property
    def blocks(self) -> list[str]:
        """The block names, in source order."""
        return list(self._native.blocks())

    def explain_text(self, grad: bool = False) -> str:
        """What ``codac explain`` prints (``grad``: ``codac explain --grad``)."""
        return self._native.explain(grad)

    def explain(self, grad: bool = False, *, file: Optional[TextIO] = None) -> None:
        """Prints what ``codac explain`` prints: each block's fused kernels,
        what they read and write, and the IR (``grad``: the backward blocks
        and what the forward saves for them)."""
        print(self.explain_text(grad), file=file or sys.stdout, end="")

    def block(self, name: str) -> "BlockFunction":
        """The block ``name`` as a callable on torch tensors."""
        if not isinstance(name, str):
            raise TypeError(f"codac: block name must be a str, got {type(name).__name__}")
        fn = self._blocks.get(name)
        if fn is None:
            fn = BlockFunction(self, name)
            self._blocks[name] = fn
        return fn

    def __repr__(self) -> str:
        return f"codac.Program({self.name!r}, blocks={self.blocks})"

    # A program is immutable: copies share it (and its compiled kernels), and
    # pickling it records its source and dims, so modules holding blocks can
    # be deep-copied and saved with torch.save.
    def __reduce__(self) -> tuple[Any, ...]:
        return (Program, (self.name, self._source, self.dims))

    def __deepcopy__(self, memo: dict[int, Any]) -> "Program":
        return self


class Variant:
    """One compiled form of a block: its signature and executors per device."""

    def __init__(self, program: Program, block: str, variant: str) -> None:
        self.program = program
        self.block = block
        self.variant = variant
        self.signature = Signature(block, program._native.signature(variant, block))
        self._executors: dict[int, Any] = {}
        # The layouts of CUDA tensors this variant ran with, and the latest
        # one with a guard that recognises its tensors and their count
        # (see ``_cuda``).
        self.layouts: dict[Any, Any] = {}
        self.latest_layout: Optional[tuple[Any, Any, int]] = None
        self._lock = threading.Lock()

    def executor(self, index: int) -> Any:
        """The kernels on CUDA device ``index``, compiled on first use."""
        executor = self._executors.get(index)
        if executor is not None:
            return executor
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError(
                f"codac block {self.block!r} ({self.variant}) is not compiled for cuda:{index} yet, and a CUDA "
                "graph is being captured; call the block once (eagerly, with the same kind of inputs and "
                "gradients) before capturing"
            )
        with self._lock:
            executor = self._executors.get(index)
            if executor is None:
                executor = self._compile(index)
                self._executors[index] = executor
        return executor

    def _compile(self, index: int) -> Any:
        _toolkit.configure()
        what = f"{self.block!r}" + ("" if self.variant == "forward" else f" ({self.variant})")
        notice = threading.Timer(
            1.0, lambda: print(f"codac: compiling block {what} for cuda:{index}...", file=sys.stderr, flush=True)
        )
        notice.daemon = True
        notice.start()
        try:
            executor = self.program._native.executor(self.variant, self.block, index)
        finally:
            notice.cancel()
        if executor.compile_seconds > 1.0:
            print(
                f"codac: block {what} ready on cuda:{index}: {executor.compiled_kernels} kernel(s) compiled "
                f"in {executor.compile_seconds:.1f} s (cached for later runs)",
                file=sys.stderr,
                flush=True,
            )
        return executor

    def cuda_layout(self, tensors: list[torch.Tensor]) -> Any:
        """The layout of ``tensors``, CUDA tensors: the latest one when its
        guard accepts them, else the one found by their key (``_cuda``)."""
        latest = self.latest_layout
        if latest is not None and len(tensors) == latest[2] and latest[0](*tensors):
            return latest[1]
        return find_layout(self, tensors)

    def run(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        """Runs on the tensors' device; returns fresh outputs."""
        device = tensors[0].device
        if device.type == "cuda":
            return launch_cuda(self.cuda_layout(tensors), tensors)
        dims = self.signature.bind(tensors)
        if device.type == "cpu":
            return run_cpu(self, dims, tensors)
        raise ValueError(f"codac block {self.block!r}: tensors on {device} are not supported (use cuda or cpu)")


class BlockFunction:
    """A block of a program as a callable: ``f(*inputs)`` or ``f(**inputs)``
    returns its outputs (one tensor, or a tuple in output order)."""

    def __init__(self, program: Program, name: str) -> None:
        self.program = program
        self.name = name
        self.forward = Variant(program, name, "forward")
        self.signature = self.forward.signature
        for spec in self.signature.outputs:
            if spec.accumulate:
                raise ValueError(
                    f"codac block {name!r}: output {spec.name!r} accumulates (`+=`), which the PyTorch "
                    "binding does not support; write the sum explicitly"
                )
        info = program._native.gradient_info(name)
        self.gradient: Optional[Gradient] = None if info is None else Gradient(self, info)
        self.key = f"{program.key}:{name}"
        # The latest eager call on CUDA tensors: (grad mode, tensor count,
        # guard, layout, differentiated), see ``_ops.call``.
        self.latest_call: Optional[tuple[bool, int, Any, Any, bool]] = None
        _ops.register(self)

    def __call__(self, *args: Any, **kwargs: Any) -> Union[torch.Tensor, tuple[torch.Tensor, ...]]:
        tensors = self.signature.arrange(args, kwargs)
        outputs = _ops.call(self, tensors)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Program.block, (self.program, self.name))

    def __deepcopy__(self, memo: dict[int, Any]) -> "BlockFunction":
        return self

    def __repr__(self) -> str:
        ins = ", ".join(f"{t.name}: {t.describe()}" for t in self.signature.inputs)
        outs = ", ".join(f"{t.name}: {t.describe()}" for t in self.signature.outputs)
        return f"codac block {self.name}({ins}) -> ({outs})"


class Gradient:
    """How a block is differentiated: its saving forward and backward block."""

    def __init__(self, fn: BlockFunction, info: Mapping[str, Any]) -> None:
        self.saving = Variant(fn.program, fn.name, "saving")
        self.backward = Variant(fn.program, fn.name, "backward")
        index = fn.signature.input_index
        # (forward input index, backward output index) per differentiated input.
        outs = {t.name: i for i, t in enumerate(self.backward.signature.outputs)}
        self.wrt: list[tuple[int, int]] = [(index[i], outs[o]) for i, o in info["wrt"]]
        self.differentiable: frozenset[int] = frozenset(i for i, _ in self.wrt)
        saving_outputs = {t.name: i for i, t in enumerate(self.saving.signature.outputs)}
        output_names = {t.name: i for i, t in enumerate(fn.signature.outputs)}
        given = {g: output_names[o] for o, g in info["outputs"] if g is not None}
        # Each backward input: ("input", i) a forward input, ("saved", j) an
        # output of the saving forward, ("grad", k) the gradient of output k.
        self.sources: list[tuple[str, int]] = []
        for t in self.backward.signature.inputs:
            if t.name in given:
                self.sources.append(("grad", given[t.name]))
            elif t.name in saving_outputs:
                self.sources.append(("saved", saving_outputs[t.name]))
            elif t.name in index:
                self.sources.append(("input", index[t.name]))
            else:
                raise RuntimeError(f"internal error in codac: backward input {t.name!r} of {fn.name!r} has no source")
        self.n_outputs = len(fn.signature.outputs)
        self.saved_outputs: list[int] = sorted({j for kind, j in self.sources if kind == "saved"})
        self.saved_inputs: list[int] = sorted({j for kind, j in self.sources if kind == "input"})
