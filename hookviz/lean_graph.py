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
  inside the clamp range, 0 elsewhere; a bool mask (1 byte per element, not 4) says where.

For these modules the hooks in ``hooks.capture_outputs`` run the module without recording and
attach one custom autograd node (``attach``) that keeps only that. The gradients are the same
numbers autograd computes (the same kernels: tests compare them bit for bit on the torchvision
zoo); everything else in the network keeps its usual autograd. Only exact module types are
handled: a subclass may override ``forward`` (timm's ``BatchNormAct2d`` adds an activation).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import torch
from torch import nn

Backward = Callable[[torch.Tensor], torch.Tensor]
# (module input, module output) -> the gradient map from d(score)/d(output) to d(score)/d(input).
Rule = Callable[[torch.Tensor, torch.Tensor], Backward]

_BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)
_CLAMPS = (nn.ReLU, nn.ReLU6, nn.Hardtanh)
HANDLED = frozenset((*_BATCH_NORMS, nn.Conv2d, *_CLAMPS))


def rule_for(module: nn.Module) -> Rule | None:
    """The lean backward for ``module``, or None when autograd's own must be used (an unknown
    type, trainable parameters, batch statistics, padding the rule does not cover)."""
    kind = type(module)
    if kind not in HANDLED:
        return None
    # _parameters directly: module.parameters() walks named_modules, too slow per module here.
    if any(p is not None and p.requires_grad for p in module._parameters.values()):
        return None
    if kind in _BATCH_NORMS:
        return _batch_norm_rule(module)
    if kind is nn.Conv2d:
        return _conv_rule(module)
    if kind in _CLAMPS:
        # ReLU is a clamp to [0, inf); Hardtanh and ReLU6 name their bounds.
        low, high = (0.0, None) if kind is nn.ReLU else (module.min_val, module.max_val)
        return _clamp_rule(low, high)
    return None


def _batch_norm_rule(module: nn.modules.batchnorm._BatchNorm) -> Rule | None:
    if module.training or module.running_var is None:
        return None  # batch statistics: the output depends on the whole batch, not affine

    def make(source: torch.Tensor, result: torch.Tensor) -> Backward:
        scale = _batch_norm_scale(module, source)
        return lambda grad: grad * scale

    return make


# BatchNorm module -> (the tensors and versions the scale was made from, scales by rank and
# dtype). Made once per module, not once per call: some 30 BatchNorms run per ResNet-50 forward.
_SCALES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _batch_norm_scale(
    module: nn.modules.batchnorm._BatchNorm, source: torch.Tensor
) -> torch.Tensor:
    """weight / sqrt(running_var + eps), shaped to broadcast over ``source``'s channels."""
    tensors = [t for t in (module.running_var, module.weight) if t is not None]
    made_from = (*((id(t), t._version) for t in tensors), module.eps)
    cached = _SCALES.get(module)
    if cached is None or cached[0] != made_from:
        cached = (made_from, {})
        _SCALES[module] = cached
    key = (source.dim(), source.dtype)
    scales = cached[1]
    if key not in scales:
        scale = torch.rsqrt(module.running_var + module.eps)
        if module.weight is not None:
            scale = scale * module.weight
        scales[key] = scale.reshape((1, -1) + (1,) * (source.dim() - 2)).to(source.dtype)
    return scales[key]


def _conv_rule(module: nn.Conv2d) -> Rule | None:
    if module.padding_mode != "zeros" or isinstance(module.padding, str):
        return None  # "same" and non-zero padding modes pad outside the convolution itself
    geometry = (list(module.stride), list(module.padding), list(module.dilation), module.groups)

    def make(source: torch.Tensor, result: torch.Tensor) -> Backward:
        # Read now: a parametrization (weight norm) computes the weight at each forward.
        weight, shape, dtype = module.weight, source.shape, source.dtype
        stride, padding, dilation, groups = geometry

        def backward(grad: torch.Tensor) -> torch.Tensor:
            # Under autocast the forward ran in the autocast dtype; run the transpose in it too.
            kernel = weight if weight.dtype == grad.dtype else weight.to(grad.dtype)
            # The input's values are not needed, only its shape: a one-element stand-in,
            # expanded (as torch.nn.grad.conv2d_input does).
            stand_in = grad.new_empty(1).expand(shape)
            grad_input = torch.ops.aten.convolution_backward(
                grad,
                stand_in,
                kernel,
                None,
                stride,
                padding,
                dilation,
                False,
                [0],
                groups,
                (True, False, False),
            )[0]
            return grad_input if grad_input.dtype == dtype else grad_input.to(dtype)

        return backward

    return make


def _clamp_rule(low: float, high: float | None) -> Rule:
    def make(source: torch.Tensor, result: torch.Tensor) -> Backward:
        # From the output, so in-place versions work too: strictly inside the range the output
        # equals the input, which is where autograd's own backward lets the gradient pass.
        if high is None and low == 0:
            # A ReLU output is 0 or positive (or NaN, which autograd also lets pass), so
            # "nonzero" is the test, and .bool() is 5x faster than a comparison here.
            inside = result.bool()
        else:
            inside = (result > low) & (result < high) if high is not None else result > low
        # Multiplying by uint8 is 3x faster than by bool (no type-promotion slow path).
        inside = inside.view(torch.uint8)
        return lambda grad: grad * inside

    return make


class _LeanNode(torch.autograd.Function):
    """Links ``result`` (computed without recording) to ``source`` with a given backward."""

    @staticmethod
    def forward(ctx, source, boxed_result, backward):
        result = boxed_result[0]
        if result is source:
            ctx.mark_dirty(source)  # in-place module: the input tensor itself is the output
        ctx.lean_backward = backward
        return result

    @staticmethod
    def backward(ctx, grad):
        return ctx.lean_backward(grad), None, None


def attach(source: torch.Tensor, result: torch.Tensor, rule: Rule) -> torch.Tensor:
    """``result`` (made under ``torch.no_grad`` from ``source``) as a graph node whose backward
    is the rule's: what the node keeps is only what that backward needs."""
    # Boxed: a tensor argument would be an input of the node, and returning an input that was
    # not marked dirty makes the output a view, which a following in-place op must not touch.
    return _LeanNode.apply(source, [result], rule(source, result))
