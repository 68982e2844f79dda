"""The CAM family as one mechanism: a method turns a layer's activations A (and, for most, the
gradient G = d y^c / d A of the class logit) into a coarse map; hooks, the backward pass,
upsampling and scaling are shared by all of them (pipeline.py, cam.py).

Each function takes float32 tensors with a leading batch dimension, A and G of shape
(N, C, h, w), and returns the map before ReLU, shape (N, h, w), plus the effective channel
weights (N, C) when the method has them (None for the spatially weighted ones). The caller
applies the ReLU that every method of this family ends with.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..errors import HookvizError
from .cam import weighted_sum

Combine = Callable[[torch.Tensor, torch.Tensor | None], tuple[torch.Tensor, torch.Tensor | None]]

# Numerical guards, the values the reference implementations use, so results agree with them.
_EPS_PLUSPLUS = 1e-6
_EPS_XGRAD = 1e-7


class MethodError(HookvizError, ValueError):
    """Unknown CAM method name."""


def gradcam(a: torch.Tensor, g: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Grad-CAM, Selvaraju et al. 2017 (arXiv:1610.02391), eq. 1-2:
    alpha_k = mean_ij G_kij;  L = sum_k alpha_k A_k."""
    weights = g.mean(dim=(-2, -1))
    return weighted_sum(a, weights), weights


def gradcam_plusplus(
    a: torch.Tensor, g: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Grad-CAM++, Chattopadhay et al. 2018 (arXiv:1710.11063), eq. 19 with the exponential
    output, where higher derivatives are powers of the first:
    a_kij = G^2 / (2 G^2 + sum_ab A_kab G^3);  w_k = sum_ij a_kij ReLU(G_kij);
    L = sum_k w_k A_k."""
    g2 = g * g
    g3 = g2 * g
    total = a.sum(dim=(-2, -1), keepdim=True)
    alpha = g2 / (2 * g2 + total * g3 + _EPS_PLUSPLUS)
    alpha = torch.where(g != 0, alpha, torch.zeros_like(alpha))
    weights = (alpha * torch.relu(g)).sum(dim=(-2, -1))
    return weighted_sum(a, weights), weights


def xgradcam(a: torch.Tensor, g: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """XGrad-CAM, Fu et al. 2020 (arXiv:2008.02312), eq. 8:
    w_k = sum_ij (A_kij / sum_ab A_kab) G_kij;  L = sum_k w_k A_k."""
    total = a.sum(dim=(-2, -1), keepdim=True)
    weights = (g * a / (total + _EPS_XGRAD)).sum(dim=(-2, -1))
    return weighted_sum(a, weights), weights


def layercam(a: torch.Tensor, g: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Layer-CAM, Jiang et al. 2021 (IEEE TIP 30), eq. 6-7: every location has its own weight,
    w_kij = ReLU(G_kij);  L = sum_k w_k * A_k (element-wise)."""
    return (torch.relu(g) * a).sum(dim=-3), None


def hirescam(a: torch.Tensor, g: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """HiResCAM, Draelos & Carin 2020 (arXiv:2011.08891), eq. 4: the gradient itself weighs
    each location, L = sum_k G_k * A_k (element-wise; no spatial averaging)."""
    return (g * a).sum(dim=-3), None


def eigencam(a: torch.Tensor, g: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Eigen-CAM, Muhammad & Yeasin 2020 (arXiv:2008.00299), eq. 5-6: the projection of the
    mean-centred activations (h*w positions x C channels) on their first principal component.
    No gradient and no class: it shows what the layer responds to most.

    An SVD's singular vectors have no fixed sign, so the raw projection may come out inverted
    (a frequent complaint about Eigen-CAM). The sign is fixed as in Seg-Eigen-CAM (Chung & Ying
    2025, eq. 13): flipped when its most negative value outweighs its most positive one."""
    n, c, h, w = a.shape
    positions = a.reshape(n, c, h * w).transpose(1, 2)  # (N, hw, C)
    centred = positions - positions.mean(dim=1, keepdim=True)
    # float64 SVD: the first singular vector must not depend on float32 round-off
    _, _, vh = torch.linalg.svd(centred.double(), full_matrices=False)
    projection = (centred.double() @ vh[:, 0, :, None])[..., 0]
    flip = projection.amin(dim=1).abs() > projection.amax(dim=1)
    projection = torch.where(flip[:, None], -projection, projection)
    return projection.float().reshape(n, h, w), None


# Score-CAM needs forward passes of masked images, not a combination rule: pipeline.py runs it.
METHODS: dict[str, Combine | None] = {
    "gradcam": gradcam,
    "gradcam++": gradcam_plusplus,
    "xgradcam": xgradcam,
    "layercam": layercam,
    "hirescam": hirescam,
    "scorecam": None,
    "eigencam": eigencam,
}
NEEDS_GRADIENT = frozenset({"gradcam", "gradcam++", "xgradcam", "layercam", "hirescam"})


def check_method(method: str) -> str:
    """The method's canonical name, or a MethodError listing the choices."""
    name = method.lower().replace("_", "").replace("-", "") if isinstance(method, str) else method
    aliases = {"gradcampp": "gradcam++", "gradcamplusplus": "gradcam++"}
    name = aliases.get(name, name)
    if name not in METHODS:
        raise MethodError(f"unknown CAM method {method!r}; choose one of {', '.join(METHODS)}")
    return name


SCORECAM_BATCH = 32


def score_weights(
    scores: Callable[[torch.Tensor], torch.Tensor],
    image: torch.Tensor,
    activations: torch.Tensor,
    batch_size: int = SCORECAM_BATCH,
    progress: Callable[[int, int], bool | None] | None = None,
) -> torch.Tensor:
    """Score-CAM channel weights, Wang et al. 2020 (arXiv:1910.01279), eq. 5-7 as in the
    reference implementation: each channel, upsampled to the input and scaled to [0, 1], masks
    the input; the target's score of every masked input (a class's logit), softmaxed over
    channels, is that channel's weight.

    Args:
        scores: the model followed by the target: (N, 3, H, W) inputs -> (N,) scores.
        image: (1, 3, H, W) preprocessed input.
        activations: (C, h, w).
        batch_size: masked inputs per forward pass.
        progress: called before each batch with (channels done, channels in all); returning
            True cancels (raises CancelledError). A UI can also cancel by raising from it.

    Returns:
        (C,) weights.
    """
    size = tuple(image.shape[-2:])
    masks = torch.nn.functional.interpolate(
        activations[None].float(), size=size, mode="bilinear", align_corners=True
    )[0]
    low = masks.amin(dim=(1, 2), keepdim=True)
    high = masks.amax(dim=(1, 2), keepdim=True)
    masks = (masks - low) / (high - low + 1e-8)
    found = []
    for start in range(0, masks.shape[0], batch_size):
        if progress is not None and progress(start, masks.shape[0]):
            raise CancelledError("Score-CAM was cancelled")
        chunk = image * masks[start : start + batch_size, None].to(image.dtype)
        found.append(scores(chunk).float())
    return torch.softmax(torch.cat(found), dim=0)


class CancelledError(HookvizError):
    """A long computation was cancelled by its caller."""
