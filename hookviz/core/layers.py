"""Layer discovery: which modules of a model can be hooked, in execution order, with shapes.

The list comes from tracing real forward passes with recording hooks, not from
``named_modules()`` order (which is definition order and includes modules that never run).
A traced table is built once per model and memoised on the ``LoadedModel``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import LayerError
from .hooks import record_calls
from .loaded import LoadedModel


@dataclass(frozen=True)
class LayerInfo:
    """A module whose output is a 4-D feature map.

    Attributes:
        name: dotted module name (``"layer4"``, ``"features.7.2"``).
        type_name: the module's class name (``"Conv2d"``, ``"Sequential"``).
        shape: (C, h, w) of its output for a square input at the model's native size.
        calls: how many times it runs per forward; only layers that run once can be hooked.
        aligned: whether its spatial grid follows the input image (False for outputs of fixed
            size, such as adaptive pooling to 7x7, whose cells do not map onto image regions).
    """

    name: str
    type_name: str
    shape: tuple[int, int, int]
    calls: int
    aligned: bool

    @property
    def hookable(self) -> bool:
        """Whether the layer can be a target (it runs exactly once per forward)."""
        return self.calls == 1

    @property
    def reason(self) -> str | None:
        """Why the layer cannot be picked, or None."""
        if self.hookable:
            return None
        return (
            f"{self.name} ({self.type_name}) runs {self.calls} times per forward: a shared "
            "module's hook fires on every call, so its output is ambiguous"
        )

    def describe(self) -> str:
        """A one-line label, e.g. ``"layer4 · 2048×7×7 · Sequential"``."""
        channels, height, width = self.shape
        return f"{self.name} · {channels}×{height}×{width} · {self.type_name}"


@dataclass(frozen=True)
class LayerTable:
    """Every module with a 4-D output, in the order their outputs are produced.

    Attributes:
        layers: all such modules, including those that cannot be hooked.
        default: the name of the last hookable layer whose grid follows the image.
    """

    layers: tuple[LayerInfo, ...]
    default: str

    @property
    def hookable(self) -> list[LayerInfo]:
        """The layers a user can pick."""
        return [layer for layer in self.layers if layer.hookable]

    @property
    def excluded(self) -> list[LayerInfo]:
        """The layers that run more than once per forward, each with its ``reason``."""
        return [layer for layer in self.layers if not layer.hookable]

    def get(self, name: str) -> LayerInfo:
        """The layer called ``name``, or a ``LayerError`` that says why it cannot be used."""
        for layer in self.layers:
            if layer.name == name:
                if not layer.hookable:
                    raise LayerError(f"layer {layer.reason}; pick its parent block instead")
                return layer
        import difflib

        close = difflib.get_close_matches(name, [layer.name for layer in self.hookable], n=3)
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
        raise LayerError(
            f"layer {name!r} is not a hookable feature-map layer{hint} "
            "See hookviz.list_layers(loaded)."
        )


def layer_table(loaded: LoadedModel) -> LayerTable:
    """The traced layer table of ``loaded`` (computed on first use, then memoised)."""
    table = loaded.memo.get("layer_table")
    if table is None:
        with loaded.lock:
            table = loaded.memo.get("layer_table")
            if table is None:
                table = _trace(loaded)
                loaded.memo["layer_table"] = table
    return table


def list_layers(loaded: LoadedModel) -> list[LayerInfo]:
    """The layers that can be hooked, in execution order (each with ``.name`` and ``.shape``)."""
    return layer_table(loaded).hookable


def default_layer(loaded: LoadedModel) -> str:
    """The name of the last spatial layer: the usual Grad-CAM target."""
    return layer_table(loaded).default


def _trace(loaded: LoadedModel) -> LayerTable:
    size = loaded.preprocessing.size
    square = _record(loaded, size, size)
    # A second, shorter input tells which outputs follow the image grid: their height changes.
    short = max(loaded.preprocessing.min_side, size // 2)
    other = _record(loaded, short, size)

    layers = []
    for name, (type_name, shape, calls) in square.items():
        other_shape = other.get(name, (None, None, 0))[1]
        aligned = other_shape is not None and other_shape != shape
        layers.append(LayerInfo(name, type_name, shape, calls, aligned))
    candidates = [layer for layer in layers if layer.hookable and layer.aligned]
    if not candidates:
        candidates = [layer for layer in layers if layer.hookable]
    if not candidates:
        raise LayerError(f"{loaded.name!r} has no module with a 4-D output to hook")
    return LayerTable(tuple(layers), candidates[-1].name)


def _record(
    loaded: LoadedModel, height: int, width: int
) -> dict[str, tuple[str, tuple[int, int, int], int]]:
    """name -> (type name, (C, h, w) of the first call, number of calls), in output order."""
    dummy = torch.zeros(1, 3, height, width, device=loaded.device)
    with torch.no_grad(), record_calls(loaded.model) as calls:
        loaded.model(dummy)
    found: dict[str, tuple[str, tuple[int, int, int], int]] = {}
    counts: dict[str, int] = {}
    for call in calls:
        counts[call.name] = counts.get(call.name, 0) + 1
        if call.shape is not None and call.name not in found:
            found[call.name] = (call.type_name, tuple(call.shape[1:]), 0)
    return {name: (t, s, counts[name]) for name, (t, s, _) in found.items()}
