"""Vision transformers from timm and torchvision: how their outputs become feature maps
(``TokenLayout``), what input size they take, and the one fix random weights need.

- timm ViT family (every model with ``num_prefix_tokens`` and a ``patch_embed``: ViT, DeiT
  incl. distilled (2 prefix tokens), register tokens (DINOv2-reg: 1 + 4), EVA-02, BEiT, CaiT,
  hybrids with a CNN stem): tokens (N, prefix + h*w, C), the prefix dropped to make the map.
  Loaded by name they are built with ``dynamic_img_size`` so they take an image at its aspect
  ratio (the position embedding is resampled to the patch grid); one built as timm builds it
  by default and wrapped takes its ``img_size`` only (``TokenLayout.input_size``). A hybrid's
  patch is the stride of its stem and patches together (``img_size / grid_size``).
- timm and torchvision Swin: channels-last stage outputs (N, h, w, C); fed at their native
  square size (their attention windows are laid out for it).
- torchvision ViT (``vit_b_16`` ...): tokens with one class token; only its native square size
  (the position embedding is fixed). Its head starts at zero with random weights, which makes
  every gradient zero: re-initialised here for ``pretrained=False``.
- A model whose source read its layout when it built it carries that ``TokenLayout`` as
  ``hookviz_tokens`` (Hugging Face transformers models: ``models.huggingface.mark_tokens``).
"""

from __future__ import annotations

import dataclasses

from torch import nn

from ..core.grids import TokenLayout
from ..core.preprocess import Preprocessing


def token_layout(module: nn.Module) -> TokenLayout | None:
    """The layout of ``module``'s outputs, or None for a CNN."""
    # a model whose source read its layout at build carries it (models.huggingface.mark_tokens)
    marked = getattr(module, "hookviz_tokens", None)
    if isinstance(marked, TokenLayout):
        return marked
    kind = type(module).__name__
    if hasattr(module, "num_prefix_tokens") and hasattr(module, "patch_embed"):
        return TokenLayout(
            prefix_tokens=int(module.num_prefix_tokens),
            patch=_patch_stride(module.patch_embed),
            embed_dim=int(getattr(module, "embed_dim", 0)) or None,
            input_size=_one_size(module),
        )
    if kind == "SwinTransformer" and hasattr(module, "patch_embed"):  # timm
        return TokenLayout(
            prefix_tokens=0,
            patch=_pair(module.patch_embed.patch_size),
            channels_last=True,
            embed_dim=int(module.num_features),
            input_size=_one_size(module),
        )
    if kind == "SwinTransformer" and hasattr(module, "features"):  # torchvision
        first = module.features[0][0]  # the patch-embedding convolution
        return TokenLayout(
            prefix_tokens=0,
            patch=_pair(first.stride),
            channels_last=True,
            embed_dim=int(module.head.in_features),
        )
    if kind == "VisionTransformer" and hasattr(module, "class_token"):  # torchvision
        return TokenLayout(
            prefix_tokens=1,
            patch=_pair(module.patch_size),
            embed_dim=int(module.hidden_dim),
            input_size=_pair(module.image_size),
        )
    return None


def _patch_stride(patch_embed: nn.Module) -> tuple[int, int]:
    """Pixels per patch token: the patch size, or for a hybrid (a CNN stem under the patch
    embedding: ``vit_tiny_r_s16_p8_224`` has 8-pixel patches of a 4x smaller map) the input
    size over the token grid."""
    image, grid = getattr(patch_embed, "img_size", None), getattr(patch_embed, "grid_size", None)
    if image is not None and grid is not None:
        (height, width), (rows, columns) = _pair(image), _pair(grid)
        if rows and columns and height % rows == 0 and width % columns == 0:
            return height // rows, width // columns
    return _pair(patch_embed.patch_size)


def _one_size(module: nn.Module) -> tuple[int, int] | None:
    """The (height, width) a timm model asserts its input is (its patch embedding's
    ``strict_img_size``, unless built with ``dynamic_img_size``), or None."""
    embed = module.patch_embed
    if getattr(module, "dynamic_img_size", False) or not getattr(embed, "strict_img_size", False):
        return None
    size = getattr(embed, "img_size", None)
    return _pair(size) if size is not None else None


def fit_preprocessing(module: nn.Module, preprocessing: Preprocessing) -> Preprocessing:
    """``preprocessing`` made to fit what ``module`` takes: a model of one input size (a timm
    ViT with its default ``img_size``, torchvision's ViT) is fed that square whole
    (``fixed``, the size its own), a ViT of any size whole patches (``multiple``). Others get
    ``preprocessing`` unchanged. For ``wrap_model``, whose default is 224 pixels at any
    aspect ratio: without it a 56-pixel ViT, or a 224-pixel one given a wide photo, refuses
    its input."""
    layout = token_layout(module)
    if layout is None:
        return preprocessing
    if layout.input_size is not None:
        height, width = layout.input_size
        if height == width:
            return dataclasses.replace(preprocessing, size=height, fixed=True, multiple=1)
        return preprocessing  # (no Preprocessing feeds a non-square size)
    if layout.channels_last or layout.hierarchical or preprocessing.fixed:
        return preprocessing
    return dataclasses.replace(preprocessing, multiple=max(layout.patch))


def fixed_size(module: nn.Module) -> bool:
    """Whether ``module`` takes only its native square input."""
    kind = type(module).__name__
    if kind == "SwinTransformer":
        return True
    if hasattr(module, "num_prefix_tokens") and hasattr(module, "patch_embed"):
        return not bool(getattr(module, "dynamic_img_size", False))
    if kind == "VisionTransformer" and hasattr(module, "class_token"):
        return True
    # timm says so for the rest (MaxViT, CoAtNet: their attention grids are laid out for it)
    cfg = getattr(module, "pretrained_cfg", None) or {}
    return bool(cfg.get("fixed_input_size", False))


def input_multiple(module: nn.Module) -> int:
    """What both input sides must be a multiple of (a ViT's patch size; 1 for others)."""
    layout = token_layout(module)
    if layout is None or layout.channels_last:
        return 1
    return max(layout.patch)


def timm_kwargs(module_on_meta: nn.Module) -> dict:
    """Extra ``timm.create_model`` arguments for a family (given a model built on the meta
    device to learn its class): the ViT family takes images at their aspect ratio."""
    vit = hasattr(module_on_meta, "num_prefix_tokens") and hasattr(module_on_meta, "patch_embed")
    return {"dynamic_img_size": True} if vit and hasattr(module_on_meta, "dynamic_img_size") else {}


def reinitialise_zero_head(module: nn.Module) -> nn.Module:
    """Give torchvision's ViT, whose head is initialised to zeros, a random head (else every
    gradient is zero and every CAM blank); called for random weights only."""
    heads = getattr(module, "heads", None)
    head = getattr(heads, "head", None)
    if isinstance(head, nn.Linear) and not bool(head.weight.detach().abs().amax() > 0):
        nn.init.normal_(head.weight, std=0.02)
        nn.init.zeros_(head.bias)
    return module


def _pair(value) -> tuple[int, int]:
    if isinstance(value, int):
        return value, value
    first, second = tuple(value)[:2]
    return int(first), int(second)
