"""The one-call API: predictions, feature maps, a CAM or all three from one hooked forward pass,
and one hooked forward + single backward over several layers (``hooked_gradients``, shared by
the layer sweep, gradient flow and the intervention CAM).

Every function here is safe to call from many threads on one shared ``LoadedModel``: the model's
lock is held from registering the hooks to removing them. Rendering happens outside, on the plain
results.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import LayerError, ModelError
from .cam import GradCAM
from .features import FeatureMaps
from .forward_pass import (
    Analysis,
    ForwardPass,
    Prediction,
    check_target,
    resolve_layer,
    top_k,
)
from .fusion import check_fusion, fuse_cams
from .grids import grid_view
from .hooks import capture_outputs
from .inputs import ImageInput, check_num_classes, extract_logits, prepare_input
from .loaded import LoadedModel
from .methods import NEEDS_GRADIENT, check_method
from .own_pass_cams import OWN_PASS_METHODS, own_pass_cam
from .pass_methods import method_options
from .shared_passes import layer_passes, seed_layer_gradients

# What to call instead of ``predict`` on a model that is not a classifier.
_TASK_CALLS = {
    "detection": "hookviz.detect lists its detections",
    "segmentation": "hookviz.segment gives its per-pixel categories",
    "embedding": "hookviz.embed gives its embedding",
}

__all__ = [
    "Analysis",
    "ForwardPass",
    "HookedGradients",
    "Prediction",
    "analyze",
    "check_target",
    "feature_maps",
    "grad_cam",
    "hooked_gradients",
    "predict",
    "top_k",
]


def predict(loaded: LoadedModel, image: ImageInput, k: int = 5) -> list[Prediction]:
    """The top-k classes of ``image``.

    Args:
        loaded: the model.
        image: a PIL image (preprocessed here, whole, no crop) or a (1, 3, H, W) tensor that is
            already preprocessed.
        k: how many classes (clipped to the number of classes).
    """
    if not loaded.scores_classes:
        raise ModelError(
            f"{loaded.name!r} is a {loaded.task} model, not a classifier: "
            f"{_TASK_CALLS.get(loaded.task, 'see hookviz.targets')}"
        )
    batch, _ = prepare_input(loaded, image)
    with loaded.lock, torch.no_grad():
        logits = extract_logits(loaded.model(batch))
    return top_k(loaded, logits, k)


def feature_maps(loaded: LoadedModel, image: ImageInput, layer: str | None = None) -> FeatureMaps:
    """The feature maps of ``layer`` (default: the last spatial layer) for ``image``."""
    name = resolve_layer(loaded, layer)
    batch, _ = prepare_input(loaded, image)
    _, activations = captured_forward(loaded, batch, name)
    return FeatureMaps(name, activations.float().cpu(), (int(batch.shape[2]), int(batch.shape[3])))


def captured_forward(
    loaded: LoadedModel, batch: torch.Tensor, layer: str
) -> tuple[Any, torch.Tensor]:
    """One forward pass of ``batch`` without gradients: the model's output and ``layer``'s
    output for the first image, (C, h, w) (a transformer's tokens on their grid)."""
    with (
        loaded.lock,
        torch.no_grad(),
        capture_outputs(
            loaded.model, [layer], track_grad=False, grids=grid_view(loaded.tokens, batch)
        ) as captured,
    ):
        output = loaded.model(batch)
    return output, captured.activations[layer][0]


def grad_cam(
    loaded: LoadedModel,
    image: ImageInput,
    layer: str | Sequence[str] | None = None,
    target: object = None,
    method: str = "gradcam",
    *,
    fuse: str = "max",
    progress: Callable[[int, int], bool | None] | None = None,
    **options: Any,
) -> GradCAM:
    """Grad-CAM (or another CAM ``method``) of ``target`` at ``layer``.

    Args:
        loaded: the model.
        image: a PIL image or a preprocessed (1, 3, H, W) tensor.
        layer: a name from ``list_layers(loaded)``; default: the last spatial layer. Several
            names fuse their layers' maps into one (``fuse``).
        target: a class index; a target of ``hookviz.targets`` (``Box`` for a detector,
            ``Region`` for a segmenter, ``Similarity`` for an embedder, ``Text``); or any
            callable taking the model's output and returning one score per image. Default:
            the top-1 class, a detector's most confident box, a segmenter's largest category.
        method: ``"gradcam"`` (default) or another name of ``hookviz.METHODS``: with a
            gradient, ``"gradcam++"``, ``"xgradcam"``, ``"layercam"``, ``"hirescam"``,
            ``"gradcamelementwise"``, ``"eigengradcam"``, ``"shapleycam"``, ``"finercam"``,
            ``"smoothgradcam++"``, ``"fullgrad"`` (every bias of the network: no layer);
            ``"cam"`` (a linear head on the global average pool of the layer only); with a
            forward pass per channel or sample (``hookviz.SLOW_METHODS``), ``"scorecam"``,
            ``"sscam"``, ``"iscam"``, ``"ablationcam"``; without a class, ``"eigencam"``,
            ``"kpcacam"``, ``"fem"``; ``"randomcam"`` and the baselines ``"random"``,
            ``"centre"``, ``"edges"`` (``hookviz.BASELINES``), which explain nothing.
        fuse: how several layers' maps become one: ``"max"`` (TorchCAM's ``fuse_cams``),
            ``"mean"`` (pytorch-grad-cam's several target layers) or ``"refinecam"`` (their
            product, RefineCAM).
        progress: the slow methods (``hookviz.SLOW_METHODS``) and ``aug_smooth``: called with
            (steps done, steps in all); return True to cancel (``CancelledError``).
        options: ``eigen_smooth``, ``aug_smooth`` (pytorch-grad-cam's) and the method's own,
            with their defaults in ``hookviz.method_options(method)``.

    Returns:
        A ``GradCAM`` whose ``heatmap`` is (H, W) float32 in [0, 1] on the image's pixel grid.

    Raises:
        TargetError: ``target`` does not apply (a class index out of range, a box no detection
            overlaps, a category with no pixel).
        LayerError: the layer does not exist, cannot be hooked, or does not affect the scores.
        MethodError: an unknown method; ``"cam"`` on a model or layer it does not apply to.
    """
    if layer is not None and not isinstance(layer, str):
        names = list(layer)
        check_fusion(fuse)
        if not names:
            raise LayerError("no layer given: name one layer or several to fuse")
        check_target(loaded, target)
        method = check_method(method)
        method_options(method, options)  # (an unknown option fails before any work)
        resolved = [resolve_layer(loaded, name) for name in names]
        if len(resolved) == 1:
            return ForwardPass(loaded, image, resolved[0]).grad_cam(
                target, method, progress=progress, **options
            )
        # every layer hooked in one forward and, for a gradient method, differentiated in one
        # backward (as TorchCAM and pytorch-grad-cam do); each pass then computes its map as a
        # pass of its own layer would
        distinct = list(dict.fromkeys(resolved))
        passes = layer_passes(loaded, image, distinct)
        if method in NEEDS_GRADIENT:
            seed_layer_gradients(passes, target)
        cams = [p.grad_cam(target, method, progress=progress, **options) for p in passes]
        by_layer = dict(zip(distinct, cams, strict=True))
        return fuse_cams([by_layer[name] for name in resolved], fuse)
    check_target(loaded, target)
    method = check_method(method)
    chosen = method_options(method, options)
    if method in OWN_PASS_METHODS and not (chosen["aug_smooth"] or chosen["eigen_smooth"]):
        # (nothing of the forward pass kept for the other methods serves these: their own does)
        name = resolve_layer(loaded, layer)
        return own_pass_cam(loaded, image, name, target, method, chosen, progress)
    return ForwardPass(loaded, image, layer).grad_cam(target, method, progress=progress, **options)


def analyze(
    loaded: LoadedModel,
    image: ImageInput,
    layer: str | None = None,
    target: object = None,
    k: int = 5,
    method: str = "gradcam",
    *,
    progress: Callable[[int, int], bool | None] | None = None,
    **options: Any,
) -> Analysis:
    """Predictions, feature maps and Grad-CAM of one layer from a single hooked forward pass.

    Args:
        loaded: the model.
        image: a PIL image or a preprocessed (1, 3, H, W) tensor.
        layer: a name from ``list_layers(loaded)``; default: the last spatial layer.
        target: what Grad-CAM explains, as for ``grad_cam``.
        k: number of predictions to return (a model that scores classes).
        method: the CAM method, as for ``grad_cam``.
        progress: as for ``grad_cam``.
        options: the method's options, as for ``grad_cam``.
    """
    check_target(loaded, target)  # before any work: a bad target or method costs nothing
    method_options(check_method(method), options)
    return ForwardPass(loaded, image, layer, k).analysis(
        target, method, progress=progress, **options
    )


@dataclass(frozen=True)
class HookedGradients:
    """One hooked forward and one backward over several layers (see ``hooked_gradients``).

    Attributes:
        logits: (num_classes,) detached class scores.
        index: the class whose score was differentiated.
        activations: layer -> (C, h, w) snapshot, for the layers that ran.
        gradients: layer -> (C, h, w) float32 gradient (zeros where the score does not
            depend on the layer).
    """

    logits: torch.Tensor
    index: int
    activations: dict[str, torch.Tensor]
    gradients: dict[str, torch.Tensor]

    @property
    def probability(self) -> float:
        """Softmax probability of ``index``."""
        return float(torch.softmax(self.logits.float(), 0)[self.index])


def hooked_gradients(
    loaded: LoadedModel,
    batch: torch.Tensor,
    layers: Sequence[str],
    target: int | None,
    *,
    during: Callable[[], AbstractContextManager[object]] = nullcontext,
) -> HookedGradients:
    """Capture ``layers`` in one forward pass and differentiate the class score (default: the
    top-1) with respect to all of them in a single ``torch.autograd.grad`` call.

    Args:
        loaded: the model.
        batch: (1, 3, H, W) prepared input.
        layers: hookable layer names.
        target: class index or None.
        during: a context manager entered around the forward before the capture hooks are
            registered (so it runs first on a shared layer), e.g. an intervention.
    """
    with loaded.lock, torch.inference_mode(False), torch.enable_grad():
        with (
            during(),
            capture_outputs(
                loaded.model, layers, track_grad=True, grids=grid_view(loaded.tokens, batch)
            ) as captured,
        ):
            logits = extract_logits(loaded.model(batch))
        check_num_classes(loaded, logits)
        index = int(logits[0].argmax()) if target is None else int(target)
        present = [name for name in layers if name in captured.tracked]
        grads = torch.autograd.grad(
            logits[0, index], [captured.tracked[name] for name in present], allow_unused=True
        )
    activations = {name: captured.activations[name][0] for name in present}
    gradients = {
        name: torch.zeros_like(activations[name], dtype=torch.float32)
        if grad is None
        else grad[0].float()
        for name, grad in zip(present, grads, strict=True)
    }
    return HookedGradients(logits[0].detach(), index, activations, gradients)
