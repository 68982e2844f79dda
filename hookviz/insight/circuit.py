"""A class's circuit between two layers: which channels of each carry the class's relevance
over many images, and how much of an upper channel's relevance each lower channel passes on
(Summit's question, Hohman et al. 2019, answered with Concept Relevance Propagation's
conditional relevance, Achtibat et al. 2023, instead of activations).

For each image, LRP of the class's score (``relevance``'s rules) reaches the upper layer's
channels; a link (j, i) is the relevance reaching the lower layer's channel i when only upper
channel j's relevance goes on down. Since the rules are linear in the relevance they pass on,
the links of every upper channel add up to the lower layer's whole relevance through the upper
layer. Means over the images give the class's circuit; the per-image values stay for its
examples (the images where a channel carries the most of the class).

The upper channels whose links are followed are chosen first (the ``top`` most relevant on
average), so the images are read twice: once for every upper channel's relevance, once for
the links of those chosen.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple

import numpy as np
import torch

from ..core.inputs import ImageInput, extract_logits, prepare_input
from ..core.layers import layer_table
from ..core.loaded import LoadedModel
from ..core.targets import Class
from .relevance import (
    DEFAULT_COMPOSITE,
    LayerReader,
    RelevanceError,
    channel_sums,
    check_relevance,
    class_starts,
    traced_forward,
)

DEFAULT_TOP = 8  # upper channels whose links are followed
TABLE_COLUMNS = (
    "upper_layer",
    "upper_channel",
    "lower_layer",
    "lower_channel",
    "relevance",
    "share",
)


class Link(NamedTuple):
    """How much of upper channel ``upper``'s relevance reaches lower channel ``lower``: the
    mean over the images (``relevance``) and its share of the upper channel's mean."""

    upper: int
    lower: int
    relevance: float
    share: float


