"""Turning a whole RGB image into a model input tensor, without cropping.

A centre crop silently drops the edges of the photo, and a heatmap stretched back over the
uncropped image then points at the wrong pixels. CNNs with global pooling accept any input size,
so the whole image is resized (short side to the model's native size, aspect ratio kept up to
8:1) and the heatmap is later mapped back onto the original pixel grid.
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
        max_aspect: the long side is at most ``max_aspect * size`` pixels (bounds the cost of
            panoramas; longer images are squeezed along their length).
        min_side: the network's smallest workable input (the short side is never below it).
        fixed: the network takes only its native ``size`` x ``size`` input (a ViT with learned
            position embeddings): every image is resized to that square whole (no crop) and
            its heatmap mapped back onto the whole image.
        multiple: both sides are a multiple of this (a ViT's patch size: its patch grid must
            tile the input); the long side is rounded to the nearest one.
        crop_fraction: the share of the short side that the model's standard evaluation
            transform keeps in its centre crop (torchvision: 224 of 256 = 0.875; timm:
            ``crop_pct``); used only when a centre crop is asked for (``crop_box``).
        own_size: the model takes an image at its own size and resizes it itself (a
            torchvision detector): the image is fed as it is, only shrunk when its long side
            is over ``size`` (bounding the memory of a huge photo; the model would shrink it
            anyway).
    """

    size: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    interpolation: str = "bilinear"
    max_aspect: float = 8.0
    min_side: int = 32
    fixed: bool = False
    multiple: int = 1
    crop_fraction: float = 0.875
    own_size: bool = False

    def __post_init__(self) -> None:
        if self.interpolation not in _PIL_FILTERS:
            raise ValueError(
                f"interpolation {self.interpolation!r} is not one of {sorted(_PIL_FILTERS)}"
            )

    def input_size(self, width: int, height: int) -> tuple[int, int]:
        """The (height, width) the model is fed for an image of ``width`` x ``height`` pixels.

        The short side is always the native size: shrinking it to fit a cap on the long side
        (a 4000x600 panorama fed at 672x101) leaves objects too small for the network and its
        prediction collapses. The long side follows the aspect ratio, so the cost grows with it
        (a 6.7:1 panorama costs 6.7x a square input), up to ``max_aspect`` times the native
        size; only beyond that is the image squeezed along its length (see ``squeeze``).
        """
        if self.fixed:
            return self.size, self.size
        if self.own_size:
            scale = min(1.0, self.size / max(width, height))
            return max(1, round(height * scale)), max(1, round(width * scale))
        short_side = max(self.size, self.min_side)
        long_natural = max(width, height) * short_side / min(width, height)
        long_side = max(short_side, round(min(long_natural, self.max_aspect * short_side)))
        if self.multiple > 1:
            long_side = max(short_side, round(long_side / self.multiple) * self.multiple)
        return (short_side, long_side) if height <= width else (long_side, short_side)

    def squeeze(self, width: int, height: int) -> float:
        """How much the long side is compressed relative to the short one (1.0: the aspect
        ratio is kept; 2.0: a 16:1 strip fed as 8:1)."""
        if self.fixed or self.own_size:
            return 1.0  # the square: said by the caller; own size: the aspect is kept
        out_h, out_w = self.input_size(width, height)
        short_side, fed = min(out_h, out_w), max(out_h, out_w)
        natural = max(width, height) * short_side / min(width, height)
        # within rounding (a pixel, or half a patch for a ViT) the aspect ratio is kept
        return 1.0 if abs(natural - fed) < max(1.0, self.multiple / 2) else natural / fed

    def cost(self, width: int, height: int) -> float:
        """Pixels fed for this image relative to the native square input (about the relative
        compute of a CNN's forward pass)."""
        out_h, out_w = self.input_size(width, height)
        return out_h * out_w / float(self.size * self.size)

    def crop_box(self, width: int, height: int) -> tuple[float, float, float, float]:
        """The standard evaluation transform's centre crop of a ``width`` x ``height`` image,
        as (left, top, right, bottom) in its pixels: a square of ``crop_fraction`` of the short
        side (resize the short side to ``size / crop_fraction``, crop ``size`` x ``size``)."""
        side = min(width, height) * self.crop_fraction
        left, top = (width - side) / 2.0, (height - side) / 2.0
        return left, top, left + side, top + side

    def resized(self, image: Image.Image, *, crop: bool = False) -> np.ndarray:
        """The image resized as the model is fed it (whole, or its centre crop resized to the
        native square with ``crop``): (h, w, 3) uint8."""
        rgb = image if image.mode == "RGB" else image.convert("RGB")
        if crop:
            box = self.crop_box(*rgb.size)
            picked = rgb.resize((self.size, self.size), _PIL_FILTERS[self.interpolation], box)
            return np.array(picked, dtype=np.uint8)  # a writable copy: it may go to torch
        # an image decoded at a reduced scale is fed at the size its file would be
        out_h, out_w = self.input_size(*image.info.get("full_size", rgb.size))
        return np.array(rgb.resize((out_w, out_h), _PIL_FILTERS[self.interpolation]))

    def normalise(self, pixels: torch.Tensor) -> torch.Tensor:
        """(N, h, w, 3) uint8 pixels (on any device) as the model's (N, 3, h, w) float32
        input: scaled to [0, 1], ``mean`` subtracted, divided by ``std``. Run where the model
        is, so only bytes travel to a GPU."""
        mean = torch.tensor(self.mean, dtype=torch.float32, device=pixels.device)
        std = torch.tensor(self.std, dtype=torch.float32, device=pixels.device)
        scaled = pixels.permute(0, 3, 1, 2).float() / 255.0
        return (scaled - mean[:, None, None]) / std[:, None, None]

    def to_tensor(self, image: Image.Image) -> torch.Tensor:
        """Resize and normalise a PIL image.

        Returns:
            (1, 3, h, w) float32 tensor on the CPU, normalised with ``mean`` and ``std``.
        """
        pixels = self.resized(image).astype(np.float32) / 255.0
        mean = np.asarray(self.mean, dtype=np.float32)
        std = np.asarray(self.std, dtype=np.float32)
        normalised = (pixels - mean) / std
        return torch.from_numpy(np.ascontiguousarray(normalised.transpose(2, 0, 1))).unsqueeze(0)

    def to_picture(self, batch: torch.Tensor) -> Image.Image:
        """The first image of a normalised (N, 3, h, w) batch as RGB, normalisation undone
        (values outside [0, 1] clipped): what the model saw, for drawing."""
        mean = torch.tensor(self.mean).view(3, 1, 1)
        std = torch.tensor(self.std).view(3, 1, 1)
        pixels = (batch[0].detach().float().cpu() * std + mean).clamp(0.0, 1.0)
        array = (pixels.permute(1, 2, 0).numpy() * 255.0 + 0.5).astype(np.uint8)
        return Image.fromarray(array)
