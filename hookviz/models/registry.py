"""The model registry: the sources of models register into it, and it lists, resolves and
loads their names; it knows no source itself.

A source (``ModelSource``) says which names are its own, lists them with their availability,
builds them, and can build them as the architecture of a user's checkpoint. The registry adds
what is the same for every model: random weights seeded by the name, a user's checkpoint
fitted to an architecture, class names given by the caller, and readying the module (eval mode,
frozen, on its device). The sources register in ``hookviz.models.sources``; the first source
that owns a name loads it. Offline is a normal state: the catalog says which models can load
now, and a model that cannot gives a ``ModelUnavailableError`` saying what to do.
"""

from __future__ import annotations

import dataclasses
import difflib
import zlib
from collections.abc import Callable, Sequence

import torch
from torch import nn

from ..core.devices import default_device
from ..core.loaded import TASKS, LoadedModel, Source, Task
from ..core.preprocess import Preprocessing
from ..errors import ModelError
from .base import Architecture, Built, ModelInfo, ModelRequest, ModelSource
from .checkpoint_model import build_from_checkpoint
from .checkpoints import CheckpointSource, ClassNames, read_class_names
from .headless import headless
from .preprocessing_text import IMAGENET_PREPROCESSING, parse_preprocessing
from .transformers import fit_preprocessing, token_layout

__all__ = [
    "DEFAULT_MODEL",
    "Architecture",
    "Built",
    "ModelInfo",
    "ModelRequest",
    "ModelSource",
    "architecture",
    "architecture_names",
    "load_model",
    "model_catalog",
    "model_names",
    "register",
    "source_of",
    "sources",
    "untrained_seed",
    "wrap_model",
]

DEFAULT_MODEL = "efficientnet_lite0"

# In registration order: the order of every listing, and of resolving a name no prefix claims.
_SOURCES: list[ModelSource] = []


def register(source: ModelSource) -> None:
    """Add a model source (last in every listing); one of the same identity already there is
    replaced in its place instead (a module reloaded registers its source again)."""
    for position, known in enumerate(_SOURCES):
        if (known.identity or known.kind) == (source.identity or source.kind):
            _SOURCES[position] = source
            return
    _SOURCES.append(source)


def sources() -> tuple[ModelSource, ...]:
    """The registered sources, in registration order."""
    return tuple(_SOURCES)


def source_of(name: str) -> ModelSource | None:
    """The source that owns ``name``: the one whose prefix it starts with, else the first
    that lists it, else the first that claims its form (``"package.module:function"``); None
    when none does."""
    for source in _SOURCES:
        if source.prefix and name.startswith(source.prefix):
            return source
    for source in _SOURCES:
        if not source.prefix and name in source.names():
            return source
    for source in _SOURCES:
        if source.claims is not None and source.claims(name):
            return source
    return None


def model_names() -> list[str]:
    """The names ``load_model`` lists, source by source in registration order: the bundled
    models first, then torchvision's CNNs, a curated set of timm models, then the model cards of
    ``HOOKVIZ_MODELS_DIR``. (Any other timm model loads too, as ``"timm:NAME"``.)"""
    return [name for source in _SOURCES for name in source.names()]


def architecture_names() -> list[str]:
    """The architectures a checkpoint can be loaded as, as offered in lists: the bundled ones,
    torchvision's CNNs and a curated set of timm models (any other timm name works too, as
    ``"timm:NAME"``)."""
    return [
        name for source in _SOURCES if source.architecture is not None for name in source.names()
    ]


def model_catalog() -> list[ModelInfo]:
    """The models with their availability, checked now (the hub cache can change any time)."""
    return [row for source in _SOURCES for row in source.catalog()]


def architecture(name: str) -> Architecture:
    """How to build ``name`` as the architecture of a user's checkpoint.

    Raises:
        ModelError: no source offers ``name`` as an architecture (the message says what to
            give).
    """
    source = source_of(name)
    if source is None or source.architecture is None:
        hints = " or ".join(known.hint for known in _SOURCES if known.architecture and known.hint)
        raise ModelError(f"unknown architecture {name!r}: give {hints}")
    return source.architecture(name)