@dataclass(frozen=True)
class Circuit:
    """A class's circuit between two layers, over some images.

    Attributes:
        class_index, class_name: the class explained in every image.
        lower, upper: the two layers, the lower one running first.
        composite: the LRP rules (``RELEVANCE_COMPOSITES``).
        upper_by_image: (N, C_upper) float32, each image's class relevance reaching each upper
            channel (a row of NaN: an image that failed).
        lower_by_image: (N, C_lower) float32, what reaches each lower channel through the
            upper layer.
        upper_channels: the upper channels whose links were followed, most relevant first.
        links_by_image: (N, len(upper_channels), C_lower) float32: what reaches each lower
            channel when only that upper channel's relevance goes on down.
        sources: each image's name (its path, or "image N").
    """

    class_index: int
    class_name: str
    lower: str
    upper: str
    composite: str
    upper_by_image: np.ndarray
    lower_by_image: np.ndarray
    upper_channels: tuple[int, ...]
    links_by_image: np.ndarray
    sources: tuple[str, ...] = field(default=(), compare=False)

    @property
    def images(self) -> int:
        """The images that count (those that did not fail)."""
        return int(np.isfinite(self.upper_by_image).all(axis=1).sum())

    @cached_property
    def upper_relevance(self) -> np.ndarray:
        """(C_upper,): each upper channel's mean relevance over the images."""
        return _mean(self.upper_by_image)

    @cached_property
    def lower_relevance(self) -> np.ndarray:
        """(C_lower,): each lower channel's mean relevance (through the upper layer)."""
        return _mean(self.lower_by_image)

    @cached_property
    def links(self) -> np.ndarray:
        """(len(upper_channels), C_lower): the links' mean relevance over the images."""
        return _mean(self.links_by_image)

    def top_upper(self, n: int = DEFAULT_TOP) -> list[tuple[int, float]]:
        """The ``n`` upper channels with the most mean relevance, with it, most first."""
        return ranked_channels(self.upper_relevance, n)

    def top_lower(self, n: int = DEFAULT_TOP) -> list[tuple[int, float]]:
        """The ``n`` lower channels with the most mean relevance, with it, most first."""
        return ranked_channels(self.lower_relevance, n)

    def examples(self, layer: str, channel: int, n: int = 6) -> list[tuple[int, float]]:
        """(image, relevance) of the ``n`` images where ``channel`` of ``layer`` (``lower``
        or ``upper``) carries the most of the class's relevance, most first."""
        by_image = {self.upper: self.upper_by_image, self.lower: self.lower_by_image}.get(layer)
        if by_image is None:
            raise RelevanceError(f"this circuit's layers are {self.lower!r} and {self.upper!r}")
        if not 0 <= channel < by_image.shape[1]:
            raise RelevanceError(
                f"channels of {layer!r} are numbered 0 to {by_image.shape[1] - 1}; got {channel}"
            )
        values = np.where(np.isfinite(by_image[:, channel]), by_image[:, channel], -np.inf)
        order = np.argsort(-values, kind="stable")[:n]
        return [(int(i), float(values[i])) for i in order if np.isfinite(values[i])]

    def strongest_links(self, n: int = 20) -> list[Link]:
        """The ``n`` links with the most relevance, strongest first."""
        return self._all_links()[:n]

    def link(self, upper: int, lower: int) -> Link:
        """The link from upper channel ``upper`` (one of ``upper_channels``) to ``lower``."""
        if upper not in self.upper_channels:
            raise RelevanceError(
                f"links were followed from upper channels {list(self.upper_channels)}, not {upper}"
            )
        row = self.upper_channels.index(upper)
        return self._link(row, int(lower))

    def table(self) -> list[dict]:
        """Every link, strongest first, as rows of ``TABLE_COLUMNS`` (what ``to_csv``
        writes; ``pandas.DataFrame(circuit.table())`` makes it a frame)."""
        return [
            {
                "upper_layer": self.upper,
                "upper_channel": link.upper,
                "lower_layer": self.lower,
                "lower_channel": link.lower,
                "relevance": link.relevance,
                "share": link.share,
            }
            for link in self._all_links()
        ]

    def to_csv(self, path: str | os.PathLike) -> None:
        """Write ``table`` as CSV (a temporary file renamed: never half written)."""
        temporary = f"{os.fspath(path)}.tmp"
        with open(temporary, "w", newline="", encoding="utf-8") as file:
            writer = csv.DictWriter(file, fieldnames=TABLE_COLUMNS)
            writer.writeheader()
            for row in self.table():
                writer.writerow(row | {k: f"{row[k]:.6g}" for k in ("relevance", "share")})
        os.replace(temporary, path)

    def _link(self, row: int, lower: int) -> Link:
        upper = self.upper_channels[row]
        value = float(self.links[row, lower])
        whole = float(self.upper_relevance[upper])
        return Link(upper, lower, value, value / whole if whole else float("nan"))

    def _all_links(self) -> list[Link]:
        order = np.argsort(-np.nan_to_num(self.links, nan=-np.inf).ravel(), kind="stable")
        lowers = self.links.shape[1]
        return [self._link(int(i) // lowers, int(i) % lowers) for i in order]

    def __repr__(self) -> str:
        top = ", ".join(
            f"{self.upper}[{u}]<-{self.lower}[{v}]" for u, v, *_ in self.strongest_links(3)
        )
        return (
            f"Circuit({self.class_name!r} over {self.images} images, {self.lower} -> "
            f"{self.upper}, strongest: {top})"
        )


def circuit(
    loaded: LoadedModel,
    images: Sequence[ImageInput | str | os.PathLike],
    target: int | str,
    *,
    layers: Sequence[str],
    top: int = DEFAULT_TOP,
    composite: str = DEFAULT_COMPOSITE,
) -> Circuit:
    """The circuit of class ``target`` between two layers, over ``images``.

    Args:
        loaded: a classifier (a CNN: attention has no relevance rule here).
        images: PIL images, image files' paths or preprocessed (1, 3, H, W) tensors; each is
            explained alone, as ``relevance`` explains it (``sources`` names them).
        target: the class, by index or name.
        layers: two layers, in either order (the one that runs first is ``lower``); the lower
            one must feed the upper one.
        top: how many of the upper layer's most relevant channels to follow links from.
        composite: the LRP rules.

    Raises:
        RelevanceError: as ``relevance``, a class that does not apply, two layers that are
            the same or where the lower does not feed the upper, no images, top < 1.
        LayerError: an unknown layer.
    """
    check_relevance(loaded, composite)
    index = class_of(loaded, target)
    lower, upper = ordered_layers(loaded, layers)
    if not images:
        raise RelevanceError("a circuit needs at least one image")
    named = [_source(image, i) for i, image in enumerate(images)]
    images = [_opened(image) for image in images]
    batches = [prepare_input(loaded, image)[0] for image in images]
    uppers = np.stack(
        [
            layer_pair_relevance(loaded, b, lower, upper, [index], composite).upper[0]
            for b in batches
        ]
    )
    chosen = most_relevant(uppers, top)
    lowers, links = [], []
    for batch in batches:
        pair = layer_pair_relevance(loaded, batch, lower, upper, [index], composite, chosen)
        lowers.append(pair.lower[0])
        links.append(pair.links[0])
    return Circuit(
        class_index=index,
        class_name=loaded.class_name(index),
        lower=lower,
        upper=upper,
        composite=composite,
        upper_by_image=uppers,
        lower_by_image=np.stack(lowers),
        upper_channels=chosen,
        links_by_image=np.stack(links),
        sources=tuple(named),
    )


def class_of(loaded: LoadedModel, target: int | str) -> int:
    """The class ``target`` names (an index, or a name; a digit string is an index)."""
    if not loaded.scores_classes:
        raise RelevanceError(f"a circuit is a class's; a {loaded.task} model has no classes")
    if isinstance(target, str) and not target.strip().lstrip("-").isdigit():
        try:
            return loaded.class_index(target)
        except Exception as exc:  # (ModelError: no such class)
            raise RelevanceError(f"{exc}; give a class index or a class name") from None
    value = int(target)
    try:
        Class(value).resolve_index(loaded)
    except Exception as exc:  # (TargetError: out of range)
        raise RelevanceError(str(exc)) from None
    return value


def ordered_layers(loaded: LoadedModel, layers: Sequence[str]) -> tuple[str, str]:
    """The two layers' names as (lower, upper): in the order they run."""
    names = [str(name).strip() for name in layers]
    if len(names) != 2:
        raise RelevanceError(f"a circuit joins two layers (lower,upper); got {len(names)}")
    table = layer_table(loaded)
    found = [table.get(name).name for name in names]  # (LayerError: an unknown layer)
    if found[0] == found[1]:
        raise RelevanceError(f"a circuit joins two different layers; got {found[0]!r} twice")
    if table.canonical(found[0]) == table.canonical(found[1]):
        raise RelevanceError(
            f"{found[0]!r} and {found[1]!r} give the same feature map (a block and its last "
            "part): pick two layers with maps of their own"
        )
    place = {layer.name: i for i, layer in enumerate(table.layers)}
    lower, upper = sorted(found, key=place.__getitem__)
    return lower, upper


def most_relevant(upper_by_image: np.ndarray, top: int) -> tuple[int, ...]:
    """The ``top`` upper channels with the most mean relevance over the images that
    counted (ties: the lower channel number first)."""
    if top < 1:
        raise RelevanceError(f"top must be at least 1, not {top}")
    mean = _mean(upper_by_image)
    if not np.isfinite(mean).any():
        raise RelevanceError("no image could be explained: there is no circuit to follow")
    return tuple(c for c, _ in ranked_channels(mean, top))


class PairRelevance(NamedTuple):
    """A batch's relevance at two layers: ``upper`` (N, C_upper), ``lower`` (N, C_lower)
    through the upper layer, and ``links`` (N, T, C_lower) for the upper channels asked for
    (None when none were)."""

    upper: np.ndarray
    lower: np.ndarray | None
    links: np.ndarray | None


def layer_pair_relevance(
    loaded: LoadedModel,
    batch: torch.Tensor,
    lower: str,
    upper: str,
    classes: Sequence[int] | None,
    composite: str,
    upper_channels: Sequence[int] | None = None,
) -> PairRelevance:
    """One relevance forward pass over ``batch`` (N, 3, H, W) with both layers read; the
    relevance of each image's class (None: its top class) at the upper layer, and with
    ``upper_channels``, at the lower layer: the whole of it and the links of each of those
    channels (one backward over the layers between, per channel)."""
    readers = LayerReader(lower), LayerReader(upper)
    with loaded.lock, torch.inference_mode(False), torch.enable_grad():
        x = batch.detach().clone().requires_grad_(True)
        logits = extract_logits(traced_forward(loaded, x, composite, *readers))
        start, _ = class_starts(loaded, logits, classes)
        following = upper_channels is not None
        (reached,) = torch.autograd.grad(
            logits, readers[1].output, grad_outputs=start, retain_graph=following
        )
        if not following:
            return PairRelevance(channel_sums(reached), None, None)
        chosen = readers[1].checked(upper_channels)
        down = [reached, *(_only(reached, c) for c in chosen)]
        sums = []
        for number, part in enumerate(down):
            (found,) = torch.autograd.grad(
                readers[1].output,
                readers[0].output,
                grad_outputs=part,
                retain_graph=number < len(down) - 1,
                allow_unused=True,
            )
            if found is None:
                raise RelevanceError(f"layer {lower!r} does not feed layer {upper!r}")
            sums.append(channel_sums(found))
    return PairRelevance(channel_sums(reached), sums[0], np.stack(sums[1:], axis=1))


def _only(relevance: torch.Tensor, channel: int) -> torch.Tensor:
    kept = torch.zeros_like(relevance)
    kept[:, channel] = relevance[:, channel]
    return kept


def _mean(by_image: np.ndarray) -> np.ndarray:
    """The mean over the images (axis 0) of the rows that did not fail (NaN where none)."""
    rows = by_image.reshape(len(by_image), -1)
    good = np.isfinite(rows).all(axis=1)
    if not good.any():
        return np.full(by_image.shape[1:], np.nan, np.float32)
    return by_image[good].mean(axis=0).astype(np.float32)


def ranked_channels(values: np.ndarray, n: int) -> list[tuple[int, float]]:
    """The ``n`` channels with the largest values (NaN last), with them, largest first."""
    order = np.argsort(-np.nan_to_num(values, nan=-np.inf), kind="stable")[: max(0, n)]
    return [(int(c), float(values[c])) for c in order]


def _source(image: ImageInput | str | os.PathLike, number: int) -> str:
    if isinstance(image, (str, os.PathLike)):
        return os.fspath(image)
    filename = getattr(image, "filename", "")
    return str(filename) if filename else f"image {number}"


def _opened(image: ImageInput | str | os.PathLike) -> ImageInput:
    """A path's image (``load_image``); a picture or tensor as it is."""
    if isinstance(image, (str, os.PathLike)):
        from ..images import load_image

        return load_image(image)
    return image
