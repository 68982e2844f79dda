"""A leaner autograd graph from the hooked layer to the scores, for frozen networks.

Grad-CAM needs the gradient of a score with respect to one layer's output, so autograd records
every op downstream of that layer. By default each op saves what *any* of its gradients needs,
and the weight gradients need the inputs: an eval-mode BatchNorm saves its whole input, a
convolution its input, a ReLU its output, all in float32. On ResNet-50 at ``layer2`` that is
about 23 MB per image kept until the backward, twice what a plain inference forward needs.

With frozen weights only the gradient with respect to the input is ever asked for, and for the
three most common modules of a CNN it needs much less:

- ``BatchNorm`` in eval mode is a per-channel affine map: the gradient is ``grad * scale``,
  one number per channel.
- ``Conv2d`` (zero padding): the gradient is a transposed convolution of ``grad`` with the
  weight; the input's values are not needed, only its shape.
- ``ReLU`` / ``ReLU6`` / ``Hardtanh``: the gradient is ``grad`` where the output lies strictly
  inside the clamp range, 0 elsewhere; a 1-byte mask (not 4 bytes per element) says where.

For these modules the hooks in ``hooks.capture_outputs`` run the module without recording and
attach one custom autograd node (``attach``) that keeps only that. The gradients are the same
numbers autograd computes (the same kernels: tests compare them bit for bit on the torchvision
zoo); everything else in the network keeps its usual autograd. Only exact module types are
handled: a subclass may override ``forward`` (timm's ``BatchNormAct2d`` adds an activation).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

_BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)
CLAMPS = (nn.ReLU, nn.ReLU6, nn.Hardtanh)
HANDLED = frozenset((*_BATCH_NORMS, nn.Conv2d, *CLAMPS))
# Resolved once: looking the overload up through torch.ops on every backward costs microseconds.
_CONV_BACKWARD = torch.ops.aten.convolution_backward.default

# A few hundred of these run per forward, so they allocate as little as they can: every Python
# object made here counts towards the garbage collector's next pass, which in a process that
# holds a whole network (and a Streamlit server) costs milliseconds.
# Rule: (module, its input, its output computed without recording) -> (the backward function,
# what it needs kept): the node calls backward(kept, grad).
Rule = Callable[[nn.Module, torch.Tensor, torch.Tensor], Any]


def rule_for(module: nn.Module) -> Rule | None:
    """What the lean node of ``module`` keeps, or None when autograd's own node must be used
    (an unknown type, trainable parameters, batch statistics, padding the rule does not cover)."""
    kind = type(module)
    if kind not in HANDLED:
        return None
    # _parameters directly: module.parameters() walks named_modules, too slow per module here.
    if any(p is not None and p.requires_grad for p in module._parameters.values()):
        return None
    if kind in _BATCH_NORMS:
        # Batch statistics (training, or no running stats) make the output depend on the whole
        # batch: not an affine map of each input.
        return None if module.training or module.running_var is None else _batch_norm_keeps
    if kind is nn.Conv2d:
        # "same" and non-zero padding modes pad outside the convolution itself.
        plain_padding = module.padding_mode == "zeros" and not isinstance(module.padding, str)
        return _conv_keeps if plain_padding else None
    return _relu_keeps if kind is nn.ReLU else _clamp_keeps


# --- BatchNorm (eval): y = scale * x + shift per channel, so dy/dx = scale.


def _batch_norm_keeps(module: nn.Module, source: torch.Tensor, result: torch.Tensor) -> Any:
    return _batch_norm_backward, _batch_norm_scale(module, source)


class _ScaleCache:
    """weight / sqrt(running_var + eps) of one BatchNorm, remade when those tensors change."""

    __slots__ = ("eps", "module", "scales", "var", "var_version", "weight", "weight_version")

    def __init__(self, module: nn.Module) -> None:
        key = id(module)
        # The entry goes when the module does, so a later module with the same id starts fresh.
        self.module = weakref.ref(module, lambda _: _SCALES.pop(key, None))
        self.var, self.weight, self.eps = module.running_var, module.weight, module.eps
        self.var_version = self.var._version
        self.weight_version = None if self.weight is None else self.weight._version
        self.scales: dict[tuple[int, torch.dtype], torch.Tensor] = {}

    def fresh_for(self, module: nn.Module) -> bool:
        weight = module.weight
        return (
            self.module() is module
            and module.running_var is self.var
            and self.var._version == self.var_version
            and weight is self.weight
            and (weight is None or weight._version == self.weight_version)
            and module.eps == self.eps
        )


# id(BatchNorm) -> its scales: made once per module, not once per call.
_SCALES: dict[int, _ScaleCache] = {}


def _batch_norm_scale(module: nn.Module, source: torch.Tensor) -> torch.Tensor:
    """weight / sqrt(running_var + eps), shaped to broadcast over ``source``'s channels."""
    cache = _SCALES.get(id(module))
    if cache is None or not cache.fresh_for(module):
        cache = _SCALES[id(module)] = _ScaleCache(module)
    key = (source.dim(), source.dtype)
    scale = cache.scales.get(key)
    if scale is None:
        scale = torch.rsqrt(module.running_var + module.eps)
        if module.weight is not None:
            scale = scale * module.weight
        scale = scale.reshape((1, -1) + (1,) * (source.dim() - 2)).to(source.dtype)
        cache.scales[key] = scale
    return scale


