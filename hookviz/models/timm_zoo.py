"""timm classification models by name (``"timm:convnext_tiny"``), offline-first.

Preprocessing comes from timm's own data config for the model. Pretrained weights are read from
the local Hugging Face cache (or the torch hub cache, for timm's older URL weights) when they are
there, without asking the network; a download is attempted only when downloads are allowed
(``HOOKVIZ_OFFLINE`` is not ``"1"``), and a failure says how to get the file.

``SOURCE`` registers it: every name with the prefix ``timm:`` (the curated ones listed), also
as the architecture of a checkpoint.
"""

from __future__ import annotations

import difflib
import os
import socket
from functools import cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

from ..core.preprocess import Preprocessing
from ..errors import ModelError, ModelUnavailableError
from . import transformers, zoo_index
from .base import Architecture, Built, ModelInfo, ModelRequest, ModelSource
from .downloads import download_label, downloads_allowed, network_reason
from .imagenet import imagenet_categories

PREFIX = "timm:"

# Offered in the page's model list: small members of the families people fine-tune most, each a
# different design (residual, mobile, modern conv, efficient). Any other name can be typed.
CURATED = (
    "timm:resnet18",
    "timm:resnet50",
    "timm:convnext_tiny",
    "timm:efficientnet_b0",
    "timm:mobilenetv3_large_100",
    "timm:regnety_016",
)

_HUB_FILES = ("model.safetensors", "pytorch_model.bin")
# The pretrained-config fields that say where the weights live (``cached_weights``), as the
# stored index keeps them for the curated models.
_LOCATION_FIELDS = ("hf_hub_id", "hf_hub_filename", "url")
_INTERPOLATIONS = {"bilinear", "bicubic", "nearest"}


def is_timm_name(name: str) -> bool:
    return name.startswith(PREFIX)


def check_name(name: str) -> str:
    """The timm name behind ``timm:NAME`` (a pretrained tag such as ``.a1_in1k`` allowed).

    Raises:
        ModelError: timm has no such model (close matches named).
    """
    import timm

    bare = name[len(PREFIX) :] if is_timm_name(name) else name
    if bare and timm.is_model(bare):
        return bare
    close = difflib.get_close_matches(bare, _all_names(), n=3)
    hint = f"; did you mean {', '.join(PREFIX + c for c in close)}?" if close else ""
    raise ModelError(f"timm has no model {bare!r}{hint} (see timm.list_models())")


def build(
    name: str, pretrained: bool, download: bool | None, num_classes: int | None = None
) -> nn.Module:
    """Build ``timm:NAME``; with ``num_classes`` its head has that many outputs."""
    import timm

    bare = check_name(name)
    extra: dict[str, Any] = {} if num_classes is None else {"num_classes": num_classes}
    extra.update(family_kwargs(bare))
    if not pretrained:
        return timm.create_model(bare, pretrained=False, **extra)
    cfg = pretrained_cfg(bare)
    cached = cached_weights(cfg)
    if cached is not None:
        # the file override is timm's own loader, with its filters, reading with weights_only
        overlay = {"file": str(cached), **extra}
        return timm.create_model(bare, pretrained=True, pretrained_cfg_overlay=overlay, **extra)
    if not downloads_allowed(download):
        raise ModelUnavailableError(_missing_message(name, cfg, "downloads are switched off"))
    unreachable = _unreachable("huggingface.co")
    if unreachable:
        # the hub client would retry for about a minute before giving up
        raise ModelUnavailableError(_missing_message(name, cfg, unreachable))
    try:
        return timm.create_model(bare, pretrained=True, **extra)
    except Exception as exc:  # hub, urllib and timm each raise their own kinds
        raise ModelUnavailableError(_missing_message(name, cfg, _reason(exc))) from exc


def _unreachable(host: str) -> str:
    """Why ``host`` cannot be reached (its name does not resolve), or "" when it might be."""
    try:
        socket.getaddrinfo(host, 443)
    except OSError as exc:
        return network_reason(exc)
    return ""