def load_model(
    name: str,
    pretrained: bool = True,
    *,
    checkpoint: CheckpointSource | None = None,
    class_names: ClassNames | None = None,
    device: torch.device | str | None = None,
    download: bool | None = None,
    channels_last: bool = False,
    task: Task | None = None,
    preprocessing: Preprocessing | str | None = None,
) -> LoadedModel:
    """Load a model by name, ready for analysis: a built-in classifier, detector or segmenter,
    any timm model, your own weights on one of their architectures, or your own model code.

    Args:
        name: a name from ``model_names()``: a torchvision classification model
            (``"resnet50"``, ``"vgg16"``, ...) or a bundled offline model
            (``"efficientnet_lite0"``); or any timm model as ``"timm:NAME"``
            (``"timm:convnext_tiny"``, a pretrained tag allowed: ``"timm:resnet50.a1_in1k"``);
            or a torchvision detector or segmenter (``"fasterrcnn_resnet50_fpn"``,
            ``"retinanet_resnet50_fpn"``, ``"deeplabv3_resnet50"``, ...; ``model_catalog()``
            gives each model's task). Or your own code, as ``"package.module:function"``
            (``"module:function"``): the function is imported (the current folder is
            importable, as with ``python -m``), called with no arguments, and returns an
            ``nn.Module`` (or a ``LoadedModel``), which is used as ``wrap_model`` would.
        checkpoint: your weights for that architecture: a path, bytes or a binary file object
            holding a ``.safetensors`` file or a ``torch.save`` state dict (``.pt``, ``.pth``,
            ``.ckpt``; read with ``weights_only=True`` only, nothing in it is run). Training
            containers (``state_dict``, ``model``, ``model_state_dict``, ``state_dict_ema``) and
            key prefixes (``module.``, ``_orig_mod.``, Lightning's ``model.``) are handled; the
            number of classes is read from the classifier weights and the head built to match.
            ``pretrained`` is then ignored. ``loaded_from`` on the result says what was read.
            For your own code the file's keys and shapes must be the built module's own (its
            class count is the module's).
        class_names: names of the classes, index-aligned with the outputs: a list, or a path or
            bytes of a text file with one name per line. Their count must match the model's.
            For a zero-shot model (``"clip:ViT-B-32"``) they are the labels it scores, any
            number (as ``hookviz.zero_shot(loaded, labels)`` gives them).
            Without them a checkpoint's classes come from its safetensors metadata
            (``"class_names"``, a JSON list), else are called ``"class 0"``, ``"class 1"``, ...
        pretrained: False gives the same architecture with random weights (no files needed).
            They are deterministic per architecture: every load of ``name`` with
            ``pretrained=False``, in any process or session, on any device, gets the same
            weights (seeded from the name; the global random state is left untouched), so a
            shared link or a restarted server shows the same pictures. For your own code
            (and a model card naming a function), no weights file is read: the function's own
            initialisation, run under the same seed.
        device: where to run; by default CUDA, then MPS, then the CPU.
        download: whether torchvision weights missing from the cache may be downloaded; by default
            yes unless the environment variable ``HOOKVIZ_OFFLINE`` is ``"1"``.
        channels_last: store the weights channels-last (set once here, never changed later);
            worth it for batched work on a GPU.
        task: ``"embedding"`` loads a classifier (a built-in one, a timm model or a
            checkpoint) with its head removed: it outputs the features the head read, for
            ``hookviz.embed`` and ``Similarity`` targets. Otherwise the model's own task
            (None, or naming it, gives it). For your own code: ``"classification"``,
            ``"detection"``, ``"segmentation"`` or ``"embedding"``, what its output is (None:
            guessed from the output of one forward pass: a list of dicts of boxes is a
            detector's, (N, C, H, W) scores a segmenter's, anything else a classifier's).
        preprocessing: how images become the model's input, instead of the model's own: a
            ``Preprocessing``, or its text form (``parse_preprocessing``:
            ``"size=224,mean=0.485/0.456/0.406,std=0.229/0.224/0.225"``). Your own code
            without it gets ImageNet's mean and std at 224 pixels, as ``wrap_model`` does.

    Raises:
        ModelError: unknown name (the message lists close matches); a checkpoint that cannot be
            read safely or does not fit the architecture (the message has a table of missing,
            unexpected and mismatched keys); class names whose count is not the model's. For
            your own code, in its terms: a module or function that cannot be found, a function
            that raised or returned no ``nn.Module``, an output that does not fit ``task``
            (the message says which task does).
        ModelUnavailableError: the weights cannot be had right now; the message says what to do.
    """
    if task is not None and task not in TASKS:
        raise ModelError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
    if isinstance(preprocessing, str):
        preprocessing = parse_preprocessing(preprocessing)
    target = torch.device(device) if device is not None else default_device()
    source = source_of(name)
    if source is not None and source.own_weights:
        request = ModelRequest(
            name, pretrained, download, checkpoint, class_names, task, preprocessing
        )
        built = source.build(request)
        pretrained, kind = built.pretrained, source.kind
        preprocessing = None  # (the source used it)
    elif checkpoint is not None:
        built = build_from_checkpoint(name, architecture(name), checkpoint, class_names)
        pretrained, kind = True, "checkpoint"
    elif source is None:
        raise ModelError(_unknown_model_message(name))
    else:
        request = ModelRequest(name, pretrained, download, class_names=class_names)
        built = _seeded(name, pretrained, lambda: source.build(request))
        kind = source.kind
        if class_names is not None and built.task != "zero-shot":  # (a zero-shot's are labels)
            built = _renamed(name, built, read_class_names(class_names))
    if preprocessing is not None:
        built = dataclasses.replace(built, preprocessing=preprocessing)
    return _ready(name, _for_task(name, built, task), target, pretrained, kind, channels_last)


