"""Concepts over a folder: Deep Feature Factorization (``hookviz.concepts``) of a layer's maps
of many images at once, as CRAFT (Fel et al. 2023, arXiv:2211.10154) factorises a whole set of
images' activations, so that a concept is one direction of the layer over the folder and its
strongest regions show what it stands for.

Three steps, the first the long one:

1. The layer's whole maps of every image: a features run with ``pool="none"`` in
   ``OUT/features`` (each image resized whole to the model's square, so every map has one
   shape), chunked and resumable as every run: the same call again continues it, and Ctrl-C or
   a crash leaves its finished chunks.
2. The factorisation: the maps of the images that were read, side by side, (C, n*h*w), each
   channel minus its minimum over the whole folder, into ``k`` concepts
   (``insight.concepts.factorise``); each concept named through the layer's pooled linear head
   where the layer feeds one (``insight.concepts.concept_labels``, as for one image).
3. Each concept's strongest regions: the ``regions`` images where its map reaches its highest
   values (one region per image), the region being the map cells around the peak where the
   concept is at least half its peak, and a picture of each.

Layout of ``OUT``:

    features/                 the features run (``open_run(OUT / "features")``: its table)
    concepts.npz              ``vectors`` (C, k), ``offset`` (C,), ``maps`` (k, n, h, w),
                              ``shares`` (k,), float32; ``rows`` (n,) int64: each image's row
                              of the features run
    concepts.json             the model, layer, k, error, labels, and per concept its share,
                              top channels and regions (row, path, peak, box, picture)
    regions/concept-J-R.jpg   concept J's R-th strongest region (both from 0): that part of
                              the image, enlarged, with the concept's heatmap over it

``concepts.json`` is written last, after the arrays and the pictures: it marks the concepts
done. Steps 2 and 3 are made again by every call (the features are kept), so the same inputs
with another ``k`` or ``regions`` reuse the maps of step 1. Step 2 holds every map in memory,
side by side in float32 and the float64 copy it works on: about 16 x C x h x w bytes per image
(measured).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from ..core.inputs import prepare_input
from ..core.layers import default_layer, layer_shapes, layer_table
from ..core.loaded import LoadedModel
from ..core.pipeline import captured_forward
from ..errors import HookvizError
from ..images import load_image
from ..insight.concepts import ConceptError, check_k, concept_labels, factorise
from . import distributed, store
from .batches import Box, heatmap_on_image
from .concept_reader import (
    CONCEPTS_FORMAT,
    CONCEPTS_JSON,
    CONCEPTS_NPZ,
    FEATURES,
    REGIONS,
    FolderConcepts,
    folder_concepts,
    region_picture_name,
    seen_fractions,
)
from .decode import Decoding, decode
from .plan import check_crop, input_paths
from .reader import Run, open_run
from .run import RunSummary, run_features
from .store import RunError

TOP_CHANNELS = 5  # channels concepts.json lists per concept, by the concept's weight on them
HALF = 0.5  # a region: the cells around the peak where the concept is at least this x the peak
REGION_SHORT_SIDE = 160  # a region's picture is enlarged to at least this on its short side
REGION_LONG_SIDE = 480  # ... and made no longer than this (a large region is shrunk)


@dataclass(frozen=True)
class ConceptsSummary(RunSummary):
    """What ``run_concepts`` did: the features run's counts (``RunSummary``; ``rows`` are
    images, ``out`` the concepts' folder) and the concepts found (None on a rank other than 0
    of a distributed run, which only makes features).

    Attributes:
        layer: the layer's name.
        k: how many concepts.
        error: the factorisation's relative error (``FolderConcepts.error``).
        concepts: what ``open_concepts(out)`` reads back.
    """

    layer: str = ""
    k: int = 0
    error: float = math.nan
    concepts: FolderConcepts | None = None


def run_concepts(
    loaded: LoadedModel,
    inputs: Sequence[str | os.PathLike],
    out: str | os.PathLike,
    *,
    layer: str | None = None,
    k: int = 8,
    regions: int = 6,
    weights: str = "pretrained",
    crop: str = "none",
    bf16: bool = False,
    batch_size: int = 32,
    workers: int = 0,
    size_step: int = 1,
    chunk_size: int = 64,
    limit: int | None = None,
    overwrite: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> ConceptsSummary:
    """A layer's ``k`` concepts over every image ``inputs`` name, written under ``out`` (see
    the module's notes); ``open_concepts(out)`` reads them back.

    Args:
        loaded: the model.
        inputs: files, folders (recursive), globs or text files listing paths.
        out: the concepts' folder; the same call on it again continues an interrupted run.
        layer: the layer (default: the model's default layer).
        k: how many concepts, from 1 to the layer's channels.
        regions: how many regions (images) to find and draw per concept.
        weights: recorded in the features run's manifest (``"pretrained"`` or
            ``"untrained"``).
        crop: ``"none"`` (default): each image whole, resized to the model's square;
            ``"center"``: its centre crop.
        bf16: run the network under bfloat16 autocast (the maps are stored in float32).
        batch_size: images per forward pass.
        workers: processes that decode the next images while the model runs (0: here).
        size_step: recorded as in ``run_features`` (each image is fed at the square anyway).
        chunk_size: images per chunk of the features run (the unit of resuming).
        limit: only the first ``limit`` inputs.
        overwrite: start afresh in an ``out`` that holds other concepts or another run's
            features.
        progress: called with (images done, images in all) while the maps are made.

    Raises:
        ConceptError: ``k`` out of range, or a layer without a spatial grid (before any image
            is read); ``k`` more than the positions of the images that could be read.
        RunError: ``regions`` below 1, no input files, ``out`` holding something else
            (without ``overwrite``), or no image that could be read.
        LayerError: an unknown layer.
    """
    started = time.perf_counter()
    out = Path(out)
    name = default_layer(loaded) if layer is None else layer_table(loaded).get(layer).name
    check_crop(crop)
    if isinstance(regions, bool) or not isinstance(regions, (int, np.integer)) or regions < 1:
        raise RunError(f"regions is how many images to show per concept, 1 or more: {regions!r}")
    shape = layer_shapes(loaded, loaded.preprocessing.size, loaded.preprocessing.size).get(name)
    if shape is None:
        raise ConceptError(f"layer {name!r} has no spatial grid to factorise")
    channels, height, width = shape
    count = len(input_paths(inputs, limit))
    if count == 0:
        shown = ", ".join(str(given) for given in inputs)
        raise RunError(f"no image files in {shown}: nothing to factorise")
    k = check_k(k, name, channels, count * height * width, _grid(count, height, width))
    _prepare(out, overwrite)
    summary = run_features(
        loaded,
        inputs,
        out / FEATURES,
        layer=name,
        weights=weights,
        pool="none",
        crop=crop,
        bf16=bf16,
        batch_size=batch_size,
        workers=workers,
        size_step=size_step,
        chunk_size=chunk_size,
        limit=limit,
        overwrite=overwrite,
        progress=progress,
    )
    counts = {f.name: getattr(summary, f.name) for f in fields(RunSummary)} | {"out": out}
    if distributed.world()[0] != 0:  # (rank 0 factorises, once every chunk is on disk)
        return ConceptsSummary(**counts, layer=name, k=k)
    found = _concepts(loaded, open_run(out / FEATURES), out, name, k, int(regions), weights, crop)
    counts["seconds"] = time.perf_counter() - started
    return ConceptsSummary(**counts, layer=name, k=k, error=found.error, concepts=found)


def _grid(images: int, height: int, width: int) -> str:
    return f"{images} image{'s' if images != 1 else ''} of {height}x{width} positions"


def _prepare(out: Path, overwrite: bool) -> None:
    """Refuse an ``out`` that holds something else; with ``overwrite``, remove the concepts
    written before (the features run clears its own folder)."""
    if (out / "manifest.json").is_file():
        raise RunError(
            f"{out} holds a run of another hookviz command (its manifest.json): pick another --out"
        )
    ours = (out / FEATURES / "manifest.json").is_file() or (out / CONCEPTS_JSON).is_file()
    if out.is_dir() and any(out.iterdir()) and not ours and not overwrite:
        raise RunError(f"{out} is not empty and holds no hookviz concepts: pick another --out")
    if overwrite:
        for stale in (out / CONCEPTS_JSON, out / CONCEPTS_NPZ):
            stale.unlink(missing_ok=True)
        for stale in (out / REGIONS).glob("concept-*.jpg") if (out / REGIONS).is_dir() else ():
            stale.unlink()


def _concepts(
    loaded: LoadedModel,
    run: Run,
    out: Path,
    layer: str,
    k: int,
    regions: int,
    weights: str,
    crop: str,
) -> FolderConcepts:
    """Steps 2 and 3: the factorisation of the features run's maps, the regions, the files."""
    table = run.table
    rows = np.flatnonzero((table["status"] == "ok").to_numpy())
    if len(rows) == 0:
        raise RunError(
            f"no image could be read, so there is nothing to factorise (the reasons: "
            f"{out / FEATURES / 'table.csv'})"
        )
    stacked = _read_maps(run, rows)  # (n, C, h, w)
    images, channels, height, width = stacked.shape
    k = check_k(k, layer, channels, images * height * width, _grid(images, height, width))
    # the images side by side: column i*h*w + p is position p of image i
    flat = torch.from_numpy(stacked).permute(1, 0, 2, 3).reshape(channels, -1)
    del stacked  # (the side-by-side copy is all the factorisation needs)
    offset, found = factorise(flat, k)
    del flat
    concept_maps = found.h.reshape(k, images, height, width)
    labels, probabilities, reason = _labels(loaded, run, layer, crop, int(rows[0]), found.w, offset)
    # each concept's part of the sum of vectors @ maps (all >= 0, so the parts add up)
    parts = found.w.sum(dim=0) * concept_maps.sum(dim=(1, 2, 3))
    shares = (parts / parts.sum().clamp(min=1e-300)).float().numpy()
    arrays = {
        "vectors": found.w.float().numpy(),
        "offset": offset.float().numpy(),
        "maps": concept_maps.float().numpy(),
        "shares": shares,
        "rows": rows.astype(np.int64),
    }
    (out / REGIONS).mkdir(exist_ok=True)
    described = []
    for concept in range(k):
        weights_of = arrays["vectors"][:, concept]
        top = np.argsort(-weights_of, kind="stable")[:TOP_CHANNELS]
        described.append(
            {
                "concept": concept,
                "share": float(shares[concept]),
                "channels": [{"channel": int(c), "weight": float(weights_of[c])} for c in top],
                "labels": list(labels[concept]) if labels else None,
                "label_probabilities": (
                    [float(p) for p in probabilities[concept]] if labels else None
                ),
                "regions": _regions(run, arrays, concept, regions, out),
            }
        )
    found_json = {
        "format": CONCEPTS_FORMAT,
        "model": loaded.name,
        "weights": weights,
        "layer": layer,
        "k": k,
        "regions_per_concept": regions,
        "crop": crop,
        "channels": channels,
        "grid": [height, width],
        "images": images,
        "failed": len(table) - images,
        "error": found.error,
        "labels_reason": reason,
        "features": FEATURES,
        "concepts": described,
    }
    store.write_bytes(out / CONCEPTS_NPZ, _npz_bytes(arrays))
    store.write_json(out / CONCEPTS_JSON, found_json)  # last: the concepts are done
    _remove_stale_pictures(out, described)
    return folder_concepts(out, found_json, arrays)