def _reason(exc: BaseException) -> str:
    """The network error at the root of a hub failure, in words (the hub's own text is long)."""
    seen = exc
    while seen.__cause__ is not None or seen.__context__ is not None:
        seen = seen.__cause__ or seen.__context__  # type: ignore[assignment]
    return network_reason(seen if isinstance(seen, OSError) else exc)


@cache
def family_kwargs(bare: str) -> dict:
    """What ``timm.create_model`` needs for this model's family (built once on the meta device,
    no memory, to see its class): ViTs take images at their aspect ratio."""
    import timm

    with torch.device("meta"):
        probe = timm.create_model(bare, pretrained=False)
    return transformers.timm_kwargs(probe)


def pretrained_cfg(name: str) -> Any:
    """timm's record of where ``name``'s pretrained weights live (no model is built)."""
    import timm.models

    bare = name[len(PREFIX) :] if is_timm_name(name) else name
    return timm.models.get_pretrained_cfg(bare)


def weights_location(name: str) -> Any:
    """Where ``name``'s pretrained weights live (``hf_hub_id``, ``hf_hub_filename``, ``url``
    attributes, as ``cached_weights`` reads them): from the stored index for the curated models
    (no timm import), else ``pretrained_cfg``."""
    index = zoo_index.timm_part()
    entry = index["models"].get(PREFIX + name.removeprefix(PREFIX)) if index else None
    return SimpleNamespace(**entry) if entry is not None else pretrained_cfg(name)


def preprocessing(module: nn.Module) -> Preprocessing:
    """The model's preprocessing from timm's data config (input size, mean, std, resize)."""
    from timm.data import resolve_model_data_config

    config = resolve_model_data_config(module)
    _, height, width = config["input_size"]
    interpolation = config.get("interpolation", "bicubic")
    return Preprocessing(
        size=int(min(height, width)),
        mean=tuple(float(v) for v in config["mean"]),
        std=tuple(float(v) for v in config["std"]),
        interpolation=interpolation if interpolation in _INTERPOLATIONS else "bicubic",
        fixed=transformers.fixed_size(module),
        multiple=transformers.input_multiple(module),
        crop_fraction=float(config.get("crop_pct") or 0.875),
    )


def categories(module: nn.Module, num_classes: int) -> tuple[str, ...] | None:
    """Class names of a pretrained model's label set when timm knows it (ImageNet-1k gets
    torchvision's names, as every other model here), else None."""
    if num_classes == 1000:
        return imagenet_categories()
    try:
        from timm.data import ImageNetInfo, infer_imagenet_subset

        subset = infer_imagenet_subset(module)
        if subset:
            names = ImageNetInfo(subset).label_descriptions()
            if len(names) == num_classes:
                return tuple(name.split(",")[0] for name in names)
    except (ImportError, ValueError, KeyError, OSError):
        pass
    return None


def cached_weights(cfg: Any) -> Path | None:
    """The pretrained file already on this machine, or None (never asks the network)."""
    hub_id = getattr(cfg, "hf_hub_id", None)
    # (a model never fetched has no folder in the cache: known without importing
    # huggingface_hub, about 0.1 s of a cold start that lists every model)
    if hub_id and Path(_hub_cache(), "models--" + hub_id.replace("/", "--")).is_dir():
        from huggingface_hub import try_to_load_from_cache

        wanted = getattr(cfg, "hf_hub_filename", None)
        for filename in (wanted,) if wanted else _HUB_FILES:
            found = try_to_load_from_cache(hub_id, filename, cache_dir=_hub_cache())
            if isinstance(found, str) and Path(found).is_file():
                return Path(found)
    url = getattr(cfg, "url", None)
    if url:
        path = Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(url)
        if path.is_file():
            return path
    return None


