"""Feature maps captured by a forward hook, and choosing which channels to show."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

ORDERINGS = ("mean", "max", "index")
# Orderings that need the Grad-CAM channel weights alpha_k as well.
WEIGHT_ORDERINGS = ("weight", "weight_x_mean")


@dataclass(frozen=True)
class FeatureMaps:
    """A layer's output for one image.

    Attributes:
        layer: the hooked layer's name.
        activations: (C, h, w) float32 CPU tensor, a clone of the layer's output (so values
            a following in-place ReLU would erase, negatives included, are kept).
        input_size: (height, width) of the tensor fed to the model.
    """

    layer: str
    activations: torch.Tensor
    input_size: tuple[int, int]

    @property
    def num_channels(self) -> int:
        """C."""
        return int(self.activations.shape[0])

    def channel_order(self, by: str = "mean", count: int | None = None) -> list[int]:
        """Channel indices to show, strongest first (see ``channel_order``)."""
        return channel_order(self.activations, by, count)

    def _repr_png_(self) -> bytes:
        """The grid of the 64 strongest channels, for Jupyter."""
        from .. import render  # deferred: pictures only when asked for

        return render.grid_picture_png(self)


def channel_order(
    activations: torch.Tensor, by: str = "mean", count: int | None = None
) -> list[int]:
    """Pick and order channels.

    Args:
        activations: (C, h, w).
        by: ``"mean"`` (strongest mean activation first), ``"max"`` (strongest peak first) or
            ``"index"`` (channel number order).
        count: how many to return (default all).

    Returns:
        Channel indices; ties keep channel-number order.
    """
    channels = int(activations.shape[0])
    count = channels if count is None else max(0, min(count, channels))
    if by == "index":
        return list(range(count))
    if by == "mean":
        strength = activations.float().mean(dim=(1, 2))
    elif by == "max":
        strength = activations.float().amax(dim=(1, 2))
    else:
        raise ValueError(f"ordering {by!r} is not one of {ORDERINGS}")
    # stable sort on the negated values: strongest first, ties by channel number
    order = torch.sort(-strength, stable=True).indices
    return order[:count].tolist()


def order_by_weight(
    activations: torch.Tensor,
    weights: torch.Tensor | np.ndarray,
    by: str = "weight",
    count: int | None = None,
) -> tuple[list[int], list[float]]:
    """Channels ordered by how much they matter to a Grad-CAM, largest magnitude first.

    Args:
        activations: (C, h, w).
        weights: (C,) the channel weights alpha_k.
        by: ``"weight"`` (alpha_k) or ``"weight_x_mean"`` (alpha_k times the channel's mean
            activation: its actual contribution to the averaged map).
        count: how many to return (default all).

    Returns:
        (channel indices, their signed values), so callers can mark evidence for (+) and
        against (-) the class.
    """
    alpha = torch.as_tensor(np.asarray(weights), dtype=torch.float32)
    if by == "weight":
        value = alpha
    elif by == "weight_x_mean":
        value = alpha * activations.float().mean(dim=(1, 2))
    else:
        raise ValueError(f"ordering {by!r} is not one of {WEIGHT_ORDERINGS}")
    channels = int(value.numel())
    count = channels if count is None else max(0, min(count, channels))
    order = torch.sort(-value.abs(), stable=True).indices[:count]
    return order.tolist(), value[order].tolist()
