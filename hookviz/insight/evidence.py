"""Beyond a single heatmap: evidence against a class, "why A rather than B", the top-5 gallery,
Grad-CAM at every stage from one backward pass, the Grad-CAM computation step by step, and a
trust check by deleting and inserting pixels in heatmap order.

All of it reuses one hooked forward pass (``ForwardPass``) or, for the layer sweep, one forward
and one backward over several captured layers.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..core.cam import GradCAM, channel_weights, grad_cam_result, to_pixel_grid, weighted_sum
from ..core.inputs import ImageInput, extract_logits, prepare_input
from ..core.layers import LayerTable, layer_table
from ..core.loaded import LoadedModel
from ..core.pipeline import ForwardPass, check_target, hooked_gradients


def evidence_against(kept: ForwardPass, target: int | None = None) -> GradCAM:
    """Where the image speaks *against* ``target``: Grad-CAM of the negated score (the
    "counterfactual explanation" of Selvaraju et al. 2017, section 5.1): weights from -dy/dA."""
    index = _index(kept, target)
    gradient = kept.gradient_of(lambda logits: -logits[0, index])
    return _cam_from(kept, gradient, index, "gradcam (against)")


def contrast(kept: ForwardPass, first: int, second: int) -> GradCAM:
    """Why ``first`` rather than ``second``: Grad-CAM of the score difference y_first - y_second
    (regions that raise the first class more than the second)."""
    check_target(kept.loaded, first, classes_only=True)
    check_target(kept.loaded, second, classes_only=True)
    gradient = kept.gradient_of(lambda logits: logits[0, first] - logits[0, second])
    return _cam_from(kept, gradient, first, f"gradcam (vs {second})")


def gallery(kept: ForwardPass, method: str = "gradcam") -> list[GradCAM]:
    """The CAM of each top-k prediction, from the one forward pass (a backward each)."""
    return [kept.grad_cam(p.index, method) for p in kept.predictions]


@dataclass(frozen=True)
class GradCAMSteps:
    """The tensors of one Grad-CAM, in the order they are computed (for teaching).

    Attributes:
        activations: (C, h, w) the layer's output A, captured by the forward hook.
        gradients: (C, h, w) d y^c / d A, from ``torch.autograd.grad``.
        weights: (C,) alpha_k, the spatial mean of each gradient map.
        weighted_sum: (h, w) sum_k alpha_k A_k, before the ReLU (may be negative).
        removed: (h, w) what the ReLU removed (the negative part, as positive numbers).
        cam: (h, w) ReLU(weighted_sum).
        heatmap: (H, W) the map upsampled bilinearly onto the image and scaled to [0, 1].
    """

    activations: np.ndarray
    gradients: np.ndarray
    weights: np.ndarray
    weighted_sum: np.ndarray
    removed: np.ndarray
    cam: np.ndarray
    heatmap: np.ndarray

    @property
    def flat_gradient(self) -> bool:
        """Whether dy/dA is the same in every cell of each channel, as it is just before a
        global average pooling (the pooling spreads the gradient evenly): the gradient tiles
        are then flat and all the spatial detail comes from A."""
        spread = self.gradients.max(axis=(1, 2)) - self.gradients.min(axis=(1, 2))
        magnitude = float(np.abs(self.gradients).max())
        return magnitude == 0.0 or bool((spread <= 1e-5 * magnitude).all())


def grad_cam_steps(kept: ForwardPass, target: int | None = None) -> GradCAMSteps:
    """Every intermediate tensor of the Grad-CAM of ``target``."""
    index = _index(kept, target)
    gradient = kept.gradient_of(lambda logits: logits[0, index])
    activations = kept.activations.float()
    weights = channel_weights(gradient)
    total = weighted_sum(activations, weights)
    cam = torch.relu(total)
    return GradCAMSteps(
        activations=activations.cpu().numpy(),
        gradients=gradient.cpu().numpy(),
        weights=weights.cpu().numpy(),
        weighted_sum=total.cpu().numpy(),
        removed=torch.relu(-total).cpu().numpy(),
        cam=cam.cpu().numpy(),
        heatmap=to_pixel_grid(cam, kept.image_size),
    )


def layer_sweep(
    loaded: LoadedModel,
    image: ImageInput,
    layers: Sequence[str] | None = None,
    target: int | None = None,
) -> list[GradCAM]:
    """Grad-CAM at several layers (default: the stages, see ``stage_layers``) from one forward
    pass and a single ``torch.autograd.grad`` call for all of them."""
    names = list(layers) if layers is not None else stage_layers(loaded)
    table = layer_table(loaded)
    names = [table.get(name).name for name in names]
    check_target(loaded, target, classes_only=True)
    batch, size = prepare_input(loaded, image)
    result = hooked_gradients(loaded, batch, names, target)
    return [
        grad_cam_result(
            result.activations[name],
            result.gradients[name],
            size,
            class_index=result.index,
            class_name=loaded.class_name(result.index),
            score=float(result.logits[result.index]),
            probability=result.probability,
            layer=name,
            method="gradcam",
        )
        for name in names
    ]


def teaching_layer(
    loaded: LoadedModel,
    image: ImageInput,
    target: int | None = None,
    *,
    before: str | None = None,
) -> str | None:
    """The deepest layer, before ``before`` (default: the default layer), where every part of a
    Grad-CAM step-through shows something: a gradient that varies inside each channel (not so
    just before global pooling) and a weighted sum with both signs (so "evidence against" and
    "what the ReLU removed" are not blank). None if no block-level layer qualifies.

    One forward pass and one backward for all candidates (block-level layers: at most one dot
    in their name).
    """
    table = layer_table(loaded)
    stop = table.canonical(before or table.default)
    order = [layer.name for layer in table.distinct]
    end = order.index(stop) if stop in order else len(order)
    candidates = [
        layer.name for layer in table.distinct[:end] if layer.aligned and layer.name.count(".") <= 1
    ][-12:]
    if not candidates:
        return None
    check_target(loaded, target, classes_only=True)
    batch, _ = prepare_input(loaded, image)
    result = hooked_gradients(loaded, batch, candidates, target)
    for name in reversed(candidates):
        if name not in result.gradients:
            continue
        gradient = result.gradients[name]
        total = weighted_sum(result.activations[name].float(), channel_weights(gradient))
        spread = gradient.amax(dim=(1, 2)) - gradient.amin(dim=(1, 2))
        varies = bool((spread > 1e-5 * gradient.abs().max()).any())
        if varies and bool((total > 0).any()) and bool((total < 0).any()):
            return name
    return None


def stage_layers(loaded: LoadedModel, count: int = 5) -> list[str]:
    """Up to ``count`` layers that end the network's stages, ending with the default layer: a
    natural set for a layer sweep. Never a layer the class scores do not depend on (its CAM is
    blank by construction).

    A vision transformer's blocks all have the same output shape: its sweep walks them at the
    default layer's place, evenly spaced and ending at the default (``blocks.2.norm1``, ``5``,
    ``8``, ``11``). Otherwise layers are grouped by output resolution; each group contributes
    its last layer among those with the shortest dotted name (a whole block such as ``layer2``
    or ``blocks.3`` rather than a module inside one).
    """
    table = layer_table(loaded)
    plain_transformer = loaded.tokens is not None and not loaded.tokens.channels_last
    blocks = _same_place_in_each_block(table) if plain_transformer else []
    if len(blocks) >= 2:
        step = -(-len(blocks) // count)  # ceil: at most ``count`` layers
        return blocks[::-1][::step][:count][::-1]
    groups: dict[tuple[int, int], list[str]] = {}
    for layer in table.hookable:
        if layer.aligned and not layer.zero_gradient:
            groups.setdefault(layer.shape[1:], []).append(layer.name)
    ends = []
    for names in groups.values():
        shallowest = min(name.count(".") for name in names)
        ends.append([name for name in names if name.count(".") == shallowest][-1])
    ends = [name for name in ends if name != table.default]
    return [*ends[max(0, len(ends) - (count - 1)) :], table.default]


def _same_place_in_each_block(table: LayerTable) -> list[str]:
    """The default layer's counterparts in every block up to its own, in block order; empty
    when the default is in no run of same-shaped blocks. The block is the number in the
    default's name that the most same-shaped layers vary (``blocks.11.norm1`` varies ``11``;
    ``encoder_layer_11.ln_1`` varies ``11``, not ``ln_1``'s ``1``)."""
    default = table.get(table.default)
    candidates = {
        layer.name: layer
        for layer in table.hookable
        if layer.shape == default.shape and not layer.zero_gradient
    }
    best: list[tuple[int, str]] = []
    for number in re.finditer(r"\d+", default.name):
        pattern = re.compile(
            re.escape(default.name[: number.start()])
            + r"(\d+)"
            + re.escape(default.name[number.end() :])
        )
        found = [
            (int(match.group(1)), name)
            for name in candidates
            if (match := pattern.fullmatch(name)) is not None
        ]
        if len(found) > len(best):
            best = found
    last = next((index for index, name in best if name == default.name), -1)
    ordered = [name for index, name in sorted(best) if index <= last]
    return ordered if len(ordered) >= 2 else []


