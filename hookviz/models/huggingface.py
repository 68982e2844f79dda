"""Hugging Face ``transformers`` image classifiers by their hub id
(``"hf:google/vit-base-patch16-224"``), offline-first.

A model is read from the local Hugging Face cache (``HF_HUB_CACHE``, else ``HF_HOME/hub``)
when its files are there (``models--ORG--NAME/snapshots/<commit>/``, the commit named by
``refs/main``), without asking the network; it is downloaded into that cache only when
downloads are allowed (``HOOKVIZ_OFFLINE`` is not ``"1"``), and a failure says how to get it.

- Preprocessing: the model's own image processor (size, mean, std, resampling), with the
  image fed whole: a processor's centre crop becomes ``crop_fraction`` (used only when a crop
  is asked for).
- Class names: ``config.id2label``, index-aligned with the logits.
- Output: transformers' ``ImageClassifierOutput``; its ``logits`` are what every target reads.
- Vision transformers (an embedding module holding a patch embedding): token outputs become
  feature maps (``TokenLayout``, read from the model's parts by ``token_layout``), whether the
  patch tokens follow class, distillation or register tokens (ViT, DeiT, BEiT, DINOv2, CLIP)
  or stand alone (SigLIP, I-JEPA). Models built in stages (Swin, Swinv2, FocalNet, LeViT,
  SegFormer, PVTv2) output (N, h*w, C) sequences on each stage's own grid (strides 4, 8, 16,
  32 for Swin), each read as a map on that grid; the default layer is then the last stage's
  output norm (``swin.layernorm``, as timm Swin's ``norm``). Hiera's tokens are out of row
  order and stay unread. All are fed at their native square (their position embeddings and
  attention windows are laid out for it, and their processors resize every image to it too).
- ConvNets (ResNet, ConvNeXt, RegNet, ...): maps as they are, the image at its aspect ratio.

``SOURCE`` registers it: every name with the prefix ``hf:``; the image classifiers already in
the cache are listed.
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..core.grids import TokenLayout
from ..core.preprocess import Preprocessing
from ..errors import ModelError, ModelUnavailableError
from .base import Built, ModelInfo, ModelRequest, ModelSource
from .downloads import download_label, downloads_allowed, network_reason

PREFIX = "hf:"

_CONFIG = "config.json"
_PROCESSOR = "preprocessor_config.json"
_WEIGHTS = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
# The architectures transformers builds with AutoModelForImageClassification end so.
_CLASSIFIER_ENDINGS = ("ForImageClassification", "ForImageClassificationWithTeacher")
# Families made of convolutions (and pooling) only: they take an image at its aspect ratio. Any
# other family is fed at its native square, as its processor feeds it.
_CONVNETS = frozenset(
    {
        "bit",
        "convnext",
        "convnextv2",
        "efficientnet",
        "mobilenet_v1",
        "mobilenet_v2",
        "regnet",
        "resnet",
    }
)
# PIL's resampling codes, as processors store them, in the filters hookviz resizes with.
_RESAMPLE = {0: "nearest", 1: "bicubic", 2: "bilinear", 3: "bicubic", 4: "bilinear", 5: "bilinear"}
# The prefix tokens an embedding module may hold before the patch tokens (CLIP's class token is
# ``class_embedding``).
_PREFIX_PARAMETERS = ("cls_token", "class_embedding", "distillation_token", "register_tokens")
# What an embedding module calls its patch embedding (CLIP and SigLIP: ``patch_embedding``).
_PATCH_EMBEDDINGS = ("patch_embeddings", "patch_embedding")
# Families whose tokens are not in row-by-row order (Hiera unrolls them for its pooling): no
# reshape makes them a map.
_UNROLLED = frozenset({"hiera"})
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")


def repo_id(name: str) -> str:
    """The hub id behind ``hf:ORG/NAME``.

    Raises:
        ModelError: not a hub id.
    """
    repo = name.removeprefix(PREFIX)
    if not _REPO_ID.match(repo) or "--" in repo or ".." in repo:
        raise ModelError(
            f"{name!r} is not a Hugging Face model id: give 'hf:ORG/NAME', such as "
            "'hf:google/vit-base-patch16-224'"
        )
    return repo


def hub_cache() -> Path:
    """The Hugging Face hub cache folder (read at call time: huggingface_hub reads its
    variables once, when first imported)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "huggingface"
    )
    return Path(home, "hub")


def hub_unreachable() -> str:
    """Why huggingface.co cannot be reached (its name does not resolve), or "" when it might
    be (the hub client would retry for about a minute before giving up)."""
    try:
        socket.getaddrinfo("huggingface.co", 443)
    except OSError as exc:
        return network_reason(exc)
    return ""