def _batch_norm_backward(scale: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    return grad * scale


# --- Conv2d (zero padding): dy/dx is the transposed convolution with the same weight; the
# input's values are not needed, only its shape.


def _conv_keeps(module: nn.Module, source: torch.Tensor, result: torch.Tensor) -> Any:
    # The weight is read now: a parametrization (weight norm) computes it at each forward.
    return _conv_backward, (module, module.weight, source.shape, source.dtype)


def _conv_backward(kept: tuple, grad: torch.Tensor) -> torch.Tensor:
    module, weight, shape, dtype = kept
    # Under autocast the forward ran in the autocast dtype; run the transpose in it too.
    if weight.dtype != grad.dtype:
        weight = weight.to(grad.dtype)
    # A one-element stand-in expanded to the input's shape, as torch.nn.grad.conv2d_input does.
    stand_in = grad.new_empty(1).expand(shape)
    grad_input = _CONV_BACKWARD(
        grad,
        stand_in,
        weight,
        None,
        module.stride,
        module.padding,
        module.dilation,
        False,
        [0],
        module.groups,
        (True, False, False),
    )[0]
    return grad_input if grad_input.dtype == dtype else grad_input.to(dtype)


# --- ReLU / ReLU6 / Hardtanh: the gradient passes where the output lies strictly inside the
# clamp range (there the output equals the input, which is autograd's own rule), 0 elsewhere.
# Read from the output, so in-place modules work too; kept as 1 byte per element, not 4.


def _relu_keeps(module: nn.Module, source: torch.Tensor, result: torch.Tensor) -> Any:
    # A ReLU output is 0 or positive (or NaN, which autograd also lets pass), so "nonzero" is
    # the test, and .bool() is 5x faster than a comparison. uint8, because multiplying by it
    # is 3x faster than by bool (no type-promotion slow path).
    return _mask_backward, result.bool().view(torch.uint8)


def _clamp_keeps(module: nn.Module, source: torch.Tensor, result: torch.Tensor) -> Any:
    inside = (result > module.min_val) & (result < module.max_val)
    return _mask_backward, inside.view(torch.uint8)


def _mask_backward(mask: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    return grad * mask


class _LeanNode(torch.autograd.Function):
    """Links ``result`` (computed without recording) to ``source``; keeps only what its
    backward needs."""

    @staticmethod
    def forward(ctx, source, box, backward, kept):
        result = box[0]
        if result is source:
            ctx.mark_dirty(source)  # in-place module: the input tensor itself is the output
        ctx.lean_backward, ctx.kept = backward, kept
        return result

    @staticmethod
    def backward(ctx, grad):
        return ctx.lean_backward(ctx.kept, grad), None, None, None


def attach(
    module: nn.Module, source: torch.Tensor, result: torch.Tensor, rule: Rule
) -> torch.Tensor:
    """``result`` (made by ``module`` under ``torch.no_grad`` from ``source``) as a graph node
    that keeps only what the rule says its backward needs."""
    backward, kept = rule(module, source, result)
    # Boxed: a tensor argument would be an input of the node, and returning an input that was
    # not marked dirty makes the output a view, which a following in-place op must not touch.
    return _LeanNode.apply(source, [result], backward, kept)
