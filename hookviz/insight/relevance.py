"""Layer-wise Relevance Propagation: how much each input pixel, and each channel of a layer,
contributes to a score, by rules that share the score out layer by layer (``lrp_rules``, put
into the model's forward by ``lrp_trace``), with zennit's composites.

Relevance starts as the explained score itself (Captum's convention: the output times the
score's gradient there, which for a class is its logit in its own slot), so it sums to the
score wherever the rules conserve it (no biases, no stabilizer at work). A layer's relevance is
what reaches its output; with ``channels``, only what flows through those channels goes on
down (Concept Relevance Propagation's conditional heatmap, Achtibat et al. 2023): the
conditional relevances of a split of the channels add up to the whole.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from ..core.forward_pass import resolve_layer
from ..core.hooks import forward_hooks, resolve_modules
from ..core.inputs import ImageInput, extract_logits, prepare_input
from ..core.loaded import LoadedModel
from ..core.outputs import detached
from ..core.targets import TargetContext, resolve_target
from ..errors import HookvizError
from .lrp_trace import COMPOSITES, RelevanceTrace, UnsupportedOperation

DEFAULT_COMPOSITE = "epsilon_plus_flat"


class RelevanceError(HookvizError, ValueError):
    """Relevance that cannot be computed here: an unknown composite, channels out of range, a
    model with attention or a detector's boxes."""


@dataclass(frozen=True)
class Relevance:
    """Where a score's relevance lies, in the input and at a layer.

    Attributes:
        composite: the rules' composite (a key of ``COMPOSITES``).
        input: (3, h, w) float32, signed: each input value's relevance on the model's input.
        score: the explained score (where the rules conserve, ``input.sum()`` is close to it).
        class_index: the target's class, label or category (-1 for one without).
        class_name: its name, or the target in words.
        probability: the model's confidence in it where it has one (NaN otherwise).
        layer: the layer read (None without one).
        layer_relevance: (C,) float32, the relevance reaching each channel of ``layer`` (the
            whole of it, before any ``channels`` condition); None without a layer.
        channels: the channels of ``layer`` the relevance was conditioned on (None: all).
        size: (H, W) of the image's pixel grid ``heatmap`` is on.
        image: the analysed picture, when there is one (never compared).
    """

    composite: str
    input: np.ndarray
    score: float
    class_index: int
    class_name: str
    probability: float
    layer: str | None
    layer_relevance: np.ndarray | None
    channels: tuple[int, ...] | None
    size: tuple[int, int]
    image: Image.Image | None = field(default=None, repr=False, compare=False)

    @cached_property
    def heatmap(self) -> np.ndarray:
        """(H, W) float32, signed: the relevance summed over the colour channels, on the
        image's pixels (bilinear from the model's input where the grids differ)."""
        return self.heatmap_at(self.size)

    def heatmap_at(self, size: tuple[int, int]) -> np.ndarray:
        """The heatmap on another (H, W) grid (e.g. a display-size copy of the image)."""
        summed = torch.from_numpy(self.input.sum(axis=0))
        if tuple(summed.shape) != tuple(size):
            summed = F.interpolate(summed[None, None], size=size, mode="bilinear",
                                   align_corners=False)[0, 0]  # fmt: skip
        return summed.numpy().astype(np.float32)

    def top_channels(self, n: int = 8) -> list[tuple[int, float]]:
        """The ``n`` channels of the layer with the most relevance, with it, most first."""
        if self.layer_relevance is None:
            raise RelevanceError("no layer was read: pass layer= to rank its channels")
        order = np.argsort(-self.layer_relevance, kind="stable")[:n]
        return [(int(c), float(self.layer_relevance[c])) for c in order]

    def _repr_png_(self) -> bytes:
        """The relevance over the analysed image (red for, blue against), for Jupyter."""
        from .. import render  # deferred: pictures only when asked for

        return render.png_bytes(render.relevance_picture(self))


