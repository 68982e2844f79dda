"""CAMs and feature maps for a whole batch in one forward (and one backward) pass: the
throughput path of dataset runs and GPUs.

Maps stay on the device until they are reduced; a batch's results then come to the host in one
copy. Optional autocast (bf16) runs the network in bfloat16 while the CAM maths stay in float32.
"""

from __future__ import annotations

import contextlib
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import TargetError
from .baseline_maps import BASELINE_MAPS
from .cam import upsample_and_scale, weighted_sum
from .forward_pass import ForwardPass, resolve_layer
from .frame import image_frame
from .grids import grid_view
from .hooks import Capture, StopForward, capture_outputs, forward_hooks, resolve_modules
from .inputs import check_num_classes, extract_logits, prepare_input
from .loaded import LoadedModel
from .methods import (
    METHODS,
    NEEDS_GRADIENT,
    MethodError,
    check_method,
    head_weights,
    score_weights,
)
from .outputs import detached, one_of
from .pass_methods import PASS_METHODS, method_options
from .targets import TargetContext, resolve_target


@dataclass(frozen=True)
class BatchGradCAM:
    """Grad-CAM of every image of a batch.

    Attributes:
        heatmaps: (N, H, W) float32 in [0, 1] on the input tensor's grid.
        class_indices: (N,) int64, the explained class of each image (a box's label, a
            region's category; -1 for a target without one).
        scores: (N,) float32, the score that was differentiated (a class's logit).
        layer: the hooked layer.
    """

    heatmaps: np.ndarray
    class_indices: np.ndarray
    scores: np.ndarray
    layer: str


def grad_cam_batch(
    loaded: LoadedModel,
    images: torch.Tensor,
    layer: str | None = None,
    targets: Sequence[int] | torch.Tensor | None = None,
    *,
    autocast: torch.dtype | None = None,
) -> BatchGradCAM:
    """Grad-CAM of N preprocessed images in one forward and one backward pass.

    Each image's class score depends only on that image (eval mode: no batch statistics), so
    the gradient of the summed scores gives every image its own gradient at once.

    Args:
        loaded: the model.
        images: (N, 3, H, W) preprocessed float tensor.
        layer: the layer to explain; default: the last spatial layer.
        targets: one target per image: a class index, a target of ``hookviz.targets`` or a
            callable scoring the model's output (each image's is resolved against that
            image's own output); default: each model's own choice (a classifier's top-1).
        autocast: e.g. ``torch.bfloat16`` to run the network under autocast (CAM maths stay in
            float32).

    Raises:
        TargetError: wrong number of targets or an index out of range.
    """
    batch, size = prepare_input(loaded, images, batched=True)
    passed = _explain(loaded, batch, layer, targets, "gradcam", autocast)
    # (a detector pads its resized input: the heatmaps are read from the images' part)
    heatmaps = upsample_and_scale(passed.cams, size, image_frame(loaded, batch[:1]))
    heatmaps, scores, indices = _to_host(heatmaps, passed.scores, passed.indices)
    return BatchGradCAM(
        heatmaps=heatmaps,
        class_indices=indices.astype(np.int64),
        scores=scores,
        layer=passed.layer,
    )


@dataclass(frozen=True)
class BatchExplanation:
    """A CAM method's result for every image of a batch, at the layer's resolution.

    Attributes:
        cams: (N, h, w) float32, non-negative: each image's map before upsampling (what
            ``GradCAM.cam`` holds; ``upsample_and_scale`` puts it on a pixel grid).
        class_indices: (N,) int64, the explained class of each image (a box's label, a
            region's category; -1 for a target without one).
        scores: (N,) float32, the score that was differentiated (a class's logit).
        top1_indices: (N,) int64, each image's most probable class.
        top1_probabilities: (N,) float32, its probability.
        layer: the hooked layer.
    """

    cams: np.ndarray
    class_indices: np.ndarray
    scores: np.ndarray
    top1_indices: np.ndarray
    top1_probabilities: np.ndarray
    layer: str


