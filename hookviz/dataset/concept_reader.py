"""Reading concepts over a folder back: ``open_concepts(OUT)`` gives what ``run_concepts``
wrote (``concept_run``'s notes give the layout of ``OUT``): the concepts' channel vectors, their
maps on every image, their labels, their strongest regions and pictures, and each concept's
heatmap on any image of the run, upsampled from the stored map as ``Run.heatmap`` upsamples a
CAM."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from .batches import Box, heatmap_on_image
from .reader import Run, open_run
from .store import RunError

CONCEPTS_FORMAT = 1  # the version of concepts.json and concepts.npz
CONCEPTS_JSON = "concepts.json"
CONCEPTS_NPZ = "concepts.npz"
FEATURES = "features"  # the sub-folder of the features run
REGIONS = "regions"  # the sub-folder of the region pictures


def region_picture_name(concept: int, rank: int) -> str:
    """The picture of ``concept``'s ``rank``-th strongest region (both from 0)."""
    return f"concept-{concept}-{rank}.jpg"


@dataclass(frozen=True)
class ConceptRegion:
    """Where a concept is strongest in one image.

    Attributes:
        row: the image's row in the features run (its line of ``features/inputs.txt``).
        path: the image's path as the run recorded it.
        peak: the concept's highest value on the image's map (the ``maps`` entry), the value
            the images are ranked by.
        box: (left, top, right, bottom) as fractions of the image's width and height: the map
            cells around the peak where the concept is at least half its peak there (the cells
            reached from the peak cell through such cells, side by side), each cell the share
            of the image it covers on the layer's grid.
        picture: the picture of the region, relative to the folder; None when the image could
            not be read again to draw it.
    """

    row: int
    path: str
    peak: float
    box: Box
    picture: str | None


@dataclass(frozen=True, eq=False)
class FolderConcepts:
    """A layer's concepts over a folder of images (Deep Feature Factorization of all the images'
    maps at once).

    Attributes:
        directory: the folder ``run_concepts`` wrote.
        model: the model's name.
        layer: the layer's name.
        vectors: (C, k) float32 >= 0, each concept's weight on each channel.
        offset: (C,) float32, each channel's minimum over every position of every image.
        maps: (k, n, h, w) float32 >= 0, each concept on the layer's grid of each image that
            was read (n of them, in run order: ``rows``); the maps minus ``offset`` are close
            to ``vectors @ maps`` (channels by positions).
        rows: (n,) int64, the features run's row of each image in ``maps``.
        error: ||A - offset - vectors @ maps|| / ||A - offset|| (Frobenius norms; A: the
            maps of every image side by side, (C, n*h*w)).
        shares: (k,) float32, each concept's share of the sum of ``vectors @ maps`` (they add
            up to 1).
        labels: per concept, the class names it scores highest through the layer's pooled
            linear head, best first; None where the layer feeds none.
        label_probabilities: (k, 3) float32, their softmax probabilities; None with ``labels``.
        labels_reason: why there are no labels ("" when there are).
        regions: per concept, its strongest regions: the images where its map reaches its
            highest values, one region per image, strongest first.
        crop: ``"none"`` (each image whole, resized to the model's square) or ``"center"``.
    """

    directory: Path
    model: str
    layer: str
    vectors: np.ndarray
    offset: np.ndarray
    maps: np.ndarray
    rows: np.ndarray
    error: float
    shares: np.ndarray
    labels: tuple[tuple[str, ...], ...] | None
    label_probabilities: np.ndarray | None
    labels_reason: str
    regions: tuple[tuple[ConceptRegion, ...], ...]
    crop: str = "none"

    @property
    def k(self) -> int:
        return int(self.maps.shape[0])

    @property
    def images(self) -> int:
        """How many images the concepts were found in (the run's images that were read)."""
        return int(self.maps.shape[1])

    @cached_property
    def _positions(self) -> dict[int, int]:
        """The features run's row -> its place in ``maps``."""
        return {int(row): place for place, row in enumerate(self.rows)}

    @cached_property
    def run(self) -> Run:
        """The features run of the layer's maps (``open_run``): its table, its images."""
        return open_run(self.directory / FEATURES)

    def map(self, concept: int, row: int) -> np.ndarray:
        """``concept``'s map on the features run's ``row``: (h, w) float32 >= 0.

        Raises:
            ValueError: that row's image was not read (the run's table says why).
        """
        position = self._positions.get(int(row))
        if position is None:
            raise ValueError(f"row {row} has no map: its image was not read (see the table)")
        return self.maps[int(concept), position]

    def heatmap(self, concept: int, row: int) -> np.ndarray:
        """``concept``'s heatmap on ``row``'s image: (H, W) float32 in [0, 1] on the image's
        own pixel grid, its map upsampled (bilinear) and scaled to [0, 1] in that image (as
        ``Concepts.heatmaps``); in a ``crop="center"`` run, 0 outside the crop."""
        record = self.run.table.iloc[int(row)]
        return self.heatmap_at(concept, row, (int(record["height"]), int(record["width"])))

    def heatmap_at(self, concept: int, row: int, size: tuple[int, int]) -> np.ndarray:
        """The heatmap on another (H, W) grid of the same image (a smaller copy's)."""
        return heatmap_on_image(self.map(concept, row), size, self.seen(row))

    def seen(self, row: int) -> Box | None:
        """The part of ``row``'s image the model saw, as fractions (left, top, right, bottom)
        of its width and height; None for the whole image."""
        return seen_fractions(self.run, row)

    def region_picture(self, concept: int, rank: int = 0) -> Path:
        """The picture of ``concept``'s ``rank``-th strongest region (0: the strongest): that
        part of the image, enlarged, with the concept's heatmap over it (JPEG).

        Raises:
            IndexError: no such concept or rank.
            FileNotFoundError: the picture was not drawn (its image could not be read).
        """
        region = self.regions[int(concept)][int(rank)]
        if region.picture is None:
            raise FileNotFoundError(
                f"no picture of concept {concept}'s region {rank}: {region.path} could not be read"
            )
        return self.directory / region.picture


