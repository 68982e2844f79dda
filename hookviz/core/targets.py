"""Targets: what a CAM explains. A target turns the model's output into one score per image, and
the gradient of that score is what every gradient method weighs.

``Class`` is a classifier's class (what an integer target means); ``Box`` a detected object;
``Region`` a segmentation category over its predicted pixels or a mask; ``Similarity`` the cosine
similarity of an embedding to a reference's; ``Text`` a zero-shot model's label. The scores are
those of pytorch-grad-cam's ``ClassifierOutputTarget``, ``FasterRCNNBoxScoreTarget``,
``SemanticSegmentationTarget`` and ``SimilarityToConceptTarget``, so the same layer gives the same
map. Any callable taking the model's output (the whole batch's) and returning one score per
image is a target too.

Before a CAM is computed, a target is *resolved* against the forward pass it explains
(``resolve_target``): its coordinates moved from the image's pixels into the model input's, a
region's mask fixed from the clean prediction (so Score-CAM's masked inputs are scored on the
same pixels), a reference image embedded, a name looked up; a target that cannot apply (a box
no detection overlaps, a category with no pixel) is refused there with a message that says why.
"""

from __future__ import annotations

import hashlib
import math
import numbers
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from ..errors import ModelError, TargetError
from .inputs import extract_logits, prepare_input
from .loaded import LoadedModel
from .outputs import detections_of, embeddings_of, segmentation_scores

Score = Callable[[Any], torch.Tensor]

# What to use instead of a class, by task (for the message when a class cannot apply).
_TARGET_HINT = {
    "detection": "a hookviz.targets.Box(box, label) (hookviz.detect lists the boxes)",
    "segmentation": "a hookviz.targets.Region(category) (hookviz.segment lists the categories)",
    "embedding": "a hookviz.targets.Similarity(reference image or vector)",
}


@dataclass(frozen=True)
class TargetContext:
    """The forward pass a target is resolved against.

    Attributes:
        loaded: the model.
        output: the model's output for the image, detached.
        image_size: (H, W) of the image (the pixels targets and results speak in).
        input_size: (h, w) of the model's input.
    """

    loaded: LoadedModel
    output: Any
    image_size: tuple[int, int]
    input_size: tuple[int, int]

    def box_to_input(self, box: tuple[float, ...]) -> tuple[float, float, float, float]:
        """A box in the image's pixels, in the input's."""
        sx, sy = self._scale()
        return (box[0] * sx, box[1] * sy, box[2] * sx, box[3] * sy)

    def box_to_image(self, box: tuple[float, ...]) -> tuple[float, float, float, float]:
        """A box in the input's pixels, in the image's."""
        sx, sy = self._scale()
        return (box[0] / sx, box[1] / sy, box[2] / sx, box[3] / sy)

    def _scale(self) -> tuple[float, float]:
        return (
            self.input_size[1] / self.image_size[1],
            self.input_size[0] / self.image_size[0],
        )


@dataclass(frozen=True, eq=False)
class Resolved:
    """A target ready to score outputs of this forward pass.

    Attributes:
        score: output -> (N,) scores, differentiable.
        key: what identifies it among the results a forward pass remembers.
        index: the class, label or category it concerns (-1 for none).
        name: that index's name, or the target in words.
        probability: the model's confidence in it where it has one (a class's softmax
            probability, a detection's score, a region's mean probability over its pixels);
            NaN where it has none (a similarity, a callable).
        target: the target as resolved (a box in the image's pixels, a label as its index).
    """

    score: Score
    key: Hashable
    index: int
    name: str
    probability: float
    target: Any


@dataclass(frozen=True)
class Class:
    """A classifier's class ``index``: its logit (``ClassifierOutputTarget``)."""

    index: int

    def __post_init__(self) -> None:
        if isinstance(self.index, bool) or not isinstance(self.index, numbers.Integral):
            raise TargetError(
                f"target must be a class index (int), got {type(self.index).__name__}"
            )
        object.__setattr__(self, "index", int(self.index))

    def __call__(self, output: Any) -> torch.Tensor:
        return extract_logits(output)[:, self.index]

    def resolve_index(self, loaded: LoadedModel) -> None:
        """Refuse a model without classes, or an index out of its range."""
        if not loaded.scores_classes:
            raise TargetError(
                f"{loaded.name!r} is a {loaded.task} model: a class index does not apply; give "
                f"{_TARGET_HINT.get(loaded.task, 'a target from hookviz.targets')}"
            )
        if not 0 <= self.index < loaded.num_classes:
            raise TargetError(
                f"target {self.index} is out of range: {loaded.name!r} has classes 0 to "
                f"{loaded.num_classes - 1}"
            )

    def resolve(self, context: TargetContext) -> Resolved:
        loaded = context.loaded
        self.resolve_index(loaded)
        logits = extract_logits(context.output)
        probability = float(torch.softmax(logits[0].float(), 0)[self.index])
        name = loaded.class_name(self.index)
        return Resolved(self, ("class", self.index), self.index, name, probability, self)


