"""Attention rollout (Abnar & Zuidema 2020): where a ViT's class token draws its information
from, through every layer's attention, as a map of the patches.

Each layer's attention (N, heads, T, T) is fused over heads (mean, max or min), its weakest
weights are discarded (the ``discard_ratio`` fraction, never the class token's own), the
residual connection is added as the identity (``(A + I) / 2``, rows renormalised), and the
layers are multiplied in order. The class token's row, over the patch tokens, is the map.

The attention probabilities are read with forward hooks: on timm's attention-dropout module,
with timm's fused attention switched off for the call (the fused kernel never forms the
probabilities) and restored after; on torchvision's ``nn.MultiheadAttention``, asked for its
per-head weights by a pre-hook. All under the model's lock, so no other caller sees the switch.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..core.grids import grid_view
from ..core.hooks import ModuleHook, hooks_on
from ..core.inputs import ImageInput, prepare_input
from ..core.loaded import LoadedModel
from ..errors import ModelError

HEAD_FUSIONS = ("mean", "max", "min")


@dataclass(frozen=True)
class Rollout:
    """An attention-rollout map.

    Attributes:
        grid: (h, w) float32 in [0, 1], one value per patch (the class token's attention
            flow to it, scaled by its maximum).
        image_size: (H, W) of the image the heatmap is returned on.
        layers: how many attention layers were rolled out.
        head_fusion: how heads were fused.
        discard_ratio: the fraction of the weakest attention weights dropped per layer.
    """

    grid: np.ndarray
    image_size: tuple[int, int]
    layers: int
    head_fusion: str
    discard_ratio: float

    @property
    def heatmap(self) -> np.ndarray:
        """(H, W) float32 in [0, 1] on the image's pixel grid (bilinear)."""
        return self.heatmap_at(self.image_size)

    def heatmap_at(self, size: tuple[int, int]) -> np.ndarray:
        grid = torch.from_numpy(self.grid)[None, None]
        up = F.interpolate(grid, size=tuple(size), mode="bilinear", align_corners=False)[0, 0]
        low, high = float(up.min()), float(up.max())
        return ((up - low) / (high - low) if high > low else up * 0).numpy().astype(np.float32)


def attention_rollout(
    loaded: LoadedModel,
    image: ImageInput,
    *,
    head_fusion: str = "mean",
    discard_ratio: float = 0.9,
) -> Rollout:
    """The attention rollout of ``image`` through ``loaded`` (a ViT with a class token).

    Raises:
        ModelError: not a ViT with a class token and global attention (a CNN, a Swin).
        ValueError: an unknown head fusion, or a discard ratio outside [0, 1).
    """
    if head_fusion not in HEAD_FUSIONS:
        raise ValueError(f"head_fusion {head_fusion!r} is not one of {HEAD_FUSIONS}")
    if not 0.0 <= discard_ratio < 1.0:
        raise ValueError(f"discard_ratio must be in [0, 1), not {discard_ratio}")
    tokens = loaded.tokens
    modules = _attention_modules(loaded.model)
    if tokens is None or tokens.prefix_tokens < 1 or tokens.channels_last or not modules:
        raise ModelError(
            f"attention rollout needs a vision transformer with a class token and global "
            f"attention; {loaded.name!r} is not one (a CNN or a Swin: use a CAM method)"
        )
    batch, size = prepare_input(loaded, image)
    height, width = grid_view(tokens, batch).patch_grid
    maps: list[torch.Tensor] = []
    with loaded.lock, torch.no_grad(), _recording(modules, maps):
        loaded.model(batch)
    flow = roll_out(maps, head_fusion, discard_ratio)
    patches = flow[0, tokens.prefix_tokens :]
    grid = patches.reshape(height, width).float()
    grid = grid / grid.max() if float(grid.max()) > 0 else grid
    return Rollout(grid.cpu().numpy(), size, len(maps), head_fusion, float(discard_ratio))


def roll_out(
    attentions: list[torch.Tensor], head_fusion: str, discard_ratio: float
) -> torch.Tensor:
    """The (T, T) rollout of per-layer attentions (1, heads, T, T), first layer first."""
    tokens = attentions[0].shape[-1]
    eye = torch.eye(tokens, dtype=torch.float64, device=attentions[0].device)
    result = eye.clone()
    for attention in attentions:
        heads = attention[0].double()
        fused = {"mean": heads.mean(0), "max": heads.amax(0), "min": heads.amin(0)}[head_fusion]
        flat = fused.flatten().clone()
        drop = int(flat.numel() * discard_ratio)
        if drop:
            weakest = flat.topk(drop, largest=False).indices
            flat[weakest[weakest != 0]] = 0  # the class token's attention to itself stays
        fused = flat.reshape(tokens, tokens)
        step = (fused + eye) / 2
        step = step / step.sum(dim=-1, keepdim=True)
        result = step @ result
    return result


def _attention_modules(model: nn.Module) -> list[nn.Module]:
    found = []
    for module in model.modules():
        timm_attention = hasattr(module, "fused_attn") and isinstance(
            getattr(module, "attn_drop", None), nn.Module
        )
        if isinstance(module, nn.MultiheadAttention) or timm_attention:
            found.append(module)
    return found


@contextmanager
def _recording(modules: list[nn.Module], maps: list[torch.Tensor]) -> Iterator[None]:
    """Append each attention's probabilities (1, heads, T, T) to ``maps`` in call order."""
    with ExitStack() as stack:
        for module in modules:
            if isinstance(module, nn.MultiheadAttention):
                stack.enter_context(_torchvision_weights(module, maps))
            else:
                stack.enter_context(_timm_weights(module, maps))
        yield


@contextmanager
def _timm_weights(module: nn.Module, maps: list[torch.Tensor]) -> Iterator[None]:
    fused = module.fused_attn
    module.fused_attn = False  # the unfused path forms the probabilities: restored below

    def keep(_module: nn.Module, _inputs: tuple, output: torch.Tensor) -> None:
        maps.append(output.detach())

    try:
        with hooks_on([ModuleHook(module.attn_drop, keep)]):
            yield
    finally:
        module.fused_attn = fused


@contextmanager
def _torchvision_weights(module: nn.MultiheadAttention, maps: list[torch.Tensor]) -> Iterator[None]:
    def ask(_module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        return args, {**kwargs, "need_weights": True, "average_attn_weights": False}

    def keep(_module: nn.Module, _args: tuple, output: tuple) -> None:
        maps.append(output[1].detach())

    with hooks_on([ModuleHook(module, ask, pre=True, with_kwargs=True), ModuleHook(module, keep)]):
        yield
