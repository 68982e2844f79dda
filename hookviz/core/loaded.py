"""The one type every analysis takes: a model ready for hooks (eval mode, frozen, on its device,
with its own lock). Model sources (``hookviz.models``) build it; the core only reads it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn

from ..errors import ModelError
from .fair_lock import FairLock
from .grids import TokenLayout
from .preprocess import Preprocessing

# The name torchvision's COCO weights give the category ids that no COCO category has.
UNUSED_CATEGORY = "N/A"

Source = Literal["bundled", "torchvision", "timm", "hf", "clip", "checkpoint", "card", "custom"]
# What a model's output is, and so which targets explain it (``hookviz.targets``).
Task = Literal["classification", "detection", "segmentation", "embedding", "zero-shot"]
TASKS: tuple[Task, ...] = ("classification", "detection", "segmentation", "embedding", "zero-shot")


@dataclass(eq=False)
class LoadedModel:
    """A model ready for analysis: in eval mode, frozen, on its device, with its own lock.

    Attributes:
        name: registry name (``"resnet50"``, ``"efficientnet_lite0"``) or a custom label.
        model: the ``nn.Module``; never mutated after loading.
        preprocessing: how images become input tensors.
        categories: class names, index-aligned with the logits (a detector's or segmenter's
            category names, index-aligned with its labels; empty for an embedder).
        device: where the model lives.
        pretrained: whether real trained weights are loaded (False: random initialisation).
        source: ``"bundled"``, ``"torchvision"``, ``"timm"``, ``"checkpoint"`` (the user's own
            weights), ``"card"`` (a model card of ``HOOKVIZ_MODELS_DIR``) or ``"custom"``
            (``wrap_model``).
        lock: held by every analysis from registering its hooks to removing them, because module
            hooks fire for every caller of a shared model; callers are let in first come,
            first served (``FairLock``), and long jobs take it once per slice.
        memo: derived data computed once per model under ``lock`` (the traced layer table).
        channels_last: the weights (and so every input) use the channels-last memory format,
            faster for convolutions on recent GPUs.
        loaded_from: where the weights came from, in words (for a checkpoint: the file, its
            format, the container and any prefix removed); empty for the built-in sources.
        tokens: for a vision transformer, how its token outputs become feature maps
            (``hookviz.core.grids.TokenLayout``); None for a CNN.
        task: what the output is: ``"classification"`` (class scores), ``"detection"`` (boxes,
            labels and scores per image, as torchvision's detectors return them),
            ``"segmentation"`` (per-pixel category scores), ``"embedding"`` (one vector per
            image) or ``"zero-shot"`` (scores of the labels a user typed).
    """

    name: str
    model: nn.Module
    preprocessing: Preprocessing
    categories: tuple[str, ...]
    device: torch.device
    pretrained: bool
    source: Source
    lock: FairLock = field(default_factory=FairLock, repr=False)
    memo: dict[str, Any] = field(default_factory=dict, repr=False)
    channels_last: bool = False
    loaded_from: str = ""
    tokens: TokenLayout | None = None
    task: Task = "classification"

    @property
    def num_classes(self) -> int:
        """Number of classes the model scores."""
        return len(self.categories)

    @property
    def scores_classes(self) -> bool:
        """Whether the output is one score per class (a classifier, or a zero-shot model over
        its labels): what ``predict`` and the class-based views need."""
        return self.task in ("classification", "zero-shot")

    def class_name(self, index: int) -> str:
        """The name of class ``index`` (raises ``IndexError`` when out of range). An id its
        dataset leaves unused (torchvision's COCO weights name each "N/A") reads "unused class
        ``index``": a trained detector never answers one, but an untrained one often answers
        nothing else, and its boxes should say what they are rather than "N/A"."""
        name = self.categories[index]
        return f"unused class {index}" if name == UNUSED_CATEGORY else name

    def class_index(self, name: str) -> int:
        """The index of the class called ``name`` (exact match, case-insensitive).

        Raises:
            ModelError: no class has that name.
        """
        wanted = name.strip().lower()
        for index, category in enumerate(self.categories):
            if category.lower() == wanted:
                return index
        raise ModelError(f"no class named {name!r} in {self.name!r}")
