"""What the view explains: a target, described by plain values.

Today a target is the model's top prediction for each image (``TOP1``) or one class
(``Target.of_class(i)``). The view keeps, names in the address, caches by and writes into the
"Reproduce in Python" snippet a ``Target``, never a bare class index, so that a detected box,
a segmentation region, a reference image or a text prompt can be added as another ``kind``
(with its own ``text`` and ``parse``) without touching the state machine (``state``), the
caches (``cached``) or the pages' keys.
"""

from __future__ import annotations

from dataclasses import dataclass

TOP1_KIND = "top1"
CLASS_KIND = "class"


@dataclass(frozen=True)
class Target:
    """One thing to explain.

    Attributes:
        kind: ``"top1"`` (whatever the model predicts first for the image shown) or ``"class"``.
        index: the class index, for ``"class"``.
    """

    kind: str = TOP1_KIND
    index: int | None = None

    def __post_init__(self) -> None:
        if self.kind == CLASS_KIND and (not isinstance(self.index, int) or self.index < 0):
            raise ValueError(f"a class target needs a class index >= 0, got {self.index!r}")
        if self.kind == TOP1_KIND and self.index is not None:
            raise ValueError(f"the top-1 target has no index, got {self.index!r}")
        if self.kind not in (TOP1_KIND, CLASS_KIND):
            raise ValueError(f"unknown target kind {self.kind!r}")

    @classmethod
    def of_class(cls, index: int) -> Target:
        return cls(CLASS_KIND, int(index))

    @property
    def is_top1(self) -> bool:
        return self.kind == TOP1_KIND

    @property
    def class_index(self) -> int | None:
        """What the library takes as ``target``: the class index, or None for the top-1."""
        return self.index

    def text(self) -> str:
        """The address's text of this target (``parse`` reads it back): a class is its index."""
        return TOP1_KIND if self.is_top1 else str(self.index)

    @classmethod
    def parse(cls, text: str) -> Target:
        """A target from the address (ValueError when the text names none)."""
        if text == TOP1_KIND:
            return TOP1
        return cls.of_class(int(text))


TOP1 = Target()


def within(target: Target, num_classes: int) -> bool:
    """Whether ``target`` can be explained by a model of ``num_classes`` classes."""
    return target.is_top1 or (target.index is not None and target.index < num_classes)
