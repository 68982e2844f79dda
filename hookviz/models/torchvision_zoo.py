"""The torchvision classification zoo: names, where its weights are cached, and building a model
from them safely.

Trained weights come the torchvision way (downloaded once into the torch hub cache), but are read
with ``weights_only=True``: torchvision's own loader goes through ``torch.hub``, whose default
would unpickle code from a poisoned cache file.

``SOURCE`` registers the zoo: its names, also as the architectures of checkpoints, and its part
of the stored index (``zoo_index``).
"""

from __future__ import annotations

import os
import pickle
import re
import urllib.error
from functools import cache
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..core.preprocess import Preprocessing
from ..errors import ModelUnavailableError
from . import transformers, zoo_index
from .base import Architecture, Built, ModelInfo, ModelRequest, ModelSource
from .downloads import download_label, downloads_allowed, network_reason

# ViT and Swin outputs become feature maps through their token layout (models.transformers);
# MaxViT's blocks output (N, C, h, w) like a CNN's. All three take only their square input.
UNSUPPORTED_PREFIXES: tuple[str, ...] = ()
TRANSFORMER_PREFIXES = ("vit_", "swin_", "maxvit_")

# Named in messages as the model that always works.
_OFFLINE_MODEL = "efficientnet_lite0"


@cache
def cnn_names() -> list[str]:
    """torchvision's classification models, sorted: the CNNs, ViT, Swin and MaxViT (from the
    stored index when it matches the installed torchvision: no import of torchvision)."""
    index = zoo_index.torchvision_part()
    return sorted(index["models"]) if index is not None else live_cnn_names()


def live_cnn_names() -> list[str]:
    """``cnn_names`` asked of torchvision itself."""
    from torchvision import models

    names = models.list_models(module=models)
    return sorted(name for name in names if not name.startswith(UNSUPPORTED_PREFIXES))


def torchvision_weights_path(name: str) -> Path:
    """Where torchvision keeps (or will download) the default weights of ``name``."""
    entry = _indexed(name)
    filename = entry["file"] if entry else os.path.basename(default_weights(name).url)
    return Path(torch.hub.get_dir()) / "checkpoints" / filename


def download_mb(name: str) -> float | None:
    """The size of ``name``'s default weights file in MB, when torchvision says."""
    entry = _indexed(name)
    if entry is not None:
        return entry["mb"]
    size = default_weights(name).meta.get("_file_size")
    return float(size) if size else None


def _indexed(name: str) -> dict | None:
    index = zoo_index.torchvision_part()
    return index["models"].get(name) if index is not None else None


def default_weights(name: str) -> Any:
    from torchvision import models

    return models.get_model_weights(name).DEFAULT


def preprocessing_of(name: str) -> Preprocessing:
    """What torchvision's own weights of ``name`` expect (size, statistics, resize filter):
    also right for a checkpoint fine-tuned from them."""
    weights = default_weights(name)
    transforms = weights.transforms()
    min_size = weights.meta.get("min_size", (32, 32))
    return Preprocessing(
        size=int(transforms.crop_size[0]),
        mean=tuple(transforms.mean),
        std=tuple(transforms.std),
        interpolation=transforms.interpolation.value,
        min_side=max(32, *min_size),
        fixed=name.startswith(TRANSFORMER_PREFIXES),  # learned positions / fixed windows
        crop_fraction=float(transforms.crop_size[0]) / float(transforms.resize_size[0]),
    )


def _build(request: ModelRequest) -> Built:
    """Build a torchvision model with its default weights (downloaded into the hub cache when
    missing and allowed) or random ones."""
    from torchvision import models

    name, pretrained = request.name, request.pretrained

    weights = default_weights(name)
    preprocessing = preprocessing_of(name)
    # GoogLeNet and Inception warn about a future change of their default init unless told.
    extra = {"init_weights": True} if name in AUX_HEADS and not pretrained else {}
    if not pretrained:
        module = transformers.reinitialise_zero_head(models.get_model(name, weights=None, **extra))
        return Built(module, preprocessing, tuple(weights.meta["categories"]))

    path = torchvision_weights_path(name)
    state = trained_state(name, weights, path, request.download)
    module = _torchvision_architecture(name, models)
    try:
        module.load_state_dict(_current_key_names(name, state))
    except RuntimeError as exc:
        raise ModelUnavailableError(
            f"the cached weights of {name!r} at {path} do not fit the architecture ({exc}); "
            "delete the file and load the model again"
        ) from exc
    if name in AUX_HEADS:
        drop_aux_heads(module)
    return Built(module, preprocessing, tuple(weights.meta["categories"]))