@dataclass(frozen=True)
class TrustCurves:
    """Deletion and insertion curves (Petsiuk et al. 2018, RISE, section 4.1).

    Attributes:
        fractions: (steps + 1,) share of pixels removed (deletion) or revealed (insertion).
        deletion: class probability as pixels are removed, most salient first.
        insertion: class probability as pixels are revealed on a blurred image, most salient
            first.
        deletion_random, insertion_random: the same with a random pixel order (the baseline);
            NaN when not asked for (``baseline=False``).
        deletion_auc, insertion_auc, deletion_random_auc, insertion_random_auc: areas under
            the curves (trapezoids over [0, 1]). A trustworthy heatmap has a lower deletion
            and a higher insertion area than the random order.
    """

    fractions: np.ndarray
    deletion: np.ndarray
    insertion: np.ndarray
    deletion_random: np.ndarray
    insertion_random: np.ndarray
    deletion_auc: float
    insertion_auc: float
    deletion_random_auc: float
    insertion_random_auc: float


def trust_curves(
    loaded: LoadedModel,
    image: ImageInput,
    heatmap: np.ndarray,
    target: int,
    *,
    steps: int = 16,
    seed: int = 0,
    baseline: bool = True,
) -> TrustCurves:
    """Remove (deletion) or add (insertion) pixels in heatmap order and follow the class
    probability; compare with a random order. ``steps + 1`` points per curve, all the inputs of
    one curve run as one batch.

    Args:
        loaded: the model.
        image: the image (PIL or preprocessed (1, 3, H, W) tensor).
        heatmap: (H, W) map on the image's grid (e.g. ``grad_cam(...).heatmap``).
        target: the class.
        steps: number of steps from 0 to all pixels.
        seed: for the random baseline order.
        baseline: also the random order's curves (half the forward passes); without them
            they are NaN.
    """
    check_target(loaded, target, classes_only=True)
    batch, _ = prepare_input(loaded, image)
    height, width = batch.shape[-2:]
    saliency = torch.as_tensor(np.asarray(heatmap, dtype=np.float32))[None, None]
    saliency = F.interpolate(saliency, size=(height, width), mode="bilinear", align_corners=False)
    order = torch.argsort(saliency.flatten(), descending=True, stable=True)
    random_order = torch.randperm(order.numel(), generator=torch.Generator().manual_seed(seed))
    # "removed" pixels become the mean of the input (0 after normalisation is the dataset mean);
    # insertion starts from a heavily blurred copy, as in RISE.
    removed = torch.zeros_like(batch)
    blurred = F.avg_pool2d(batch, kernel_size=11, stride=1, padding=5, count_include_pad=False)
    fractions = np.linspace(0.0, 1.0, steps + 1)

    def curve(pixel_order: torch.Tensor, start: torch.Tensor, end: torch.Tensor) -> np.ndarray:
        inputs = []
        for fraction in fractions:
            mask = torch.zeros(height * width, device=batch.device)
            mask[pixel_order[: round(fraction * pixel_order.numel())].to(batch.device)] = 1.0
            mask = mask.view(1, 1, height, width)
            inputs.append(start * (1 - mask) + end * mask)
        with loaded.lock, torch.no_grad():
            logits = extract_logits(loaded.model(torch.cat(inputs)))
        return torch.softmax(logits.float(), dim=1)[:, target].cpu().numpy()

    deletion = curve(order, batch, removed)
    insertion = curve(order, blurred, batch)
    if baseline:
        deletion_random = curve(random_order, batch, removed)
        insertion_random = curve(random_order, blurred, batch)
    else:
        deletion_random = insertion_random = np.full(fractions.shape, np.nan)

    def area(values: np.ndarray) -> float:
        return float(np.trapezoid(values, fractions))

    return TrustCurves(
        fractions,
        deletion,
        insertion,
        deletion_random,
        insertion_random,
        area(deletion),
        area(insertion),
        area(deletion_random),
        area(insertion_random),
    )


def _index(kept: ForwardPass, target: int | None) -> int:
    check_target(kept.loaded, target, classes_only=True)
    return int(kept.logits.argmax()) if target is None else int(target)


def _cam_from(kept: ForwardPass, gradient: torch.Tensor, index: int, method: str) -> GradCAM:
    return grad_cam_result(
        kept.activations,
        gradient,
        kept.image_size,
        class_index=index,
        class_name=kept.loaded.class_name(index),
        score=float(kept.logits[index]),
        probability=float(torch.softmax(kept.logits.float(), 0)[index]),
        layer=kept.layer,
        method=method,
    )