def _read_maps(run: Run, rows: np.ndarray) -> np.ndarray:
    """The stored maps of ``rows`` (n, C, h, w) float32, read a chunk at a time (the failed
    rows, all NaN, never held)."""
    wanted = set(rows.tolist())
    parts = []
    for path in sorted((run.directory / "cams").glob("*.npz")):
        with np.load(path) as chunk:
            keep = np.array([int(row) in wanted for row in chunk["rows"]], bool)
            if keep.any():
                parts.append(chunk["features"][keep])
    return np.concatenate(parts)


def _labels(
    loaded: LoadedModel,
    run: Run,
    layer: str,
    crop: str,
    row: int,
    vectors: torch.Tensor,
    offset: torch.Tensor,
) -> tuple[tuple[tuple[str, ...], ...] | None, np.ndarray | None, str]:
    """``concept_labels`` over the folder: whether the layer feeds a pooled linear head is
    seen on one forward pass of ``row``'s image, fed as the features run fed it (the stored
    maps have no class scores beside them)."""
    path = run.input_path(row)
    decoding = Decoding(loaded.preprocessing, crop=crop == "center", square=True)
    record = decode(row, str(path), decoding) if path is not None else {"error": "moved"}
    if record["error"]:
        return None, None, f"the image of row {row} could not be read again to check the head"
    pixels = torch.from_numpy(record["pixels"][None]).to(loaded.device)
    batch, _ = prepare_input(loaded, loaded.preprocessing.normalise(pixels))
    output, activations = captured_forward(loaded, batch, layer)
    return concept_labels(loaded, output, activations.double().cpu(), layer, vectors, offset)


