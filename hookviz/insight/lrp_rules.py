"""The rules of Layer-wise Relevance Propagation (Bach et al. 2015; Montavon et al. 2019), as
autograd functions whose backward carries relevance instead of a gradient.

Each function's forward computes what the operation it stands for computes; its backward takes
the relevance of that output and returns the relevance of the input (``lrp_trace`` puts them in
the model's forward). The quantity flowing backward is relevance itself, not a gradient that is
multiplied by an activation later: what reaches the input is the input's relevance, and what
reaches any tensor on the way is that tensor's (``relevance`` reads a layer's this way).

The rules, with zennit's names and definitions (zennit.rules; ``x+``/``x-`` the input's positive
and negative parts, ``W+``/``W-`` the weights', ``s(z)`` the stabilizer z + eps * sign(z), with
sign(0) = 1):

- ``epsilon``: R_in = x * W^T (R / s(x W + b)).
- ``zplus`` (alpha 1, beta 0): the positive contributions only, z = x+ W+ + x- W- + b+.
- ``alpha2beta1``: twice the positive contributions' share minus the negative contributions'.
- ``flat``: every input of a unit's field shares its relevance equally (weights and inputs
  taken as ones): the first layer's rule in the ``*_flat`` composites.
- Norm (sums, average pooling): each term's share of the sum.
- Pass (activations, normalisations not merged into a layer): relevance goes through unchanged.
- Gate (a product of a signal and a gate, as in squeeze-and-excitation): the signal takes all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

STABILIZER = 1e-6
LINEAR_RULES = ("epsilon", "zplus", "alpha2beta1", "flat")

# A linear operation with its weight and bias given: conv1d/2d/3d or linear, with its other
# arguments (stride, padding, ...) bound.
Call = Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor]


def stabilized(z: torch.Tensor, epsilon: float = STABILIZER) -> torch.Tensor:
    """``z`` moved away from zero by ``epsilon`` in its own direction (zero counts as
    positive): a denominator that is never zero and keeps its sign."""
    return z + ((z == 0).to(z) + z.sign()) * epsilon


@dataclass
class LinearLayer:
    """A convolution or dense layer met in the forward, as its rule needs it.

    Attributes:
        call: the operation with its weight and bias as arguments.
        weight, bias: its own parameters (bias None where it has none).
        rule: one of ``LINEAR_RULES``.
        merged: (scale, shift) of a BatchNorm that directly follows it, folded into the layer
            for the rule (y = scale * (x W + b) + shift), as zennit's canonizer merges it; the
            model's parameters are never changed.
    """

    call: Call
    weight: torch.Tensor
    bias: torch.Tensor | None
    rule: str
    merged: tuple[torch.Tensor, torch.Tensor] | None = field(default=None)

    def parameters(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The weight and bias the rule uses: the layer's, with a following BatchNorm
        merged in (a missing bias is zero)."""
        weight = self.weight.detach()
        out_channels = weight.shape[0]
        bias = (
            torch.zeros(out_channels, dtype=weight.dtype, device=weight.device)
            if self.bias is None
            else self.bias.detach()
        )
        if self.merged is None:
            return weight, bias
        scale, shift = self.merged
        shape = (-1,) + (1,) * (weight.dim() - 1)
        return weight * scale.reshape(shape), bias * scale + shift


def _share(
    call: Call,
    terms: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]],
    relevance: torch.Tensor,
) -> list[torch.Tensor]:
    """Each term's input times its part of the relevance: for terms (input, weight, bias)
    whose outputs add up to z, input * d(sum(output * R / s(z))) / d input, from one forward
    of each term and a single backward for all."""
    inputs = [x.detach().requires_grad_(True) for x, _, _ in terms]
    outputs = [call(x, w, b) for x, (_, w, b) in zip(inputs, terms, strict=True)]
    upper = relevance / stabilized(sum(outputs))
    gradients = torch.autograd.grad(outputs, inputs, grad_outputs=[upper] * len(outputs))
    return [x.detach() * g for x, g in zip(inputs, gradients, strict=True)]


