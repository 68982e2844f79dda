"""Baselines: maps that explain nothing about the model, to compare a method with. A method
worth trusting on an image beats them on the faithfulness metrics, and the sanity check must
flag the edge map (it survives any randomisation of the network: it only reads the image).

- ``random``: uniform noise in [0, 1], drawn from a generator seeded with ``seed`` (default 0).
- ``centre``: a Gaussian centred on the image, its standard deviation ``sigma`` (default 0.25)
  times each side (photographers centre their subject: a strong baseline).
- ``edges``: the Sobel gradient magnitude of the image's luminance.

Each is the same in the three channels, on the model input's grid like every attribution.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from ..core.loaded import LoadedModel
from .attribute import register

# ITU-R BT.601 luma weights: the edge map's luminance
_LUMA = (0.299, 0.587, 0.114)
_SOBEL_X = ((-1.0, 0.0, 1.0), (-2.0, 0.0, 2.0), (-1.0, 0.0, 1.0))


def _in_channels(picture: torch.Tensor) -> torch.Tensor:
    """(h, w) -> (1, 3, h, w)."""
    return picture.expand(1, 3, *picture.shape).clone()


def _random(loaded: LoadedModel, x: torch.Tensor, score, options: dict[str, Any]):
    generator = torch.Generator().manual_seed(int(options["seed"]))
    return _in_channels(torch.rand(tuple(x.shape[-2:]), generator=generator).to(x.device))


def _centre(loaded: LoadedModel, x: torch.Tensor, score, options: dict[str, Any]):
    height, width = x.shape[-2:]
    sigma = float(options["sigma"])
    rows = torch.linspace(-0.5, 0.5, height, device=x.device)[:, None] / sigma
    columns = torch.linspace(-0.5, 0.5, width, device=x.device)[None, :] / sigma
    return _in_channels(torch.exp(-(rows**2 + columns**2) / 2))


def _edges(loaded: LoadedModel, x: torch.Tensor, score, options: dict[str, Any]):
    luma = sum(w * x[:, c : c + 1] for c, w in enumerate(_LUMA))
    kernel_x = torch.tensor(_SOBEL_X, dtype=x.dtype, device=x.device)[None, None]
    padded = F.pad(luma, (1, 1, 1, 1), mode="replicate")
    gx = F.conv2d(padded, kernel_x)
    gy = F.conv2d(padded, kernel_x.transpose(-1, -2))
    return _in_channels(torch.sqrt(gx**2 + gy**2)[0, 0])


register("random", _random, {"seed": 0})
register("centre", _centre, {"sigma": 0.25})
register("edges", _edges, {})