def relevance(
    loaded: LoadedModel,
    image: ImageInput,
    target: object = None,
    *,
    layer: str | None = None,
    channels: Iterable[int] | None = None,
    composite: str = DEFAULT_COMPOSITE,
) -> Relevance:
    """LRP of ``target``'s score for ``image`` with ``composite``'s rules.

    Args:
        loaded: the model (a CNN: attention has no rule here).
        image: a PIL image (explained on the model's input, mapped onto the image's pixels) or
            a preprocessed (1, 3, H, W) tensor.
        target: what to explain, as for ``grad_cam`` (None: the model's own choice).
        layer: a layer whose channels' relevance to read (``layer_relevance``); with
            ``channels`` and no layer, the model's default layer.
        channels: channels of ``layer``: the relevance that flows through them only.
        composite: ``epsilon``, ``epsilon_plus``, ``epsilon_plus_flat`` (default),
            ``epsilon_alpha2_beta1`` or ``epsilon_alpha2_beta1_flat``, as zennit's.

    Raises:
        RelevanceError: an unknown composite, channels out of range, a model with attention,
            a detector.
        LayerError: an unknown layer.
        TargetError: a target that does not apply.
    """
    groups = None if channels is None else [channels]
    return conditional_relevance(loaded, image, groups, target, layer=layer, composite=composite)[0]


def conditional_relevance(
    loaded: LoadedModel,
    image: ImageInput,
    groups: Sequence[Iterable[int]] | None,
    target: object = None,
    *,
    layer: str | None = None,
    composite: str = DEFAULT_COMPOSITE,
) -> tuple[Relevance, ...]:
    """``relevance`` conditioned on each group of ``layer``'s channels in turn, from one
    forward pass (a backward each): one ``Relevance`` per group (None: one, unconditioned)."""
    check_relevance(loaded, composite)
    name = resolve_layer(loaded, layer) if layer is not None or groups is not None else None
    batch, size = prepare_input(loaded, image)
    with loaded.lock, torch.inference_mode(False), torch.enable_grad():
        passes = _propagate(loaded, batch, size, target, composite, name, groups)
    resolved, score, inputs, reached, wanted = passes
    return tuple(
        Relevance(
            composite=composite,
            input=relevance_input,
            score=score,
            class_index=resolved.index,
            class_name=resolved.name,
            probability=resolved.probability,
            layer=name,
            layer_relevance=reached,
            channels=chosen,
            size=size,
            image=image if isinstance(image, Image.Image) else None,
        )
        for relevance_input, chosen in zip(inputs, wanted, strict=True)
    )


def batch_layer_relevance(
    loaded: LoadedModel,
    batch: torch.Tensor,
    layer: str,
    classes: Sequence[int] | None = None,
    composite: str = DEFAULT_COMPOSITE,
) -> np.ndarray:
    """Each image's relevance reaching each channel of ``layer``, for a classifier's batch:
    (N, C) float32, the ``layer_relevance`` of ``relevance`` for every image at once.

    Args:
        batch: preprocessed images, (N, 3, H, W).
        classes: each image's class (None: each image's own top class).

    The backward stops at the layer (what reaches the pixels is not needed): about half a
    whole relevance's backward.
    """
    check_relevance(loaded, composite)
    name = resolve_layer(loaded, layer)
    reader = LayerReader(name)
    with loaded.lock, torch.inference_mode(False), torch.enable_grad():
        x = batch.detach().clone().requires_grad_(True)
        logits = extract_logits(traced_forward(loaded, x, composite, reader))
        start, _ = class_starts(loaded, logits, classes)
        (reached,) = torch.autograd.grad(logits, reader.output, grad_outputs=start)
    return channel_sums(reached)