def _regions(run: Run, arrays: dict, concept: int, count: int, out: Path) -> list[dict]:
    """``concept``'s strongest regions (one per image, the highest peaks first; the earlier row
    first among equal peaks), each drawn to ``regions/``."""
    from .. import render  # deferred: matplotlib, only when pictures are drawn

    maps = arrays["maps"][concept]  # (n, h, w)
    peaks = maps.reshape(len(maps), -1).max(axis=1)
    found = []
    for rank, place in enumerate(np.argsort(-peaks, kind="stable")[:count]):
        row = int(arrays["rows"][place])
        seen = seen_fractions(run, row)
        box = _on_image(peak_box(maps[place]), seen)
        name = f"{REGIONS}/{region_picture_name(concept, rank)}"
        path = run.input_path(row)
        try:
            if path is None:
                raise FileNotFoundError(row)
            image = load_image(path, shrink_to=_shrink_to(box))
        except (OSError, HookvizError):  # moved or changed since step 1: no picture
            name = None
        else:
            picture = region_picture(image, maps[place], seen, box)
            store.write_bytes(out / name, render.jpeg_bytes(picture))
        found.append(
            {
                "row": row,
                "path": str(run.table.iloc[row]["path"]),
                "peak": float(peaks[place]),
                "box": [float(v) for v in box],
                "picture": name,
            }
        )
    return found


