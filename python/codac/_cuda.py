"""Running a block's kernels on CUDA tensors.

Outputs and the one workspace region (scratch, partial, counter and staging
buffers) come from PyTorch's caching allocator on the current stream, the
kernels run on that stream in the device's primary context, and nothing
waits for them. Memory freed right after the launch is safe: the caching
allocator reuses it only for work ordered after it on the same stream.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

import torch

from . import _native

if TYPE_CHECKING:
    from ._program import Variant


def _acceptable(t: torch.Tensor) -> torch.Tensor:
    """``t``, or a contiguous copy when its layout is one the kernels can't
    read (a rank-2 tensor needs a unit column stride and a row stride of at
    least its column count; vectors and scalars must be contiguous). A
    16-bit input that is not 16-byte aligned is staged by the block itself."""
    if t.dim() == 2:
        rows, cols = t.shape
        row_stride, col_stride = t.stride()
        if (cols <= 1 or col_stride == 1) and (rows <= 1 or row_stride >= max(cols, 1)):
            return t
        return t.contiguous()
    return t if t.is_contiguous() else t.contiguous()


def run_cuda(variant: "Variant", dims: Mapping[str, int], tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    device = tensors[0].device
    index = device.index if device.index is not None else torch.cuda.current_device()
    executor = variant.executor(index)
    inputs = [_acceptable(t) for t in tensors]
    outputs = [
        torch.empty(spec.shape(dims), dtype=spec.dtype, device=device) for spec in variant.signature.outputs
    ]
    workspace: list[torch.Tensor] = []

    def alloc(nbytes: int) -> int:
        region = torch.empty(nbytes, dtype=torch.uint8, device=device)
        workspace.append(region)
        ptr = region.data_ptr()
        if ptr % _native.WORKSPACE_ALIGN:
            raise RuntimeError(f"codac: PyTorch gave a workspace at {ptr:#x}, not {_native.WORKSPACE_ALIGN}-byte aligned")
        return ptr

    everything = inputs + outputs
    stream = torch.cuda.current_stream(device).cuda_stream
    executor.run(
        dict(dims),
        [t.data_ptr() for t in everything],
        [tuple(t.shape) for t in everything],
        [t.stride() for t in everything],
        stream,
        alloc,
    )
    # Inputs copied to a new layout must live until the kernels have read
    # them; like the workspace, the caching allocator orders their reuse
    # after this stream's work.
    return outputs
