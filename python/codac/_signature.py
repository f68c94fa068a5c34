"""Block signatures: argument checks, dims bound from input shapes, and
output shapes, on plain integers and on PyTorch's symbolic sizes alike (the
fake implementations under ``torch.compile`` use the same code).

A shape axis is a polynomial over the block's run-time dims, given by the
extension module as ``[(coefficient, [dim names]), ...]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence, Union

import torch

Size = Union[int, torch.SymInt]
Polynomial = tuple[tuple[int, tuple[str, ...]], ...]

DTYPES: dict[str, torch.dtype] = {
    "bf16": torch.bfloat16,
    "f16": torch.float16,
    "e4m3": torch.float8_e4m3fn,
    "e5m2": torch.float8_e5m2,
    "f32": torch.float32,
    "i32": torch.int32,
}
DTYPE_NAMES: dict[torch.dtype, str] = {v: k for k, v in DTYPES.items()}


def _polynomial(raw: Sequence[Any]) -> Polynomial:
    return tuple((int(c), tuple(names)) for c, names in raw)


def evaluate(poly: Polynomial, dims: Mapping[str, Size]) -> Size:
    """The value of ``poly`` with ``dims`` bound."""
    total: Size = 0
    for coefficient, names in poly:
        term: Size = coefficient
        for name in names:
            term = term * dims[name]
        total = total + term
    return total


def render(poly: Polynomial) -> str:
    """``2*F``, ``M``, ``4096``."""
    if not poly:
        return "0"
    parts = []
    for coefficient, names in poly:
        factors = ([str(coefficient)] if coefficient != 1 or not names else []) + list(names)
        parts.append("*".join(factors))
    return " + ".join(parts)


@dataclass(frozen=True)
class TensorSpec:
    """One input or output of a block."""

    name: str
    dtype: torch.dtype
    rank: int
    rows: Polynomial
    cols: Polynomial
    accumulate: bool = False

    @staticmethod
    def of(raw: Mapping[str, Any]) -> "TensorSpec":
        rows, cols = raw["shape"]
        return TensorSpec(
            name=raw["name"],
            dtype=DTYPES[raw["dtype"]],
            rank=int(raw["rank"]),
            rows=_polynomial(rows),
            cols=_polynomial(cols),
            accumulate=bool(raw.get("accumulate", False)),
        )

    def axes(self) -> tuple[Polynomial, ...]:
        """The declared axes: none for a scalar, the one that is not 1 for a vector."""
        if self.rank == 0:
            return ()
        if self.rank == 1:
            return (self.cols,) if self.rows == ((1, ()),) else (self.rows,)
        return (self.rows, self.cols)

    def shape(self, dims: Mapping[str, Size]) -> list[Size]:
        """The torch shape for ``dims``."""
        if self.rank == 1:
            return [evaluate(self.rows, dims) * evaluate(self.cols, dims)]
        return [evaluate(axis, dims) for axis in self.axes()]

    def describe(self) -> str:
        """``bf16[M, 4096]``."""
        name = next(k for k, v in DTYPES.items() if v == self.dtype)
        return f"{name}[{', '.join(render(a) for a in self.axes())}]"


def describe_tensor(t: torch.Tensor) -> str:
    dtype = DTYPE_NAMES.get(t.dtype, str(t.dtype).removeprefix("torch."))
    return f"{dtype}[{', '.join(str(s) for s in t.shape)}] on {t.device}"


class Signature:
    """A block's inputs, outputs and run-time dims."""

    def __init__(self, block: str, raw: Mapping[str, Any]) -> None:
        self.block = block
        self.kind: str = raw["kind"]
        self.dims: tuple[str, ...] = tuple(raw["dims"])
        self.inputs: tuple[TensorSpec, ...] = tuple(TensorSpec.of(t) for t in raw["inputs"])
        self.outputs: tuple[TensorSpec, ...] = tuple(TensorSpec.of(t) for t in raw["outputs"])
        self.input_index: dict[str, int] = {t.name: i for i, t in enumerate(self.inputs)}
        # Dims by (dtype, shape, device) of every input: a training loop
        # calls a block with few distinct shapes, and checking them costs
        # more host time than the rest of a call.
        self._bound: dict[tuple[Any, ...], dict[str, Size]] = {}

    def arrange(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[torch.Tensor]:
        """The tensors in signature order, from positional and keyword arguments."""
        if not kwargs and len(args) == len(self.inputs) and all([isinstance(a, torch.Tensor) for a in args]):
            return list(args)
        if len(args) > len(self.inputs):
            raise TypeError(
                f"codac block {self.block!r}: takes {len(self.inputs)} inputs "
                f"({', '.join(t.name for t in self.inputs)}), got {len(args)} positional arguments"
            )
        slots: list[Any] = list(args) + [None] * (len(self.inputs) - len(args))
        for name, value in kwargs.items():
            index = self.input_index.get(name)
            if index is None:
                raise TypeError(
                    f"codac block {self.block!r}: no input {name!r} "
                    f"(inputs: {', '.join(t.name for t in self.inputs)})"
                )
            if index < len(args):
                raise TypeError(f"codac block {self.block!r}: input {name!r} given twice, by position and by name")
            slots[index] = value
        for spec, value in zip(self.inputs, slots):
            if value is None:
                raise TypeError(f"codac block {self.block!r}: input {spec.name!r} ({spec.describe()}) is missing")
            if not isinstance(value, torch.Tensor):
                raise TypeError(
                    f"codac block {self.block!r}: input {spec.name!r} must be a torch.Tensor "
                    f"({spec.describe()}), got {type(value).__name__}"
                )
        return slots

    def bind(self, tensors: Sequence[torch.Tensor]) -> dict[str, Size]:
        """Checks dtypes, ranks, devices and shapes; returns the run-time dims.

        A dim is read off the first input axis that is that dim times a
        constant; every axis must then agree.
        """
        try:
            key = tuple([(t.dtype, t.shape, t.device) for t in tensors])
            dims = self._bound.get(key)
        except TypeError:  # symbolic sizes are not hashable: check them each time
            return self._bind(tensors)
        if dims is None:
            dims = self._bind(tensors)
            if len(self._bound) >= 64:
                self._bound.clear()
            self._bound[key] = dims
        return dims

    def _bind(self, tensors: Sequence[torch.Tensor]) -> dict[str, Size]:
        device = tensors[0].device if tensors else None
        for spec, t in zip(self.inputs, tensors):
            if t.dtype != spec.dtype:
                raise TypeError(
                    f"codac block {self.block!r}: input {spec.name!r} expected {spec.describe()}, "
                    f"got {describe_tensor(t)}"
                )
            if t.dim() != spec.rank:
                raise ValueError(
                    f"codac block {self.block!r}: input {spec.name!r} expected {spec.describe()} "
                    f"({spec.rank} dimension(s)), got {describe_tensor(t)}"
                )
            if t.device != device:
                raise ValueError(
                    f"codac block {self.block!r}: input {spec.name!r} is on {t.device}, "
                    f"but {self.inputs[0].name!r} is on {device}; all inputs must be on one device"
                )
        dims: dict[str, Size] = {}
        source: dict[str, str] = {}
        for spec, t in zip(self.inputs, tensors):
            for poly, size in zip(spec.axes(), t.shape):
                if len(poly) == 1 and len(poly[0][1]) == 1:
                    coefficient, (name,) = poly[0]
                    if name not in dims and coefficient > 0:
                        if size % coefficient != 0:
                            raise ValueError(
                                f"codac block {self.block!r}: input {spec.name!r} expected {spec.describe()}, "
                                f"got {describe_tensor(t)}: {size} is not a multiple of {coefficient}"
                            )
                        dims[name] = size // coefficient
                        source[name] = spec.name
        for name in self.dims:
            if name not in dims:
                raise ValueError(f"codac block {self.block!r}: no input's shape gives the dimension {name!r}")
        for name, value in dims.items():
            if isinstance(value, int) and value <= 0:
                raise ValueError(
                    f"codac block {self.block!r}: dimension {name!r} = {value} from input {source[name]!r}; "
                    "dims must be positive"
                )
        for spec, t in zip(self.inputs, tensors):
            expected = spec.shape(dims)
            if list(t.shape) != expected:
                bound = ", ".join(f"{n} = {dims[n]} from {source[n]!r}" for n in self.dims)
                raise ValueError(
                    f"codac block {self.block!r}: input {spec.name!r} expected {spec.describe()} "
                    f"= [{', '.join(str(e) for e in expected)}]{f' ({bound})' if bound else ''}, "
                    f"got {describe_tensor(t)}"
                )
        return dims

    def empty_outputs(self, dims: Mapping[str, Size], device: torch.device) -> list[torch.Tensor]:
        """Uninitialized outputs for ``dims`` on ``device`` (also the fake
        implementations' results)."""
        return [torch.empty(spec.shape(dims), dtype=spec.dtype, device=device) for spec in self.outputs]
