"""Running a block on CPU tensors through codac's exact interpreter.

The interpreter computes in float64 and rounds to each tensor's storage
type where the program stores it, as the kernels do. It is slow: meant for
small shapes, debugging and tests on machines without a GPU.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

import numpy as np
import torch

ONE = ((1, ()),)

if TYPE_CHECKING:
    from ._program import Variant


def run_cpu(variant: "Variant", dims: Mapping[str, int], tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    signature = variant.signature
    inputs = {}
    for spec, t in zip(signature.inputs, tensors):
        if spec.rank == 2:
            rows, cols = int(t.shape[0]), int(t.shape[1])
        elif spec.rank == 1 and spec.cols == ONE:
            rows, cols = int(t.numel()), 1
        elif spec.rank == 1:
            rows, cols = 1, int(t.numel())
        else:
            rows, cols = 1, 1
        data = t.detach().to(torch.float64).contiguous().numpy().tobytes()
        inputs[spec.name] = (rows, cols, data)
    bound = {name: int(value) for name, value in dims.items()}
    results = variant.program._native.eval(variant.variant, variant.block, bound, inputs, True)
    outputs = []
    for spec in signature.outputs:
        rows, cols, data = results[spec.name]
        values = np.frombuffer(data, dtype=np.float64).copy()
        shape = [int(s) for s in spec.shape(bound)]
        outputs.append(torch.from_numpy(values).reshape(shape).to(spec.dtype))
    return outputs