def _hub_cache() -> str:
    # read at call time: huggingface_hub reads its variables once, when first imported
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "huggingface"
    )
    return os.path.join(home, "hub")


def _missing_message(name: str, cfg: Any, reason: str) -> str:
    where = getattr(cfg, "hf_hub_id", None) or getattr(cfg, "url", None) or "timm"
    bare = name[len(PREFIX) :] if is_timm_name(name) else name
    return (
        f"the pretrained weights of {name!r} are not in the local Hugging Face cache "
        f"({_hub_cache()}) and could not be downloaded ({reason}). On a machine with the "
        f"internet run: python -c \"import timm; timm.create_model('{bare}', pretrained=True)\" "
        f"(it fetches {where} into that cache), copy the cache here, or pick random weights."
    )


@cache
def _all_names() -> tuple[str, ...]:
    import timm

    return tuple(timm.list_models())


def _build(request: ModelRequest) -> Built:
    """The model as it comes: a classifier, or an embedder where it has no class to score.

    A backbone published without a classifier head (DINOv2 with or without registers, EVA-02's
    MIM weights, MAE, SigLIP's image tower: timm builds them with ``num_classes=0``) outputs
    its pooled features, and a CLIP image tower (``vit_base_patch16_clip_224.openai``) its
    projection into the joint space (timm's ``head``, whose "classes" are the embedding's
    dimensions). Either is only ever an embedder, so it loads as one whether or not
    ``task="embedding"`` is named: refusing a name that can mean one thing only, to have the
    caller type the keyword that says so, would help nobody. A class of it is explained after
    fine-tuning: ``hookviz.load_model(name, checkpoint=...)`` reads the head from the file.
    """
    name = request.name
    module = build(name, request.pretrained, request.download)
    count = int(getattr(module, "num_classes", 0) or 0)
    if count == 0 or is_projection_head(module):
        return Built(module, preprocessing(module), (), task="embedding")
    names = categories(module, count) or tuple(f"class {index}" for index in range(count))
    return Built(module, preprocessing(module), names)


def is_projection_head(module: nn.Module) -> bool:
    """Whether ``module``'s head maps into a CLIP embedding space rather than onto classes:
    a CLIP image tower under its contrastive weights' tag (``openai``, ``laion2b``; a
    fine-tuned tag such as ``openai_ft_in1k`` has a classifier)."""
    cfg = getattr(module, "pretrained_cfg", None) or {}
    architecture, tag = str(cfg.get("architecture") or ""), str(cfg.get("tag") or "")
    return "clip" in architecture.split("_") and "ft" not in tag.split("_")


def _architecture(name: str) -> Architecture:
    bare = check_name(name)

    def make(classes: int | None, state: dict) -> nn.Module:
        import timm

        extra = {} if classes is None else {"num_classes": classes}
        return timm.create_model(bare, pretrained=False, **extra, **family_kwargs(bare))

    return Architecture(make, preprocessing)


def _catalog() -> list[ModelInfo]:
    rows = []
    for name in CURATED:
        cached = cached_weights(weights_location(name)) is not None
        rows.append(ModelInfo(name, "timm", cached, "cached" if cached else download_label(None)))
    return rows


def _index() -> dict[str, Any]:
    """What ``zoo_index`` stores from timm: where the curated models' weights live."""
    import timm.models

    stored = {}
    for name in CURATED:
        cfg = timm.models.get_pretrained_cfg(name.removeprefix(PREFIX))
        stored[name] = {field: getattr(cfg, field, None) for field in _LOCATION_FIELDS}
    return {"timm": zoo_index.versioned("timm", stored)}


SOURCE = ModelSource(
    kind="timm",
    names=lambda: list(CURATED),
    catalog=_catalog,
    build=_build,
    prefix=PREFIX,
    architecture=_architecture,
    hint="a timm name with the prefix 'timm:', such as 'timm:convnext_tiny'",
    index=_index,
)
