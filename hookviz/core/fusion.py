"""Several layers' CAMs as one map: an early layer's fine detail where a late layer's coarse
evidence agrees. Each layer's map is scaled to [0, 1] and upsampled to the finest of the layers'
grids, then combined element by element:

- ``"max"``: the largest of them, TorchCAM's ``fuse_cams``;
- ``"mean"``: their mean, what pytorch-grad-cam does with several target layers;
- ``"refinecam"``: their product, RefineCAM (TorchCAM's and pytorch-grad-cam's ``RefineCAM``,
  arXiv:2605.14641): a place stays only where every layer points at it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from .cam import GradCAM, cam_result
from .methods import MethodError

FUSIONS = ("max", "mean", "refinecam")
# TorchCAM's guard when scaling a map by its maximum.
_EPS = 1e-8


def check_fusion(fuse: str) -> str:
    """``fuse`` if it is one of ``FUSIONS``, else a MethodError listing them."""
    if fuse not in FUSIONS:
        raise MethodError(f"unknown fusion {fuse!r}; choose one of {', '.join(FUSIONS)}")
    return fuse


def fuse_cams(cams: Sequence[GradCAM], fuse: str = "max") -> GradCAM:
    """One ``GradCAM`` from the CAMs of the same image, target and method at several layers.

    Its ``cam`` is on the finest grid among them (the largest h and w), its ``layer`` the
    layers' names joined by ``+``; it has no channel weights.
    """
    check_fusion(fuse)
    if not cams:
        raise MethodError("fusing layers needs at least one layer's CAM")
    shape = tuple(max(c.cam.shape[i] for c in cams) for i in (0, 1))
    maps = torch.stack([_scaled_to(c.cam, shape) for c in cams])
    if fuse == "max":
        fused = maps.amax(dim=0)
    elif fuse == "mean":
        fused = maps.mean(dim=0)
    else:
        fused = maps.prod(dim=0)
    first = cams[0]
    return cam_result(
        fused,
        None,
        first.size,
        class_index=first.class_index,
        class_name=first.class_name,
        score=first.score,
        probability=first.probability,
        layer="+".join(c.layer for c in cams),
        method=first.method,
        image=first.image,
        target=first.target,
        frame=first.frame,
    )


def _scaled_to(cam: np.ndarray, shape: tuple[int, int]) -> torch.Tensor:
    """A non-negative (h, w) map scaled to [0, 1] (TorchCAM's normalisation) and upsampled
    bilinearly to ``shape``."""
    values = torch.from_numpy(cam).float()
    values = values - values.min()
    values = values / (values.max() + _EPS)
    return F.interpolate(values[None, None], size=shape, mode="bilinear", align_corners=False)[0, 0]
