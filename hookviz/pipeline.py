"""One hooked forward pass (and, for Grad-CAM, one backward to the layer) per analysis.

Every public function here is safe to call from many threads on one shared ``LoadedModel``: the
model's lock is held from registering the hooks to removing them (and through the backward), so
concurrent callers never read each other's activations. Rendering happens outside, on the plain
results.
"""

from __future__ import annotations

import numbers
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from PIL import Image

from .cam import GradCAM, channel_weights, to_pixel_grid, weighted_map
from .errors import ImageError, ModelError, TargetError
from .features import FeatureMaps
from .hooks import capture_outputs
from .layers import layer_table
from .models import LoadedModel

ImageInput = Image.Image | torch.Tensor


class Prediction(NamedTuple):
    """One of the top-k classes: ``(index, name, probability)``."""

    index: int
    name: str
    probability: float


@dataclass(frozen=True)
class Analysis:
    """Everything one forward (+ one backward) gives: predictions, feature maps and Grad-CAM.

    Attributes:
        predictions: the top-k classes, most probable first.
        features: the layer's feature maps.
        cam: the Grad-CAM of ``cam.class_index`` at the same layer.
        image_size: (H, W) of the heatmap grid (the original image or the given tensor).
        seconds: wall time of the analysis (preprocessing, forward, backward, CAM maths).
    """

    predictions: tuple[Prediction, ...]
    features: FeatureMaps
    cam: GradCAM
    image_size: tuple[int, int]
    seconds: float


def predict(loaded: LoadedModel, image: ImageInput, k: int = 5) -> list[Prediction]:
    """The top-k classes of ``image``.

    Args:
        loaded: the model.
        image: a PIL image (preprocessed here, whole, no crop) or a (1, 3, H, W) tensor that is
            already preprocessed.
        k: how many classes (clipped to the number of classes).
    """
    batch, _ = _prepare(loaded, image)
    with loaded.lock, torch.no_grad():
        logits = _logits(loaded.model(batch))
    return _top_k(loaded, logits, k)


def feature_maps(loaded: LoadedModel, image: ImageInput, layer: str | None = None) -> FeatureMaps:
    """The feature maps of ``layer`` (default: the last spatial layer) for ``image``."""
    name = _layer_name(loaded, layer)
    batch, _ = _prepare(loaded, image)
    with (
        loaded.lock,
        torch.no_grad(),
        capture_outputs(loaded.model, [name], track_grad=False) as captured,
    ):
        loaded.model(batch)
    return FeatureMaps(name, _first(captured.activations[name]), tuple(batch.shape[-2:]))


def grad_cam(
    loaded: LoadedModel,
    image: ImageInput,
    layer: str | None = None,
    target: int | None = None,
) -> GradCAM:
    """Grad-CAM of class ``target`` (default: the top-1 prediction) at ``layer``.

    Returns:
        A ``GradCAM`` whose ``heatmap`` is (H, W) float32 in [0, 1] on the image's pixel grid.

    Raises:
        TargetError: ``target`` is not a class index in ``[0, num_classes)``.
        LayerError: the layer does not exist, cannot be hooked, or does not affect the scores.
    """
    return analyze(loaded, image, layer, target).cam


def analyze(
    loaded: LoadedModel,
    image: ImageInput,
    layer: str | None = None,
    target: int | None = None,
    k: int = 5,
) -> Analysis:
    """Predictions, feature maps and Grad-CAM of one layer from a single hooked forward pass.

    Args:
        loaded: the model.
        image: a PIL image or a preprocessed (1, 3, H, W) tensor.
        layer: a name from ``list_layers(loaded)``; default: the last spatial layer.
        target: class index for Grad-CAM; default: the top-1 prediction.
        k: number of predictions to return.
    """
    started = time.perf_counter()
    name = _layer_name(loaded, layer)
    _check_target(loaded, target)
    batch, image_size = _prepare(loaded, image)
    # Grad mode is thread-local: enable it here so a caller inside torch.no_grad() or
    # torch.inference_mode() (a validation loop, a Streamlit callback) still gets a gradient.
    with loaded.lock, torch.inference_mode(False), torch.enable_grad():
        with capture_outputs(loaded.model, [name], track_grad=True) as captured:
            logits = _logits(loaded.model(batch))
        if logits.shape[1] != loaded.num_classes:
            raise ModelError(
                f"{loaded.name!r} returned {logits.shape[1]} scores for "
                f"{loaded.num_classes} class names"
            )
        class_index = int(logits[0].argmax()) if target is None else int(target)
        score = logits[0, class_index]
        tracked = captured.tracked[name]
        if not score.requires_grad:
            raise TargetError(f"the class scores do not depend on layer {name!r}")
        # Gradient w.r.t. the activation only: no parameter gradients, nothing written to .grad,
        # and the backward stops at the layer.
        (gradient,) = torch.autograd.grad(score, [tracked], allow_unused=True)
    if gradient is None:
        raise TargetError(f"the score of class {class_index} does not depend on layer {name!r}")

    activations = captured.activations[name][0]
    weights = channel_weights(gradient[0].float())
    cam = weighted_map(activations.float(), weights)
    heatmap = to_pixel_grid(cam, image_size)
    probabilities = torch.softmax(logits.detach().float(), dim=1)[0]
    result = GradCAM(
        heatmap=heatmap,
        class_index=class_index,
        class_name=loaded.class_name(class_index),
        score=float(score.detach()),
        probability=float(probabilities[class_index]),
        layer=name,
        cam=cam.detach().cpu().numpy().astype("float32"),
        weights=weights.detach().cpu().numpy().astype("float32"),
        blank=not bool((cam > 0).any()),
    )
    features = FeatureMaps(name, _first(captured.activations[name]), tuple(batch.shape[-2:]))
    predictions = tuple(_top_k(loaded, logits.detach(), k))
    return Analysis(predictions, features, result, image_size, time.perf_counter() - started)