@dataclass(frozen=True)
class Box:
    """A detected object: ``box`` as (x0, y0, x1, y1) in the image's pixels and its ``label``
    (index or category name). Scored as ``FasterRCNNBoxScoreTarget``: the detection of the same
    label that overlaps the box most, if by more than ``iou_threshold``, gives its IoU plus its
    score."""

    box: tuple[float, float, float, float]
    label: int | str
    iou_threshold: float = 0.5

    def __post_init__(self) -> None:
        values = self.box.tolist() if hasattr(self.box, "tolist") else self.box
        try:
            coords = tuple(float(value) for value in values)
        except (TypeError, ValueError):
            coords = ()
        if len(coords) != 4 or not (coords[2] > coords[0] and coords[3] > coords[1]):
            raise TargetError(
                f"a box is (x0, y0, x1, y1) with x1 > x0 and y1 > y0, got {self.box!r}"
            )
        object.__setattr__(self, "box", coords)
        if isinstance(self.label, bool) or not isinstance(self.label, (numbers.Integral, str)):
            raise TargetError(f"a box's label is an index or a name, got {self.label!r}")
        if isinstance(self.label, numbers.Integral):
            object.__setattr__(self, "label", int(self.label))

    def __call__(self, output: Any) -> torch.Tensor:
        if not isinstance(self.label, int):
            raise TargetError(f"the label {self.label!r} is a name: resolve_target looks it up")
        totals = []
        for found in detections_of(output):
            boxes = found["boxes"]
            total = boxes.new_zeros(())
            matched = _best_match(self.box, self.label, found, self.iou_threshold)
            if matched is not None:
                index, iou = matched
                total = total + iou + found["scores"][index]
            totals.append(total)
        return torch.stack(totals)

    def resolve(self, context: TargetContext) -> Resolved:
        loaded = context.loaded
        _require(loaded, "detection", "Box")
        label = _category_index(loaded, self.label, "label")
        in_input = Box(context.box_to_input(self.box), label, self.iou_threshold)
        found = detections_of(context.output)[0]
        matched = _best_match(in_input.box, label, found, self.iou_threshold)
        name = loaded.class_name(label)
        if matched is None:
            raise TargetError(
                f"no detected {name!r} overlaps the box {_rounded(self.box)} by an IoU over "
                f"{self.iou_threshold}, so its score is zero and its CAM would be blank "
                "(hookviz.detect lists what the model found)"
            )
        key = ("box", _rounded(self.box), label, self.iou_threshold)
        probability = float(found["scores"][matched[0]])
        resolved = Box(self.box, label, self.iou_threshold)
        return Resolved(in_input, key, label, name, probability, resolved)


@dataclass(frozen=True, eq=False)
class Region:
    """A segmentation ``category`` (index or name) over ``mask``: its per-pixel scores summed
    over the mask (``SemanticSegmentationTarget``). ``mask`` is (H, W), boolean or 0-1, at the
    image's pixels (or the output's); None: the pixels predicted as the category."""

    category: int | str
    mask: Any = None

    def __call__(self, output: Any) -> torch.Tensor:
        if not isinstance(self.category, int):
            raise TargetError(f"the category {self.category!r} is a name: resolve it first")
        scores = segmentation_scores(output)
        if self.mask is None:
            mask = (scores.detach().argmax(dim=1) == self.category).to(scores.dtype)
        else:
            mask = _mask_tensor(self.mask, tuple(scores.shape[-2:])).to(scores)
        return (scores[:, self.category] * mask).sum(dim=(-2, -1))

    def resolve(self, context: TargetContext) -> Resolved:
        loaded = context.loaded
        _require(loaded, "segmentation", "Region")
        category = _category_index(loaded, self.category, "category")
        scores = segmentation_scores(context.output)[:1]
        name = loaded.class_name(category)
        size = tuple(scores.shape[-2:])
        if self.mask is None:
            mask = (scores.argmax(dim=1)[0] == category).float()
            if not bool(mask.any()):
                raise TargetError(f"no pixel is predicted as {name!r}: give a mask to explain it")
        else:
            if tuple(np.shape(self.mask)) not in (size, tuple(context.image_size)):
                raise TargetError(
                    f"the mask is {tuple(np.shape(self.mask))}; give it at the image's size "
                    f"{tuple(context.image_size)} (H, W)"
                )
            mask = _mask_tensor(self.mask, size).to(scores.device)
            if not bool(mask.any()):
                raise TargetError("the mask is empty: it selects no pixel")
        probabilities = torch.softmax(scores.float(), dim=1)[0, category]
        probability = float((probabilities * mask).sum() / mask.sum())
        digest = hashlib.sha1(mask.cpu().numpy().tobytes()).hexdigest()
        resolved = Region(category, self.mask)
        key = ("region", category, digest)
        return Resolved(Region(category, mask), key, category, name, probability, resolved)


