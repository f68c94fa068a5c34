"""``codac.nn.Block``: a block as an ``nn.Module`` that owns its weights.

The inputs named in ``params`` become ``nn.Parameter``s of the module, so
optimizers, ``state_dict``, ``torch.compile`` and FSDP2's ``fully_shard``
treat them like any module's weights; the module's ``forward`` takes the
block's other inputs, in signature order or by name.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence, Union

import torch
from torch import nn

from ._program import BlockFunction, Program


class Block(nn.Module):
    """A codac block whose weight-like inputs are parameters of this module.

    Parameters are created with the block's declared dtype and shape (which
    must not depend on run-time dims) and initialized by ``reset_parameters``:
    vectors (norm gains) to ones, matrices ``[out, in]`` like ``nn.Linear``
    (uniform in ±1/sqrt(in)). Copy trained weights in with
    ``load_state_dict`` or under ``torch.no_grad()``.
    """

    def __init__(
        self,
        program: Program,
        name: str,
        params: Sequence[str],
        *,
        device: Optional[Union[torch.device, str]] = None,
    ) -> None:
        super().__init__()
        if not isinstance(program, Program):
            raise TypeError(f"codac.nn.Block: program must be a codac.Program, got {type(program).__name__}")
        self.fn: BlockFunction = program.block(name)
        signature = self.fn.signature
        if isinstance(params, str):
            raise TypeError("codac.nn.Block: params must be a sequence of input names, not one string")
        for p in params:
            if p not in signature.input_index:
                raise ValueError(
                    f"codac.nn.Block: params names {p!r}, which is not an input of block {name!r} "
                    f"(inputs: {', '.join(t.name for t in signature.inputs)})"
                )
        if len(set(params)) != len(params):
            raise ValueError(f"codac.nn.Block: params names an input twice: {list(params)}")
        self.param_names: tuple[str, ...] = tuple(params)
        self.input_names: tuple[str, ...] = tuple(t.name for t in signature.inputs if t.name not in params)
        for p in params:
            spec = signature.inputs[signature.input_index[p]]
            try:
                shape = [int(s) for s in spec.shape({})]
            except KeyError as missing:
                raise ValueError(
                    f"codac.nn.Block: parameter {p!r} is {spec.describe()}, whose shape depends on the run-time "
                    f"dim {missing.args[0]!r}; fix it with codac.load(..., dims=...) or pass it as an input"
                ) from None
            if not spec.dtype.is_floating_point:
                raise ValueError(f"codac.nn.Block: parameter {p!r} is {spec.describe()}, not a float tensor")
            self.register_parameter(p, nn.Parameter(torch.empty(shape, dtype=spec.dtype, device=device)))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            for p in self.param_names:
                weight = getattr(self, p)
                if weight.dim() <= 1:
                    weight.fill_(1.0)
                else:
                    bound = 1.0 / math.sqrt(weight.shape[-1])
                    weight.uniform_(-bound, bound)

    def forward(self, *args: Any, **kwargs: Any) -> Union[torch.Tensor, tuple[torch.Tensor, ...]]:
        if len(args) > len(self.input_names):
            raise TypeError(
                f"codac.nn.Block {self.fn.name!r} takes {len(self.input_names)} inputs "
                f"({', '.join(self.input_names)}), got {len(args)} positional arguments"
            )
        named = dict(zip(self.input_names, args))
        for key, value in kwargs.items():
            if key in self.param_names:
                raise TypeError(f"codac.nn.Block {self.fn.name!r}: {key!r} is a parameter of the module, not an input")
            if key in named:
                raise TypeError(f"codac.nn.Block {self.fn.name!r} got input {key!r} twice")
            named[key] = value
        for p in self.param_names:
            named[p] = getattr(self, p)
        return self.fn(**named)

    def extra_repr(self) -> str:
        return f"block={self.fn.name!r}, inputs=({', '.join(self.input_names)})"
