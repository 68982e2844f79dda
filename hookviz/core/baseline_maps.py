"""Baselines: maps that explain nothing about the model, to compare a method with. A method
worth trusting on an image beats them on the faithfulness metrics, and the sanity check must
flag the edge map (it survives any randomisation of the network: it only reads the image).

- ``random``: uniform noise in [0, 1], drawn from a generator seeded with ``seed`` (default 0).
- ``centre`` (or ``center``): a Gaussian centred on the image, its standard deviation ``sigma``
  (default 0.25) times each side (photographers centre their subject: a strong baseline).
- ``edges``: the Sobel gradient magnitude of the image's luminance.

Each is a map on the model input's grid, computed from the input alone. They are usable wherever
a method name is: ``grad_cam(..., method="edges")``, ``attribute(..., "edges")``, the batch
API, the command line, the sanity check, the page.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

# ITU-R BT.601 luma weights: the edge map's luminance
_LUMA = (0.299, 0.587, 0.114)
_SOBEL_X = ((-1.0, 0.0, 1.0), (-2.0, 0.0, 2.0), (-1.0, 0.0, 1.0))


def random_map(x: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """(1, 3, H, W) input -> (H, W) uniform noise in [0, 1], seeded."""
    generator = torch.Generator().manual_seed(int(seed))
    return torch.rand(tuple(x.shape[-2:]), generator=generator).to(x.device)


def centre_map(x: torch.Tensor, sigma: float = 0.25) -> torch.Tensor:
    """(1, 3, H, W) input -> (H, W) a Gaussian centred on the grid, ``sigma`` times each side."""
    height, width = x.shape[-2:]
    rows = torch.linspace(-0.5, 0.5, height, device=x.device)[:, None] / float(sigma)
    columns = torch.linspace(-0.5, 0.5, width, device=x.device)[None, :] / float(sigma)
    return torch.exp(-(rows**2 + columns**2) / 2)


def edge_map(x: torch.Tensor) -> torch.Tensor:
    """(1, 3, H, W) input -> (H, W) the Sobel gradient magnitude of its luminance."""
    x = x.float()
    luma = sum(w * x[:, c : c + 1] for c, w in enumerate(_LUMA))
    kernel_x = torch.tensor(_SOBEL_X, dtype=x.dtype, device=x.device)[None, None]
    padded = F.pad(luma, (1, 1, 1, 1), mode="replicate")
    gx = F.conv2d(padded, kernel_x)
    gy = F.conv2d(padded, kernel_x.transpose(-1, -2))
    return torch.sqrt(gx**2 + gy**2)[0, 0]


# name -> (map of the input, its options' defaults)
BASELINE_MAPS: dict[str, tuple[Callable[..., torch.Tensor], dict[str, Any]]] = {
    "random": (random_map, {"seed": 0}),
    "centre": (centre_map, {"sigma": 0.25}),
    "edges": (edge_map, {}),
}
BASELINE_ALIASES = {"center": "centre", "edge": "edges"}
# The baselines' names, in the order pages list them.
BASELINES = tuple(BASELINE_MAPS)
