"""Reading, decoding and resizing a run's files, in DataLoader worker processes when asked
(``--workers N``), so the next images are decoded while the model works on these.

Each file becomes one record (a plain dict, what a DataLoader passes between processes): its
row, the resized pixels as uint8 (the model's normalisation runs on its device, so only bytes
travel), the original size, and the reason when it could not be read. A worker never raises for
a bad file: that file's row gets the reason and the run goes on.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..core.preprocess import Preprocessing
from ..images import fit_within, load_image

# Overlay pictures are drawn at most this many pixels on their long side.
OVERLAY_LONG_SIDE = 1024


@dataclass(frozen=True)
class Decoding:
    """What is done to every file (picklable: it travels to the worker processes).

    Attributes:
        preprocessing: the model's.
        crop: the centre crop of the standard evaluation transform instead of the whole image.
        square: the whole image resized to the native square (features kept as whole maps,
            which must all have one shape).
        overlay: also keep a picture of at most ``OVERLAY_LONG_SIDE`` pixels to draw on.
        size_step: the long side is rounded to a multiple of this many pixels (1: each image
            at its own aspect ratio), so photos of nearly the same shape are fed at one size
            and share batches; the aspect ratio then changes by at most ``size_step / 2``
            pixels over the long side (at most ``size_step / (2 * size)``: 3.6% for 16 px at
            224).
    """

    preprocessing: Preprocessing
    crop: bool = False
    square: bool = False
    overlay: bool = False
    size_step: int = 1

    @functools.cached_property
    def fed(self) -> Preprocessing:
        """The preprocessing the model is fed with (worked out once, not per file)."""
        prep = self.preprocessing
        if self.square and not self.crop:
            return dataclasses.replace(prep, fixed=True)
        if self.size_step > 1 and not prep.fixed:
            return dataclasses.replace(prep, multiple=math.lcm(prep.multiple, self.size_step))
        return prep

    @functools.cached_property
    def shrink_to(self) -> int:
        """The short side a large JPEG may be decoded down to: twice what the model is fed
        (so the resize still averages several pixels into one), and the overlay's size."""
        needed = 2 * self.fed.size / (self.fed.crop_fraction if self.crop else 1.0)
        if self.overlay:
            needed = max(needed, OVERLAY_LONG_SIDE)  # the overlay picture keeps its size too
        return math.ceil(needed)


def decode(row: int, path: str, decoding: Decoding) -> dict:
    """One file's record: ``row``, ``path``, ``pixels`` ((h, w, 3) uint8 or None), ``width``,
    ``height``, ``picture`` (uint8 or None) and ``error`` ("" when it was read)."""
    record = {"row": row, "path": path, "pixels": None, "picture": None, "error": ""}
    record.update(width=0, height=0)
    try:
        # a large JPEG is decoded at a reduced scale (a 12 MP photo several times faster);
        # the table keeps the file's own size
        image = load_image(path, shrink_to=decoding.shrink_to)
        width, height = image.info.get("full_size", image.size)
        record.update(width=width, height=height)
        record["pixels"] = decoding.fed.resized(image, crop=decoding.crop)
        if decoding.overlay:
            record["picture"] = np.array(fit_within(image, OVERLAY_LONG_SIDE))
    except Exception as exc:  # any failure of one file (PIL raises many kinds) is its row's
        record["error"] = str(exc) or type(exc).__name__
    return record


def decoded(
    files: Sequence[tuple[int, str]], decoding: Decoding, workers: int = 0
) -> Iterator[dict]:
    """The records of ``files`` ((row, path) pairs), in their order; decoded in ``workers``
    background processes (0: here, one at a time)."""
    if workers <= 0 or not files:
        for row, path in files:
            yield decode(row, path, decoding)
        return
    loader = torch.utils.data.DataLoader(
        _Files(files, decoding),
        batch_size=None,  # one record at a time: the run groups them by size itself
        num_workers=int(workers),
        prefetch_factor=4,
    )
    for record in loader:
        # the loader hands numpy arrays back as tensors (shared memory): numpy again
        for key in ("pixels", "picture"):
            if isinstance(record[key], torch.Tensor):
                record[key] = record[key].numpy()
        yield record


class _Files(torch.utils.data.Dataset):
    def __init__(self, files: Sequence[tuple[int, str]], decoding: Decoding) -> None:
        self.files = list(files)
        self.decoding = decoding

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> dict:
        row, path = self.files[index]
        return decode(row, path, self.decoding)
