"""What the view explains: a target, described by plain values, and the library's target it
stands for.

A target is the model's own choice for each image (``TOP1``: a classifier's top class, a
detector's most confident box, a segmenter's largest category), one class
(``ViewTarget.of_class(i)``), a detected box (``of_box``), a segmentation category over its
predicted pixels or a rectangle (``of_region``) or the similarity to a reference image
(``similar_to``). The view keeps, names in the address, caches by and writes into the
"Reproduce in Python" snippet a ``ViewTarget``, never a bare class index; ``library_target``
turns it into the library's target (``hookviz.targets``).

On the page's side a new kind of target is written here only: its kind and the tasks that
explain it, its fields' checks, its address text, its library target and how the "Reproduce in
Python" snippet writes that. (The sidebar's picker of it, and a page that draws it, come on top.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from hookviz import targets as library

TOP1_KIND = "top1"
CLASS_KIND = "class"
BOX_KIND = "box"
REGION_KIND = "region"
SIMILAR_KIND = "similar"
_KINDS = (TOP1_KIND, CLASS_KIND, BOX_KIND, REGION_KIND, SIMILAR_KIND)
# the targets each task can explain (TOP1: the model's own choice; an embedder has none)
TASK_KINDS = {
    "classification": (TOP1_KIND, CLASS_KIND),
    "zero-shot": (TOP1_KIND, CLASS_KIND),
    "detection": (TOP1_KIND, BOX_KIND),
    "segmentation": (TOP1_KIND, REGION_KIND),
    "embedding": (SIMILAR_KIND,),
}

Rectangle = tuple[float, float, float, float]
# How far apart two boxes' sides may be and still be the same box: a tenth of a pixel, the
# precision a box target keeps (``_rounded``) and so the precision of the address.
BOX_TOLERANCE = 0.1


class Found(Protocol):
    """A detection as the page lists it (``hookviz.Detection``): its label and its box."""

    label: int
    box: Rectangle


@dataclass(frozen=True)
class ViewTarget:
    """One thing to explain.

    Attributes:
        kind: ``"top1"``, ``"class"``, ``"box"``, ``"region"`` or ``"similar"``.
        index: the class index (``"class"``), the box's label (``"box"``) or the category
            (``"region"``).
        box: (x0, y0, x1, y1) in the image's pixels: the detected box, or the rectangle a
            region is limited to (None: the category's predicted pixels).
        reference: the reference image's content hash (``"similar"``).
    """

    kind: str = TOP1_KIND
    index: int | None = None
    box: Rectangle | None = None
    reference: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"unknown target kind {self.kind!r}")
        indexed = self.kind in (CLASS_KIND, BOX_KIND, REGION_KIND)
        if indexed and (not isinstance(self.index, int) or self.index < 0):
            raise ValueError(f"a {self.kind} target needs an index >= 0, got {self.index!r}")
        if not indexed and self.index is not None:
            raise ValueError(f"a {self.kind} target has no index, got {self.index!r}")
        if (self.kind == BOX_KIND) != (self.box is not None) and self.kind != REGION_KIND:
            raise ValueError(f"a box is what a box target has, got {self.box!r}")
        if self.box is not None and not (self.box[2] > self.box[0] and self.box[3] > self.box[1]):
            raise ValueError(f"a box is (x0, y0, x1, y1) with x1 > x0 and y1 > y0: {self.box}")
        if (self.kind == SIMILAR_KIND) != bool(self.reference):
            raise ValueError("a similarity target names its reference image, and only it")

    @classmethod
    def of_class(cls, index: int) -> ViewTarget:
        return cls(CLASS_KIND, int(index))

    @classmethod
    def of_box(cls, label: int, box: Rectangle) -> ViewTarget:
        return cls(BOX_KIND, int(label), _rounded(box))

    @classmethod
    def of_region(cls, category: int, rectangle: Rectangle | None = None) -> ViewTarget:
        return cls(REGION_KIND, int(category), None if rectangle is None else _rounded(rectangle))

    @classmethod
    def similar_to(cls, reference: str) -> ViewTarget:
        return cls(SIMILAR_KIND, reference=reference)

    @property
    def is_top1(self) -> bool:
        return self.kind == TOP1_KIND

    @property
    def class_index(self) -> int | None:
        """The class index of a class target, None for the others (the top-1 included)."""
        return self.index if self.kind == CLASS_KIND else None

    def text(self) -> str:
        """The address's text of this target (``parse`` reads it back): a class is its index,
        ``box:LABEL:X0,Y0,X1,Y1``, ``region:CATEGORY`` (``:X0,Y0,X1,Y1`` for a rectangle),
        ``similar:DIGEST``."""
        if self.kind == TOP1_KIND:
            return TOP1_KIND
        if self.kind == CLASS_KIND:
            return str(self.index)
        if self.kind == SIMILAR_KIND:
            return f"{SIMILAR_KIND}:{self.reference}"
        parts = [self.kind, str(self.index)]
        if self.box is not None:
            parts.append(",".join(f"{value:g}" for value in self.box))
        return ":".join(parts)

    @classmethod
    def parse(cls, text: str) -> ViewTarget:
        """A target from the address (ValueError when the text names none)."""
        if text == TOP1_KIND:
            return TOP1
        kind, _, rest = text.partition(":")
        if kind == SIMILAR_KIND:
            return cls.similar_to(rest)
        if kind in (BOX_KIND, REGION_KIND):
            index, _, box = rest.partition(":")
            rectangle = tuple(float(v) for v in box.split(",")) if box else None
            if rectangle is not None and len(rectangle) != 4:
                raise ValueError(f"a box has four numbers, got {box!r}")
            if kind == BOX_KIND:
                if rectangle is None:
                    raise ValueError("a box target names its box")
                return cls.of_box(int(index), rectangle)  # type: ignore[arg-type]
            return cls.of_region(int(index), rectangle)  # type: ignore[arg-type]
        return cls.of_class(int(text))


TOP1 = ViewTarget()


def within(target: ViewTarget, num_classes: int, task: str = "classification") -> bool:
    """Whether ``target`` can be explained by a model of ``task`` with ``num_classes``
    classes (or categories)."""
    if target.kind not in TASK_KINDS.get(task, ()):
        return False
    return target.index is None or target.index < num_classes


def same_box(first: Iterable[float], second: Iterable[float]) -> bool:
    """Whether two (x0, y0, x1, y1) boxes are the same to ``BOX_TOLERANCE``: a detection and
    the box a target kept of it (rounded), or a CAM's box."""
    return all(abs(a - b) <= BOX_TOLERANCE for a, b in zip(first, second, strict=True))


def box_targets(listed: Iterable[Found]) -> list[ViewTarget]:
    """The targets of a detector's listed boxes, in their order (most confident first): the
    first is ``TOP1``, the detector's own choice, which the library's default target is (its
    most confident box with an area, as the page lists first), the others ``of_box``."""
    return [
        TOP1 if rank == 0 else ViewTarget.of_box(found.label, found.box)
        for rank, found in enumerate(listed)
    ]


def library_target(
    target: ViewTarget,
    image_size: Callable[[], tuple[int, int]],
    embedding_of: Callable[[str], object],
) -> object:
    """The library's target for ``target`` (``hookviz.targets``): None for the model's own
    choice, a class index, a ``Box``, a ``Region`` (a rectangle as its mask) or a
    ``Similarity`` to the reference image's embedding.

    Args:
        target: the view's target.
        image_size: the (width, height) of the image explained; asked for a rectangle only.
        embedding_of: a reference image's embedding by its content hash; asked for a
            similarity only.
    """
    if target.kind == TOP1_KIND:
        return None
    if target.kind == CLASS_KIND:
        return target.index
    if target.kind == BOX_KIND:
        return library.Box(target.box, target.index)
    if target.kind == REGION_KIND:
        mask = None if target.box is None else _rectangle_mask(target.box, image_size())
        return library.Region(target.index, mask)
    return library.Similarity(embedding_of(target.reference))


def snippet_code(target: ViewTarget) -> str | None:
    """``library_target`` as the "Reproduce in Python" snippet writes it: an expression over
    ``hookviz.targets`` (``mask`` and ``reference`` are names the snippet sets up), or None for
    the top-1 and a class, which the snippet passes as ``target=`` (None or the index)."""
    # (numbers made numbers: the expression is pasted into the snippet as it is)
    if target.kind == BOX_KIND:
        return f"Box({tuple(float(v) for v in target.box)!r}, {int(target.index)})"
    if target.kind == REGION_KIND:
        mask = "" if target.box is None else ", mask=mask"
        return f"Region({int(target.index)}{mask})"
    if target.kind == SIMILAR_KIND:
        return "Similarity(reference)"
    return None


def _rectangle_mask(box: Rectangle, size: tuple[int, int]) -> np.ndarray:
    """A region's rectangle as a (height, width) mask of the image (the library takes masks)."""
    width, height = size
    x0, y0, x1, y1 = (max(0, round(value)) for value in box)
    mask = np.zeros((height, width), dtype=bool)
    mask[y0:y1, x0:x1] = True
    return mask


def _rounded(box: Rectangle) -> Rectangle:
    # to BOX_TOLERANCE: the address stays short, and the box still matches its detection
    x0, y0, x1, y1 = (round(float(value), 1) for value in box)
    return (x0, y0, x1, y1)
