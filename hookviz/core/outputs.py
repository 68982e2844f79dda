"""Reading the outputs of models that are not plain classifiers: a detector's detections, a
segmenter's per-pixel scores and an embedder's vectors, in whichever container the model
returns them (torchvision's list of dicts and ``{"out": ...}``, a Hugging Face ``ModelOutput``,
a tuple)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from ..errors import ModelError


def detections_of(output: Any) -> list[Mapping[str, torch.Tensor]]:
    """One ``{"boxes": (K, 4), "labels": (K,), "scores": (K,)}`` per image, as torchvision's
    detectors return them in eval mode (a single dict is one image)."""
    images = [output] if isinstance(output, Mapping) else output
    if not isinstance(images, Sequence) or not all(
        isinstance(found, Mapping) and {"boxes", "labels", "scores"} <= set(found)
        for found in images
    ):
        raise ModelError(
            "expected a detector's output: one dict of 'boxes', 'labels' and 'scores' per image, "
            f"got {type(output).__name__}"
        )
    return list(images)


def segmentation_scores(output: Any) -> torch.Tensor:
    """The (N, categories, H, W) per-pixel scores: the tensor itself, a dict's ``"out"`` (or
    ``"logits"``), or an object's ``.logits``."""
    scores = output
    if isinstance(output, Mapping):
        scores = next((output[k] for k in ("out", "logits") if k in output), None)
    elif not isinstance(output, torch.Tensor):
        scores = getattr(output, "logits", None)
    if not isinstance(scores, torch.Tensor) or scores.dim() != 4:
        shape = tuple(scores.shape) if isinstance(scores, torch.Tensor) else type(output).__name__
        raise ModelError(f"expected per-pixel scores of shape (N, categories, H, W), got {shape}")
    return scores


def embeddings_of(output: Any) -> torch.Tensor:
    """The (N, D) embeddings: the tensor itself (a pooled (N, D, 1, 1) one flattened), a
    tuple's first item, a dict's ``"embedding"``/``"image_embeds"``/``"pooler_output"``, or an
    object's ``.image_embeds``/``.pooler_output``."""
    vectors = output
    names = ("embedding", "image_embeds", "pooler_output")
    if isinstance(output, Mapping):
        vectors = next((output[k] for k in names if k in output), None)
    elif isinstance(output, (tuple, list)) and output:
        vectors = output[0]
    elif not isinstance(output, torch.Tensor):
        vectors = next(
            (getattr(output, k) for k in names[1:] if getattr(output, k, None) is not None), None
        )
    if isinstance(vectors, torch.Tensor) and vectors.dim() == 4 and vectors.shape[2:] == (1, 1):
        vectors = vectors.flatten(1)
    if not isinstance(vectors, torch.Tensor) or vectors.dim() != 2:
        shape = tuple(vectors.shape) if isinstance(vectors, torch.Tensor) else type(output).__name__
        raise ModelError(f"expected embeddings of shape (N, D), got {shape}")
    return vectors


def detached(output: Any) -> Any:
    """``output`` with every tensor in it detached (lists, tuples and dicts kept as they are),
    for reading results without holding the autograd graph."""
    if isinstance(output, torch.Tensor):
        return output.detach()
    if isinstance(output, Mapping):
        return {key: detached(value) for key, value in output.items()}
    if isinstance(output, tuple) and hasattr(output, "_fields"):  # a named tuple
        return type(output)(*(detached(value) for value in output))
    if isinstance(output, (list, tuple)):
        return type(output)(detached(value) for value in output)
    return output


def one_of(output: Any, index: int) -> Any:
    """Image ``index``'s part of a batch's output, as a batch of one: a tensor's row, a list's
    item (a detector's dict) as a list of one, a dict's or tuple's tensors each cut alike."""
    if isinstance(output, torch.Tensor):
        return output[index : index + 1]
    if isinstance(output, Mapping):
        return {key: one_of(value, index) for key, value in output.items()}
    if isinstance(output, list) and output and isinstance(output[0], Mapping):
        return [output[index]]
    if isinstance(output, (list, tuple)):
        return type(output)(one_of(value, index) for value in output)
    return output