def _layer_name(loaded: LoadedModel, layer: str | None) -> str:
    table = layer_table(loaded)
    if layer is None:
        return table.default
    return table.get(layer).name


def _check_target(loaded: LoadedModel, target: int | None) -> None:
    if target is None:
        return
    if isinstance(target, bool) or not isinstance(target, numbers.Integral):
        raise TargetError(f"target must be a class index (int), got {type(target).__name__}")
    if not 0 <= int(target) < loaded.num_classes:
        raise TargetError(
            f"target {target} is out of range: {loaded.name!r} has classes 0 to "
            f"{loaded.num_classes - 1}"
        )


def _prepare(loaded: LoadedModel, image: ImageInput) -> tuple[torch.Tensor, tuple[int, int]]:
    """The model input on the model's device and the (H, W) grid the heatmap is returned on."""
    if isinstance(image, Image.Image):
        batch = loaded.preprocessing.to_tensor(image)
        size = (image.height, image.width)
    elif isinstance(image, torch.Tensor):
        batch = image.unsqueeze(0) if image.dim() == 3 else image
        if batch.dim() != 4 or batch.shape[0] != 1 or batch.shape[1] != 3:
            raise ImageError(
                f"expected a preprocessed image tensor of shape (1, 3, H, W), got "
                f"{tuple(image.shape)}"
            )
        if not batch.is_floating_point():
            raise ImageError(f"expected a float tensor, got {batch.dtype}")
        size = (int(batch.shape[2]), int(batch.shape[3]))
    else:
        raise ImageError(
            f"expected a PIL image or a (1, 3, H, W) tensor, got {type(image).__name__}; "
            "use hookviz.load_image() for files and bytes"
        )
    param = next(loaded.model.parameters(), None)
    dtype = param.dtype if param is not None and param.is_floating_point() else torch.float32
    return batch.to(device=loaded.device, dtype=dtype), size


def _logits(output: Any) -> torch.Tensor:
    """The (1, num_classes) scores out of whatever the model returns."""
    if isinstance(output, torch.Tensor):
        logits = output
    elif isinstance(output, Mapping):
        key = next((k for k in ("logits", "out") if k in output), None)
        if key is None:
            raise ModelError(f"model returned a dict without 'logits' or 'out': {list(output)}")
        logits = output[key]
    elif isinstance(output, (tuple, list)) and output:
        logits = output[0]
    elif isinstance(getattr(output, "logits", None), torch.Tensor):
        logits = output.logits
    else:
        raise ModelError(f"cannot find class scores in a {type(output).__name__} output")
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2:
        shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ModelError(f"expected class scores of shape (1, num_classes), got {shape}")
    return logits


def _top_k(loaded: LoadedModel, logits: torch.Tensor, k: int) -> list[Prediction]:
    probabilities = torch.softmax(logits.float(), dim=1)[0]
    values, indices = probabilities.topk(max(1, min(k, probabilities.numel())))
    return [
        Prediction(int(i), loaded.class_name(int(i)), float(p))
        for p, i in zip(values.tolist(), indices.tolist(), strict=True)
    ]


def _first(activations: torch.Tensor) -> torch.Tensor:
    """(1, C, h, w) on any device -> (C, h, w) float32 on the CPU."""
    return activations[0].float().cpu()
