"""The concepts a layer found in one image: Deep Feature Factorization (Collins et al. 2018,
arXiv:1806.10206), as pytorch-grad-cam's ``DeepFeatureFactorization`` defines it.

The layer's activations A (C, h, w), each channel minus its own minimum (so that they are
non-negative), are factorised into k non-negative parts: A - min ~ V M, V (C, k) the concepts'
channel vectors and M (k, h*w) where each concept lies in the image (``nmf``). Each concept's map,
upsampled onto the image's pixels and scaled to [0, 1], is its heatmap. Where the layer feeds a
classifier's head through global average pooling alone, a concept is named by the classes its
vector scores highest as if it were the pooled features (its vector plus the channels' minimum:
pytorch-grad-cam's ``concepts = W + offset`` through the classifier).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import torch
from PIL import Image

from ..core.cam import upsample_and_scale
from ..core.forward_pass import resolve_layer
from ..core.inputs import ImageInput, extract_logits, prepare_input
from ..core.loaded import LoadedModel
from ..core.methods import pooled_linear_head
from ..core.pipeline import captured_forward
from ..errors import HookvizError
from .nmf import Factorisation, nmf

LABELS_PER_CONCEPT = 3


class ConceptError(HookvizError, ValueError):
    """A factorisation that cannot be made (k out of range, a layer without a spatial grid)."""


@dataclass(frozen=True)
class Concepts:
    """A layer's concepts in one image.

    Attributes:
        layer: the layer's name.
        vectors: (C, k) float32 >= 0, each concept's weight on each channel.
        maps: (k, h, w) float32 >= 0, where each concept lies on the layer's grid; the
            activations minus each channel's minimum are close to ``vectors @ maps``.
        offset: (C,) float32, each channel's minimum over the grid.
        error: ||A - offset - vectors @ maps|| / ||A - offset|| (Frobenius norms).
        labels: per concept, the ``LABELS_PER_CONCEPT`` class names it scores highest through
            the head, best first; None where the layer does not feed a pooled linear head.
        label_probabilities: (k, LABELS_PER_CONCEPT) float32, the softmax probabilities of
            those classes; None with ``labels``.
        labels_reason: why there are no labels, in words ("" when there are).
        size: (H, W) of the pixel grid ``heatmaps`` are on.
        image: the analysed picture, when there is one (never compared).
    """

    layer: str
    vectors: np.ndarray
    maps: np.ndarray
    offset: np.ndarray
    error: float
    labels: tuple[tuple[str, ...], ...] | None
    label_probabilities: np.ndarray | None
    labels_reason: str
    size: tuple[int, int]
    image: Image.Image | None = field(default=None, repr=False, compare=False)

    @property
    def k(self) -> int:
        return int(self.maps.shape[0])

    @cached_property
    def heatmaps(self) -> np.ndarray:
        """(k, H, W) float32 in [0, 1]: each concept's map upsampled (bilinear) onto the
        image's pixels and scaled to [0, 1]."""
        return self.heatmaps_at(self.size)

    def heatmaps_at(self, size: tuple[int, int]) -> np.ndarray:
        """The heatmaps on another (H, W) grid, e.g. a display-size copy of the image:
        (k, H, W) float32 in [0, 1]."""
        return upsample_and_scale(torch.from_numpy(self.maps), size).numpy()

    def _repr_png_(self) -> bytes:
        """The concepts coloured over the analysed image, for Jupyter."""
        from .. import render  # deferred: pictures only when asked for

        return render.png_bytes(render.concepts_picture(self))


