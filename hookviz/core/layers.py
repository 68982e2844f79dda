"""Layer discovery: which modules of a model can be hooked, in execution order, with shapes.

The list comes from tracing real forward passes with recording hooks, not from
``named_modules()`` order (which is definition order and includes modules that never run).
A traced table is built once per model and memoised on the ``LoadedModel``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import LayerError
from .grids import TokenLayout, grid_view
from .hooks import record_calls
from .inputs import extract_logits
from .loaded import LoadedModel


@dataclass(frozen=True)
class LayerInfo:
    """A module whose output is a 4-D feature map.

    Attributes:
        name: dotted module name (``"layer4"``, ``"features.7.2"``).
        type_name: the module's class name (``"Conv2d"``, ``"Sequential"``).
        shape: (C, h, w) of its output for a square input at the model's native size (for a
            model that takes one input size only, at that size).
        calls: how many times it runs per forward; only layers that run once can be hooked.
        aligned: whether its spatial grid follows the input image (False for outputs of fixed
            size, such as adaptive pooling to 7x7, whose cells do not map onto image regions).
        same_as: the name of the layer that outputs the very same tensor (a container and its
            last child, an ``Identity`` and what it passes on), or None. Hooking either gives
            the same maps; ``LayerTable.distinct`` offers one name per tensor.
        zero_gradient: the class scores do not depend on this layer's map at all (the last
            block's patch tokens of a class-token ViT: only the class token reaches the head),
            so every gradient-based CAM there is blank by construction.
    """

    name: str
    type_name: str
    shape: tuple[int, int, int]
    calls: int
    aligned: bool
    same_as: str | None = None
    zero_gradient: bool = False

    @property
    def hookable(self) -> bool:
        """Whether the layer can be a target (it runs exactly once per forward)."""
        return self.calls == 1

    @property
    def note(self) -> str | None:
        """Why a gradient CAM is blank at this layer (it can still be picked), or None."""
        if not self.zero_gradient:
            return None
        return (
            f"{self.name}: the class scores do not depend on this layer's patch tokens (only "
            "the class token reaches the head), so its gradient is zero and Grad-CAM is blank"
        )

    @property
    def reason(self) -> str | None:
        """Why the layer cannot be picked, or None."""
        if self.hookable:
            return None
        return (
            f"{self.name} ({self.type_name}) runs {self.calls} times per forward: a shared "
            "module's hook fires on every call, so its output is ambiguous"
        )

    def describe(self, shape: tuple[int, int, int] | None = None) -> str:
        """A one-line label, e.g. ``"layer4 · 2048×7×7 · Sequential"``.

        Args:
            shape: the output shape to show (e.g. at this image's input size); default the
                shape at the model's native square size.
        """
        channels, height, width = shape or self.shape
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
    def distinct(self) -> list[LayerInfo]:
        """The hookable layers with one name per output tensor and no ``Identity`` (a
        container repeating its last child's output, a drop-path or a no-op attention slot
        adds nothing to look at)."""
        return [
            layer
            for layer in self.hookable
            if layer.same_as is None and layer.type_name != "Identity"
        ]

    def canonical(self, name: str) -> str:
        """The name ``distinct`` uses for the tensor layer ``name`` outputs."""
        for layer in self.layers:
            if layer.name == name:
                return layer.same_as or layer.name
        return name

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


def layer_shapes(loaded: LoadedModel, height: int, width: int) -> dict[str, tuple[int, int, int]]:
    """Every 4-D layer output's (C, h, w) for an input of ``height`` x ``width`` pixels (the
    table's shapes are at the native square size; an image's own input differs). Traced once
    per size and kept (the eight most recent sizes)."""
    sizes = loaded.memo.setdefault("layer_shapes", {})
    key = (int(height), int(width))
    shapes = sizes.get(key)
    if shapes is None:
        with loaded.lock:
            shapes = {name: shape for name, (_, shape, _, _) in _record(loaded, *key).items()}
        if len(sizes) >= 8:
            sizes.pop(next(iter(sizes)))
        sizes[key] = shapes
    return shapes


def native_size(loaded: LoadedModel) -> tuple[int, int]:
    """(height, width) the layer table is traced at: the one input size the model takes where
    it takes one (a timm ViT built with its default ``img_size``, wrapped as it is), else the
    preprocessing's native square."""
    own = loaded.tokens.input_size if loaded.tokens is not None else None
    if own is not None:
        return own
    return loaded.preprocessing.size, loaded.preprocessing.size


