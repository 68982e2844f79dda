"""The baselines (``hookviz.core.baseline_maps``: random, centre, edges) as attributions: the
map, the same in the three channels, on the model input's grid like every attribution."""

from __future__ import annotations

from typing import Any

import torch

from ..core.baseline_maps import BASELINE_MAPS
from ..core.loaded import LoadedModel
from .attribute import register


def _as_attribution(name: str):
    function = BASELINE_MAPS[name][0]

    def attribution(loaded: LoadedModel, x: torch.Tensor, score, options: dict[str, Any]):
        wanted = {k: v for k, v in options.items() if not k.startswith("_")}
        picture = function(x, **wanted)
        return picture.expand(1, 3, *picture.shape).clone()

    return attribution


for _name, (_, _defaults) in BASELINE_MAPS.items():
    register(_name, _as_attribution(_name), _defaults)