def snapshot(repo: str, revision: str = "main") -> Path | None:
    """The cached folder of ``repo`` at ``revision`` (the commit ``refs/REVISION`` names), or
    None when the cache has no such folder. Read from the cache's layout, nothing imported."""
    folder = hub_cache() / ("models--" + repo.replace("/", "--"))
    try:
        commit = (folder / "refs" / revision).read_text(encoding="utf-8").strip()
    except OSError:
        return None
    found = folder / "snapshots" / commit
    return found if commit and found.is_dir() else None


def has_weights(folder: Path) -> bool:
    """Whether a snapshot holds the model's weights (``is_file`` follows the cache's links: a
    link whose blob is missing does not count)."""
    return any((folder / name).is_file() for name in _WEIGHTS)


def _read_config(folder: Path) -> dict[str, Any] | None:
    try:
        config = json.loads((folder / _CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def is_image_classifier(config: dict[str, Any]) -> bool:
    """Whether a ``config.json`` names an image-classification architecture (a timm or
    open_clip repository's config names none)."""
    architectures = config.get("architectures") or []
    return any(str(arch).endswith(_CLASSIFIER_ENDINGS) for arch in architectures)


def cached_classifiers() -> list[tuple[str, bool]]:
    """(``hf:ORG/NAME``, whether its weights are cached) for every image classifier in the
    cache, by name."""
    root = hub_cache()
    try:
        folders = sorted(path.name for path in root.iterdir() if path.name.startswith("models--"))
    except OSError:
        return []
    found = []
    for folder_name in folders:
        repo = folder_name.removeprefix("models--").replace("--", "/")
        folder = snapshot(repo)
        config = _read_config(folder) if folder is not None else None
        if config is not None and is_image_classifier(config):
            found.append((PREFIX + repo, has_weights(folder)))  # type: ignore[arg-type]
    return found


def _location(name: str, repo: str, pretrained: bool, download: bool | None) -> tuple[str, dict]:
    """Where to read the model from: its cached folder when it has every file needed (and no
    keyword for the loaders), else the hub id (and the cache to download into).

    Raises:
        ModelUnavailableError: not cached, and no download may or can be tried.
    """
    folder = snapshot(repo)
    missing = _missing_files(folder, pretrained)
    if not missing:
        return str(folder), {}
    what = " and ".join(missing)
    if not downloads_allowed(download):
        raise ModelUnavailableError(
            _missing_message(name, repo, what, "downloads are switched off")
        )
    unreachable = hub_unreachable()
    if unreachable:
        raise ModelUnavailableError(_missing_message(name, repo, what, unreachable))
    return repo, {"cache_dir": str(hub_cache())}


def _missing_files(folder: Path | None, pretrained: bool) -> list[str]:
    """What loading needs that the cached folder lacks, in words (empty: nothing)."""
    if folder is None:
        return ["files"]
    missing = [
        words
        for filename, words in ((_CONFIG, "configuration"), (_PROCESSOR, "image processor"))
        if not (folder / filename).is_file()
    ]
    if pretrained and not has_weights(folder):
        missing.append("weights")
    return missing


def _missing_message(name: str, repo: str, what: str, reason: str) -> str:
    return (
        f"the local Hugging Face cache ({hub_cache()}) lacks the {what} of {name!r}, and they "
        f"could not be downloaded ({reason}). On a machine with the internet run: "
        f'python -c "from transformers import AutoModelForImageClassification as M, '
        f"AutoImageProcessor as P; M.from_pretrained('{repo}'); P.from_pretrained('{repo}')\" "
        "(it fetches them into that cache), copy the cache here, or pick random weights."
    )


def _reason(exc: BaseException) -> str:
    """The network error at the root of a hub failure, in words (the hub's own text is long)."""
    seen = exc
    while seen.__cause__ is not None or seen.__context__ is not None:
        seen = seen.__cause__ or seen.__context__  # type: ignore[assignment]
    return network_reason(seen if isinstance(seen, OSError) else exc)


def build(name: str, pretrained: bool, download: bool | None) -> tuple[nn.Module, Any]:
    """The model of ``hf:ORG/NAME`` (trained, or random weights on its cached configuration)
    and its image processor, in float32.

    Raises:
        ModelError: not an image classifier transformers can build (or one that needs its own
            code, which is never run).
        ModelUnavailableError: its files are not cached and cannot be downloaded now.
    """
    from transformers import AutoConfig, AutoImageProcessor, AutoModelForImageClassification

    repo = repo_id(name)
    location, remote = _location(name, repo, pretrained, download)
    try:
        config = AutoConfig.from_pretrained(location, **remote)
        processor = AutoImageProcessor.from_pretrained(location, **remote)
    except ValueError as exc:  # a family it does not know, or one that needs its own code
        raise ModelError(f"transformers cannot build {name!r}: {exc}") from exc
    except OSError as exc:
        if not remote:
            raise ModelError(f"the cached files of {name!r} cannot be read: {exc}") from exc
        raise ModelUnavailableError(_missing_message(name, repo, "files", _reason(exc))) from exc
    if not is_image_classifier(config.to_dict()):
        raise ModelError(
            f"{name!r} is not an image classifier (its architectures: "
            f"{', '.join(config.architectures or ['none'])}); hookviz loads the Hugging Face "
            "models whose architecture ends in 'ForImageClassification'"
        )
    try:
        if pretrained:
            module = AutoModelForImageClassification.from_pretrained(
                location, dtype=torch.float32, **remote
            )
        else:
            module = AutoModelForImageClassification.from_config(config, dtype=torch.float32)
    except ValueError as exc:
        raise ModelError(f"transformers cannot build {name!r}: {exc}") from exc
    except OSError as exc:
        if not remote:
            raise ModelError(f"the cached weights of {name!r} cannot be read: {exc}") from exc
        raise ModelUnavailableError(_missing_message(name, repo, "weights", _reason(exc))) from exc
    mark_tokens(module)
    return module, processor


def token_layout(module: nn.Module) -> TokenLayout | None:
    """The token layout of a transformers vision transformer, or None (a ConvNet, or a model
    with no patch embedding hookviz can read).

    Found from the model's parts, whatever its family: the embedding module holding a patch
    embedding (``patch_embeddings``, or CLIP's and SigLIP's ``patch_embedding``) gives the patch
    (its convolutions' strides) and the prefix tokens (the class, distillation and register
    tokens it holds: none for SigLIP, I-JEPA, Swin). A model built in stages (its configuration
    has ``depths``: Swin, Swinv2, FocalNet, LeViT, SegFormer, PVTv2) is hierarchical: its token
    sequences lie on each stage's grid.
    """
    config = getattr(module, "config", None)
    model_type = str(getattr(config, "model_type", ""))
    if model_type in _CONVNETS or model_type in _UNROLLED:
        return None
    found = _patch_embedding(module)
    patch = _patch_of(found[1]) if found is not None else None
    if found is None or patch is None:
        return None
    hierarchical = len(getattr(_vision_config(config), "depths", None) or ()) > 1
    return TokenLayout(
        prefix_tokens=_prefix_tokens(found[0]),
        patch=patch,
        # a model built in stages may also hold channels-last (N, h, w, C) maps between its
        # token sequences (FocalNet's modulation), as timm's Swin does
        channels_last=hierarchical,
        embed_dim=_stream_width(module, hierarchical),
        hierarchical=hierarchical,
    )


def _patch_embedding(module: nn.Module) -> tuple[nn.Module, nn.Module] | None:
    """(the embedding module, its patch embedding): the first module holding one patch
    embedding (a list of them, one a stage as in PVT, is not one), or None."""
    for part in module.modules():
        for field in _PATCH_EMBEDDINGS:
            patches = getattr(part, field, None)
            if isinstance(patches, nn.Module) and not isinstance(
                patches, (nn.ModuleList, nn.ModuleDict)
            ):
                return part, patches
    return None


def _patch_of(patches: nn.Module) -> tuple[int, int] | None:
    """(height, width) in pixels of one token out of a patch embedding: the product of its
    convolutions' strides (one strided convolution in a ViT, a stack of four in LeViT), else
    its ``patch_size``; None when neither says (a linear patch embedding fed pre-cut
    patches)."""
    strides = [part.stride for part in patches.modules() if isinstance(part, nn.Conv2d)]
    if strides:
        return math.prod(s[0] for s in strides), math.prod(s[1] for s in strides)
    size = getattr(patches, "patch_size", None)
    return _pair(size) if size else None


def _prefix_tokens(embedding: nn.Module) -> int:
    """How many tokens an embedding module puts before the patch tokens: one per class or
    distillation token (``(1, 1, C)``, or CLIP's ``(C,)``), n per ``(1, n, C)`` register tokens."""
    count = 0
    for field in _PREFIX_PARAMETERS:
        tokens = getattr(embedding, field, None)
        if isinstance(tokens, torch.Tensor):
            count += 1 if tokens.dim() < 2 else int(tokens.shape[-2])
    return count


def _vision_config(config: Any) -> Any:
    """The configuration of the image tower (a CLIP or SigLIP classifier's ``vision_config``;
    the model's own otherwise)."""
    return getattr(config, "vision_config", None) or config


def _stream_width(module: nn.Module, hierarchical: bool) -> int | None:
    """The channels of the token stream a CAM is read on by default. A ViT's is its hidden
    size; a hierarchical model's is its last stage's, the width its classifier reads (its
    configuration names it differently in each family, and FocalNet's does not state it)."""
    vision = _vision_config(getattr(module, "config", None))
    if hierarchical:
        linears = [part for part in module.modules() if isinstance(part, nn.Linear)]
        if linears:
            return int(linears[-1].in_features)
    width = getattr(vision, "hidden_size", None)
    if isinstance(width, int) and width > 0:
        return width
    widths = getattr(vision, "hidden_sizes", None)
    return int(widths[-1]) if widths else None


def mark_tokens(module: nn.Module) -> None:
    """Give a transformers vision transformer its ``TokenLayout`` as the attribute by which
    hookviz reads a model's tokens (``models.transformers.token_layout``). Done once, at
    build; nothing of the model's own is changed."""
    layout = token_layout(module)
    if layout is not None:
        module.hookviz_tokens = layout


def preprocessing(module: nn.Module, processor: Any) -> Preprocessing:
    """The model's preprocessing from its image processor, the image fed whole.

    ``size``: the side the model sees (the crop's, when the processor crops; else the
    resized short side, or the square's). A processor that resizes the short side and crops
    keeps ``crop_fraction`` of it (ConvNeXt's ``crop_pct``; a crop size over a resize size).
    """
    size = _as_dict(getattr(processor, "size", None))
    crop = _as_dict(getattr(processor, "crop_size", None))
    cropping = bool(getattr(processor, "do_center_crop", False)) and bool(crop)
    square = size.get("height") or size.get("width")
    short = size.get("shortest_edge")
    crop_pct = getattr(processor, "crop_pct", None)
    fraction = 1.0
    if cropping:
        side = int(min(crop.get("height") or 0, crop.get("width") or 0) or square or short)
        resized = short or square
        fraction = min(1.0, side / resized) if resized else 1.0
    elif short and crop_pct and short < 384:
        # ConvNeXt's processor: short side to size / crop_pct, then the centre size x size
        side, fraction = int(short), float(crop_pct)
    else:
        side = int(short or min(size.get("height") or 0, size.get("width") or 0) or square or 224)
    if bool(getattr(processor, "do_normalize", True)):
        mean = _triple(getattr(processor, "image_mean", None) or (0.5, 0.5, 0.5))
        std = _triple(getattr(processor, "image_std", None) or (0.5, 0.5, 0.5))
    else:
        mean, std = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)
    layout = token_layout(module)
    model_type = str(getattr(getattr(module, "config", None), "model_type", ""))
    fixed = model_type not in _CONVNETS
    return Preprocessing(
        size=side,
        mean=mean,
        std=std,
        interpolation=_RESAMPLE.get(_resample_code(processor), "bilinear"),
        fixed=fixed,
        multiple=max(layout.patch) if layout is not None else 1,
        crop_fraction=fraction,
    )


def _as_dict(value: Any) -> dict[str, int]:
    if value is None:
        return {}
    if isinstance(value, int):
        return {"shortest_edge": value}
    items = value.items() if hasattr(value, "items") else vars(value).items()
    return {key: int(number) for key, number in items if isinstance(number, int) and number}


def _resample_code(processor: Any) -> int:
    value = getattr(processor, "resample", None)
    try:
        return int(getattr(value, "value", value))
    except (TypeError, ValueError):
        return 2


def _triple(values: Any) -> tuple[float, float, float]:
    numbers = [float(v) for v in (values if hasattr(values, "__iter__") else [values])]
    if len(numbers) == 1:
        numbers *= 3
    return numbers[0], numbers[1], numbers[2]


def categories(module: nn.Module) -> tuple[str, ...]:
    """The class names of ``config.id2label``, index-aligned with the logits."""
    config = module.config
    labels = {int(key): str(value) for key, value in (config.id2label or {}).items()}
    count = int(getattr(config, "num_labels", 0) or len(labels))
    return tuple(labels.get(index, f"class {index}") for index in range(count))


def _build(request: ModelRequest) -> Built:
    module, processor = build(request.name, request.pretrained, request.download)
    return Built(module, preprocessing(module, processor), categories(module))


def _catalog() -> list[ModelInfo]:
    return [
        ModelInfo(name, "hf", ready, "cached" if ready else download_label(None))
        for name, ready in cached_classifiers()
    ]


def _pair(value: Any) -> tuple[int, int]:
    if isinstance(value, int):
        return value, value
    first, second = tuple(value)[:2]
    return int(first), int(second)


SOURCE = ModelSource(
    kind="hf",
    names=lambda: [name for name, _ in cached_classifiers()],
    catalog=_catalog,
    build=_build,
    prefix=PREFIX,
)
