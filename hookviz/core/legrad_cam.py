"""``hookviz.grad_cam(..., method="legrad")`` on one forward pass: LeGrad's own.

Every other method starts from ``ForwardPass``, a forward pass kept for any number of targets.
LeGrad uses none of it (it needs every selected block's attention probabilities in the graph of a
score of that block), so here its own forward pass runs to the model's output and the target,
its score and probability are taken from that output: one forward pass where there were two, a
ViT-B/16's forward is 40% of the call. The result is the one ``ForwardPass.grad_cam`` gives.
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
from .targets import Resolved, TargetContext, resolve_target


def legrad_cam(
    loaded: LoadedModel,
    image: ImageInput,
    layer: str,
    target: object = None,
    blocks: object = None,
    progress: Callable[[int, int], bool | None] | None = None,
) -> GradCAM:
    """LeGrad's map of ``target`` (default: the top-1 class) at the encoder block ``layer``
    (or a layer inside one), averaged over ``blocks`` blocks (None: all up to it), as
    ``ForwardPass(loaded, image, layer).grad_cam(target, "legrad", blocks=blocks)``."""
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

    raw, _ = legrad_to_the_output(loaded, batch, layer, blocks, target_of, progress)
    resolved: Resolved = chosen["resolved"]
    return cam_result(
        torch.relu(raw[0]),
        None,
        image_size,
        class_index=resolved.index,
        class_name=resolved.name,
        score=float(resolved.score(chosen["output"])[0]),
        probability=resolved.probability,
        layer=layer,
        method="legrad",
        image=image if isinstance(image, Image.Image) else loaded.preprocessing.to_picture(batch),
        target=resolved.target,
        frame=image_frame(loaded, batch),
    )