def _trace(loaded: LoadedModel) -> LayerTable:
    height, width = native_size(loaded)
    square = _record(loaded, height, width)
    one_size = loaded.tokens is not None and loaded.tokens.input_size is not None
    if loaded.preprocessing.fixed or one_size:
        other = _by_grid(loaded, square, height, width)
    else:
        # A second, shorter input tells which outputs follow the image grid: their height
        # changes.
        size = height
        short = max(loaded.preprocessing.min_side, size // 2)
        step = loaded.preprocessing.multiple  # a ViT takes whole patches only
        short = max(step, short // step * step)
        if short == size:
            short = max(step, size - step)
        try:
            other = _record(loaded, short, size)
        except (AssertionError, RuntimeError, ValueError):
            # a model that takes its native size only and does not say so (timm asserts the
            # size, a flatten into a Linear mismatches): known by the grids instead
            other = _by_grid(loaded, square, height, width)
    zero = _zero_gradient(loaded, [n for n, row in square.items() if row[2] == 1])

    layers = []
    for name, (type_name, shape, calls, same_as) in square.items():
        other_shape = other.get(name, (None, None, 0, None))[1]
        aligned = other_shape != shape
        layers.append(LayerInfo(name, type_name, shape, calls, aligned, same_as, name in zero))
    candidates = [
        layer for layer in layers if layer.hookable and layer.aligned and not layer.zero_gradient
    ]
    width = loaded.tokens.embed_dim if loaded.tokens is not None else None
    if width is not None:
        # a transformer's CAM is read on its main token stream: a block's input or output or a
        # norm, not a hidden layer (an MLP's is wider; a value projection, as transformers
        # splits attention into, has the stream's width but is a Linear inside attention)
        stream = [layer for layer in candidates if layer.shape[0] == width]
        plain = [layer for layer in stream if layer.type_name != "Linear"]
        candidates = plain or stream or candidates
    if loaded.task in ("detection", "segmentation"):
        # its heads mix the levels of a pyramid or end in per-category maps: the CAM is read on
        # the feature extractor's deepest stage (where pytorch-grad-cam's tutorials read it)
        for prefix in ("backbone.body.", "backbone."):
            inside = [layer for layer in candidates if layer.name.startswith(prefix)]
            if inside:
                candidates = inside
                break
    if not candidates:
        candidates = [layer for layer in layers if layer.hookable]
    if not candidates:
        raise LayerError(f"{loaded.name!r} has no module with a 4-D output to hook")
    # the default is a name the distinct list offers
    named = [c for c in candidates if c.same_as is None and c.type_name != "Identity"]
    default = (named or candidates)[-1]
    return LayerTable(tuple(layers), default.same_as or default.name)


def _by_grid(
    loaded: LoadedModel,
    square: dict[str, tuple[str, tuple[int, int, int], int, str | None]],
    height: int,
    width: int,
) -> dict[str, tuple[str, tuple[int, int, int] | None, int, str | None]]:
    """``square``'s rows with the shape of every output that does not follow the image set to
    None (what a second input would have told), for a model that takes one input size.

    A map follows the image when its grid is the input's at some stride (a stage's grid, the
    patch grid), not when pooled to a fixed size (1x1). A transformer's own patch grids count
    whatever their stride (14-pixel patches: 16x16 at 224 pixels, no power of two)."""
    view = TokenLayout(0, (1, 1)).view_for(height, width)
    grids = set()
    if loaded.tokens is not None:
        grids = set(loaded.tokens.view_for(height, width).token_grids())
    on_grid = {
        name: view.on_grid(*shape[1:]) or tuple(shape[1:]) in grids
        for name, (_, shape, _, _) in square.items()
    }
    return {
        name: (t, None if on_grid[name] else shape, c, s)
        for name, (t, shape, c, s) in square.items()
    }


def _record(
    loaded: LoadedModel, height: int, width: int
) -> dict[str, tuple[str, tuple[int, int, int], int, str | None]]:
    """name -> (type name, (C, h, w) of the first call, number of calls, the name its tensor
    goes by), in output order."""
    # the model's own floating dtype: a float64 (or half) model refuses a float32 probe
    dtype = next(
        (p.dtype for p in loaded.model.parameters() if p.is_floating_point()), torch.float32
    )
    dummy = torch.zeros(1, 3, height, width, device=loaded.device, dtype=dtype)
    # (inference mode off: a caller inside torch.inference_mode() would give tensors without
    # the version counter that record_calls reads)
    with (
        torch.inference_mode(False),
        torch.no_grad(),
        record_calls(loaded.model, grid_view(loaded.tokens, dummy)) as calls,
    ):
        loaded.model(dummy)
    found: dict[str, tuple[str, tuple[int, int, int]]] = {}
    counts: dict[str, int] = {}
    groups: list[list[str]] = []  # runs of calls that output the same unchanged tensor
    group_of: dict[str, list[str]] = {}
    for call in calls:
        counts[call.name] = counts.get(call.name, 0) + 1
        if call.shape is None:
            continue
        if call.name not in found:
            found[call.name] = (call.type_name, tuple(call.shape[1:]))
        if call.same_as is not None and call.same_as in group_of:
            group = group_of[call.same_as]  # a level another module returns as it is
            group.append(call.name)
        elif call.same_as_previous and groups:
            group = groups[-1]
            group.append(call.name)
        else:
            group = [call.name]
            groups.append(group)
        group_of[call.name] = group
    same_as: dict[str, str] = {}
    for group in groups:
        keeper = _group_name(group, found, counts)
        if keeper is None:
            continue
        same_as.update({name: keeper for name in group if name != keeper})
    return {
        name: (type_name, shape, counts[name], same_as.get(name))
        for name, (type_name, shape) in found.items()
    }


def _zero_gradient(loaded: LoadedModel, names: list[str]) -> set[str]:
    """The layers (of a transformer) whose map the class scores do not depend on: one forward
    with every layer captured and one backward of all scores. CNNs are skipped (every map of
    a CNN reaches its pooled head)."""
    if loaded.tokens is None or not names:
        return set()
    from .hooks import capture_outputs  # the tracing hooks above need none of this

    height, width = native_size(loaded)
    generator = torch.Generator().manual_seed(0)
    batch = torch.randn(1, 3, height, width, generator=generator).to(loaded.device)
    view = grid_view(loaded.tokens, batch)
    with (
        torch.inference_mode(False),
        torch.enable_grad(),
        capture_outputs(loaded.model, names, track_grad=True, lean=False, grids=view) as captured,
    ):
        logits = extract_logits(loaded.model(batch))
    tracked = [name for name in names if name in captured.tracked]
    # A random mix of the outputs, not their sum: the sum of a normalised output is the same
    # for every input (an embedder ending in an untrained LayerNorm, as timm's DINOv2 and EVA-02
    # do: it always sums to 0; softmax probabilities always to 1), which would mark every layer.
    mix = torch.randn(logits.shape[1:], generator=generator).to(logits.device)
    gradients = torch.autograd.grad(
        (logits.float() * mix).sum(), [captured.tracked[n] for n in tracked], allow_unused=True
    )
    return {
        name
        for name, gradient in zip(tracked, gradients, strict=True)
        if gradient is None or not bool(gradient.abs().amax() > 0)
    }


def _group_name(
    group: list[str], found: dict[str, tuple[str, tuple[int, int, int]]], counts: dict[str, int]
) -> str | None:
    """The name a tensor goes by: the outermost hookable module that outputs it (the last
    called; containers return after their children), an ``Identity`` only if nothing else."""
    hookable = [name for name in group if counts[name] == 1]
    if not hookable:
        return None
    real = [name for name in hookable if found[name][0] != "Identity"]
    # a module's own output before a level of another's dict (``backbone.body.16`` rather
    # than ``backbone.body:1``)
    modules = [name for name in real if ":" not in name]
    return (modules or real or hookable)[-1]