@dataclass(frozen=True, eq=False)
class Similarity:
    """The cosine similarity of the image's embedding to ``reference``'s: a reference image
    (PIL, or a preprocessed (1, 3, H, W) tensor) or a (D,) vector
    (``SimilarityToConceptTarget``). Needs a model that outputs embeddings (``load_model(...,
    task="embedding")``)."""

    reference: Any

    def __call__(self, output: Any) -> torch.Tensor:
        vectors = embeddings_of(output)
        reference = _vector(self.reference).to(vectors)
        return F.cosine_similarity(vectors, reference[None], dim=1)

    def resolve(self, context: TargetContext) -> Resolved:
        loaded = context.loaded
        _require(loaded, "embedding", "Similarity")
        if isinstance(self.reference, Image.Image) or (
            isinstance(self.reference, torch.Tensor) and self.reference.dim() >= 3
        ):
            reference = embedding(loaded, self.reference)
        else:
            reference = _vector(self.reference)
        width = int(embeddings_of(context.output).shape[1])
        if reference.numel() != width:
            raise TargetError(
                f"the reference has {reference.numel()} values; {loaded.name!r} embeds "
                f"images in {width}"
            )
        digest = hashlib.sha1(reference.float().cpu().numpy().tobytes()).hexdigest()
        target = Similarity(reference.cpu())
        return Resolved(target, ("similarity", digest), -1, "similarity", math.nan, target)


@dataclass(frozen=True)
class Text:
    """A zero-shot model's label ``prompt``: its score among the labels the model was given."""

    prompt: str

    def __call__(self, output: Any) -> torch.Tensor:
        raise TargetError("a Text target is scored through its model: use resolve_target")

    def resolve(self, context: TargetContext) -> Resolved:
        loaded = context.loaded
        if loaded.task != "zero-shot":
            raise TargetError(
                f"a Text target needs a zero-shot (CLIP) model; {loaded.name!r} is a "
                f"{loaded.task} model"
            )
        try:
            index = loaded.class_index(self.prompt)
        except ModelError as exc:
            raise TargetError(
                f"{self.prompt!r} is not one of the model's labels: {', '.join(loaded.categories)}"
            ) from exc
        scored = Class(index).resolve(context)
        return Resolved(scored.score, scored.key, index, scored.name, scored.probability, self)


Target = Class | Box | Region | Similarity | Text


def resolve_target(context: TargetContext, target: object) -> Resolved:
    """``target`` (None: the model's own choice, see ``default_target``; an integer: a class;
    a target of this module; a callable) resolved against ``context``.

    Raises:
        TargetError: the target does not apply to this model or image (the message says why).
    """
    if target is None:
        target = default_target(context)
    if isinstance(target, numbers.Integral) and not isinstance(target, bool):
        target = Class(int(target))
    resolve = getattr(target, "resolve", None)
    if callable(resolve):
        return resolve(context)
    if callable(target):
        return _resolve_callable(context, target)
    raise TargetError(
        f"a target is a class index, a hookviz.targets target (Class, Box, Region, Similarity, "
        f"Text) or a callable scoring the model's output; got {type(target).__name__}"
    )


def default_target(context: TargetContext) -> Target:
    """What a CAM explains when not told: a classifier's top class, a detector's most
    confident detection, a segmenter's largest predicted category (other than the background
    where another is present). An embedder has no such choice (``TargetError``)."""
    loaded = context.loaded
    if loaded.scores_classes:
        return Class(int(extract_logits(context.output)[0].argmax()))
    if loaded.task == "detection":
        found = detections_of(context.output)[0]
        if len(found["scores"]) == 0:
            raise TargetError("the detector found nothing in this image: no box to explain")
        boxes = found["boxes"].detach()
        # (a box of no area, as an untrained detector may output, has nothing to explain)
        real = [i for i in ranked(found["scores"]) if has_area(boxes[i].tolist())]
        if not real:
            raise TargetError("the detector found no box with an area in this image")
        box = context.box_to_image(tuple(boxes[real[0]].tolist()))
        return Box(box, int(found["labels"][real[0]]))
    if loaded.task == "segmentation":
        predicted = segmentation_scores(context.output)[0].argmax(dim=0)
        counts = torch.bincount(predicted.flatten().cpu(), minlength=loaded.num_classes)
        if _is_background(loaded, 0) and int(counts[1:].sum()) > 0:
            counts[0] = 0
        return Region(int(counts.argmax()))
    raise TargetError(f"{loaded.name!r} is an embedder: give {_TARGET_HINT['embedding']}")