def explain_batch(
    loaded: LoadedModel,
    images: torch.Tensor,
    layer: str | None = None,
    targets: Sequence[int] | torch.Tensor | None = None,
    method: str = "gradcam",
    *,
    autocast: torch.dtype | None = None,
    **options: object,
) -> BatchExplanation:
    """Any CAM method for N preprocessed images of one size: one forward pass, and one
    backward pass for the gradient methods (Score-CAM adds its masked forwards per image).
    The methods that probe the model further (``pass_methods.py``), the baselines and the
    smoothing options run image by image, as ``grad_cam`` would (``cams`` may then be on the
    input's grid: FullGrad, the baselines, ``aug_smooth``).

    Args:
        as for ``grad_cam_batch``, and ``method`` (see ``hookviz.METHODS``) and its
        ``options`` (``hookviz.method_options``).
    """
    method = check_method(method)
    chosen = method_options(method, options)
    batch, _ = prepare_input(loaded, images, batched=True)
    if _image_by_image(method, chosen):
        passed = _explain_each(loaded, batch, layer, targets, method, options)
    else:
        passed = _explain(loaded, batch, layer, targets, method, autocast)
    cams, scores, indices, probabilities, top1 = _to_host(
        passed.cams,
        passed.scores,
        passed.indices,
        passed.top1_probabilities,
        passed.top1_indices,
    )
    return BatchExplanation(
        cams=cams,
        class_indices=indices.astype(np.int64),
        scores=scores,
        top1_indices=top1.astype(np.int64),
        top1_probabilities=probabilities,
        layer=passed.layer,
    )


def layer_batch(
    loaded: LoadedModel,
    images: torch.Tensor,
    layer: str,
    *,
    autocast: torch.dtype | None = None,
) -> torch.Tensor:
    """A layer's maps for N preprocessed images of one size, (N, C, h, w) float32 on the
    model's device. The forward stops at the layer: nothing downstream is computed."""
    name = resolve_layer(loaded, layer)
    batch, _ = prepare_input(loaded, images, batched=True)

    def stop(name: str):
        def hook(module, inputs, output):
            raise StopForward

        return hook

    with (
        loaded.lock,
        torch.no_grad(),
        _precision(loaded, autocast),
        capture_outputs(
            loaded.model, [name], track_grad=False, grids=grid_view(loaded.tokens, batch)
        ) as captured,
        # registered after the capture's hook, so it runs once the maps are read
        forward_hooks(resolve_modules(loaded.model, [name]), stop),
        contextlib.suppress(StopForward),
    ):
        loaded.model(batch)
    return captured.activations[name].float()


@dataclass(frozen=True)
class _Passed:
    cams: torch.Tensor
    scores: torch.Tensor
    indices: torch.Tensor
    top1_indices: torch.Tensor
    top1_probabilities: torch.Tensor
    layer: str


def _to_host(*tensors: torch.Tensor) -> list[np.ndarray]:
    """The tensors as float32 numpy arrays of the same shapes, in one device-to-host copy for
    all of them (class indices are exact in float32 up to 2**24)."""
    flat = torch.cat([t.detach().float().flatten() for t in tensors]).cpu().numpy()
    arrays, start = [], 0
    for tensor in tensors:
        arrays.append(flat[start : start + tensor.numel()].reshape(tuple(tensor.shape)))
        start += tensor.numel()
    return arrays


def _precision(loaded: LoadedModel, autocast: torch.dtype | None):
    if autocast is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=loaded.device.type, dtype=autocast)


