"""The model's side of a run of a detector, a segmenter or an embedder: one chunk of decoded
records in, its table rows and arrays out, several rows per image where the image has several
things to explain.

Each image gets one hooked forward pass (``ForwardPass``) and then one backward pass per row:
a detector's boxes (``Box``), a segmenter's categories present (``Region`` of its predicted
pixels), an embedder's similarity to the reference (``Similarity``). What a row says is read from
that same forward pass as ``hookviz.detect``, ``hookviz.segment`` and ``hookviz.embed`` read it,
in the image's own pixels, so a row equals what the library gives for the image alone. (The
batched path of ``batches`` is for classifiers: a detector's output is a list of boxes per
image, not a score per class.)

A record that could not be read, or an image the model refuses, gets one row with the reason;
a row whose CAM fails (its score does not depend on the layer) keeps what it explains and gets
the reason, and the image's other rows go on.

With overlays asked for, each row with a CAM gets its picture (``store.task_overlay_name``):
the CAM over the image with what the row explains marked on it (the box, the category's
outline; an embedder's row has nothing to mark).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from .. import marks
from ..core.forward_pass import ForwardPass
from ..core.loaded import LoadedModel
from ..core.outputs import embeddings_of
from ..core.targets import Box, Region, Similarity, TargetContext
from ..core.tasks import detections, segmentation
from ..errors import HookvizError
from . import store
from .batches import Advance, write_overlay

Frame = tuple[float, float]
# The array of a row without a CAM (a failure, an image with no box): nothing, over the image.
_NO_CAM: tuple[np.ndarray, Frame] = (np.zeros((0, 0), np.float32), (1.0, 1.0))
# What a row's overlay marks on the picture (it draws on a copy and returns it), or None.
Mark = Callable[[Image.Image], Image.Image] | None


@dataclass(frozen=True)
class Explaining:
    """What a non-classifier run explains in each image.

    Attributes:
        layer: the hooked layer.
        method: the CAM method.
        min_score: a detector's boxes scored at least this.
        max_boxes: at most this many of them per image, the most confident.
        reference: an embedder's (D,) reference vector (the reference image's embedding).
        overlays: ``"none"``, ``"jpeg"`` or ``"png"``: each row's overlay picture, written
            into ``overlay_folder``.
        overlay_folder: where the overlays go.
    """

    layer: str
    method: str
    min_score: float = 0.5
    max_boxes: int = 20
    reference: torch.Tensor | None = None
    overlays: str = "none"
    overlay_folder: Path | None = None


def explain_rows(
    loaded: LoadedModel, records: list[dict], explaining: Explaining, advance: Advance
) -> tuple[list[dict], list[tuple[np.ndarray, Frame]]]:
    """The table rows of ``records`` (in order; an image's rows together, as the library
    lists them: most confident box first, largest category first) and each row's
    (coarse CAM, frame)."""
    columns = store.TASK_COLUMNS[loaded.task]
    rows: list[dict] = []
    arrays: list[tuple[np.ndarray, Frame]] = []
    for record in records:
        base = store.blank_row(Path(record["path"]), columns) | {"image": record["row"]}
        if record["width"]:
            base["width"], base["height"] = record["width"], record["height"]
        try:
            if record["error"]:
                raise _Unread(record["error"])
            found = _image_rows(loaded, record, explaining)
        except (_Unread, HookvizError, RuntimeError) as exc:  # RuntimeError: torch's own
            # the reason in this image's one row; the run goes on and no row moves
            rows.append(base | {"status": "error", "error": str(exc) or type(exc).__name__})
            arrays.append(_NO_CAM)
        else:
            for part, (values, array, mark) in enumerate(found):
                rows.append(base | values)
                arrays.append(array)
                if explaining.overlays != "none" and values["status"] == "ok":
                    _write_overlay(record, part, array, mark, explaining)
        advance(1)
    return rows, arrays


def _write_overlay(
    record: dict, part: int, array: tuple[np.ndarray, Frame], mark: Mark, explaining: Explaining
) -> None:
    """Row ``part`` of the image's overlay: its CAM over the image's picture, marked."""
    cam, frame = array
    name = store.task_overlay_name(int(record["row"]), part, explaining.overlays)
    target = explaining.overlay_folder / name
    write_overlay(target, record["picture"], cam, explaining.overlays, frame=frame, mark=mark)


class _Unread(Exception):
    """The record's file could not be read (its reason, from decoding)."""


