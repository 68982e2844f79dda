"""Several layers' CAMs from one hooked forward and one backward pass, for layer fusion.

A ``ForwardPass`` hooks one layer; fusing n layers with one each would cost n forwards and n
backwards where TorchCAM and pytorch-grad-cam hook every layer at once. Here every layer is
captured in the same forward and one ``torch.autograd.grad`` call differentiates the score with
respect to all of them. Each layer's map is built exactly as ``ForwardPass.grad_cam`` builds it
(same combination rule, same ``eigen_smooth``, same result fields), so a fused map is the same
either way. Methods that need more than the activations and one gradient (the slow ones, those
that probe the model further, CAM's head, ``aug_smooth``) go through ``ForwardPass`` instead:
``one_pass_cams`` returns None for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from PIL import Image

from ..errors import TargetError
from .cam import GradCAM, cam_result
from .frame import image_frame
from .grids import grid_view
from .hooks import capture_outputs
from .inputs import ImageInput, check_num_classes, extract_logits, prepare_input
from .loaded import LoadedModel
from .methods import METHODS, NEEDS_GRADIENT
from .outputs import detached
from .smoothing import smoothed
from .targets import TargetContext, resolve_target


def one_pass_cams(
    loaded: LoadedModel,
    image: ImageInput,
    layers: Sequence[str],
    target: object,
    method: str,
    options: dict[str, Any],
) -> list[GradCAM] | None:
    """The CAM of ``target`` at each of ``layers`` (resolved names), in their order, from one
    forward and at most one backward pass; None when ``method`` or ``options`` need more than
    that (the caller then runs a ``ForwardPass`` per layer).

    ``options`` are the method's options with their defaults filled in."""
    if METHODS.get(method) is None or options.get("aug_smooth"):
        return None
    batch, size = prepare_input(loaded, image)
    picture = image if isinstance(image, Image.Image) else loaded.preprocessing.to_picture(batch)
    with (
        loaded.lock,
        torch.inference_mode(False),
        torch.enable_grad(),
        capture_outputs(
            loaded.model, layers, track_grad=True, grids=grid_view(loaded.tokens, batch)
        ) as captured,
    ):
        output = loaded.model(batch)
    if loaded.scores_classes:
        check_num_classes(loaded, extract_logits(output))
    grid = (int(batch.shape[2]), int(batch.shape[3]))
    context = TargetContext(loaded, detached(output), size, grid)
    resolved = resolve_target(context, target)
    gradients: dict[str, torch.Tensor | None] = dict.fromkeys(layers)
    if method in NEEDS_GRADIENT:
        gradients = _gradients(resolved.score(output).sum(), captured.tracked, layers)
    score = float(resolved.score(context.output)[0])
    frame = image_frame(loaded, batch)
    cams = []
    for name in layers:
        activations = captured.activations[name][0].float()[None]
        gradient = gradients[name]
        raw, weights = METHODS[method](activations, gradient)
        if options["eigen_smooth"]:
            raw = smoothed(method, activations, gradient, weights, raw)
        cams.append(
            cam_result(
                torch.relu(raw[0]),
                None if weights is None else weights[0],
                size,
                class_index=resolved.index,
                class_name=resolved.name,
                score=score,
                probability=resolved.probability,
                layer=name,
                method=method,
                image=picture,
                target=resolved.target,
                frame=frame,
            )
        )
    return cams


def _gradients(
    value: torch.Tensor, tracked: dict[str, torch.Tensor], layers: Sequence[str]
) -> dict[str, torch.Tensor]:
    """The gradient of ``value`` with respect to each layer's output, (1, C, h, w) float32, in
    one backward pass; a TargetError naming the first layer the score does not depend on."""
    if not value.requires_grad:
        raise TargetError(f"the scores do not depend on layer {layers[0]!r}")
    with torch.inference_mode(False), torch.enable_grad():
        grads = torch.autograd.grad(value, [tracked[name] for name in layers], allow_unused=True)
    for name, grad in zip(layers, grads, strict=True):
        if grad is None:
            raise TargetError(f"the score does not depend on layer {name!r}")
    return {name: grad[0].float()[None] for name, grad in zip(layers, grads, strict=True)}
