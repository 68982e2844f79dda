"""Hooks as a diagnostic instrument: activation statistics of every layer, the gradient's size
at every layer, and interventions that switch channels off or scale them.

Same hook lifecycle as everything else: registered for one call under the model's lock, removed
in ``finally``; the model is never altered (an intervention replaces a layer's output for one
forward pass, it does not touch weights).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..core.cam import GradCAM, grad_cam_result
from ..core.grids import grid_view
from ..core.hooks import observe_outputs, replace_output
from ..core.inputs import ImageInput, extract_logits, prepare_input
from ..core.layers import layer_table
from ..core.loaded import LoadedModel
from ..core.pipeline import Prediction, check_target, hooked_gradients, top_k
from ..errors import LayerError

_STAT_FIELDS = 6  # mean, std, min, max, zero fraction, element count


@dataclass(frozen=True)
class LayerStats:
    """Statistics of one layer's output for one image.

    Attributes:
        name: the layer.
        type_name: its module class.
        shape: (C, h, w) of its output.
        mean, std, min, max: over every element of the output.
        zero_fraction: share of elements exactly 0 (dead ReLUs show up as 1.0).
        histogram: counts in ``bins`` equal bins between ``min`` and ``max``.
        bin_edges: the ``bins + 1`` edges.
    """

    name: str
    type_name: str
    shape: tuple[int, int, int]
    mean: float
    std: float
    min: float
    max: float
    zero_fraction: float
    histogram: np.ndarray
    bin_edges: np.ndarray


@dataclass(frozen=True)
class GradientRecord:
    """The size of the class score's gradient at one layer's output.

    Attributes:
        name: the layer.
        grad_norm: L2 norm of d score / d output (0 when the score does not depend on it).
        grad_rms: root mean square of the gradient (comparable across layers of any size).
    """

    name: str
    grad_norm: float
    grad_rms: float


@dataclass(frozen=True)
class Intervention:
    """Predictions with and without changing some channels of a layer.

    Attributes:
        layer: the layer whose output was changed.
        channels: the channels that were scaled.
        scale: the factor they were multiplied by (0: switched off).
        original: top-k predictions of the untouched model.
        predictions: top-k predictions with the intervention.
        original_scores: (num_classes,) logits without, ``scores`` with the intervention.
        scores: (num_classes,) logits with the intervention.
        cam: Grad-CAM at ``cam_layer`` with the intervention in place (None if not asked).
    """

    layer: str
    channels: tuple[int, ...]
    scale: float
    original: tuple[Prediction, ...]
    predictions: tuple[Prediction, ...]
    original_scores: np.ndarray
    scores: np.ndarray
    cam: GradCAM | None = None


def layer_stats(loaded: LoadedModel, image: ImageInput, *, bins: int = 32) -> list[LayerStats]:
    """Statistics of every hookable layer's output, in execution order, from one forward pass.

    Computed on the model's device as each output is produced; one transfer to the host at the
    end.
    """
    table = layer_table(loaded)
    layers = table.hookable
    batch, _ = prepare_input(loaded, image)
    rows: dict[str, torch.Tensor] = {}
    histograms: dict[str, torch.Tensor] = {}

    def observe(name: str, output: torch.Tensor) -> None:
        values = output[0].float()
        low, high = values.min(), values.max()
        rows[name] = torch.stack(
            [
                values.mean(),
                values.std(unbiased=False),
                low,
                high,
                (values == 0).float().mean(),
                torch.tensor(float(values.numel()), device=values.device),
            ]
        )
        histograms[name] = torch.histc(values, bins=bins, min=float(low), max=float(high))

    with (
        loaded.lock,
        torch.no_grad(),
        observe_outputs(
            loaded.model,
            [layer.name for layer in layers],
            observe,
            grids=grid_view(loaded.tokens, batch),
        ),
    ):
        loaded.model(batch)
    names = [layer.name for layer in layers if layer.name in rows]
    packed = (
        torch.cat(
            [
                torch.stack([rows[n] for n in names]).flatten(),
                torch.stack([histograms[n] for n in names]).flatten(),
            ]
        )
        .cpu()
        .numpy()
    )
    stats = packed[: len(names) * _STAT_FIELDS].reshape(len(names), _STAT_FIELDS)
    counts = packed[len(names) * _STAT_FIELDS :].reshape(len(names), bins)
    info = {layer.name: layer for layer in layers}
    result = []
    for row, name in enumerate(names):
        mean, std, low, high, zeros, _ = (float(v) for v in stats[row])
        result.append(
            LayerStats(
                name=name,
                type_name=info[name].type_name,
                shape=info[name].shape,
                mean=mean,
                std=std,
                min=low,
                max=high,
                zero_fraction=zeros,
                histogram=counts[row].astype(np.int64),
                bin_edges=np.linspace(low, high, bins + 1),
            )
        )
    return result


def gradient_flow(
    loaded: LoadedModel, image: ImageInput, target: int | None = None
) -> list[GradientRecord]:
    """The gradient of the class score (default: the top-1) at every hookable layer's output,
    in execution order, from one forward and one backward pass.

    Gradients are taken per tensor with ``torch.autograd.grad`` on outputs captured by forward
    hooks, not with module backward hooks (which break on layers followed by in-place ops and
    see a module's *input* gradients as well).
    """
    check_target(loaded, target, classes_only=True)
    names = [layer.name for layer in layer_table(loaded).hookable]
    batch, _ = prepare_input(loaded, image)
    result = hooked_gradients(loaded, batch, names, target)
    norms = (
        torch.stack(
            [torch.stack([g.norm(), g.pow(2).mean().sqrt()]) for g in result.gradients.values()]
        )
        .cpu()
        .numpy()
    )
    return [
        GradientRecord(name, float(norm), float(rms))
        for name, (norm, rms) in zip(result.gradients, norms, strict=True)
    ]


def intervene(
    loaded: LoadedModel,
    image: ImageInput,
    layer: str,
    channels: Sequence[int],
    scale: float = 0.0,
    *,
    k: int = 5,
    cam_layer: str | None = None,
    target: int | None = None,
) -> Intervention:
    """Predictions when the given channels of ``layer`` are multiplied by ``scale`` (0 switches
    them off), next to the untouched model's; optionally the Grad-CAM under the intervention.

    Args:
        loaded: the model.
        image: a PIL image or a preprocessed (1, 3, H, W) tensor.
        layer: the layer whose output is changed.
        channels: the channels to scale.
        scale: their factor.
        k: predictions to return.
        cam_layer: also compute the Grad-CAM at this layer with the intervention in place.
        target: the class of that Grad-CAM (default: the untouched model's top-1).

    Raises:
        LayerError: unknown layer or channel out of range.
    """
    name = layer_table(loaded).get(layer).name
    check_target(loaded, target, classes_only=True)
    chosen = tuple(int(c) for c in channels)
    batch, size = prepare_input(loaded, image)

    def change(output: torch.Tensor) -> torch.Tensor:
        if chosen and not 0 <= min(chosen) <= max(chosen) < output.shape[1]:
            raise LayerError(
                f"channels {list(chosen)} out of range: {name!r} has {output.shape[1]} channels"
            )
        factors = torch.ones(output.shape[1], device=output.device, dtype=output.dtype)
        factors[list(chosen)] = scale
        return output * factors[None, :, None, None]

    with loaded.lock, torch.no_grad():
        original = extract_logits(loaded.model(batch))
        with replace_output(loaded.model, name, change, grids=grid_view(loaded.tokens, batch)):
            changed = extract_logits(loaded.model(batch))
    cam = None
    if cam_layer is not None:
        index = int(original[0].argmax()) if target is None else int(target)
        cam = _cam_with_intervention(loaded, batch, size, name, change, cam_layer, index)
    return Intervention(
        layer=name,
        channels=chosen,
        scale=float(scale),
        original=tuple(top_k(loaded, original, k)),
        predictions=tuple(top_k(loaded, changed, k)),
        original_scores=original[0].float().cpu().numpy(),
        scores=changed[0].float().cpu().numpy(),
        cam=cam,
    )


def _cam_with_intervention(
    loaded: LoadedModel,
    batch: torch.Tensor,
    size: tuple[int, int],
    layer: str,
    change,
    cam_layer: str,
    index: int,
) -> GradCAM:
    """Grad-CAM at ``cam_layer`` for class ``index`` while ``layer``'s output is changed. The
    change is registered first, so when both are the same layer the capture sees the changed
    output (forward hooks run in registration order, each on the previous one's result)."""
    cam_name = layer_table(loaded).get(cam_layer).name
    result = hooked_gradients(
        loaded,
        batch,
        [cam_name],
        index,
        during=lambda: replace_output(
            loaded.model, layer, change, grids=grid_view(loaded.tokens, batch)
        ),
    )
    return grad_cam_result(
        result.activations[cam_name],
        result.gradients[cam_name],
        size,
        class_index=index,
        class_name=loaded.class_name(index),
        score=float(result.logits[index]),
        probability=result.probability,
        layer=cam_name,
        method="gradcam (intervened)",
    )


def strongest_channels(loaded: LoadedModel, image: ImageInput, layer: str, count: int) -> list[int]:
    """The ``count`` channels of ``layer`` with the largest mean activation (for "keep only the
    top-k channels": intervene on all the others)."""
    from ..core.pipeline import feature_maps

    maps = feature_maps(loaded, image, layer)
    return maps.channel_order("mean", count)
