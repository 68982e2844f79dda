"""Guided backpropagation's and deconvolution's ReLU rules, for one call.

Both change only how a gradient passes a ReLU (Springenberg et al. 2015, arXiv:1412.6806; Zeiler
and Fergus 2014, arXiv:1311.2901):

    plain          dL/dx = g * [x > 0]
    guided         dL/dx = max(g, 0) * [x > 0]
    deconvolution  dL/dx = max(g, 0)

with g the gradient arriving at the ReLU's output. As Captum does, the rule applies to the
model's ``nn.ReLU`` modules (a functional ``relu`` inside a module's forward is left as it is).

``relu_rule(model, rule)`` swaps each ``nn.ReLU`` for a module applying the rule, and puts the
original modules back when the block ends, also after an error: the model is the same object
tree after as before. The caller holds the model's lock, so no other analysis runs through the
swapped model meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

import torch
from torch import nn

Rule = Literal["guided", "deconvolution"]


class _GuidedReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        (x,) = ctx.saved_tensors
        return g.clamp(min=0) * (x > 0).to(g.dtype)


class _DeconvolutionReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return g.clamp(min=0)


class _RuledReLU(nn.Module):
    """A ReLU whose backward follows ``rule`` (never in place: its input is kept for the
    backward)."""

    def __init__(self, rule: Rule) -> None:
        super().__init__()
        self.function = _GuidedReLU if rule == "guided" else _DeconvolutionReLU

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.function.apply(x)


@contextmanager
def relu_rule(model: nn.Module, rule: Rule) -> Iterator[int]:
    """Within the block, every ``nn.ReLU`` of ``model`` passes gradients by ``rule``; yields
    how many ReLU modules there are (0: the rule changes nothing, the model has none)."""
    swapped: list[tuple[nn.Module, str, nn.Module]] = []
    try:
        for parent in list(model.modules()):
            for name, child in list(parent.named_children()):
                if type(child) is nn.ReLU:
                    swapped.append((parent, name, child))
                    setattr(parent, name, _RuledReLU(rule))
        yield len(swapped)
    finally:
        for parent, name, child in reversed(swapped):
            setattr(parent, name, child)