def _explain(
    loaded: LoadedModel,
    batch: torch.Tensor,
    layer: str | None,
    targets: Sequence[int] | torch.Tensor | None,
    method: str,
    autocast: torch.dtype | None,
) -> _Passed:
    name = resolve_layer(loaded, layer)
    count = int(batch.shape[0])
    if _general(loaded, targets):
        return _explain_targets(loaded, batch, name, targets, method, autocast)
    chosen = _targets(loaded, targets, count)
    gradient_needed = method in NEEDS_GRADIENT
    with loaded.lock, torch.inference_mode(False), torch.enable_grad():
        output, captured = _hooked(loaded, batch, name, gradient_needed, autocast)
        logits = extract_logits(output)
        check_num_classes(loaded, logits)
        probabilities = torch.softmax(logits.detach().float(), dim=1)
        top1_probabilities, top1_indices = probabilities.max(dim=1)
        indices = top1_indices if chosen is None else chosen.to(logits.device)
        scores = logits.gather(1, indices[:, None])[:, 0]
        gradients = None
        if gradient_needed:
            (gradients,) = torch.autograd.grad(scores.sum(), [captured.tracked[name]])
    activations = captured.activations[name].float()
    if method == "scorecam":
        masked = [
            _score_cam(loaded, batch[i : i + 1], activations[i], int(indices[i]))
            for i in range(count)
        ]
        cams = torch.stack(masked)
    elif method == "cam":
        # bf16 logits are off by about 1%: the head is still found, a wrong one is not
        tolerance = 1e-3 if autocast is None else 3e-2
        weights = head_weights(
            loaded.model, activations, logits.detach().float(), indices, name, tolerance
        )
        cams = torch.relu(weighted_sum(activations, weights))
    else:
        raw, _ = METHODS[method](activations, None if gradients is None else gradients.float())
        cams = torch.relu(raw)
    return _Passed(
        cams=cams.float(),
        scores=scores.detach().float(),
        indices=indices,
        top1_indices=top1_indices,
        top1_probabilities=top1_probabilities,
        layer=name,
    )


def _image_by_image(method: str, options: dict[str, object]) -> bool:
    """Whether the batch runs image by image: a method outside the one-pass family, or a
    smoothing option (each needs passes of its own per image)."""
    return (
        method in PASS_METHODS
        or method in BASELINE_MAPS
        or bool(options["eigen_smooth"])
        or bool(options["aug_smooth"])
    )


def _explain_each(
    loaded: LoadedModel,
    batch: torch.Tensor,
    layer: str | None,
    targets: Sequence[object] | torch.Tensor | None,
    method: str,
    options: dict[str, object],
) -> _Passed:
    """``_explain`` one image at a time, through ``ForwardPass`` (what ``grad_cam`` runs)."""
    count = int(batch.shape[0])
    wanted = [None] * count if targets is None else [_plain(t) for t in targets]
    if len(wanted) != count:
        raise TargetError(f"expected {count} targets, one per image, got {len(wanted)}")
    cams, scores, indices, top1, top1_probabilities = [], [], [], [], []
    name = resolve_layer(loaded, layer)
    for i in range(count):
        kept = ForwardPass(loaded, batch[i : i + 1], name, k=1)
        cam = kept.grad_cam(wanted[i], method, **options)
        cams.append(torch.from_numpy(cam.cam))
        scores.append(cam.score)
        indices.append(cam.class_index)
        best = kept.predictions[0] if kept.predictions else None
        top1.append(-1 if best is None else best.index)
        top1_probabilities.append(float("nan") if best is None else best.probability)
    return _Passed(
        cams=torch.stack(cams),
        scores=torch.tensor(scores),
        indices=torch.tensor(indices),
        top1_indices=torch.tensor(top1),
        top1_probabilities=torch.tensor(top1_probabilities),
        layer=name,
    )


def _plain(target: object) -> object:
    """A target from a tensor of class indices as a plain int."""
    return int(target) if isinstance(target, torch.Tensor) else target


def _hooked(
    loaded: LoadedModel,
    batch: torch.Tensor,
    name: str,
    track_grad: bool,
    autocast: torch.dtype | None,
) -> tuple[object, Capture]:
    """The model's output for ``batch`` and its layer ``name`` captured (called with the
    model's lock held and grad mode on, for the backward that follows)."""
    with (
        _precision(loaded, autocast),
        capture_outputs(
            loaded.model, [name], track_grad=track_grad, grids=grid_view(loaded.tokens, batch)
        ) as captured,
    ):
        output = loaded.model(batch)
    return output, captured