def concepts(
    loaded: LoadedModel, image: ImageInput, layer: str | None = None, k: int = 5
) -> Concepts:
    """Deep Feature Factorization of ``layer``'s activations for ``image`` into ``k`` concepts.

    Args:
        loaded: the model.
        image: a PIL image or a preprocessed (1, 3, H, W) tensor.
        layer: a name from ``list_layers(loaded)``; default: the model's default layer.
        k: how many concepts, from 1 to the layer's channels (and its positions).

    Raises:
        ConceptError: ``k`` out of range.
        LayerError: an unknown layer.
    """
    name = resolve_layer(loaded, layer)
    batch, size = prepare_input(loaded, image)
    output, captured = captured_forward(loaded, batch, name)
    activations = captured.double().cpu()
    if activations.dim() != 3:
        raise ConceptError(f"layer {name!r} has no spatial grid to factorise")
    channels, height, width = activations.shape
    k = check_k(k, name, channels, height * width, f"{height}x{width} positions")
    offset, found = factorise(activations.reshape(channels, -1), k)
    labels, probabilities, reason = concept_labels(
        loaded, output, activations, name, found.w, offset
    )
    return Concepts(
        layer=name,
        vectors=found.w.float().numpy(),
        maps=found.h.reshape(k, height, width).float().numpy(),
        offset=offset.float().numpy(),
        error=found.error,
        labels=labels,
        label_probabilities=probabilities,
        labels_reason=reason,
        size=size,
        image=image if isinstance(image, Image.Image) else None,
    )


def check_k(k: object, layer: str, channels: int, positions: int, grid: str) -> int:
    """``k`` as an int when it is a whole number from 1 to ``min(channels, positions)`` (a
    factorisation has at most as many parts as the matrix's smaller side); ``grid`` says what
    the positions are, for the message.

    Raises:
        ConceptError: ``k`` out of range, or not a whole number.
    """
    most = min(channels, positions)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= most:
        raise ConceptError(
            f"k is how many concepts: a whole number from 1 to {most} at {layer!r} ({channels} "
            f"channels, {grid}); got {k!r}"
        )
    return int(k)


def factorise(flat: torch.Tensor, k: int) -> tuple[torch.Tensor, Factorisation]:
    """Deep Feature Factorization of (C, n) activations (n: positions, of one image or of
    many side by side): each channel's minimum over the n positions, (C,) float64, and the
    ``nmf`` of the activations minus it. NaN counts as 0 (as pytorch-grad-cam's ``dff``)."""
    # one float64 copy, worked on in place: a folder's activations are large
    shifted = flat.to(torch.float64, copy=True).nan_to_num_(0.0)
    offset = shifted.amin(dim=1)
    shifted -= offset[:, None]
    return offset, nmf(shifted, k)


def concept_labels(
    loaded: LoadedModel,
    output: object,
    activations: torch.Tensor,
    layer: str,
    vectors: torch.Tensor,
    offset: torch.Tensor,
) -> tuple[tuple[tuple[str, ...], ...] | None, np.ndarray | None, str]:
    """Each concept's best classes through the pooled linear head fed by ``layer``: the
    ``LABELS_PER_CONCEPT`` names per concept, best first, their (k, LABELS_PER_CONCEPT)
    softmax probabilities, and ""; or None, None and the reason there are none.

    Args:
        output: the model's output of one forward pass, and ``activations`` (C, h, w) the
            layer's for the same input: they show whether the head is a linear layer of the
            layer's global average pool.
        vectors: (C, k) the concepts' channel vectors; ``offset``: (C,) the channels' minima.
    """
    if not loaded.scores_classes:
        return None, None, f"a {loaded.task} model has no classes to name concepts by"
    logits = extract_logits(output).detach().cpu()
    head, why = pooled_linear_head(loaded.model, activations[None], logits, layer)
    if head is None:
        return None, None, why
    weight = head.weight.detach().cpu().double()
    bias = 0.0 if head.bias is None else head.bias.detach().cpu().double()
    scores = (vectors + offset[:, None]).T @ weight.T + bias  # (k, classes)
    probabilities = torch.softmax(scores, dim=1)
    top = probabilities.topk(min(LABELS_PER_CONCEPT, probabilities.shape[1]), dim=1)
    labels = tuple(tuple(loaded.class_name(int(i)) for i in row) for row in top.indices.tolist())
    return labels, top.values.float().numpy(), ""
