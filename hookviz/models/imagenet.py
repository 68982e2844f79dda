"""The 1000 ImageNet class names, shared by every source whose models score ImageNet."""

from __future__ import annotations

from functools import cache

from . import zoo_index


@cache
def imagenet_categories() -> tuple[str, ...]:
    """The 1000 ImageNet class names, as torchvision's weights metadata names them (no
    download; stored in ``zoo_index``, so the bundled models need no torchvision import)."""
    stored = zoo_index.imagenet_categories()
    if stored is not None:
        return stored
    from torchvision.models import ResNet50_Weights

    return tuple(ResNet50_Weights.IMAGENET1K_V2.meta["categories"])
