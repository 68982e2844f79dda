"""Where models come from: a registry (names, availability, loading) that model sources register
into: the bundled offline EfficientNet-Lite models, the torchvision zoo, timm (``timm:NAME``)
and the model cards of a shared folder (``sources`` registers them, in order); a user's
checkpoint loads on the architecture of any of them. Each source builds a ``LoadedModel``;
nothing above this package knows which source a model came from."""

from ..core.loaded import LoadedModel
from . import sources  # noqa: F401  (registers the model sources, once, in order)
from .base import ModelInfo
from .cards import MODELS_DIR_ENV, ModelCard, model_cards
from .checkpoints import read_checkpoint
from .downloads import OFFLINE_ENV
from .imagenet import imagenet_categories
from .registry import (
    DEFAULT_MODEL,
    architecture_names,
    load_model,
    model_catalog,
    model_names,
    untrained_seed,
    wrap_model,
)
from .torchvision_zoo import torchvision_weights_path

__all__ = [
    "DEFAULT_MODEL",
    "MODELS_DIR_ENV",
    "OFFLINE_ENV",
    "LoadedModel",
    "ModelCard",
    "ModelInfo",
    "architecture_names",
    "imagenet_categories",
    "load_model",
    "model_cards",
    "model_catalog",
    "model_names",
    "read_checkpoint",
    "torchvision_weights_path",
    "untrained_seed",
    "wrap_model",
]
