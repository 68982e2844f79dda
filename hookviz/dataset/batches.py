"""The model's side of a run: one chunk of decoded records in, its table rows and arrays out.

Records are grouped by the size they are fed at, and each group goes through the model in
batches of at most ``batch_size``: one forward (and one backward) pass per batch. Only images
fed at exactly the same size share a batch, so batching never distorts an image: every result
is the one the image gets alone (``hookviz.grad_cam``), and a folder of mixed sizes simply
batches less. A batch the model refuses is retried one image at a time, so the reason lands in
the row of the image that caused it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..core.batch import explain_batch, layer_batch
from ..core.cam import to_pixel_grid
from ..core.loaded import LoadedModel
from ..errors import HookvizError

Advance = Callable[[int], None]
Box = tuple[float, float, float, float]


@dataclass(frozen=True)
class Settings:
    """How a chunk goes through the model.

    Attributes:
        layer: the hooked layer.
        batch_size: images per forward pass.
        bf16: run the network under bfloat16 autocast (the CAM maths stay in float32).
    """

    layer: str
    batch_size: int = 32
    bf16: bool = False

    @property
    def autocast(self) -> torch.dtype | None:
        return torch.bfloat16 if self.bf16 else None


def explain_records(
    loaded: LoadedModel,
    records: list[dict],
    targets: list[int | None],
    method: str,
    settings: Settings,
    advance: Advance,
) -> list[tuple[dict, np.ndarray] | str]:
    """For each record (read, with its target: a class index, or None for the top-1) the CAM
    result, or the reason it failed: ``(values, coarse map)`` where ``values`` holds
    ``top1_index``, ``top1_prob``, ``class_index`` and ``score``."""

    def run(positions: list[int], batch: torch.Tensor) -> list:
        chosen = [targets[p] for p in positions]
        explained = explain_batch(
            loaded,
            batch,
            settings.layer,
            None if any(t is None for t in chosen) else chosen,
            method,
            autocast=settings.autocast,
        )
        return [
            (
                {
                    "top1_index": int(explained.top1_indices[i]),
                    "top1_prob": float(explained.top1_probabilities[i]),
                    "class_index": int(explained.class_indices[i]),
                    "score": float(explained.scores[i]),
                },
                explained.cams[i],
            )
            for i in range(len(positions))
        ]

    return _batched(loaded, records, settings, advance, run)


def layer_records(
    loaded: LoadedModel, records: list[dict], pool: str, settings: Settings, advance: Advance
) -> list[np.ndarray | str]:
    """For each record its features at the layer: (C,) pooled by ``pool`` ("avg" or "max"),
    or the whole (C, h, w) maps for ``"none"``; or the reason it failed."""

    def run(positions: list[int], batch: torch.Tensor) -> list:
        maps = layer_batch(loaded, batch, settings.layer, autocast=settings.autocast)
        if pool == "avg":
            maps = maps.mean(dim=(2, 3))
        elif pool == "max":
            maps = maps.amax(dim=(2, 3))
        values = maps.cpu().numpy().astype(np.float32)
        return list(values)

    return _batched(loaded, records, settings, advance, run)


def relevance_records(
    loaded: LoadedModel,
    records: list[dict],
    settings: Settings,
    target: int | None,
    composite: str,
    advance: Advance,
) -> list[np.ndarray | str]:
    """For each record the relevance of ``target`` (None: its own top class) reaching each
    channel of the layer, (C,) (``hookviz.insight.relevance.batch_layer_relevance``); or the
    reason it failed."""
    from ..insight.relevance import batch_layer_relevance  # (only runs by relevance need it)

    def run(positions: list[int], batch: torch.Tensor) -> list:
        classes = None if target is None else [target] * len(positions)
        values = batch_layer_relevance(loaded, batch, settings.layer, classes, composite)
        return list(values.astype(np.float32))

    return _batched(loaded, records, settings, advance, run)


def link_records(
    loaded: LoadedModel,
    records: list[dict],
    settings: Settings,
    target: int,
    composite: str,
    upper: str,
    upper_channels: tuple[int, ...],
    advance: Advance,
) -> list[np.ndarray | str]:
    """For each record the relevance of class ``target`` reaching the layer through
    ``upper``, then what reaches it through each of ``upper_channels`` alone: (1 + T, C)
    (``hookviz.insight.circuit.layer_pair_relevance``); or the reason it failed."""
    from ..insight.circuit import layer_pair_relevance  # (only circuit runs need it)

    def run(positions: list[int], batch: torch.Tensor) -> list:
        pair = layer_pair_relevance(
            loaded, batch, settings.layer, upper, [target] * len(positions), composite,
            upper_channels,
        )  # fmt: skip
        values = np.concatenate([pair.lower[:, None], pair.links], axis=1)
        return list(values.astype(np.float32))

    return _batched(loaded, records, settings, advance, run)


def _batched(loaded, records, settings, advance, run) -> list:
    results: list = [record["error"] for record in records]
    groups: dict[tuple[int, ...], list[int]] = {}
    for position, record in enumerate(records):
        if record["pixels"] is not None and not results[position]:
            groups.setdefault(tuple(record["pixels"].shape), []).append(position)
    size = max(1, int(settings.batch_size))
    for positions in groups.values():
        for start in range(0, len(positions), size):
            part = positions[start : start + size]
            for position, result in zip(part, _run_part(loaded, records, part, run), strict=True):
                results[position] = result
            advance(len(part))
    advance(sum(1 for record in records if record["pixels"] is None or record["error"]))
    return results


def _run_part(loaded, records, positions, run) -> list:
    try:
        return run(positions, _batch_of(loaded, records, positions))
    except (HookvizError, RuntimeError) as exc:  # RuntimeError: torch's own (out of memory)
        if len(positions) == 1:
            return [str(exc) or type(exc).__name__]
    # one image (or the batch's size) made it fail: alone, each gets its own result or reason
    return [_run_part(loaded, records, [position], run)[0] for position in positions]


def _batch_of(loaded: LoadedModel, records: list[dict], positions: list[int]) -> torch.Tensor:
    """The records' pixels as one normalised batch on the model's device (bytes travel, the
    arithmetic happens there)."""
    pixels = torch.from_numpy(np.stack([records[p]["pixels"] for p in positions]))
    return loaded.preprocessing.normalise(pixels.to(loaded.device))


def crop_fractions(prep, width: int, height: int, crop: str) -> Box | None:
    """The part of a ``width`` x ``height`` image the model saw, as fractions of its sides, for
    ``heatmap_on_image``: None for the whole image (``crop="none"``)."""
    if crop != "center":
        return None
    left, top, right, bottom = prep.crop_box(width, height)
    return left / width, top / height, right / width, bottom / height


def heatmap_on_image(
    cam: np.ndarray,
    size: tuple[int, int],
    box: Box | None,
    frame: tuple[float, float] = (1.0, 1.0),
) -> np.ndarray:
    """A stored coarse map as an (H, W) heatmap in [0, 1] on an image's grid. ``box``: the
    part of the image the model saw, as fractions (left, top, right, bottom) of its width and
    height (a centre crop); the heatmap is 0 outside it. None: the whole image. ``frame``: the
    share (height, width) of the map that covers the image (a detector pads its input), as
    ``GradCAM.frame``."""
    tensor = torch.from_numpy(np.ascontiguousarray(cam, dtype=np.float32))
    if box is None:
        return to_pixel_grid(tensor, size, frame)
    height, width = size
    left, top = round(box[0] * width), round(box[1] * height)
    right, bottom = max(left + 1, round(box[2] * width)), max(top + 1, round(box[3] * height))
    heat = np.zeros(size, np.float32)
    heat[top:bottom, left:right] = to_pixel_grid(tensor, (bottom - top, right - left))
    return heat


def write_overlay(
    target: Path,
    pixels: np.ndarray,
    cam: np.ndarray,
    kind: str,
    box: Box | None = None,
    frame: tuple[float, float] = (1.0, 1.0),
    mark: Callable | None = None,
) -> None:
    """A row's overlay picture: its CAM (``heatmap_on_image``'s ``box`` and ``frame``) over
    ``pixels``, marked by ``mark`` (a picture in, a marked copy out: a box, an outline), as
    ``kind`` ("jpeg" or "png"); written before its chunk is marked done (a redone chunk writes
    it again, the same)."""
    from PIL import Image

    from .. import render  # deferred: matplotlib, only when pictures are asked for
    from . import store

    picture = Image.fromarray(pixels)
    blended = render.overlay(
        picture, heatmap_on_image(cam, (picture.height, picture.width), box, frame)
    )
    if mark is not None:
        blended = mark(blended)
    encode = render.jpeg_bytes if kind == "jpeg" else render.png_bytes
    store.write_bytes(target, encode(blended))