def peak_box(grid: np.ndarray) -> Box:
    """The region of a (h, w) map around its peak: the cells where it is at least ``HALF`` its
    peak, reached from the peak cell through such cells side by side (4-connected), as
    (left, top, right, bottom) fractions of the grid (each cell 1/w by 1/h)."""
    height, width = grid.shape
    peak = np.unravel_index(int(np.argmax(grid)), grid.shape)
    strong = grid >= HALF * grid[peak]
    reached, waiting = {peak}, [peak]
    while waiting:
        row, column = waiting.pop()
        for step_row, step_column in ((1, 0), (-1, 0), (0, 1), (0, -1)):
            near = (row + step_row, column + step_column)
            inside = 0 <= near[0] < height and 0 <= near[1] < width
            if inside and near not in reached and strong[near]:
                reached.add(near)
                waiting.append(near)
    rows = [cell[0] for cell in reached]
    columns = [cell[1] for cell in reached]
    return (
        min(columns) / width,
        min(rows) / height,
        (max(columns) + 1) / width,
        (max(rows) + 1) / height,
    )


def _on_image(box: Box, seen: Box | None) -> Box:
    """A box in fractions of what the model saw, as fractions of the whole image."""
    if seen is None:
        return box
    left, top, right, bottom = seen
    return (
        left + box[0] * (right - left),
        top + box[1] * (bottom - top),
        left + box[2] * (right - left),
        top + box[3] * (bottom - top),
    )