def _renamed(name: str, built: Built, names: tuple[str, ...]) -> Built:
    if len(names) != len(built.categories):
        raise ModelError(
            f"{len(names)} class names given for {name!r}, which has {len(built.categories)} "
            "classes"
        )
    return dataclasses.replace(built, categories=names)


def _for_task(name: str, built: Built, task: Task | None) -> Built:
    """The built model as ``task`` asks: as it is, or a classifier without its head."""
    if task is None or task == built.task:
        return built
    if task == "embedding" and built.task == "classification":
        module = headless(built.module, len(built.categories), name)
        return dataclasses.replace(built, module=module, categories=(), task="embedding")
    raise ModelError(
        f"{name!r} is a {built.task} model; it can load as that"
        + (" or, without its head, as an embedding model" if built.task == "classification" else "")
    )


def wrap_model(
    module: nn.Module,
    *,
    name: str = "custom",
    categories: Sequence[str] | None = None,
    num_classes: int | None = None,
    preprocessing: Preprocessing | None = None,
    device: torch.device | str | None = None,
    task: Task = "classification",
) -> LoadedModel:
    """Make any image model usable with hookviz (it is put in eval mode and frozen).

    Args:
        module: the model. A classifier's output may be logits, a tuple/list (first item), a
            dict (``"logits"`` or ``"out"``) or an object with ``.logits``; a detector's, one
            dict of ``"boxes"``, ``"labels"`` and ``"scores"`` per image (torchvision's form:
            map another detector's output to it in a wrapper module); a segmenter's,
            (N, categories, H, W) scores or ``{"out": ...}``; an embedder's, (N, D) vectors.
        name: a label for messages.
        categories: class (or category) names; default ``"class 0"``, ``"class 1"``, ...
            (needs ``num_classes``); none for an embedder.
        num_classes: number of classes when ``categories`` is not given.
        preprocessing: defaults to ImageNet statistics at 224 pixels, fitted to what the
            module takes (a ViT of one input size is fed that square whole, a ViT of any size
            whole patches); one given is used as it is.
        device: where to run; by default CUDA, then MPS, then the CPU.
        task: what the output is (``LoadedModel.task``).
    """
    if task not in TASKS:
        raise ModelError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
    if task == "embedding":
        categories = ()
    elif categories is None:
        if num_classes is None:
            raise ModelError("wrap_model needs categories or num_classes")
        categories = [f"class {i}" for i in range(num_classes)]
    prep = preprocessing or fit_preprocessing(module, IMAGENET_PREPROCESSING)
    target = torch.device(device) if device is not None else default_device()
    built = Built(module, prep, tuple(categories), task=task)
    return _ready(name, built, target, True, "custom")


def _ready(
    name: str,
    built: Built,
    device: torch.device,
    pretrained: bool,
    source: Source,
    channels_last: bool = False,
) -> LoadedModel:
    module = built.module
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
        built.preprocessing,
        built.categories,
        device,
        pretrained,
        source,
        channels_last=channels_last,
        loaded_from=built.loaded_from,
        tokens=token_layout(module),
        task=built.task,
    )


def _unknown_model_message(name: str) -> str:
    close = difflib.get_close_matches(name, model_names(), n=3)
    hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
    return f"unknown model {name!r}{hint} See hookviz.model_names() for the full list."


def untrained_seed(name: str) -> int:
    """The seed of ``name``'s random weights: stable across processes and Python versions
    (``hash()`` is salted per process; CRC-32 of the name is not)."""
    return zlib.crc32(name.encode("utf-8"))


def _seeded(name: str, pretrained: bool, build: Callable[[], Built]) -> Built:
    """Run ``build``; for random weights, under the name's own seed with the caller's random
    state saved and restored (so loading a model never changes anybody's random numbers)."""
    if pretrained:
        return build()
    # Modules are built on the CPU, so only the CPU generator matters here.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(untrained_seed(name))
        return build()