def _image_rows(
    loaded: LoadedModel, record: dict, explaining: Explaining
) -> list[tuple[dict, tuple[np.ndarray, Frame], Mark]]:
    pixels = torch.from_numpy(record["pixels"][None]).to(loaded.device)
    # contiguous, as the library's own input of a PIL image is: the same memory format, the
    # same convolution kernels, the same last digits
    batch = loaded.preprocessing.normalise(pixels).contiguous()
    kept = ForwardPass(loaded, batch, explaining.layer)
    # The forward pass saw the resized pixels; the rows speak in the image's own (as
    # hookviz.detect and hookviz.segment do for the whole image).
    in_image = TargetContext(
        loaded, kept.output, (int(record["height"]), int(record["width"])), kept.context.input_size
    )
    if loaded.task == "detection":
        return _detection_rows(kept, in_image, explaining)
    if loaded.task == "segmentation":
        return _segmentation_rows(kept, in_image, explaining)
    return [(*_embedding_rows(kept, explaining), None)]


def _detection_rows(kept: ForwardPass, in_image: TargetContext, explaining: Explaining) -> list:
    found = detections(in_image, explaining.min_score)[: explaining.max_boxes]
    if not found:  # the image is done, and says so: a resumed run does not look again
        return [({"status": store.EMPTY, "error": ""}, _NO_CAM, None)]
    size = (in_image.image_size[1], in_image.image_size[0])  # (width, height), as marks takes
    rows = []
    for detection in found:
        # The box as the table gives it (in the image's pixels, written exactly: repr) is the
        # target, moved into the input's pixels as Box.resolve moves it: the row's CAM is then
        # bit for bit hookviz.grad_cam(image, target=Box(row's box, label)). (It matters: at a
        # box's own detection the IoU is at its maximum, and a last-digit difference changes
        # the IoU's gradient, which an untrained detector's tiny score gradient cannot hide.)
        target = Box(in_image.box_to_input(detection.box), detection.label)
        values = dict(zip(("x0", "y0", "x1", "y1"), map(repr, detection.box), strict=True))
        values |= {
            "label": detection.label,
            "name": detection.name,
            "score": _number(detection.score),
        }
        mark = partial(marks.draw_boxes, detections=[detection], size=size)
        rows.append((*_explained(kept, target, values, explaining), mark))
    return rows


def _segmentation_rows(kept: ForwardPass, in_image: TargetContext, explaining: Explaining) -> list:
    rows = []
    found = segmentation(in_image)
    for present in found.categories:
        values = {"category": present.index, "name": present.name, "share": _number(present.share)}
        explained = _explained(kept, Region(present.index), values, explaining, "probability")
        outline = [present.index]
        mark = partial(marks.draw_regions, mask=found.mask, categories=outline)
        rows.append((*explained, mark))
    return rows


def _embedding_rows(kept: ForwardPass, explaining: Explaining) -> tuple:
    reference = explaining.reference
    if reference is None:
        raise store.RunError("an embedding run needs a reference vector")
    vector = embeddings_of(kept.output)[0].float().cpu()
    similarity = float(F.cosine_similarity(vector[None], reference[None].float(), dim=1)[0])
    values = {"similarity": _number(similarity)}
    return _explained(kept, Similarity(reference), values, explaining)


def _explained(
    kept: ForwardPass,
    target: object,
    values: dict,
    explaining: Explaining,
    probability: str | None = None,
) -> tuple[dict, tuple[np.ndarray, Frame]]:
    """A row's values with its CAM (one backward pass), or with the reason it has none."""
    try:
        cam = kept.grad_cam(target, explaining.method)
    except (HookvizError, RuntimeError) as exc:
        return values | {"status": "error", "error": str(exc) or type(exc).__name__}, _NO_CAM
    if probability is not None:
        values = values | {probability: _number(cam.probability)}
    return values | {"status": "ok", "error": ""}, (cam.cam.astype(np.float32), cam.frame)


def _number(value: float) -> str:
    """As the classifier rows write theirs: 6 significant digits (float32 precision); NaN
    empty."""
    return "" if math.isnan(value) else f"{value:.6g}"