def linear_relevance(layer: LinearLayer, x: torch.Tensor, relevance: torch.Tensor) -> torch.Tensor:
    """The relevance of a linear layer's input ``x`` given its output's, by ``layer.rule``
    (a term's bias counts in z, never in the gradient)."""
    weight, bias = layer.parameters()
    call = layer.call
    if layer.rule == "flat":  # (inputs and weights as ones, no bias; the share is not x's)
        ones = torch.ones_like(x)
        (flat,) = _share(call, [(ones, torch.ones_like(weight), None)], relevance)
        return flat
    if layer.rule == "epsilon":
        (share,) = _share(call, [(x, weight, bias)], relevance)
        return share
    positive, negative = x.clamp(min=0), x.clamp(max=0)
    w_plus, w_minus = weight.clamp(min=0), weight.clamp(max=0)
    # the positive contributions: x+ W+ and x- W- (with the bias's positive part)
    kept = sum(_share(call, [(positive, w_plus, bias.clamp(min=0)), (negative, w_minus, None)],
                      relevance))  # fmt: skip
    if layer.rule == "zplus":
        return kept
    # alpha 2, beta 1: the negative contributions x+ W- and x- W+ (with the bias's negative part)
    lost = sum(_share(call, [(positive, w_minus, bias.clamp(max=0)), (negative, w_plus, None)],
                      relevance))  # fmt: skip
    return 2.0 * kept - lost


class LinearRule(torch.autograd.Function):
    """A convolution or dense layer: its output forward, ``linear_relevance`` backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, layer: LinearLayer) -> torch.Tensor:  # type: ignore[override]
        ctx.layer = layer
        ctx.x = x.detach()
        return layer.call(x, layer.weight, layer.bias)

    @staticmethod
    def backward(ctx, relevance: torch.Tensor):  # type: ignore[override]
        with torch.enable_grad():
            return linear_relevance(ctx.layer, ctx.x, relevance), None


class PassRule(torch.autograd.Function):
    """An elementwise operation relevance goes through unchanged (an activation, a
    normalisation not merged into a layer, a scaling by a constant)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, output: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.shape = x.shape
        return output.clone()

    @staticmethod
    def backward(ctx, relevance: torch.Tensor):  # type: ignore[override]
        return relevance.reshape(ctx.shape) if relevance.shape != ctx.shape else relevance, None


class NormRule(torch.autograd.Function):
    """An operation linear in its one input without weights to speak of (average pooling, a
    mean): each input's share of every output it adds to."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, operation: Callable) -> torch.Tensor:  # type: ignore[override]
        ctx.x, ctx.operation = x.detach(), operation
        return operation(x)

    @staticmethod
    def backward(ctx, relevance: torch.Tensor):  # type: ignore[override]
        with torch.enable_grad():
            x = ctx.x.requires_grad_(True)
            z = ctx.operation(x)
            (gradient,) = torch.autograd.grad(z, x, grad_outputs=relevance / stabilized(z))
        return ctx.x * gradient, None


class SumRule(torch.autograd.Function):
    """The sum of two tensors (a residual connection): each term's share, broadcast terms
    summed back to their own shape."""

    @staticmethod
    def forward(ctx, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.a, ctx.b = a.detach().clone(), b.detach().clone()
        return a + b

    @staticmethod
    def backward(ctx, relevance: torch.Tensor):  # type: ignore[override]
        share = relevance / stabilized(ctx.a + ctx.b)
        return _to_shape(ctx.a * share, ctx.a.shape), _to_shape(ctx.b * share, ctx.b.shape)


class GateRule(torch.autograd.Function):
    """A product of a signal and a gate (the operand with fewer elements, broadcast over the
    signal: a squeeze-and-excitation's channel weights): the signal takes all the relevance,
    the gate none (Arras et al. 2017's rule for gates). Operands of one size share it."""

    @staticmethod
    def forward(ctx, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.shapes = (a.shape, b.shape)
        return a * b

    @staticmethod
    def backward(ctx, relevance: torch.Tensor):  # type: ignore[override]
        a_shape, b_shape = ctx.shapes
        a_size, b_size = a_shape.numel(), b_shape.numel()
        if a_size == b_size:
            half = relevance / 2
            return _to_shape(half, a_shape), _to_shape(half, b_shape)
        if a_size > b_size:
            return _to_shape(relevance, a_shape), torch.zeros(
                b_shape, dtype=relevance.dtype, device=relevance.device
            )
        return torch.zeros(a_shape, dtype=relevance.dtype, device=relevance.device), _to_shape(
            relevance, b_shape
        )


def _to_shape(relevance: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """``relevance`` of a broadcast result summed back onto an operand of ``shape``."""
    if relevance.shape == shape:
        return relevance
    extra = relevance.dim() - len(shape)
    summed = relevance.sum(dim=tuple(range(extra))) if extra > 0 else relevance
    dims = tuple(i for i, size in enumerate(shape) if size == 1 and summed.shape[i] != 1)
    return summed.sum(dim=dims, keepdim=True) if dims else summed
