"""What a model that is not a classifier answers, in the image's own pixels: a detector's
detections (``detect``), a segmenter's per-pixel categories (``segment``) and an embedder's
vector (``embed``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from ..errors import ModelError
from .inputs import ImageInput, prepare_input
from .loaded import LoadedModel
from .outputs import detections_of, segmentation_scores
from .targets import Box, TargetContext, embedding, ranked


@dataclass(frozen=True)
class Detection:
    """One detected object.

    Attributes:
        box: (x0, y0, x1, y1) in the image's own pixels, whatever size the model resized it to.
        label: its category index.
        name: the category's name.
        score: the detector's confidence, in [0, 1].
    """

    box: tuple[float, float, float, float]
    label: int
    name: str
    score: float

    @property
    def target(self) -> Box:
        """This object as a CAM target."""
        return Box(self.box, self.label)


@dataclass(frozen=True)
class Present:
    """A category present in a segmentation: its ``index``, ``name`` and ``share`` of the
    image's pixels (0 to 1)."""

    index: int
    name: str
    share: float


@dataclass(frozen=True)
class Segmentation:
    """A segmenter's answer for one image.

    Attributes:
        mask: (H, W) category ids at the image's own size (the most probable per pixel).
        categories: the categories present, largest first.
    """

    mask: np.ndarray
    categories: tuple[Present, ...]


def detect(loaded: LoadedModel, image: ImageInput, min_score: float = 0.5) -> list[Detection]:
    """The objects a detector finds in ``image`` with a score of at least ``min_score``, most
    confident first, their boxes in the image's own pixels.

    Raises:
        ModelError: ``loaded`` is not a detector.
    """
    _require(loaded, "detection", "detect")
    return detections(_answered(loaded, image), min_score)


def detections(context: TargetContext, min_score: float = 0.0) -> list[Detection]:
    """The first image's detections in a forward pass's output (``ForwardPass.context``),
    scored at least ``min_score``, most confident first, in the image's pixels."""
    found = detections_of(context.output)[0]
    listed = []
    for index in ranked(found["scores"]):
        score = float(found["scores"][index])
        if score < min_score:
            break
        label = int(found["labels"][index])
        box = context.box_to_image(tuple(found["boxes"][index].detach().tolist()))
        listed.append(Detection(box, label, context.loaded.class_name(label), score))
    return listed


def segment(loaded: LoadedModel, image: ImageInput) -> Segmentation:
    """A segmenter's most probable category per pixel of ``image``, at the image's own size.

    Raises:
        ModelError: ``loaded`` is not a segmenter.
    """
    _require(loaded, "segmentation", "segment")
    return segmentation(_answered(loaded, image))


def segmentation(context: TargetContext) -> Segmentation:
    """The segmentation in a forward pass's output (``ForwardPass.context``)."""
    predicted = segmentation_scores(context.output)[0].detach().argmax(dim=0)
    mask = _resized_ids(predicted.cpu(), context.image_size)
    counts = np.bincount(mask.ravel(), minlength=context.loaded.num_classes)
    total = float(mask.size)
    present = [
        Present(int(index), context.loaded.class_name(int(index)), float(counts[index]) / total)
        for index in np.argsort(-counts, kind="stable")
        if counts[index] > 0
    ]
    return Segmentation(mask, tuple(present))


def embed(loaded: LoadedModel, image: ImageInput) -> torch.Tensor:
    """An embedder's (D,) vector for ``image``, float32 on the CPU (a model loaded with
    ``task="embedding"``, or wrapped as one).

    Raises:
        ModelError: ``loaded`` is not an embedder.
    """
    _require(loaded, "embedding", "embed")
    return embedding(loaded, image)


def _answered(loaded: LoadedModel, image: ImageInput) -> TargetContext:
    """One forward pass of ``image`` (no gradient), as what its answer is read from."""
    batch, size = prepare_input(loaded, image)
    with loaded.lock, torch.no_grad():
        output = loaded.model(batch)
    return TargetContext(loaded, output, size, (int(batch.shape[2]), int(batch.shape[3])))


def _resized_ids(ids: torch.Tensor, size: tuple[int, int]) -> np.ndarray:
    """(h, w) category ids at (H, W), nearest neighbour (ids are labels, never blended)."""
    if tuple(ids.shape) == tuple(size):
        return ids.numpy().astype(np.int64)
    if int(ids.max()) < 256:  # PIL resizes a byte picture fast, also at 40 megapixels
        picture = Image.fromarray(ids.numpy().astype(np.uint8))
        resized = picture.resize((size[1], size[0]), Image.Resampling.NEAREST)
        return np.asarray(resized).astype(np.int64)
    scaled = F.interpolate(ids[None, None].float(), size=size, mode="nearest")[0, 0]
    return scaled.long().numpy()


def _require(loaded: LoadedModel, task: str, call: str) -> None:
    if loaded.task != task:
        raise ModelError(
            f"hookviz.{call} needs a {task} model; {loaded.name!r} is a {loaded.task} model"
        )
