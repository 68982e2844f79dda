"""Grad-CAM maths on captured tensors (Selvaraju et al., 2017, arXiv:1610.02391).

For a layer with activations A (C, h, w) and the gradient of the class score y^c (the logit,
before softmax) with respect to them, Grad-CAM is

    alpha_k = (1 / (h w)) * sum_ij  d y^c / d A_k[i, j]          (paper, eq. 1)
    L^c     = ReLU( sum_k alpha_k A_k )                          (paper, eq. 2)

For a network ending in global average pooling and a linear layer this equals the classic CAM of
Zhou et al. (2016) divided by h*w, which the tests check exactly. The coarse map is then upsampled
bilinearly onto the image's pixel grid and scaled to [0, 1].
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

# A map whose spread is below this fraction of its magnitude is flat: scaling it would only
# amplify float32 round-off. Relative, not absolute: untrained networks can produce maps whose
# whole structure lives at 1e-19 and is still real.
_FLAT = 1e-6


@dataclass(frozen=True)
class GradCAM:
    """A Grad-CAM result.

    Attributes:
        class_index: the target class (a box's label, a region's category; -1 for a target
            without one: a similarity, a callable).
        class_name: its name (or the target's, in words).
        score: the score y^c that was differentiated (a class's logit; a target's score).
        probability: softmax probability of the class, in [0, 1] (a detection's score, a
            region's mean probability over its pixels; NaN for a target without one).
        layer: the hooked layer's name.
        cam: (h, w) float32, the map before upsampling and scaling (ReLU applied), >= 0.
        weights: (C,) float32, the channel weights alpha_k; None for methods that weigh every
            location separately (Layer-CAM, HiResCAM) or use no weights (Eigen-CAM).
        blank: True when the map is zero everywhere (no positive evidence at this layer); the
            heatmap is then all zeros rather than scaled noise.
        method: the CAM method (``"gradcam"``, ``"gradcam++"``, ...).
        size: (H, W) of the pixel grid ``heatmap`` is on (the analysed image, or the tensor
            that was passed in).
        image: the analysed picture when there is one (for ``_repr_png_``); never compared.
        target: what was explained, as resolved (``hookviz.targets``: a ``Class``, a ``Box``
            in the image's pixels, a ``Region``, ...; the callable given); never compared.
        frame: the share (height, width) of the layer's grid that covers the image: below 1
            when the model pads its input (a detector pads its resized image at the bottom and
            right), and the heatmap is then read from that part of the grid only.
    """

    class_index: int
    class_name: str
    score: float
    probability: float
    layer: str
    cam: np.ndarray
    weights: np.ndarray | None
    blank: bool
    method: str = "gradcam"
    size: tuple[int, int] = (0, 0)
    image: Image.Image | None = field(default=None, repr=False, compare=False)
    target: Any = field(default=None, repr=False, compare=False)
    frame: tuple[float, float] = (1.0, 1.0)

    @cached_property
    def heatmap(self) -> np.ndarray:
        """(H, W) float32 in [0, 1] on the pixel grid of ``size``.

        Computed on first use and kept: on a 40-megapixel photo it is a 160 MB array that a
        page showing a 1000-pixel copy never needs (``heatmap_at`` gives that copy's grid).
        """
        return self.heatmap_at(self.size)

    def heatmap_at(self, size: tuple[int, int]) -> np.ndarray:
        """The heatmap upsampled onto another (H, W) grid, e.g. a display-size copy of the
        image: (H, W) float32 in [0, 1]."""
        return to_pixel_grid(torch.from_numpy(self.cam), size, self.frame)

    def _repr_png_(self) -> bytes:
        """The overlay on the analysed image (the heatmap alone without one), for Jupyter."""
        from .. import render  # deferred: pictures only when asked for

        return render.cam_picture_png(self)


def channel_weights(gradients: torch.Tensor) -> torch.Tensor:
    """alpha_k: the spatial mean of the gradient.

    Args:
        gradients: (..., C, h, w) d y^c / d A (a leading batch dimension is allowed).

    Returns:
        (..., C) channel weights.
    """
    return gradients.mean(dim=(-2, -1))


def weighted_sum(activations: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """sum_k weights_k * A_k, before any ReLU (may be negative).

    Args:
        activations: (..., C, h, w).
        weights: (..., C).

    Returns:
        (..., h, w).
    """
    return (activations * weights[..., None, None]).sum(dim=-3)


def weighted_map(activations: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """ReLU(sum_k weights_k * A_k): (..., h, w), non-negative."""
    return torch.relu(weighted_sum(activations, weights))


def cam_result(
    cam: torch.Tensor,
    weights: torch.Tensor | None,
    size: tuple[int, int],
    *,
    class_index: int,
    class_name: str,
    score: float,
    probability: float,
    layer: str,
    method: str,
    image: Image.Image | None = None,
    target: Any = None,
    frame: tuple[float, float] = (1.0, 1.0),
) -> GradCAM:
    """Package a non-negative (h, w) map as a ``GradCAM`` on a ``size`` pixel grid (upsampled
    and scaled when ``heatmap`` is first read), with its channel weights (or None) and whether it
    is blank. The one place results are built."""
    return GradCAM(
        class_index=class_index,
        class_name=class_name,
        score=score,
        probability=probability,
        layer=layer,
        cam=cam.detach().cpu().numpy().astype(np.float32),
        weights=None if weights is None else weights.detach().cpu().numpy().astype(np.float32),
        blank=not bool((cam > 0).any()),
        method=method,
        size=(int(size[0]), int(size[1])),
        image=image,
        target=target,
        frame=(float(frame[0]), float(frame[1])),
    )


def grad_cam_result(
    activations: torch.Tensor, gradient: torch.Tensor, size: tuple[int, int], **info: object
) -> GradCAM:
    """Grad-CAM from (C, h, w) activations and their gradient; ``info`` as for ``cam_result``."""
    weights = channel_weights(gradient.float())
    return cam_result(weighted_map(activations.float(), weights), weights, size, **info)


def to_pixel_grid(
    cam: torch.Tensor, size: tuple[int, int], frame: tuple[float, float] = (1.0, 1.0)
) -> np.ndarray:
    """Upsample a coarse map onto a (H, W) pixel grid and scale it to [0, 1].

    Args:
        cam: (h, w) non-negative map, on any device.
        size: (H, W) of the target grid.
        frame: the share (height, width) of the map that covers the grid (from its top left;
            below 1 where the model padded its input).

    Returns:
        (H, W) float32 numpy array in [0, 1]; all zeros if the map is flat.
    """
    return upsample_and_scale(cam[None], size, frame)[0].cpu().numpy()


def upsample_and_scale(
    cams: torch.Tensor, size: tuple[int, int], frame: tuple[float, float] = (1.0, 1.0)
) -> torch.Tensor:
    """Upsample coarse maps onto a (H, W) grid and scale each to [0, 1], on their device.

    Bilinear, not nearest: nearest upsampling makes blocky maps whose cell edges look like
    evidence. Scaling comes after upsampling so each maximum is exactly 1; a flat map becomes
    all zeros rather than amplified float noise.

    Args:
        cams: (N, h, w) non-negative maps.
        size: (H, W).
        frame: the share (height, width) of each map that covers the grid: the maps are
            upsampled onto the grid enlarged by it and cut to the grid (padding dropped) before
            scaling, so the padding's values never set the scale.

    Returns:
        (N, H, W) float32 tensor in [0, 1], on the maps' device (one copy to the host later
        serves the whole batch).
    """
    whole = size
    if frame != (1.0, 1.0):
        whole = (max(size[0], round(size[0] / frame[0])), max(size[1], round(size[1] / frame[1])))
    upsampled = F.interpolate(
        cams[:, None].float(), size=whole, mode="bilinear", align_corners=False
    )[:, 0, : size[0], : size[1]]
    low = upsampled.amin(dim=(1, 2), keepdim=True)
    high = upsampled.amax(dim=(1, 2), keepdim=True)
    spread = high - low
    magnitude = torch.maximum(high.abs(), low.abs())
    flat = (spread <= _FLAT * magnitude) | (spread == 0)
    scaled = (upsampled - low) / torch.where(flat, torch.ones_like(spread), spread)
    return torch.where(flat, torch.zeros_like(scaled), scaled).clamp_(0.0, 1.0)
