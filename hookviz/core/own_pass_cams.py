"""``hookviz.grad_cam`` for the methods that run a forward pass of their own: LeGrad and
Shapley-CAM, on that pass alone.

Every other method starts from ``ForwardPass``, a forward pass kept for any number of targets.
These two have no use for it: LeGrad needs every selected block's attention probabilities in
the graph of a score of that block, Shapley-CAM a graph with second derivatives (the kept pass
records lean autograd nodes, which have none). So their own forward pass runs to the model's
output and the target, its score and probability are taken from that output: one forward pass
where there were two. The result is the one ``ForwardPass.grad_cam`` gives.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from PIL import Image

from .cam import GradCAM, cam_result
from .frame import image_frame
from .inputs import ImageInput, check_num_classes, extract_logits, prepare_input
from .legrad import legrad_to_the_output
from .loaded import LoadedModel
from .outputs import detached
from .probing_methods import shapley_to_the_output
from .targets import Resolved, TargetContext, resolve_target

OWN_PASS_METHODS = ("legrad", "shapleycam")


def own_pass_cam(
    loaded: LoadedModel,
    image: ImageInput,
    layer: str,
    target: object,
    method: str,
    options: dict[str, Any],
    progress: Callable[[int, int], bool | None] | None = None,
) -> GradCAM:
    """The CAM of ``target`` (default: the top-1 class) by ``method`` (one of
    ``OWN_PASS_METHODS``) at ``layer`` with its ``options`` (``blocks``: LeGrad's), as
    ``ForwardPass(loaded, image, layer).grad_cam(target, method, **options)``."""
    batch, image_size = prepare_input(loaded, image)
    grid = (int(batch.shape[2]), int(batch.shape[3]))
    chosen: dict[str, Any] = {}

    def target_of(output: Any) -> Callable[[Any], torch.Tensor]:
        if loaded.scores_classes:
            check_num_classes(loaded, extract_logits(output))
        chosen["output"] = detached(output)
        context = TargetContext(loaded, chosen["output"], image_size, grid)
        chosen["resolved"] = resolve_target(context, target)
        return chosen["resolved"].score

    weights = None
    if method == "legrad":
        raw, _ = legrad_to_the_output(loaded, batch, layer, options["blocks"], target_of, progress)
    else:
        raw, weights, _ = shapley_to_the_output(loaded, batch, layer, target_of)
        weights = weights[0]
    resolved: Resolved = chosen["resolved"]
    return cam_result(
        torch.relu(raw[0]),
        weights,
        image_size,
        class_index=resolved.index,
        class_name=resolved.name,
        score=float(resolved.score(chosen["output"])[0]),
        probability=resolved.probability,
        layer=layer,
        method=method,
        image=image if isinstance(image, Image.Image) else loaded.preprocessing.to_picture(batch),
        target=resolved.target,
        frame=image_frame(loaded, batch),
    )