def class_starts(
    loaded: LoadedModel, logits: torch.Tensor, classes: Sequence[int] | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch's starting relevance: each image's class logit in its own slot, zero elsewhere
    (``classes`` None: each image's top class); and the classes, (N,)."""
    if logits.dim() != 2:
        raise RelevanceError(f"{loaded.name!r} gives no class scores to start relevance from")
    if classes is None:
        index = logits.detach().argmax(dim=1)
    else:
        index = torch.as_tensor(list(classes), device=logits.device)
    start = torch.zeros_like(logits)
    start.scatter_(1, index[:, None], logits.detach().gather(1, index[:, None]))
    return start, index


def channel_sums(relevance: torch.Tensor) -> np.ndarray:
    """(N, C, ...) relevance summed over each channel's positions: (N, C) float32."""
    return relevance.detach().sum(dim=tuple(range(2, relevance.dim()))).float().cpu().numpy()


def traced_forward(
    loaded: LoadedModel, x: torch.Tensor, composite: str, *readers: LayerReader
) -> Any:
    """The model's output for ``x`` with ``composite``'s rules in its forward, each of
    ``readers`` on its layer (those that name one)."""
    by_layer = {reader.layer: reader for reader in readers if reader.layer is not None}
    modules = resolve_modules(loaded.model, list(by_layer))
    try:
        with forward_hooks(modules, lambda name: by_layer[name].on_output), RelevanceTrace(
            composite
        ):
            return loaded.model(x)
    except UnsupportedOperation as exc:
        raise RelevanceError(_attention_reason(loaded.name, exc.operation)) from None


def check_relevance(loaded: LoadedModel, composite: str) -> None:
    """Refuse an unknown composite, and a model relevance cannot pass through."""
    if composite not in COMPOSITES:
        raise RelevanceError(
            f"unknown composite {composite!r}; choose one of {', '.join(COMPOSITES)}"
        )
    if loaded.task == "detection":
        raise RelevanceError(
            "a detector's boxes come out of a selection (non-maximum suppression) that "
            "relevance cannot pass through; explain a box with grad_cam instead"
        )
    if loaded.tokens is not None:
        raise RelevanceError(_attention_reason(loaded.name))


def _attention_reason(model: str, operation: str = "attention") -> str:
    return (
        f"{model!r} computes {operation}, which has no relevance rule here (LRP's composites "
        "cover convolutions, dense layers, pooling, normalisation and residual sums): "
        "transformers are not supported; Grad-CAM and the pixel attributions explain them"
    )


def _propagate(
    loaded: LoadedModel,
    batch: torch.Tensor,
    size: tuple[int, int],
    target: object,
    composite: str,
    layer: str | None,
    groups: Sequence[Iterable[int]] | None,
):
    """One relevance forward pass, then one backward per group: the resolved target, its
    score, each group's input relevance (3, h, w), the layer's channel relevance and each
    group's channels."""
    x = batch.detach().clone().requires_grad_(True)
    reader = LayerReader(layer)
    output = traced_forward(loaded, x, composite, reader)
    leaves = [t for t in _tensors(output) if t.requires_grad]
    clean = detached(output)
    input_size = (int(batch.shape[2]), int(batch.shape[3]))
    resolved = resolve_target(TargetContext(loaded, clean, size, input_size), target)
    starts, score = _starting_relevance(output, resolved.score)
    wanted = [None] if groups is None else [reader.checked(group) for group in groups]
    inputs = []
    for index, chosen in enumerate(wanted):
        reader.only = chosen
        (found,) = torch.autograd.grad(
            leaves, x, grad_outputs=starts, retain_graph=index < len(wanted) - 1
        )
        inputs.append(found[0].detach().float().cpu().numpy())
    return (
        resolved,
        score,
        inputs,
        reader.reached,
        [None if c is None else tuple(c) for c in wanted],
    )


def _starting_relevance(output: Any, score_of) -> tuple[list[torch.Tensor], float]:
    """The relevance each output tensor starts with: itself times the score's gradient there
    (for a class: its logit in its own slot, zero elsewhere), and the score."""
    leaves = [t for t in _tensors(output) if t.requires_grad]
    copies = [t.detach().requires_grad_(True) for t in leaves]
    replaced = _rebuilt(output, iter(copies), {id(t) for t in leaves})
    score = score_of(replaced).sum()
    gradients = torch.autograd.grad(score, copies, allow_unused=True)
    starts = [
        c.detach() * (torch.zeros_like(c) if g is None else g)
        for c, g in zip(copies, gradients, strict=True)
    ]
    return starts, float(score.detach())


def _tensors(output: Any) -> list[torch.Tensor]:
    """Every tensor in ``output`` (lists, tuples, dicts and objects' ``logits``), in order."""
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, dict):
        return [t for value in output.values() for t in _tensors(value)]
    if isinstance(output, (list, tuple)):
        return [t for value in output for t in _tensors(value)]
    logits = getattr(output, "logits", None)
    return [logits] if isinstance(logits, torch.Tensor) else []


def _rebuilt(output: Any, copies, which: set[int]) -> Any:
    """``output`` with each of its tensors ``which`` replaced by the next of ``copies``."""
    if isinstance(output, torch.Tensor):
        return next(copies) if id(output) in which else output
    if isinstance(output, dict):
        return {key: _rebuilt(value, copies, which) for key, value in output.items()}
    if isinstance(output, tuple) and hasattr(output, "_fields"):
        return type(output)(*(_rebuilt(value, copies, which) for value in output))
    if isinstance(output, (list, tuple)):
        return type(output)(_rebuilt(value, copies, which) for value in output)
    logits = getattr(output, "logits", None)
    if isinstance(logits, torch.Tensor) and id(logits) in which:
        rebuilt = copy.copy(output)  # (an object with ``logits``: the same, with the copy)
        rebuilt.logits = next(copies)
        return rebuilt
    return output


class _Reading(torch.autograd.Function):
    """The identity on a layer's output, whose backward hands the relevance reaching it to
    a ``LayerReader``."""

    @staticmethod
    def forward(ctx, output: torch.Tensor, reader: LayerReader) -> torch.Tensor:  # type: ignore[override]
        ctx.reader = reader
        return output.clone()

    @staticmethod
    def backward(ctx, relevance: torch.Tensor):  # type: ignore[override]
        return ctx.reader.read(relevance), None


class LayerReader:
    """Reads the relevance reaching a layer's output, and lets only some channels' go on."""

    def __init__(self, layer: str | None) -> None:
        self.layer = layer
        self.reached: np.ndarray | None = None
        self.only: list[int] | None = None
        self.channels = 0
        self.output: torch.Tensor | None = None  # (the layer's output as the model passed it on)

    def on_output(self, module, inputs, output) -> torch.Tensor:
        """The layer's forward hook: its output is passed on through ``_Reading``, whose
        backward reads (and may condition) the relevance reaching it."""
        if not isinstance(output, torch.Tensor) or output.dim() < 2 or not output.requires_grad:
            raise RelevanceError(f"layer {self.layer!r} gives no channels relevance can reach")
        self.channels = int(output.shape[1])
        self.output = _Reading.apply(output, self)
        return self.output

    def read(self, relevance: torch.Tensor) -> torch.Tensor:
        """Keep the channels' relevance (of the first backward: every group's starts the
        same); return what goes on down: all of it, or only the chosen channels'."""
        if self.reached is None:
            dims = [0, *range(2, relevance.dim())]
            self.reached = relevance.detach().sum(dim=dims).float().cpu().numpy()
        if self.only is None:
            return relevance
        kept = torch.zeros_like(relevance)
        kept[:, self.only] = relevance[:, self.only]
        return kept

    def checked(self, group: Iterable[int]) -> list[int]:
        chosen = [int(c) for c in group]
        bad = [c for c in chosen if not 0 <= c < self.channels]
        if bad or not chosen:
            raise RelevanceError(
                f"channels of {self.layer!r} are numbered 0 to {self.channels - 1}; got "
                f"{bad or 'none'}"
            )
        return chosen
