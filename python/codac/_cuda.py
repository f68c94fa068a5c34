"""Running a block's kernels on CUDA tensors.

Outputs and the one workspace region (scratch, partial, counter and staging
buffers) come from PyTorch's caching allocator on the current stream, the
kernels run on that stream in the device's primary context, and nothing
waits for them. Memory freed right after the launch is safe: the caching
allocator reuses it only for work ordered after it on the same stream.

A workspace of at most a megabyte stays with its layout and stream for the
next call there (the stream orders that call after this one), which saves
small calls an allocation; larger ones are allocated per call.

A training loop calls a block with tensors of the same dtypes, shapes,
strides and device step after step. The first call with one such layout
checks it (``Signature.bind`` and the extension's checks) and keeps what
every later call needs: the output shapes, which inputs must be copied to a
readable layout, and the extension's launch plan. A later call only reads
its tensors' addresses.

Finding a call's layout by a key of every tensor's dtype, shape, strides
and device costs a few microseconds of Python. So each variant first tries
the layout of its latest call with a guard from PyTorch's own compiled
guard code (``torch._C._dynamo.guards.TensorGuards``, which ``torch.compile``
checks its graphs' inputs with): one C++ call checks the same properties
(and requires_grad, which only makes a stale guard miss more often). A
miss, or a PyTorch without that class, takes the keyed path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Hashable, Optional

import torch

from . import _native

if TYPE_CHECKING:
    from ._program import Variant


# PyTorch's private accessor of the current stream's raw handle, which
# Inductor's generated code calls too; the public one costs a Stream object.
_RAW_STREAM = getattr(torch._C, "_cuda_getCurrentRawStream", None)

# Layouts a block keeps; a caller cycling through more starts over.
_LAYOUTS = 64

# The largest workspace a layout keeps from call to call on one stream.
# Allocating it costs a small call a few microseconds of its host time;
# a large workspace belongs to a large call, whose kernels take far
# longer, and keeping it would hold memory between calls.
_KEPT_WORKSPACE_BYTES = 1 << 20


try:
    from torch._C._dynamo.guards import TensorGuards as _TensorGuards
except ImportError:  # a PyTorch without it: every call takes the keyed path
    _TensorGuards = None


def layout_guard(tensors: list[torch.Tensor]) -> Optional[Callable[..., bool]]:
    """A C++ check that as many tensors as ``tensors`` have their dtypes,
    shapes, strides and devices (its ``check(*tensors)``, False for
    anything else, and an error for another count), or None where PyTorch
    offers none that this version can build."""
    if _TensorGuards is None:
        return None
    try:
        # Each axis's size and stride as it must be (None would accept any).
        sizes = [list(t.shape) for t in tensors]
        strides = [list(t.stride()) for t in tensors]
        guard: Any = _TensorGuards(*tensors, dynamic_dims_sizes=sizes, dynamic_dims_strides=strides)
        return guard.check if guard.check(*tensors) else None
    except Exception:  # a changed private signature: the keyed path still works
        return None


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


class _Layout:
    """What the calls with one layout of tensors share."""

    __slots__ = ("device", "index", "executor", "copies", "outputs", "native", "kept", "guard")

    def __init__(self, variant: "Variant", tensors: list[torch.Tensor]) -> None:
        dims = variant.signature.bind(tensors)
        self.device = tensors[0].device
        self.index = self.device.index if self.device.index is not None else torch.cuda.current_device()
        self.executor = variant.executor(self.index)
        # Inputs the kernels cannot read in place, copied to a contiguous
        # tensor each call.
        self.copies = tuple(i for i, t in enumerate(tensors) if not _readable(t.shape, t.stride()))
        self.outputs = [(tuple(spec.shape(dims)), spec.dtype) for spec in variant.signature.outputs]
        readable = _copied(tensors, self.copies)
        outputs = self.empty_outputs()
        everything = readable + outputs
        # Per stream handle: a small workspace region and its (address,
        # bytes), reused by the layout's later calls on that stream, which
        # the stream orders after the calls that used it before.
        self.kept: dict[int, tuple[torch.Tensor, tuple[int, int]]] = {}
        # Recognises this layout's tensors when it is the variant's latest
        # (built once: building one costs more than a call).
        self.guard = layout_guard(tensors)
        self.native = self.executor.layout(
            dict(dims),
            [t.data_ptr() for t in everything],
            [list(t.shape) for t in everything],
            [list(t.stride()) for t in everything],
        )

    def empty_outputs(self) -> list[torch.Tensor]:
        return [torch.empty(shape, dtype=dtype, device=self.device) for shape, dtype in self.outputs]


def _copied(tensors: list[torch.Tensor], copies: tuple[int, ...]) -> list[torch.Tensor]:
    """``tensors`` with those at ``copies`` made contiguous. The copies must
    live until the kernels have read them; like the workspace, the caching
    allocator orders their reuse after this stream's work, so dropping them
    after the launch is safe."""
    if not copies:
        return tensors
    tensors = list(tensors)
    for i in copies:
        tensors[i] = tensors[i].contiguous()
    return tensors


def find_layout(variant: "Variant", tensors: list[torch.Tensor]) -> _Layout:
    """The layout of ``tensors`` (CUDA tensors of one device), checked and
    planned on its first call, and made the variant's latest."""
    key: Hashable = tuple([(t.dtype, t.shape, t.stride(), t.device) for t in tensors])
    layouts: dict[Hashable, _Layout] = variant.layouts
    layout = layouts.get(key)
    if layout is None:
        layout = _Layout(variant, tensors)
        if len(layouts) >= _LAYOUTS:
            layouts.clear()
        layouts[key] = layout
    variant.latest_layout = None if layout.guard is None else (layout.guard, layout, len(tensors))
    return layout


def launch_cuda(layout: _Layout, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Runs the block on ``tensors``, which have ``layout``; returns fresh
    outputs."""
    tensors = _copied(tensors, layout.copies)
    outputs = layout.empty_outputs()
    ptrs = [t.data_ptr() for t in tensors]
    ptrs += [t.data_ptr() for t in outputs]
    stream = _current_stream(layout.index)
    kept = layout.kept.get(stream)
    workspace: list[torch.Tensor] = []

    def alloc(nbytes: int, reusable: bool) -> int:
        region = torch.empty(nbytes, dtype=torch.uint8, device=layout.device)
        ptr = region.data_ptr()
        if ptr % _native.WORKSPACE_ALIGN:
            raise RuntimeError(f"codac: PyTorch gave a workspace at {ptr:#x}, not {_native.WORKSPACE_ALIGN}-byte aligned")
        if reusable and nbytes <= _KEPT_WORKSPACE_BYTES:
            layout.kept[stream] = (region, (ptr, nbytes))
        else:
            workspace.append(region)
        return ptr

    layout.executor.launch(layout.native, ptrs, stream, alloc, kept[1] if kept is not None else (0, 0))
    return outputs

