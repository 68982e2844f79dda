"""What goes into a model and what comes out: input tensors on the right device and format,
and class scores out of whatever a model returns."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from PIL import Image

from ..errors import ImageError, ModelError
from .loaded import LoadedModel

ImageInput = Image.Image | torch.Tensor


def prepare_input(
    loaded: LoadedModel, image: ImageInput, *, batched: bool = False
) -> tuple[torch.Tensor, tuple[int, int]]:
    """The model input and the (H, W) grid a heatmap is returned on.

    Args:
        loaded: the model (gives preprocessing, device, dtype and memory format).
        image: a PIL image (resized whole, no crop) or a preprocessed tensor: (1, 3, H, W) or
            (3, H, W); with ``batched``, (N, 3, H, W).
        batched: accept N > 1 images in one tensor.

    Returns:
        The input on the model's device, and (H, W) of the original image (of its file, for
        an image ``load_image`` decoded at a reduced scale: ``info["full_size"]``) or of the
        tensor.
    """
    if isinstance(image, Image.Image):
        batch = loaded.preprocessing.to_tensor(image)
        # a large JPEG decoded at a reduced scale (``load_image(shrink_to=...)``) stands for
        # its file: results are on the file's own pixel grid
        width, height = image.info.get("full_size", image.size)
        size = (int(height), int(width))
    elif isinstance(image, torch.Tensor):
        batch = image.unsqueeze(0) if image.dim() == 3 else image
        expected = "(N, 3, H, W)" if batched else "(1, 3, H, W)"
        if (
            batch.dim() != 4
            or batch.shape[1] != 3
            or batch.shape[0] == 0
            or (batch.shape[0] != 1 and not batched)
        ):
            raise ImageError(
                f"expected a preprocessed image tensor of shape {expected}, got "
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
    batch = batch.to(device=loaded.device, dtype=dtype)
    if loaded.channels_last:
        batch = batch.contiguous(memory_format=torch.channels_last)
    return batch, size


def extract_logits(output: Any) -> torch.Tensor:
    """The (N, num_classes) scores out of whatever the model returns: a tensor, a tuple/list
    (first item), a dict (``"logits"`` or ``"out"``) or an object with ``.logits``."""
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
        raise ModelError(f"expected class scores of shape (N, num_classes), got {shape}")
    return logits


def check_num_classes(loaded: LoadedModel, logits: torch.Tensor) -> None:
    """Refuse a model whose score count differs from its class names."""
    if logits.shape[1] != loaded.num_classes:
        raise ModelError(
            f"{loaded.name!r} returned {logits.shape[1]} scores for "
            f"{loaded.num_classes} class names"
        )
