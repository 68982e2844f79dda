"""Vision transformers from timm and torchvision: how their outputs become feature maps
(``TokenLayout``), what input size they take, and the one fix random weights need.

- timm ViT family (ViT, DeiT incl. distilled, register tokens, BEiT-style models with
  ``num_prefix_tokens``): tokens (N, prefix + h*w, C). Built with ``dynamic_img_size`` so they
  take an image at its aspect ratio (the position embedding is resampled to the patch grid).
- timm and torchvision Swin: channels-last stage outputs (N, h, w, C); fed at their native
  square size (their attention windows are laid out for it).
- torchvision ViT (``vit_b_16`` ...): tokens with one class token; only its native square size
  (the position embedding is fixed). Its head starts at zero with random weights, which makes
  every gradient zero: re-initialised here for ``pretrained=False``.
- A model whose source read its layout when it built it carries that ``TokenLayout`` as
  ``hookviz_tokens`` (Hugging Face transformers models: ``models.huggingface.mark_tokens``).
"""

from __future__ import annotations

from torch import nn

from ..core.grids import TokenLayout


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
            patch=_pair(module.patch_embed.patch_size),
            embed_dim=int(getattr(module, "embed_dim", 0)) or None,
        )
    if kind == "SwinTransformer" and hasattr(module, "patch_embed"):  # timm
        return TokenLayout(
            prefix_tokens=0,
            patch=_pair(module.patch_embed.patch_size),
            channels_last=True,
            embed_dim=int(module.num_features),
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
            prefix_tokens=1, patch=_pair(module.patch_size), embed_dim=int(module.hidden_dim)
        )
    return None


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
