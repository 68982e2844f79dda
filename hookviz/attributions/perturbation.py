"""Perturbation attributions: a pixel counts by how the score changes when it is hidden.

- ``occlusion`` (Zeiler and Fergus 2014): a ``window`` (default 16) pixels square, moved by
  ``stride`` (default 8), replaced by ``baseline`` (default 0) in all channels; each pixel gets
  the score's drop averaged over the windows that covered it. It is Captum's ``Occlusion``
  with ``sliding_window_shapes=(3, window, window)``, ``strides=(3, stride, stride)``. Window
  and stride are in the pixels of the grid the attribution is returned on (the image's, or the
  tensor's), converted to the model input's. ``batch_size`` occluded inputs per forward
  (default 16).
- ``rise`` (Petsiuk et al. 2018, arXiv:1806.07421): the score of the input times ``masks``
  (default 2000) random smooth masks, each a ``cells`` x ``cells`` (default 7) grid of
  keep-or-hide cells (kept with probability ``keep``, default 0.5) upsampled bilinearly and
  shifted by a random fraction of a cell; the saliency is the masks averaged with the scores
  as weights, divided by ``keep``. The masks come from a generator seeded with ``seed``
  (default 0): the same every call. The map is the same in the three channels.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from ..core.loaded import LoadedModel
from .attribute import AttributionError, register


def _scores(loaded: LoadedModel, inputs: torch.Tensor, score, batch_size: int) -> torch.Tensor:
    """The scores of ``inputs``, ``batch_size`` at a time, each batch under the model's lock
    (these methods are registered as run in slices)."""
    found = []
    for start in range(0, inputs.shape[0], batch_size):
        with loaded.lock, torch.no_grad():
            found.append(score(loaded.model(inputs[start : start + batch_size])).reshape(-1))
    return torch.cat(found).float()


def _in_input_pixels(value: int, scale: float, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise AttributionError(f"{name} is a whole number of pixels >= 1, got {value!r}")
    return max(1, round(value * scale))


def _occlusion(loaded: LoadedModel, x: torch.Tensor, score, options: dict[str, Any]):
    height, width = x.shape[-2:]
    scale = options["_scale"]
    window = min(_in_input_pixels(options["window"], scale, "window"), height, width)
    stride = _in_input_pixels(options["stride"], scale, "stride")
    batch_size = max(1, int(options["batch_size"]))
    clean = _scores(loaded, x, score, 1)[0]
    # Captum's positions: every stride along each side, the last window cut at the edge
    tops = [i * stride for i in range(math.ceil((height - window) / stride) + 1)]
    lefts = [i * stride for i in range(math.ceil((width - window) / stride) + 1)]
    corners = [(top, left) for top in tops for left in lefts]
    total = torch.zeros(height, width, device=x.device)
    counts = torch.zeros(height, width, device=x.device)
    for start in range(0, len(corners), batch_size):
        options["_progress"](start, len(corners))
        chunk = corners[start : start + batch_size]
        occluded = x.repeat(len(chunk), 1, 1, 1)
        for i, (top, left) in enumerate(chunk):
            occluded[i, :, top : top + window, left : left + window] = options["baseline"]
        drops = clean - _scores(loaded, occluded, score, batch_size)
        for drop, (top, left) in zip(drops, chunk, strict=True):
            total[top : top + window, left : left + window] += drop
            counts[top : top + window, left : left + window] += 1
    attribution = torch.where(counts > 0, total / counts.clamp(min=1), torch.zeros_like(total))
    return attribution.expand(1, 3, height, width).clone()


def _rise(loaded: LoadedModel, x: torch.Tensor, score, options: dict[str, Any]):
    height, width = x.shape[-2:]
    count, cells, keep = int(options["masks"]), int(options["cells"]), float(options["keep"])
    if count < 1 or cells < 1 or not 0 < keep <= 1:
        raise AttributionError("rise needs masks >= 1, cells >= 1 and 0 < keep <= 1")
    generator = torch.Generator().manual_seed(int(options["seed"]))
    cell_h, cell_w = math.ceil(height / cells), math.ceil(width / cells)
    batch_size = max(1, int(options["batch_size"]))
    saliency = torch.zeros(height, width, device=x.device)
    for start in range(0, count, batch_size):
        options["_progress"](start, count)
        n = min(batch_size, count - start)
        grids = (torch.rand(n, 1, cells, cells, generator=generator) < keep).float()
        big = F.interpolate(
            grids, size=((cells + 1) * cell_h, (cells + 1) * cell_w), mode="bilinear",
            align_corners=False,
        )  # fmt: skip
        shifts = (
            torch.randint(0, cell_h, (n,), generator=generator),
            torch.randint(0, cell_w, (n,), generator=generator),
        )
        masks = torch.stack([
            big[i, 0, dy : dy + height, dx : dx + width]
            for i, (dy, dx) in enumerate(zip(*shifts, strict=True))
        ]).to(x.device)  # fmt: skip
        scores = _scores(loaded, x * masks[:, None], score, n)
        saliency += (scores.view(-1, 1, 1) * masks).sum(dim=0)
    saliency /= count * keep
    return saliency.expand(1, 3, height, width).clone()


register("occlusion", _occlusion, {"window": 16, "stride": 8, "baseline": 0.0,
                                    "batch_size": 16}, sliced=True)  # fmt: skip
register("rise", _rise, {"masks": 2000, "cells": 7, "keep": 0.5, "seed": 0,
                          "batch_size": 64}, sliced=True)  # fmt: skip