def _general(loaded: LoadedModel, targets: object) -> bool:
    """Whether the batch needs targets resolved image by image (a model that scores no
    classes, or a target that is not a class index)."""
    if not loaded.scores_classes:
        return True
    if targets is None or isinstance(targets, torch.Tensor):
        return False
    return any(
        isinstance(target, bool) or not isinstance(target, numbers.Integral)
        for target in targets  # type: ignore[union-attr]
    )


def _explain_targets(
    loaded: LoadedModel,
    batch: torch.Tensor,
    name: str,
    targets: Sequence[object] | None,
    method: str,
    autocast: torch.dtype | None,
) -> _Passed:
    """``_explain`` for any targets (``hookviz.targets``, callables, None for each model's own
    choice): still one forward and one backward pass; each image's target is resolved against
    its own part of the output."""
    count = int(batch.shape[0])
    if targets is not None and len(targets) != count:
        raise TargetError(f"expected {count} targets, one per image, got {len(targets)}")
    if method == "cam":
        raise MethodError(
            "CAM explains a classifier's class, given as a class index; use 'gradcam', "
            "which explains any target"
        )
    wanted = list(targets) if targets is not None else [None] * count
    size = (int(batch.shape[2]), int(batch.shape[3]))
    gradient_needed = method in NEEDS_GRADIENT
    with loaded.lock, torch.inference_mode(False), torch.enable_grad():
        output, captured = _hooked(loaded, batch, name, gradient_needed, autocast)
        resolved = [
            resolve_target(TargetContext(loaded, detached(one_of(output, i)), size, size), t)
            for i, t in enumerate(wanted)
        ]
        scores = torch.stack([r.score(one_of(output, i))[0] for i, r in enumerate(resolved)])
        gradients = None
        if gradient_needed:
            (gradients,) = torch.autograd.grad(scores.sum(), [captured.tracked[name]])
    activations = captured.activations[name].float()
    if method == "scorecam":
        cams = torch.stack(
            [
                _score_cam(loaded, batch[i : i + 1], activations[i], resolved[i].score)
                for i in range(count)
            ]
        )
    else:
        raw, _ = METHODS[method](activations, None if gradients is None else gradients.float())
        cams = torch.relu(raw)
    nothing = torch.full((count,), float("nan"), device=batch.device)
    return _Passed(
        cams=cams.float(),
        scores=scores.detach().float(),
        indices=torch.tensor([r.index for r in resolved], device=batch.device),
        top1_indices=torch.full((count,), -1, device=batch.device),
        top1_probabilities=nothing,
        layer=name,
    )


def _score_cam(
    loaded: LoadedModel,
    image: torch.Tensor,
    activations: torch.Tensor,
    target: int | Callable[[object], torch.Tensor],
) -> torch.Tensor:
    """Score-CAM of one image for a class index or a resolved target's score."""

    def scores(masked: torch.Tensor) -> torch.Tensor:
        output = loaded.model(masked)
        return target(output) if callable(target) else extract_logits(output)[:, target]

    with loaded.lock, torch.no_grad():
        weights = score_weights(scores, image, activations)
    return torch.relu(weighted_sum(activations[None], weights[None])[0])


def _targets(
    loaded: LoadedModel, targets: Sequence[int] | torch.Tensor | None, count: int
) -> torch.Tensor | None:
    if targets is None:
        return None
    chosen = torch.as_tensor(targets)
    if chosen.dim() != 1 or chosen.numel() != count or chosen.is_floating_point():
        raise TargetError(
            f"expected {count} integer targets, one per image, got {list(chosen.shape)}"
        )
    if chosen.numel() and (int(chosen.min()) < 0 or int(chosen.max()) >= loaded.num_classes):
        raise TargetError(
            f"targets out of range: {loaded.name!r} has classes 0 to {loaded.num_classes - 1}"
        )
    return chosen.long()
