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


# PyTorch's private accessor of the current stream's raw handle, which
# Inductor's generated code calls too; the public one costs a Stream object.
_RAW_STREAM = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _current_stream(index: int) -> int:
    """The raw handle of PyTorch's current stream on device ``index``."""
    if _RAW_STREAM is not None:
        return _RAW_STREAM(index)
    return torch.cuda.current_stream(index).cuda_stream


def _readable(shape: torch.Size, stride: tuple[int, ...]) -> bool:
    """Whether the kernels can read a tensor of this layout in place: a
    rank-2 tensor needs a unit column stride and a row stride of at least
    its column count, vectors and scalars must be contiguous. (A 16-bit
    input that is not 16-byte aligned is staged by the block itself.)"""
    if len(shape) == 2:
        rows, cols = shape
        return (cols <= 1 or stride[1] == 1) and (rows <= 1 or stride[0] >= cols)
    return len(shape) == 0 or shape[0] <= 1 or stride[0] == 1


def run_cuda(variant: "Variant", dims: Mapping[str, int], tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    device = tensors[0].device
    index = device.index if device.index is not None else torch.cuda.current_device()
    executor = variant.executor(index)
    ptrs, shapes, strides = [], [], []
    # Tensors copied to a readable layout must live until the kernels have
    # read them; like the workspace, the caching allocator orders their
    # reuse after this stream's work, so dropping them after the launch is safe.
    copies = []
    for t in tensors:
        shape, stride = t.shape, t.stride()
        if not _readable(shape, stride):
            t = t.contiguous()
            copies.append(t)
            stride = t.stride()
        ptrs.append(t.data_ptr())
        shapes.append(shape)
        strides.append(stride)
    outputs = variant.signature.empty_outputs(dims, device)
    for t in outputs:
        ptrs.append(t.data_ptr())
        shapes.append(t.shape)
        strides.append(t.stride())
    workspace: list[torch.Tensor] = []

    def alloc(nbytes: int) -> int:
        region = torch.empty(nbytes, dtype=torch.uint8, device=device)
        workspace.append(region)
        ptr = region.data_ptr()
        if ptr % _native.WORKSPACE_ALIGN:
            raise RuntimeError(f"codac: PyTorch gave a workspace at {ptr:#x}, not {_native.WORKSPACE_ALIGN}-byte aligned")
        return ptr

    executor.run(dims, ptrs, shapes, strides, _current_stream(index), alloc)
    return outputs
