"""pytorch-grad-cam's two smoothing options, for every CAM method.

``eigen_smooth``: the map is the first principal component of the weighted activations (each
channel times its weight, or the element-wise products of the methods without channel weights)
rather than their sum: less noise, at the price of a map that no longer adds up the channels'
evidence. ``aug_smooth``: the mean of the maps of the image flipped and scaled (test-time
augmentation: horizontal flip x input scaled by 0.9, 1, 1.1), each flipped back: steadier maps
for six times the cost.
"""

from __future__ import annotations

import torch

from .loaded import LoadedModel
from .methods import ELEMENTWISE, MethodError, first_component

# pytorch-grad-cam's default test-time augmentations (ttach's HorizontalFlip x Multiply), in
# its order: (flipped, factor).
AUGMENTATIONS = tuple((flip, factor) for flip in (False, True) for factor in (0.9, 1.0, 1.1))


def smoothed(
    method: str,
    activations: torch.Tensor,
    gradient: torch.Tensor | None,
    weights: torch.Tensor | None,
    raw: torch.Tensor,
) -> torch.Tensor:
    """``eigen_smooth``: (N, h, w), the first principal component of what ``raw`` sums over
    channels. The methods without such a sum (Eigen-CAM, KPCA-CAM, FullGrad) keep ``raw``, as
    in pytorch-grad-cam."""
    if method in ELEMENTWISE and gradient is not None:
        return first_component(ELEMENTWISE[method](activations, gradient))
    if weights is not None and raw.shape[-2:] == activations.shape[-2:]:
        return first_component(activations * weights[..., None, None])
    return raw


def check_augmentable(loaded: LoadedModel) -> None:
    """A MethodError for a model whose targets move with a flip (a detector's boxes, a
    segmenter's regions): ``aug_smooth`` smooths targets that stay put."""
    if loaded.task in ("detection", "segmentation"):
        raise MethodError(
            f"aug_smooth flips the image, which moves a {loaded.task} model's boxes and "
            "regions: it smooths targets that stay put (a class, a text, a similarity)"
        )
