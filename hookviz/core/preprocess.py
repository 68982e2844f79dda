"""Turning a whole RGB image into a model input tensor, without cropping.

A centre crop silently drops the edges of the photo, and a heatmap stretched back over the
uncropped image then points at the wrong pixels. CNNs with global pooling accept any input size,
so the whole image is resized (short side to the model's native size, aspect ratio kept, long side
capped) and the heatmap is later mapped back onto the original pixel grid.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image

_PIL_FILTERS = {
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "nearest": Image.Resampling.NEAREST,
}


@dataclass(frozen=True)
class Preprocessing:
    """How a model wants its input.

    Attributes:
        size: native input size in pixels (the short side of the resized image).
        mean: per-channel mean subtracted after scaling RGB to [0, 1].
        std: per-channel standard deviation divided by after the mean.
        interpolation: ``"bilinear"``, ``"bicubic"`` or ``"nearest"``.
        max_aspect: the long side is capped at ``max_aspect * size`` pixels (bounds the cost of
            panoramas).
        min_side: no side goes below this (the network's smallest workable input).
    """

    size: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    interpolation: str = "bilinear"
    max_aspect: float = 3.0
    min_side: int = 32

    def __post_init__(self) -> None:
        if self.interpolation not in _PIL_FILTERS:
            raise ValueError(
                f"interpolation {self.interpolation!r} is not one of {sorted(_PIL_FILTERS)}"
            )

    def input_size(self, width: int, height: int) -> tuple[int, int]:
        """The (height, width) the model is fed for an image of ``width`` x ``height`` pixels."""
        scale = self.size / min(width, height)
        longest_allowed = self.max_aspect * self.size
        if max(width, height) * scale > longest_allowed:
            scale = longest_allowed / max(width, height)
        # An extreme strip (30000 x 8) would shrink its short side to nothing once the long side
        # is capped: clamp it, accepting some stretch. The heatmap is mapped back over the whole
        # image either way, so locations stay right.
        out_w = max(self.min_side, round(width * scale))
        out_h = max(self.min_side, round(height * scale))
        return out_h, out_w

    def to_tensor(self, image: Image.Image) -> torch.Tensor:
        """Resize and normalise a PIL image.

        Returns:
            (1, 3, h, w) float32 tensor on the CPU, normalised with ``mean`` and ``std``.
        """
        rgb = image if image.mode == "RGB" else image.convert("RGB")
        out_h, out_w = self.input_size(*rgb.size)
        resized = rgb.resize((out_w, out_h), _PIL_FILTERS[self.interpolation])
        pixels = np.asarray(resized, dtype=np.float32) / 255.0
        mean = np.asarray(self.mean, dtype=np.float32)
        std = np.asarray(self.std, dtype=np.float32)
        normalised = (pixels - mean) / std
        return torch.from_numpy(np.ascontiguousarray(normalised.transpose(2, 0, 1))).unsqueeze(0)