def seen_fractions(run: Run, row: int) -> Box | None:
    """The part of ``row``'s image the model saw in ``run``, as fractions (left, top, right,
    bottom) of its width and height; None for the whole image (a run without a crop)."""
    box = run.crop_box(int(row))
    if box is None:
        return None
    record = run.table.iloc[int(row)]
    width, height = int(record["width"]), int(record["height"])
    return box[0] / width, box[1] / height, box[2] / width, box[3] / height


def open_concepts(directory: str | os.PathLike) -> FolderConcepts:
    """The concepts ``run_concepts`` (``hookviz concepts``) wrote in ``directory``.

    Raises:
        RunError: no finished concepts there, or ones written by a newer hookviz.
    """
    directory = Path(directory)
    path = directory / CONCEPTS_JSON
    if not path.is_file():
        raise RunError(
            f"no concepts in {directory} (no {CONCEPTS_JSON}): hookviz concepts writes it once "
            "the factorisation is done; give the same command again to finish an interrupted run"
        )
    found = json.loads(path.read_text(encoding="utf-8"))
    if int(found.get("format", 0)) > CONCEPTS_FORMAT:
        raise RunError(f"the concepts in {directory} were written by a newer hookviz")
    with np.load(directory / CONCEPTS_NPZ) as arrays:
        stored = {key: arrays[key] for key in arrays.files}
    return folder_concepts(directory, found, stored)


def folder_concepts(directory: Path, found: dict, arrays: dict[str, np.ndarray]) -> FolderConcepts:
    """The ``FolderConcepts`` of a ``concepts.json`` (``found``) and its arrays (what
    ``run_concepts`` writes, read back or still in memory)."""
    concepts = found["concepts"]
    labelled = found["labels_reason"] == ""
    regions = tuple(
        tuple(
            ConceptRegion(
                row=int(region["row"]),
                path=str(region["path"]),
                peak=float(region["peak"]),
                box=tuple(float(v) for v in region["box"]),
                picture=region["picture"],
            )
            for region in concept["regions"]
        )
        for concept in concepts
    )
    return FolderConcepts(
        directory=directory,
        model=str(found["model"]),
        layer=str(found["layer"]),
        vectors=arrays["vectors"],
        offset=arrays["offset"],
        maps=arrays["maps"],
        rows=arrays["rows"],
        error=float(found["error"]),
        shares=np.array([c["share"] for c in concepts], np.float32),
        labels=tuple(tuple(c["labels"]) for c in concepts) if labelled else None,
        label_probabilities=(
            np.array([c["label_probabilities"] for c in concepts], np.float32) if labelled else None
        ),
        labels_reason=str(found["labels_reason"]),
        regions=regions,
        crop=str(found.get("crop", "none")),
    )
