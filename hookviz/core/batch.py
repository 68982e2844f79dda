"""Grad-CAM for a whole batch in one forward and one backward pass (throughput work, GPUs).

Maps stay on the device until they are upsampled and scaled; the batch's results then come to
the host in a single copy. Optional bf16 autocast runs the network in bfloat16 while the CAM
maths stay in float32.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import TargetError
from .cam import channel_weights, upsample_and_scale, weighted_map
from .forward_pass import resolve_layer
from .grids import grid_view
from .hooks import capture_outputs
from .inputs import check_num_classes, extract_logits, prepare_input
from .loaded import LoadedModel


@dataclass(frozen=True)
class BatchGradCAM:
    """Grad-CAM of every image of a batch.

    Attributes:
        heatmaps: (N, H, W) float32 in [0, 1] on the input tensor's grid.
        class_indices: (N,) int64, the explained class of each image.
        scores: (N,) float32, the logit of that class.
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
        targets: one class index per image; default: each image's top-1 prediction.
        autocast: e.g. ``torch.bfloat16`` to run the network under autocast (CAM maths stay in
            float32).

    Raises:
        TargetError: wrong number of targets or an index out of range.
    """
    name = resolve_layer(loaded, layer)
    batch, size = prepare_input(loaded, images, batched=True)
    count = int(batch.shape[0])
    chosen = _targets(loaded, targets, count)
    precision = (
        torch.autocast(device_type=loaded.device.type, dtype=autocast)
        if autocast is not None
        else contextlib.nullcontext()
    )
    with (
        loaded.lock,
        torch.inference_mode(False),
        torch.enable_grad(),
    ):
        with (
            precision,
            capture_outputs(
                loaded.model, [name], track_grad=True, grids=grid_view(loaded.tokens, batch)
            ) as captured,
        ):
            logits = extract_logits(loaded.model(batch))
        check_num_classes(loaded, logits)
        indices = logits.detach().argmax(dim=1) if chosen is None else chosen.to(logits.device)
        scores = logits.gather(1, indices[:, None])[:, 0]
        (gradients,) = torch.autograd.grad(scores.sum(), [captured.tracked[name]])
    weights = channel_weights(gradients.float())
    cams = weighted_map(captured.activations[name].float(), weights)
    heatmaps = upsample_and_scale(cams, size)
    # one device-to-host copy for the whole batch
    packed = torch.cat([heatmaps.flatten(), scores.detach().float(), indices.float()]).cpu().numpy()
    pixels = count * size[0] * size[1]
    return BatchGradCAM(
        heatmaps=packed[:pixels].reshape(count, *size),
        class_indices=packed[pixels + count :].astype(np.int64),
        scores=packed[pixels : pixels + count].astype(np.float32),
        layer=name,
    )


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
