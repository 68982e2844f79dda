"""How much of the model's input each layer's cell sees: its receptive field, in input pixels,
recorded from the geometry of the modules as one forward pass runs them.

A convolution or pooling of kernel k and dilation d widens the field of its input by
(k - 1) * d * jump, where jump is how many input pixels one step on its input's grid spans
(the model input's size over that grid's). A tensor the recorder did not see made (a residual
sum, an activation applied in place) is given the widest field recorded so far on a grid of its
size: a sum sees what its widest branch sees. Attention over all tokens sees the whole input
from then on; windowed attention (Swin) is not followed, and its layers' fields are unknown.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from ..core.hooks import ModuleHook, hooks_on

Field = tuple[int, int]  # (height, width) in the model input's pixels


class FieldRecorder:
    """Receptive fields of the named layers on a model input of ``input_size`` (H, W), filled
    in while one forward pass runs inside ``recording``; ``fields[name]`` is None where it is
    unknown."""

    def __init__(self, input_size: tuple[int, int]) -> None:
        self.input_size = input_size
        self.fields: dict[str, Field | None] = {}
        self._widest: dict[tuple[int, int], Field] = {}  # grid size -> widest field on it
        self._global = False  # an attention over every token has run
        self._unknown = False  # a windowed attention has run
        self._latest: Field | None = None  # the field of the last convolution or pooling

    def field_of(self, tensor: Any) -> Field | None:
        """The field of a (N, C, h, w) tensor made so far, or None."""
        if self._unknown:
            return None
        if self._global:
            return self.input_size
        if not isinstance(tensor, torch.Tensor) or tensor.dim() != 4:
            return None
        grid = (int(tensor.shape[-2]), int(tensor.shape[-1]))
        if grid == self.input_size and grid not in self._widest:
            return (1, 1)
        return self._widest.get(grid)

    def _widen(self, module: nn.Module, inputs: tuple[Any, ...], output: Any) -> None:
        if not inputs or not isinstance(output, torch.Tensor) or output.dim() != 4:
            return
        before = self.field_of(inputs[0])
        if before is None or not isinstance(inputs[0], torch.Tensor) or inputs[0].dim() != 4:
            return
        kernel, dilation = _pair(module.kernel_size), _pair(getattr(module, "dilation", 1))
        jumps = [self.input_size[i] / max(int(inputs[0].shape[-2 + i]), 1) for i in (0, 1)]
        after = tuple(
            min(self.input_size[i], round(before[i] + (kernel[i] - 1) * dilation[i] * jumps[i]))
            for i in (0, 1)
        )
        grid = (int(output.shape[-2]), int(output.shape[-1]))
        known = self._widest.get(grid, (0, 0))
        self._widest[grid] = (max(known[0], after[0]), max(known[1], after[1]))
        self._latest = self._widest[grid]

    def _attend(self, module: nn.Module, inputs: tuple[Any, ...], output: Any) -> None:
        if getattr(module, "window_size", None) is not None:
            self._unknown = True
        else:
            self._global = True

    def _name(self, name: str) -> Any:
        def record(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> None:
            made = output[0] if isinstance(output, (tuple, list)) and output else output
            self.fields[name] = self._field_of_output(made)

        return record

    def _field_of_output(self, made: Any) -> Field | None:
        if self._unknown:
            return None
        if self._global:
            return self.input_size
        grid = made.dim() == 4 if isinstance(made, torch.Tensor) else False
        # tokens before any attention, a grid no convolution made (channels last, an
        # upsampling): what the last convolution or pooling saw
        return (self.field_of(made) if grid else None) or self._latest


@contextmanager
def recording(
    model: nn.Module, layers: Mapping[str, nn.Module], recorder: FieldRecorder
) -> Iterator[FieldRecorder]:
    """Fill ``recorder`` with the receptive fields of ``layers`` (name -> module) during the
    forward passes run inside the block."""
    hooks = []
    for module in model.modules():
        if isinstance(module, (nn.Conv2d, nn.MaxPool2d, nn.AvgPool2d)):
            hooks.append(ModuleHook(module, recorder._widen))
        elif _is_attention(module):
            hooks.append(ModuleHook(module, recorder._attend))
    # (after the geometry's hooks: a layer that is itself a convolution has widened first)
    hooks += [ModuleHook(module, recorder._name(name)) for name, module in layers.items()]
    with hooks_on(hooks):
        yield recorder


def _is_attention(module: nn.Module) -> bool:
    """Attention among tokens: torch's, or a model's own module named so (timm's, Swin's)."""
    return isinstance(module, nn.MultiheadAttention) or (
        type(module).__name__.endswith("Attention") and hasattr(module, "qkv")
    )


def _pair(value: Any) -> tuple[int, int]:
    if isinstance(value, int):
        return (value, value)
    return (int(value[0]), int(value[1]))