def ranked(scores: torch.Tensor) -> list[int]:
    """Detections' positions, most confident first; equal scores (an untrained detector's are
    all alike) in their order in the output, so every listing and the default agree."""
    return torch.argsort(scores.detach(), descending=True, stable=True).tolist()


def embedding(loaded: LoadedModel, image: Any) -> torch.Tensor:
    """The (D,) embedding of one image, on the CPU (no gradient)."""
    batch, _ = prepare_input(loaded, image)
    with loaded.lock, torch.no_grad():
        return embeddings_of(loaded.model(batch))[0].float().cpu()


def _resolve_callable(context: TargetContext, target: Callable[[Any], Any]) -> Resolved:
    def score(output: Any) -> torch.Tensor:
        value = target(output)
        if not isinstance(value, torch.Tensor):
            value = torch.as_tensor(value)
        return value.reshape(-1)

    value = score(context.output)
    if value.numel() != 1:
        raise TargetError(
            f"a target callable returns one score per image; for one image it returned "
            f"{value.numel()} values"
        )
    name = getattr(target, "__name__", type(target).__name__)
    return Resolved(score, ("callable", id(target)), -1, name, math.nan, target)


def _require(loaded: LoadedModel, task: str, kind: str) -> None:
    if loaded.task != task:
        article = "an" if task[0] in "aeiou" else "a"
        raise TargetError(
            f"a {kind} target needs {article} {task} model; {loaded.name!r} is a "
            f"{loaded.task} model"
        )


def _category_index(loaded: LoadedModel, value: int | str, what: str) -> int:
    if isinstance(value, str):
        try:
            return loaded.class_index(value)
        except ModelError as exc:
            raise TargetError(f"no {what} named {value!r} in {loaded.name!r}") from exc
    if not 0 <= value < loaded.num_classes:
        raise TargetError(
            f"{what} {value} is out of range: {loaded.name!r} has {what}s 0 to "
            f"{loaded.num_classes - 1}"
        )
    return value


def _best_match(
    box: tuple[float, ...], label: int, found: Any, threshold: float
) -> tuple[int, torch.Tensor] | None:
    """The index and IoU of the detection that overlaps ``box`` most, when it has ``label``
    and overlaps by more than ``threshold`` (as pytorch-grad-cam: the best overlap must be of
    the same label; a weaker one of that label does not count)."""
    boxes = found["boxes"]
    if len(boxes) == 0:
        return None
    ious = _iou(torch.tensor(box, dtype=boxes.dtype, device=boxes.device), boxes)
    index = int(ious.argmax())
    if float(ious[index].detach()) > threshold and int(found["labels"][index]) == label:
        return index, ious[index]
    return None


def _iou(box: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
    """The intersection over union of one (4,) box with each of (K, 4) boxes: (K,)."""
    top_left = torch.maximum(box[:2], boxes[:, :2])
    bottom_right = torch.minimum(box[2:], boxes[:, 2:])
    overlap = (bottom_right - top_left).clamp(min=0)
    inter = overlap[:, 0] * overlap[:, 1]
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    return inter / (area + areas - inter)


def _mask_tensor(mask: Any, size: tuple[int, ...]) -> torch.Tensor:
    """A (H, W) mask as a float tensor at ``size`` (nearest neighbour: a mask stays binary)."""
    tensor = torch.as_tensor(np.asarray(mask.cpu() if isinstance(mask, torch.Tensor) else mask))
    tensor = tensor.float()
    if tuple(tensor.shape) != tuple(size):
        tensor = F.interpolate(tensor[None, None], size=size, mode="nearest")[0, 0]
    return tensor


def _vector(value: Any) -> torch.Tensor:
    vector = torch.as_tensor(np.asarray(value.cpu() if isinstance(value, torch.Tensor) else value))
    if vector.dim() != 1:
        raise TargetError(
            f"a reference is an image or a (D,) vector, got shape {tuple(vector.shape)}"
        )
    return vector.float()


def _is_background(loaded: LoadedModel, index: int) -> bool:
    return index < loaded.num_classes and loaded.class_name(index).strip("_").lower() in (
        "background",
        "bg",
    )


# A box thinner than this on a side (pixels) has no area to explain: left out of the default
# target and of the page's lists (a tenth-of-a-pixel address still tells its sides apart).
MIN_SIDE = 0.5


def has_area(box: list[float] | tuple[float, ...]) -> bool:
    """Whether a detection's box can be a target: at least ``MIN_SIDE`` on each side."""
    return box[2] - box[0] >= MIN_SIDE and box[3] - box[1] >= MIN_SIDE


def _rounded(box: tuple[float, ...]) -> tuple[float, ...]:
    return tuple(round(value, 1) for value in box)
