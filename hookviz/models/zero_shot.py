"""CLIP models (open_clip) as zero-shot classifiers over labels a user types.

``load_model("clip:ViT-B-32")`` (open_clip's architecture name; a pretrained tag after a slash:
``"clip:ViT-B-32/laion2b_s34b_b79k"``, else ``"openai"`` where open_clip has it, else its first
tag) gives a zero-shot model without labels; ``with_labels(loaded, ["a dog", "a cat"])`` gives
the same image encoder scoring those labels. Its module outputs (N, labels) logits:
``logit_scale * cos(image embedding, text embedding)`` (plus SigLIP's ``logit_bias``), as
``CLIP.forward`` scores an image against texts; the labels' text embeddings are computed once,
without gradients, so a CAM differentiates one label's logit through the image side only.

The text tower is kept off the module tree: the layers listed, hooked and moved to a device are
the image encoder's (``visual.*``, open_clip's own names), and the text tower stays on the CPU
(labels are encoded once per ``with_labels``). The image is fed whole at the model's native
square (its position embedding is laid out for it). Pretrained weights are read from the local
Hugging Face cache, where open_clip keeps them, without asking the network; a download is tried
only when downloads are allowed, and a failure says how to get the file. A tag trained with
QuickGELU (OpenAI's weights) is built with it (open_clip itself only warns of the mismatch).

``SOURCE`` registers it: every name with the prefix ``clip:``; a few curated ones listed.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Iterable, Sequence
from functools import cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..core.grids import TokenLayout
from ..core.loaded import LoadedModel
from ..core.preprocess import Preprocessing
from ..errors import ModelError, ModelUnavailableError
from . import huggingface, transformers, zoo_index
from .base import Built, ModelInfo, ModelRequest, ModelSource
from .checkpoints import read_class_names
from .downloads import download_label, downloads_allowed

PREFIX = "clip:"
PACKAGE = "open_clip_torch"
DEFAULT_TAG = "openai"

# Offered in lists: OpenAI's CLIP in its three classic shapes (a ResNet's map is read as a CNN's,
# a ViT's tokens as a grid) and LAION's best-known ViT-B-32. Any other open_clip name can be typed.
CURATED = (
    "clip:ViT-B-32",
    "clip:ViT-B-16",
    "clip:RN50",
    "clip:ViT-B-32/laion2b_s34b_b79k",
)

# open_clip's file names on the hub (open_clip.constants), safetensors first as open_clip does.
_HF_WEIGHTS = "open_clip_pytorch_model.bin"
_HF_SAFE_WEIGHTS = "open_clip_model.safetensors"
# The pretrained-config field that says where the weights are.
_LOCATION_FIELDS = ("hf_hub",)
_PREPROCESS_FIELDS = ("mean", "std", "interpolation", "resize_mode")
_INTERPOLATIONS = {"bilinear", "bicubic", "nearest"}
_TEXT_BATCH = 256  # labels encoded per text-tower call
_NO_LABELS = (
    "{name!r} is a zero-shot model with no labels yet: give them first, e.g. "
    "hookviz.zero_shot(model, ['a photo of a dog', 'a photo of a cat'])"
)


def split_name(name: str) -> tuple[str, str | None]:
    """(architecture, tag or None) of ``clip:ARCH`` or ``clip:ARCH/TAG``, without open_clip."""
    arch, _, tag = name.removeprefix(PREFIX).partition("/")
    return arch, tag or None


def check_name(name: str) -> tuple[str, str | None]:
    """The open_clip architecture and pretrained tag behind ``name`` (the default tag when none
    is given; None when open_clip has no weights for the architecture).

    Raises:
        ModelError: open_clip has no such architecture, or no such tag for it (close matches
            named).
    """
    import open_clip

    arch, tag = split_name(name)
    if arch not in open_clip.list_models():
        close = difflib.get_close_matches(arch, open_clip.list_models(), n=3)
        hint = f"; did you mean {', '.join(PREFIX + c for c in close)}?" if close else ""
        raise ModelError(f"open_clip has no model {arch!r}{hint} (see open_clip.list_models())")
    tags = open_clip.list_pretrained_tags_by_model(arch)
    if tag is None:
        return arch, DEFAULT_TAG if DEFAULT_TAG in tags else (tags[0] if tags else None)
    if tag not in tags:
        known = ", ".join(tags) or "none"
        raise ModelError(
            f"open_clip has no pretrained tag {tag!r} for {arch!r} (its tags: {known})"
        )
    return arch, tag


class TextEncoder:
    """The text side of an open_clip model and its tokenizer: labels -> unit text embeddings.

    A plain object, not a module: kept off the image model's module tree (no hook, layer list
    or device move sees it). Its model is in eval mode and frozen.
    """

    def __init__(self, clip: nn.Module, tokenizer: Any) -> None:
        self.clip = clip
        self.tokenizer = tokenizer

    def __deepcopy__(self, memo: dict) -> TextEncoder:
        # shared, not copied: it is frozen and never hooked, and copying the tokenizer's BPE
        # tables takes seconds (a copy of the image model, as pytorch-grad-cam needs, is quick)
        return self

    @torch.no_grad()
    def __call__(self, texts: Sequence[str]) -> torch.Tensor:
        """(len(texts), D) float32 unit vectors, on the CPU."""
        tower = getattr(self.clip, "text", None)  # a custom text tower; CLIP's own is inline
        if tower is None:
            tower = self.clip.token_embedding
        device = next(tower.parameters()).device
        parts = []
        for start in range(0, len(texts), _TEXT_BATCH):
            tokens = self.tokenizer(list(texts[start : start + _TEXT_BATCH])).to(device)
            parts.append(self.clip.encode_text(tokens, normalize=True).float().cpu())
        return torch.cat(parts) if parts else torch.zeros(0, 0)


class ZeroShotCLIP(nn.Module):
    """An open_clip image encoder scoring images against fixed text embeddings.

    ``forward(images)``: (N, 3, H, W) -> (N, labels) logits,
    ``logit_scale * normalize(visual(images)) @ text_embeddings.T`` (+ ``logit_bias``).

    Attributes:
        visual: open_clip's image encoder (its own layer names: ``visual.transformer...``).
        text: the text encoder, off the module tree (``TextEncoder``).
        text_embeddings: (labels, D) unit vectors; (0, D) before labels are given.
        logit_scale: the exponentiated temperature, a scalar buffer.
        logit_bias: SigLIP's bias, a scalar buffer, or None.
    """

    def __init__(
        self,
        visual: nn.Module,
        text: TextEncoder,
        logit_scale: torch.Tensor,
        logit_bias: torch.Tensor | None,
        text_embeddings: torch.Tensor,
        layout: TokenLayout | None,
    ) -> None:
        super().__init__()
        self.visual = visual
        self.text = text
        self.layout = layout
        self.register_buffer("logit_scale", logit_scale.detach().float().reshape(()))
        self.register_buffer(
            "logit_bias", None if logit_bias is None else logit_bias.detach().float().reshape(())
        )
        self.register_buffer("text_embeddings", text_embeddings.detach().float())
        if layout is not None and not layout.channels_last:
            # the plain attributes by which hookviz reads a ViT's tokens
            # (models.transformers.token_layout; a timm ViT has the same three)
            self.num_prefix_tokens = layout.prefix_tokens
            self.patch_embed = SimpleNamespace(patch_size=layout.patch)
            self.embed_dim = layout.embed_dim or 0

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if self.text_embeddings.shape[0] == 0:
            raise ModelError(_NO_LABELS.format(name="this CLIP model"))
        features = F.normalize(self.visual(images), dim=-1)
        logits = self.logit_scale * features @ self.text_embeddings.to(features.dtype).T
        if self.logit_bias is not None:
            logits = logits + self.logit_bias
        return logits

    def labelled(self, text_embeddings: torch.Tensor) -> ZeroShotCLIP:
        """The same encoder (shared, not copied) scoring ``text_embeddings`` (labels, D)."""
        embeddings = text_embeddings.to(self.logit_scale.device)
        labelled = ZeroShotCLIP(
            self.visual, self.text, self.logit_scale, self.logit_bias, embeddings, self.layout
        )
        return labelled.eval().requires_grad_(False)


def with_labels(loaded: LoadedModel, labels: Iterable[str], *, template: str = "{}") -> LoadedModel:
    """``loaded`` (a zero-shot model: ``load_model("clip:...")``) scoring ``labels``.

    The result shares the image encoder, its device and its lock with ``loaded`` (hooks on a
    shared module fire for every caller, so both are analysed one at a time); ``categories`` are
    the labels as given, so ``Class(i)`` and ``Text(label)`` name the same logit.

    Args:
        loaded: a zero-shot model, with or without labels.
        labels: the texts to score, at least one, distinct (case-insensitively: ``Text``
            looks a label up so).
        template: how a label becomes the text encoded, ``"{}"`` the label
            (``"a photo of a {}."`` is CLIP's usual prompt).

    Returns:
        A new ``LoadedModel`` whose model outputs (N, len(labels)) logits.

    Raises:
        ModelError: not a zero-shot model; no labels, an empty or repeated one; a template
            without ``{}``.
    """
    module = loaded.model
    if not isinstance(module, ZeroShotCLIP):
        raise ModelError(
            f"{loaded.name!r} is a {loaded.task} model: labels are given to a zero-shot model "
            "such as 'clip:ViT-B-32'"
        )
    names = _checked_labels(labels)
    if "{}" not in template:
        raise ModelError(f"the template {template!r} has no '{{}}' for the label")
    embeddings = module.text([template.format(label) for label in names])
    return dataclasses.replace(loaded, model=module.labelled(embeddings), categories=names, memo={})


def _checked_labels(labels: Iterable[str]) -> tuple[str, ...]:
    if isinstance(labels, str):
        raise ModelError(f"labels are a list of texts, got one text: {labels!r}")
    names = tuple(labels)
    if not names:
        raise ModelError("give at least one label")
    seen: dict[str, str] = {}
    for label in names:
        if not isinstance(label, str) or not label.strip():
            raise ModelError(f"a label is a non-empty text, got {label!r}")
        key = label.strip().lower()
        if key in seen:
            raise ModelError(f"the label {label!r} is given twice (as {seen[key]!r})")
        seen[key] = label
    return names


# --- where the weights are ---------------------------------------------------------------------


def weights_location(name: str) -> dict[str, Any] | None:
    """Where ``name``'s pretrained weights live (``hf_hub``): from the
    stored index for the curated names (no open_clip import), else open_clip's pretrained
    config; None for an architecture without pretrained weights."""
    part = _part()
    if part is not None and name in part["models"]:
        return part["models"][name]
    import open_clip

    arch, tag = check_name(name)
    if tag is None:
        return None
    cfg = open_clip.get_pretrained_cfg(arch, tag)
    return {field: cfg.get(field) or None for field in _LOCATION_FIELDS}


def cached_weights(location: dict[str, Any]) -> Path | None:
    """The pretrained file already in the Hugging Face cache (its safetensors twin first, as
    open_clip looks), or None (never asks the network). Every open_clip tag has a hub location;
    its older URL files (OpenAI's TorchScript archives) are not read."""
    hub = location.get("hf_hub")
    if not hub:
        return None
    model_id, filename = os.path.split(hub)
    folder = huggingface.snapshot(model_id)
    if folder is None:
        return None
    return next((folder / f for f in _hub_files(filename) if (folder / f).is_file()), None)


def _hub_files(filename: str) -> list[str]:
    if not filename or filename == _HF_WEIGHTS:
        return [_HF_SAFE_WEIGHTS, _HF_WEIGHTS]
    if filename.endswith((".bin", ".pth")):
        return [filename[:-4] + ".safetensors", filename]
    return [filename]


def _missing_message(name: str, arch: str, tag: str, location: dict, reason: str) -> str:
    where = location.get("hf_hub") or "open_clip"
    return (
        f"the pretrained weights of {name!r} are not in the local Hugging Face cache "
        f"({huggingface.hub_cache()}) and could not be downloaded ({reason}). On a machine "
        f'with the internet run: python -c "import open_clip; '
        f"open_clip.create_model('{arch}', pretrained='{tag}')\" (it fetches {where} into that "
        "cache), copy the cache here, or pick random weights."
    )


# --- building ----------------------------------------------------------------------------------


def build(name: str, pretrained: bool, download: bool | None) -> tuple[nn.Module, Any]:
    """open_clip's model for ``name`` (frozen, eval mode) and its tokenizer.

    Raises:
        ModelError: unknown architecture or tag; open_clip not installed; no pretrained
            weights exist for it; not a CLIP-style model.
        ModelUnavailableError: its weights (or its tokenizer's files) are not cached and
            cannot be downloaded now.
    """
    try:
        import open_clip
    except ImportError as exc:
        raise ModelError(f"{name!r} needs open_clip: pip install open-clip-torch") from exc

    arch, tag = check_name(name)
    cfg = open_clip.get_pretrained_cfg(arch, tag) if tag else {}
    options: dict[str, Any] = {
        "force_quick_gelu": bool(cfg.get("quick_gelu", False)),
        # random weights must not fetch a text or image tower's own pretrained weights
        "pretrained_image": False,
        "pretrained_text": False,
    }
    if pretrained:
        if tag is None:
            raise ModelError(
                f"open_clip has no pretrained weights for {split_name(name)[0]!r}: load it with "
                "pretrained=False, or pick an architecture with tags "
                "(open_clip.list_pretrained())"
            )
        location = {field: cfg.get(field) or None for field in _LOCATION_FIELDS}
        cached = cached_weights(location)
        options["force_preprocess_cfg"] = {
            field: cfg[field] for field in _PREPROCESS_FIELDS if field in cfg
        }
        options["require_pretrained"] = True
        if cached is not None:
            clip = _create(open_clip, name, arch, str(cached), options)
        else:
            if not downloads_allowed(download):
                reason = "downloads are switched off"
                raise ModelUnavailableError(_missing_message(name, arch, tag, location, reason))
            unreachable = huggingface.hub_unreachable()
            if unreachable:
                raise ModelUnavailableError(
                    _missing_message(name, arch, tag, location, unreachable)
                )
            if location.get("hf_hub"):
                options["cache_dir"] = str(huggingface.hub_cache())
            try:
                clip = open_clip.create_model(arch, pretrained=tag, **options)
            except (RuntimeError, OSError) as exc:  # open_clip wraps the hub's errors
                raise ModelUnavailableError(
                    _missing_message(name, arch, tag, location, str(exc).splitlines()[0])
                ) from exc
    else:
        clip = _create(open_clip, name, arch, None, options)
    if not isinstance(clip, (open_clip.CLIP, open_clip.CustomTextCLIP)):
        raise ModelError(
            f"{name!r} is a {type(clip).__name__}: hookviz scores labels with CLIP-style "
            "models (an image and a text tower)"
        )
    try:
        tokenizer = open_clip.get_tokenizer(arch)
    except (OSError, RuntimeError, ValueError) as exc:  # a hub tokenizer not cached
        raise ModelUnavailableError(
            f"the tokenizer of {name!r} cannot be loaded ({exc}); it comes from the Hugging "
            "Face hub: fetch it on a machine with the internet and copy the cache here"
        ) from exc
    clip.eval().requires_grad_(False)
    return clip, tokenizer


def _create(open_clip: Any, name: str, arch: str, weights: str | None, options: dict) -> Any:
    try:
        return open_clip.create_model(arch, pretrained=weights, **options)
    except (RuntimeError, OSError, ValueError) as exc:
        if weights is None:
            raise ModelError(f"open_clip cannot build {name!r}: {exc}") from exc
        raise ModelError(f"the cached weights of {name!r} cannot be read: {exc}") from exc


def token_layout(visual: nn.Module) -> TokenLayout | None:
    """The token layout of open_clip's image encoder: its own ViT (a class token, then the
    patches), a timm trunk's (``transformers.token_layout``), or None (a ResNet)."""
    if hasattr(visual, "class_embedding") and hasattr(visual, "conv1"):
        return TokenLayout(
            prefix_tokens=1,
            patch=tuple(int(side) for side in visual.patch_size),  # type: ignore[arg-type]
            embed_dim=int(visual.transformer.width),
        )
    trunk = getattr(visual, "trunk", None)
    return transformers.token_layout(trunk) if isinstance(trunk, nn.Module) else None


def preprocessing(visual: nn.Module) -> Preprocessing:
    """open_clip's preprocessing (size, mean, std, resampling), the image fed whole at the
    native square (open_clip's own transform resizes the short side and crops the centre)."""
    cfg = getattr(visual, "preprocess_cfg", {}) or {}
    size = cfg.get("size", 224)
    side = int(size) if isinstance(size, int) else int(min(size))
    interpolation = str(cfg.get("interpolation", "bicubic"))
    return Preprocessing(
        size=side,
        mean=tuple(float(v) for v in cfg.get("mean", (0.5, 0.5, 0.5))),  # type: ignore[arg-type]
        std=tuple(float(v) for v in cfg.get("std", (0.5, 0.5, 0.5))),  # type: ignore[arg-type]
        interpolation=interpolation if interpolation in _INTERPOLATIONS else "bicubic",
        fixed=True,
        crop_fraction=1.0,
    )


def _build(request: ModelRequest) -> Built:
    clip, tokenizer = build(request.name, request.pretrained, request.download)
    visual = clip.visual
    bias = getattr(clip, "logit_bias", None)
    module = ZeroShotCLIP(
        visual,
        TextEncoder(clip, tokenizer),
        clip.logit_scale.detach().exp(),
        bias.detach() if isinstance(bias, torch.Tensor) else None,
        torch.zeros(0, int(getattr(clip, "embed_dim", 0) or 0)),
        token_layout(visual),
    )
    labels: tuple[str, ...] = ()
    if request.class_names is not None:  # load_model(..., class_names=labels)
        labels = _checked_labels(read_class_names(request.class_names))
        module = module.labelled(module.text(list(labels)))
    return Built(module, preprocessing(visual), labels, task="zero-shot")


# --- listing -----------------------------------------------------------------------------------


def _part() -> dict[str, Any] | None:
    index = zoo_index.stored().get("open_clip")
    if index is None or index.get("version") != zoo_index.installed_version(PACKAGE):
        return None
    return index


@cache
def _installed() -> bool:
    return zoo_index.installed_version(PACKAGE) is not None


def _catalog() -> list[ModelInfo]:
    rows = []
    for name in CURATED:
        if not _installed():
            ready, status = False, "package not installed"
        else:
            location = weights_location(name)
            ready = location is not None and cached_weights(location) is not None
            status = "cached" if ready else download_label(None)
        rows.append(ModelInfo(name, "clip", ready, status, "zero-shot"))
    return rows


def _index() -> dict[str, Any]:
    """What ``zoo_index`` stores from open_clip: where the curated models' weights live."""
    import open_clip

    stored = {}
    for name in CURATED:
        arch, tag = check_name(name)
        cfg = open_clip.get_pretrained_cfg(arch, tag) if tag else {}
        stored[name] = {field: cfg.get(field) or None for field in _LOCATION_FIELDS}
    return {"open_clip": zoo_index.versioned(PACKAGE, stored)}


SOURCE = ModelSource(
    kind="clip",
    names=lambda: list(CURATED),
    catalog=_catalog,
    build=_build,
    prefix=PREFIX,
    index=_index,
)