def _shrink_to(box: Box) -> int:
    """The short side a large JPEG may be decoded down to and still give the region at least
    ``REGION_SHORT_SIDE`` pixels on its short side."""
    share = max(min(box[2] - box[0], box[3] - box[1]), 1e-3)
    return math.ceil(REGION_SHORT_SIDE / share)


def region_picture(image: Image.Image, grid: np.ndarray, seen: Box | None, box: Box) -> Image.Image:
    """The part ``box`` (fractions of the image) of ``image``, enlarged to at least
    ``REGION_SHORT_SIDE`` pixels on its short side (at most ``REGION_LONG_SIDE`` on its long
    side), with the heatmap of the (h, w) map ``grid`` over it (``render.overlay``; the
    heatmap scaled to [0, 1] over the whole image, as ``FolderConcepts.heatmap``)."""
    from .. import render  # deferred: matplotlib, only when pictures are drawn

    heat = heatmap_on_image(grid, (image.height, image.width), seen)
    left, top = math.floor(box[0] * image.width), math.floor(box[1] * image.height)
    right = max(left + 1, math.ceil(box[2] * image.width))
    bottom = max(top + 1, math.ceil(box[3] * image.height))
    part = image.crop((left, top, right, bottom))
    scale = min(max(1.0, REGION_SHORT_SIDE / min(part.size)), REGION_LONG_SIDE / max(part.size))
    size = (max(1, round(part.width * scale)), max(1, round(part.height * scale)))
    part = part.resize(size, Image.Resampling.BICUBIC)
    # the heatmap resized as a float picture (mode "F"), not re-upsampled: it stays the map's
    heat = Image.fromarray(np.ascontiguousarray(heat[top:bottom, left:right], np.float32))
    resized = np.asarray(heat.resize(size, Image.Resampling.BILINEAR))
    return render.overlay(part, np.clip(resized, 0.0, 1.0))


def _npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    import io

    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def _remove_stale_pictures(out: Path, described: list[dict]) -> None:
    """Remove the region pictures of an earlier call that this one did not draw (a larger
    ``k`` or ``regions`` before), once ``concepts.json`` no longer names them."""
    kept = {region["picture"] for concept in described for region in concept["regions"]}
    for picture in (out / REGIONS).glob("concept-*.jpg"):
        if f"{REGIONS}/{picture.name}" not in kept:
            picture.unlink(missing_ok=True)


def format_concepts(summary: ConceptsSummary) -> str:
    """What the command line prints of the concepts: k, the layer, the images, the error, and
    for each concept its share, its labels (if any) and its strongest region's picture."""
    found = summary.concepts
    if found is None:
        return ""
    lines = [
        f"{found.k} concepts of {found.layer} over {found.images} images, reconstruction error "
        f"{found.error:.3f} (relative, Frobenius): {found.directory / CONCEPTS_JSON}"
    ]
    if found.labels is None:
        lines.append(f"no labels: {found.labels_reason}")
    for concept in range(found.k):
        named = f": {', '.join(found.labels[concept])}" if found.labels else ""
        first = found.regions[concept][0].picture if found.regions[concept] else None
        where = found.directory / first if first else "(no picture)"
        lines.append(f"  concept {concept} ({found.shares[concept]:.0%}){named}  {where}")
    return "\n".join(lines)
