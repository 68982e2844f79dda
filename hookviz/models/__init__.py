"""Where models come from: the registry (names, availability, loading), the torchvision zoo and
the bundled offline EfficientNet-Lite models. Each source builds a ``LoadedModel``; nothing above
this package knows which source a model came from."""

from ..core.loaded import LoadedModel
from .registry import (
    DEFAULT_MODEL,
    ModelInfo,
    imagenet_categories,
    load_model,
    model_catalog,
    model_names,
    untrained_seed,
    wrap_model,
)
from .torchvision_zoo import OFFLINE_ENV, torchvision_weights_path

__all__ = [
    "DEFAULT_MODEL",
    "OFFLINE_ENV",
    "LoadedModel",
    "ModelInfo",
    "imagenet_categories",
    "load_model",
    "model_catalog",
    "model_names",
    "torchvision_weights_path",
    "untrained_seed",
    "wrap_model",
]