def trained_state(name: str, weights: Any, path: Path, download: bool | None) -> dict[str, Any]:
    """The state dict of torchvision's ``weights`` for ``name``, from the hub cache file
    ``path`` (downloaded there first when missing and allowed), read weights-only.

    Raises:
        ModelUnavailableError: not cached and not downloadable now, or an unreadable file
            (the message says what to do).
    """
    if not path.is_file() and not downloads_allowed(download):
        raise ModelUnavailableError(_offline_message(name, path, "downloads are switched off"))
    try:
        # Not models.get_model(name, weights=...): torchvision then reads the cached file with
        # torch.hub's default weights_only=False, so a poisoned file in the cache would run
        # code. The same download (URL, hash check, cache file) with weights_only=True instead.
        return weights.get_state_dict(progress=False, check_hash=True, weights_only=True)
    except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
        raise ModelUnavailableError(_offline_message(name, path, network_reason(exc))) from exc
    except _UNREADABLE as exc:
        # A half-written, corrupt or unsafe file in the cache: torch.load refuses it.
        raise ModelUnavailableError(
            f"the cached weights of {name!r} at {path} could not be read ({exc}); delete the file "
            "and load the model again to download it afresh"
        ) from exc


# What torch.load's weights-only unpickler raises on a truncated, garbage or code-carrying file
# (seen: UnpicklingError, EOFError, KeyError for garbage, RuntimeError for a bad zip archive).
_UNREADABLE = (
    RuntimeError,
    EOFError,
    OSError,
    pickle.UnpicklingError,
    KeyError,
    ValueError,
    IndexError,
)
# Models whose trained weights include auxiliary classifier heads used only in training.
AUX_HEADS = ("googlenet", "inception_v3")
# DenseNet checkpoints use old names ("denselayer1.norm.1.weight" for "denselayer1.norm1.weight").
_OLD_DENSENET_KEY = re.compile(r"(denselayer\d+\.(?:norm|relu|conv))\.(\d)\.")


def _torchvision_architecture(name: str, models: Any) -> nn.Module:
    """The architecture exactly as torchvision builds it for its trained weights."""
    if name in AUX_HEADS:
        # trained with input normalisation inside the model and with the auxiliary heads
        return models.get_model(
            name, weights=None, transform_input=True, aux_logits=True, init_weights=False
        )
    return models.get_model(name, weights=None)


def _current_key_names(name: str, state: dict[str, Any]) -> dict[str, Any]:
    if not name.startswith("densenet"):
        return state
    return {_OLD_DENSENET_KEY.sub(r"\1\2.", key): value for key, value in state.items()}


def drop_aux_heads(module: nn.Module) -> None:
    """Remove the training-only auxiliary classifiers, as torchvision does after loading."""
    module.aux_logits = False
    for head in ("aux1", "aux2", "AuxLogits"):
        if hasattr(module, head):
            setattr(module, head, None)


def _offline_message(name: str, path: Path, reason: str) -> str:
    return (
        f"the pretrained weights of {name!r} are not in the torch hub cache ({path}) and could "
        f"not be downloaded ({reason}). Connect to the internet once to download them, copy the "
        f"file there, pick 'untrained' weights, or use the bundled offline model "
        f"{_OFFLINE_MODEL!r}."
    )


def _architecture(name: str) -> Architecture:
    """``name`` as the architecture of a checkpoint: its head sized to the checkpoint, the
    auxiliary heads built when the checkpoint has them, and torchvision's preprocessing."""
    prep = preprocessing_of(name)

    def make(classes: int | None, state: dict) -> nn.Module:
        from torchvision import models

        extra: dict = {} if classes is None else {"num_classes": classes}
        if name in AUX_HEADS:
            # the auxiliary heads are there when they were trained (torchvision's default)
            aux = any(key.split(".")[0] in ("aux1", "aux2", "AuxLogits") for key in state)
            extra.update(aux_logits=aux, init_weights=False)
        return models.get_model(name, weights=None, **extra)

    finish = drop_aux_heads if name in AUX_HEADS else None
    return Architecture(make, lambda module: prep, finish)


def _catalog() -> list[ModelInfo]:
    """Every model, ready when its default weights are in the hub cache."""
    rows = []
    for name in cnn_names():
        if torchvision_weights_path(name).is_file():
            rows.append(ModelInfo(name, "torchvision", True, "cached"))
        else:
            rows.append(ModelInfo(name, "torchvision", False, download_label(download_mb(name))))
    return rows


def _index() -> dict[str, Any]:
    """What ``zoo_index`` stores from torchvision: each model's default weights file and size,
    and the ImageNet class names."""
    from torchvision import models

    stored = {}
    for name in live_cnn_names():
        weights = models.get_model_weights(name).DEFAULT
        size = weights.meta.get("_file_size")
        stored[name] = {"file": os.path.basename(weights.url), "mb": float(size) if size else None}
    categories = models.ResNet50_Weights.IMAGENET1K_V2.meta["categories"]  # type: ignore[attr-defined]
    return {
        "torchvision": zoo_index.versioned("torchvision", stored),
        "imagenet_categories": list(categories),
    }


SOURCE = ModelSource(
    kind="torchvision",
    names=cnn_names,
    catalog=_catalog,
    build=_build,
    architecture=_architecture,
    hint="a torchvision name such as 'resnet50' (see hookviz.model_names())",
    index=_index,
)
