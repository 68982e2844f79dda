"""Token outputs as feature maps: how a vision transformer's layer outputs become (N, C, h, w).

A CNN layer outputs (N, C, h, w) already. A ViT block outputs tokens (N, T, C): a few prefix
tokens (class, distillation, register tokens) and then one token per patch, row by row (a model
that adds its class token late, as CaiT and XCiT do, has blocks of patch tokens alone); a timm
Swin stage outputs a channels-last map (N, h, w, C); a hierarchical transformer written on token
sequences (Hugging Face's Swin, LeViT, SegFormer) outputs (N, h*w, C) on each stage's own grid.
``TokenLayout`` says which a model does (its family in ``hookviz.models`` knows); ``GridView``
applies it for one input size and batch: the grids are taken from the actual input (``input //
patch``), never assumed, and exactly the model's prefix tokens are dropped, so a similarity map
or CAM of DINOv2 (a class token and 4 registers) or distilled DeiT (class and distillation
tokens) needs no reshape code.

Gradients: a captured token output is replaced, for the layers downstream, by the same values
rebuilt from its grid (``from_grid``), so the class score depends on the grid tensor itself and
``autograd.grad`` can be taken with respect to it: the Grad-CAM of a token layer is computed on
the grid exactly as on a CNN's map. The prefix tokens pass on unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TokenLayout:
    """How a transformer's layer outputs map onto the image.

    Attributes:
        prefix_tokens: tokens before the patch tokens in (N, T, C) outputs (1 for a class
            token, 2 with a distillation token, 1 + registers with register tokens, 0 for none).
        patch: (height, width) in pixels of one patch token.
        channels_last: whether 4-D outputs are (N, h, w, C) (Swin) rather than (N, C, h, w);
            a 4-D output is read as channels-last only where its middle axes match the image
            grid at some stride and its last two do not.
        embed_dim: the channels of the main token stream (layers with other widths, such as a
            block's qkv or MLP hidden layer, are not where a CAM is read by default); for a
            hierarchical model, the last stage's.
        hierarchical: token sequences lie on every stage's grid, not only the patch grid: each
            stage merges 2x2 tokens, so its grid is the patch grid halved (sides rounded up, as
            these models pad), and a sequence's length tells which stage it is on.
        input_size: (height, width) of the one input the model takes (a timm ViT built
            without ``dynamic_img_size`` asserts its ``img_size``; torchvision's ViT its
            ``image_size``), or None where any whole number of patches goes.
    """

    prefix_tokens: int
    patch: tuple[int, int]
    channels_last: bool = False
    embed_dim: int | None = None
    hierarchical: bool = False
    input_size: tuple[int, int] | None = None

    def view_for(self, height: int, width: int, batch: int | None = None) -> GridView:
        """The conversion for an input of ``height`` x ``width`` pixels (and, where given, of
        ``batch`` images: a token output of another batch size, such as a window attention's
        (N * windows, window tokens, C), is no picture of the image)."""
        return GridView(self, (int(height), int(width)), batch)


@dataclass(frozen=True)
class GridView:
    """A ``TokenLayout`` at one input size."""

    layout: TokenLayout
    input_size: tuple[int, int]
    batch: int | None = None

    @property
    def patch_grid(self) -> tuple[int, int]:
        """(h, w) of the patch tokens for this input."""
        (height, width), (ph, pw) = self.input_size, self.layout.patch
        return height // ph, width // pw

    def token_grids(self) -> list[tuple[int, int]]:
        """The (h, w) grids a token sequence may lie on: the patch grid, and for a hierarchical
        model each stage's, finest first (their sizes differ, so a length names one)."""
        if not self.layout.hierarchical:
            return [self.patch_grid]
        (height, width), (ph, pw) = self.input_size, self.layout.patch
        grids = [(-(-height // ph), -(-width // pw))]
        while grids[-1] != (1, 1):
            h, w = grids[-1]
            grids.append((-(-h // 2), -(-w // 2)))
        return grids

    def token_grid(self, output: torch.Tensor) -> tuple[int, int] | None:
        """The (h, w) grid of a (N, prefix + h*w, C) token output, or None when it is not one
        (another length or batch size, or one channel: a pooled (N, C, 1) vector). A sequence
        of exactly h*w tokens is the patch tokens alone, wherever the model has prefix tokens
        (CaiT's and XCiT's blocks before their class token joins)."""
        if output.dim() != 3 or output.shape[2] < 2:
            return None
        if self.batch is not None and output.shape[0] != self.batch:
            return None
        length = output.shape[1]
        for h, w in self.token_grids():
            if h * w > 0 and length in (h * w, h * w + self.layout.prefix_tokens):
                return h, w
        return None

    def prefix_of(self, output: torch.Tensor) -> int:
        """How many prefix tokens a token output of this view has (0 or the model's)."""
        h, w = self.token_grid(output)  # type: ignore[misc]
        return int(output.shape[1]) - h * w

    def kind(self, output: torch.Tensor) -> str | None:
        """``"tokens"``, ``"channels_last"``, ``"map"`` (already N, C, h, w) or None (not a
        picture of the image)."""
        if output.dim() == 3:
            return "tokens" if self.token_grid(output) is not None else None
        if output.dim() != 4:
            return None
        if self.layout.channels_last:
            middle = self.on_grid(output.shape[1], output.shape[2])
            last = self.on_grid(output.shape[2], output.shape[3])
            if middle and not last:
                return "channels_last"
        return "map"

    def to_grid(self, output: torch.Tensor) -> torch.Tensor | None:
        """``output`` as (N, C, h, w), or None when it is not a picture of the image."""
        kind = self.kind(output)
        if kind == "tokens":
            h, w = self.token_grid(output)  # type: ignore[misc]
            patches = output[:, int(output.shape[1]) - h * w :]
            return patches.reshape(output.shape[0], h, w, output.shape[2]).permute(0, 3, 1, 2)
        if kind == "channels_last":
            return output.permute(0, 3, 1, 2)
        if kind == "map":
            return output
        return None

    def from_grid(self, grid: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
        """An output like ``output`` rebuilt from ``grid`` (the inverse of ``to_grid``; the
        prefix tokens are ``output``'s own)."""
        kind = self.kind(output)
        if kind == "tokens":
            batch, channels = grid.shape[:2]
            patches = grid.permute(0, 2, 3, 1).reshape(batch, -1, channels)
            # not detached: with several layers captured, the class token is how the earlier
            # ones reach the head
            prefix = output[:, : self.prefix_of(output)]
            return torch.cat([prefix, patches], dim=1)
        if kind == "channels_last":
            return grid.permute(0, 2, 3, 1).contiguous()
        return grid

    def on_grid(self, h: int, w: int) -> bool:
        """Whether (h, w) is the input grid at a power-of-two stride of at least 2."""
        height, width = self.input_size
        stride = 2
        while stride <= max(height, width):
            if h == -(-height // stride) and w == -(-width // stride):
                return True
            stride *= 2
        return False


def grid_view(tokens: TokenLayout | None, batch: torch.Tensor) -> GridView | None:
    """The conversion for ``batch``'s input size and batch size, or None for a CNN (nothing to
    convert)."""
    if tokens is None:
        return None
    return tokens.view_for(int(batch.shape[-2]), int(batch.shape[-1]), int(batch.shape[0]))
