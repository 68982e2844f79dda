"""Feature maps captured by a forward hook, and choosing which channels to show."""

from __future__ import annotations

from dataclasses import dataclass

import torch

ORDERINGS = ("mean", "max", "index")


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
