"""The blocks as PyTorch operators, with autograd.

Three ``torch.library`` custom ops serve every block of every program, keyed
by a string naming the block (``"<program digest>:<block>"``):

* ``codac::forward(key, inputs) -> outputs``: the plain forward;
* ``codac::saving(key, inputs) -> outputs + saved``: the forward that also
  stores the tensors its backward reads (``codac explain --grad`` lists them);
* ``codac::backward(key, inputs) -> input gradients``: the backward block.

Their fake implementations compute output shapes from the signature, so
``torch.compile`` traces them without running anything, for any token count.
``codac::saving`` carries the autograd formula: its backward runs
``codac::backward``. In eager mode a call skips the dispatcher and the same
work runs through a ``torch.autograd.Function``, which costs less host time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence

import torch

from ._cuda import launch_cuda

if TYPE_CHECKING:
    from ._program import BlockFunction, Gradient, Variant

_BLOCKS: dict[str, "BlockFunction"] = {}


def register(fn: "BlockFunction") -> None:
    _BLOCKS[fn.key] = fn


def _block(key: str) -> "BlockFunction":
    fn = _BLOCKS.get(key)
    if fn is None:
        raise RuntimeError(f"codac: no block {key!r} is loaded in this process (load its program first)")
    return fn


def _gradient(fn: "BlockFunction") -> "Gradient":
    if fn.gradient is None:
        raise RuntimeError(f"codac block {fn.name!r} has no grad declaration")
    return fn.gradient


def _fake(variant: "Variant", tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    return variant.signature.empty_outputs(variant.signature.bind(list(tensors)), tensors[0].device)


@torch.library.custom_op("codac::forward", mutates_args=())
def forward_op(key: str, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    return _block(key).forward.run(list(inputs))


@torch.library.custom_op("codac::saving", mutates_args=())
def saving_op(key: str, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    return _gradient(_block(key)).saving.run(list(inputs))


@torch.library.custom_op("codac::backward", mutates_args=())
def backward_op(key: str, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    return _gradient(_block(key)).backward.run(list(inputs))


@forward_op.register_fake
def _(key: str, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    return _fake(_block(key).forward, inputs)


@saving_op.register_fake
def _(key: str, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    return _fake(_gradient(_block(key)).saving, inputs)


@backward_op.register_fake
def _(key: str, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    return _fake(_gradient(_block(key)).backward, inputs)


def _keep(gradient: "Gradient", tensors: Sequence[torch.Tensor], everything: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """What a differentiated call keeps for its backward: the forward inputs
    and saving-forward outputs the backward block reads, and nothing else."""
    return [tensors[i] for i in gradient.saved_inputs] + [everything[j] for j in gradient.saved_outputs]


def _backward_args(
    gradient: "Gradient",
    kept: Sequence[torch.Tensor],
    grads: Sequence[Optional[torch.Tensor]],
    shapes: Sequence[torch.Size],
    device: torch.device,
) -> list[torch.Tensor]:
    """The backward block's inputs from what ``_keep`` kept and the output
    gradients, in each output's dtype (zeros of the output's ``shapes`` for
    an output that received none)."""
    inputs = dict(zip(gradient.saved_inputs, kept))
    saved = dict(zip(gradient.saved_outputs, kept[len(gradient.saved_inputs) :]))
    args = []
    for (kind, j), spec in zip(gradient.sources, gradient.backward.signature.inputs):
        if kind == "input":
            args.append(inputs[j])
        elif kind == "saved":
            args.append(saved[j])
        else:
            g = grads[j]
            if g is None:
                g = torch.zeros(shapes[j], dtype=spec.dtype, device=device)
            args.append(g if g.dtype == spec.dtype else g.to(spec.dtype))
    return args


def _input_grads(gradient: "Gradient", n_inputs: int, dinputs: Sequence[torch.Tensor]) -> list[Optional[torch.Tensor]]:
    grads: list[Optional[torch.Tensor]] = [None] * n_inputs
    for i, o in gradient.wrt:
        grads[i] = dinputs[o]
    return grads


def _save(ctx: Any, key: str, tensors: Sequence[torch.Tensor], everything: Sequence[torch.Tensor]) -> None:
    """Records on ``ctx`` what the backward of a saving-forward call needs."""
    gradient = _gradient(_block(key))
    ctx.key = key
    ctx.n_inputs = len(tensors)
    ctx.shapes = [o.shape for o in everything[: gradient.n_outputs]]
    ctx.device = tensors[0].device
    ctx.save_for_backward(*_keep(gradient, tensors, everything))


def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    key, tensors = inputs
    _save(ctx, key, tensors, output)
    ctx.mark_non_differentiable(*output[_gradient(_block(key)).n_outputs :])


def _backward(ctx: Any, grads: list[Optional[torch.Tensor]]) -> tuple[None, list[Optional[torch.Tensor]]]:
    gradient = _gradient(_block(ctx.key))
    args = _backward_args(gradient, ctx.saved_tensors, grads, ctx.shapes, ctx.device)
    dinputs = torch.ops.codac.backward(ctx.key, args)
    return None, _input_grads(gradient, ctx.n_inputs, dinputs)


saving_op.register_autograd(_backward, setup_context=_setup_context)


class _Eager(torch.autograd.Function):
    """The eager path of a differentiated call (no dispatcher round trips).
    ``layout`` is the saving forward's layout of CUDA tensors (``_cuda``),
    or None to let the variant find it (or run on the CPU)."""

    @staticmethod
    def forward(ctx: Any, fn: "BlockFunction", layout: Any, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:  # type: ignore[override]
        gradient = _gradient(fn)
        everything = gradient.saving.run(list(tensors)) if layout is None else launch_cuda(layout, list(tensors))
        _save(ctx, fn.key, tensors, everything)
        # The saved tensors stay intermediates of the call, not outputs:
        # autograd's bookkeeping per output costs host time.
        return tuple(everything[: gradient.n_outputs])

    @staticmethod
    def backward(ctx: Any, *grads: Optional[torch.Tensor]) -> tuple[Optional[torch.Tensor], ...]:  # type: ignore[override]
        gradient = _gradient(_block(ctx.key))
        args = _backward_args(gradient, ctx.saved_tensors, grads, ctx.shapes, ctx.device)
        dinputs = gradient.backward.run(args)
        return (None, None, *_input_grads(gradient, ctx.n_inputs, dinputs))


def _needs_grad(fn: "BlockFunction", tensors: Sequence[torch.Tensor], grad_mode: bool) -> bool:
    if not grad_mode:
        return False
    wanted = [i for i, t in enumerate(tensors) if t.requires_grad]
    if not wanted:
        return False
    gradient = fn.gradient
    missing = [fn.signature.inputs[i].name for i in wanted if gradient is None or i not in gradient.differentiable]
    if missing:
        declared = "no grad declaration" if gradient is None else "a grad declaration without them"
        raise ValueError(
            f"codac block {fn.name!r}: input(s) {', '.join(repr(m) for m in missing)} require grad, but the "
            f"block has {declared}; add them to the block's `grad ... wrt (...)`, or pass them detached"
        )
    return True


def call(fn: "BlockFunction", tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Runs ``fn`` on ``tensors``: the saving forward with autograd when a
    differentiated input requires grad, else the plain forward.

    An eager call on CUDA tensors first tries the block's latest call: the
    same grad mode and tensors its layout's guard accepts (dtype, shape,
    strides, device and requires_grad alike) take the same variant and
    layout, with nothing checked again."""
    if torch.compiler.is_compiling():
        if _needs_grad(fn, tensors, torch.is_grad_enabled()):
            return list(torch.ops.codac.saving(fn.key, tensors)[: _gradient(fn).n_outputs])
        return list(torch.ops.codac.forward(fn.key, tensors))
    grad_mode = torch.is_grad_enabled()
    latest = fn.latest_call
    if latest is not None and latest[0] is grad_mode and len(tensors) == latest[1] and latest[2](*tensors):
        if latest[4]:
            return list(_Eager.apply(fn, latest[3], *tensors))
        return launch_cuda(latest[3], tensors)
    grad = _needs_grad(fn, tensors, grad_mode)
    variant = _gradient(fn).saving if grad else fn.forward
    layout = None
    if tensors and tensors[0].device.type == "cuda":
        layout = variant.cuda_layout(tensors)
        # A layout's guard was built for its first call's tensors; only
        # when it accepts these does it vouch for their requires_grad, on
        # which the choice of variant rests.
        guard = layout.guard
        fn.latest_call = (grad_mode, len(tensors), guard, layout, grad) if guard is not None and guard(*tensors) else None
    if grad:
        return list(_Eager.apply(fn, layout, *tensors))
    return variant.run(tensors) if layout is None else launch_cuda(layout, tensors)
