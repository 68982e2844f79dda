"""Where the image lies in a model's own input grid.

A torchvision detector resizes its input inside the model and pads the batch at the bottom and
right to a multiple of its stride, so a layer's grid covers the padding too. The share of the
grid the image covers is read by running the model's own transform (a resize, no network)."""

from __future__ import annotations

import torch

from .loaded import LoadedModel

Frame = tuple[float, float]
WHOLE: Frame = (1.0, 1.0)


def image_frame(loaded: LoadedModel, batch: torch.Tensor) -> Frame:
    """The share (height, width) of the model's internal input that the image covers, from its
    top left; (1, 1) for a model that takes the input as it is."""
    transform = getattr(loaded.model, "transform", None)
    if not (callable(transform) and hasattr(transform, "batch_images")):
        return WHOLE
    with torch.no_grad():
        images, _ = transform(list(batch))
    (height, width), padded = images.image_sizes[0], images.tensors.shape[-2:]
    return height / int(padded[0]), width / int(padded[1])
