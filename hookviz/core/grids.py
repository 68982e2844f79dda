"""Token outputs as feature maps: how a vision transformer's layer outputs become (N, C, h, w).

A CNN layer outputs (N, C, h, w) already. A ViT block outputs tokens (N, T, C): a few prefix
tokens (class, distillation, register tokens) and then one token per patch, row by row; a Swin
stage outputs a channels-last map (N, h, w, C). ``TokenLayout`` says which a model does (its
family in ``hookviz.models`` knows); ``GridView`` applies it for one input size: the patch grid
is taken from the actual input (``input // patch``), never assumed, and exactly the model's
prefix tokens are dropped.

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
            block's qkv or MLP hidden layer, are not where a CAM is read by default).
    """

    prefix_tokens: int
    patch: tuple[int, int]
    channels_last: bool = False
    embed_dim: int | None = None

    def view_for(self, height: int, width: int) -> GridView:
        """The conversion for an input of ``height`` x ``width`` pixels."""
        return GridView(self, (int(height), int(width)))


@dataclass(frozen=True)
class GridView:
    """A ``TokenLayout`` at one input size."""

    layout: TokenLayout
    input_size: tuple[int, int]

    @property
    def patch_grid(self) -> tuple[int, int]:
        """(h, w) of the patch tokens for this input."""
        (height, width), (ph, pw) = self.input_size, self.layout.patch
        return height // ph, width // pw

    def kind(self, output: torch.Tensor) -> str | None:
        """``"tokens"``, ``"channels_last"``, ``"map"`` (already N, C, h, w) or None (not a
        picture of the image)."""
        if output.dim() == 3:
            h, w = self.patch_grid
            if output.shape[1] == self.layout.prefix_tokens + h * w and h * w > 0:
                return "tokens"
            return None
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
            h, w = self.patch_grid
            patches = output[:, self.layout.prefix_tokens :]
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
            prefix = output[:, : self.layout.prefix_tokens]
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
    """The conversion for ``batch``'s input size, or None for a CNN (nothing to convert)."""
    if tokens is None:
        return None
    return tokens.view_for(int(batch.shape[-2]), int(batch.shape[-1]))
