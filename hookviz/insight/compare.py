"""Two models on one image: each with its own layer and class, the class matched by name where
both have it, and the difference of the two heatmaps when they explain the same class.

This is the check for "did fine-tuning change what my model looks at?": the ImageNet model and
the fine-tuned one share an architecture but not their classes, so a class is matched by its
name, never by its index. Each heatmap keeps its own normalisation (each CAM is scaled to [0, 1]
on its own): the difference shows where the two models look, not how strongly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.forward_pass import Analysis, ForwardPass
from ..core.inputs import ImageInput
from ..core.loaded import LoadedModel
from ..core.methods import CLASSLESS


@dataclass(frozen=True)
class Comparison:
    """The two analyses and what they share.

    Attributes:
        first: the first model's analysis.
        second: the second model's analysis.
        shared_class: the class name both explain (matched case-insensitively), or None when
            they explain different classes.
        matched: whether the second model's class was chosen by matching the first's name
            (False: given, or the second's own top-1 because it has no such class).
        difference: ``first`` minus ``second`` heatmap on the image's pixel grid, in [-1, 1]
            (positive: where only the first model looks), or None without a shared class.
        correlation: Pearson r of the two heatmaps' pixels (1: they look at the same places),
            or None without a shared class.
    """

    first: Analysis
    second: Analysis
    shared_class: str | None
    matched: bool
    difference: np.ndarray | None
    correlation: float | None = None


def class_named(loaded: LoadedModel, name: str) -> int | None:
    """The index of the class called ``name`` in ``loaded`` (case and spaces ignored), or None."""
    wanted = name.strip().lower()
    for index, category in enumerate(loaded.categories):
        if category.strip().lower() == wanted:
            return index
    return None


def heatmap_correlation(first: np.ndarray, second: np.ndarray) -> float:
    """Pearson r of two heatmaps' pixels (0 when either is flat: no pattern to agree on)."""
    a = first.astype(np.float64).ravel()
    b = second.astype(np.float64).ravel()
    a, b = a - a.mean(), b - b.mean()
    norm = float(np.sqrt((a * a).sum() * (b * b).sum()))
    return float((a * b).sum() / norm) if norm > 0 else 0.0


def heatmap_difference(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """``first - second`` of two heatmaps of one image (each in [0, 1]), as float32."""
    if first.shape != second.shape:
        raise ValueError(f"heatmaps of different sizes: {first.shape} and {second.shape}")
    return (first.astype(np.float32) - second.astype(np.float32)).clip(-1.0, 1.0)


def compare(
    first: LoadedModel,
    second: LoadedModel,
    image: ImageInput,
    *,
    first_layer: str | None = None,
    second_layer: str | None = None,
    first_target: int | None = None,
    second_target: int | None = None,
    method: str = "gradcam",
) -> Comparison:
    """Analyse ``image`` with both models and compare their heatmaps.

    Args:
        first: the first model (any model: zoo, timm, checkpoints).
        second: the second model.
        image: a PIL image (each model preprocesses it its own way).
        first_layer: the first model's layer (default: its default layer).
        second_layer: the second model's layer (default: its default layer).
        first_target: the first model's class (default: its top-1).
        second_target: the second model's class; by default the class of the same name as the
            first's, else the second's own top-1.
        method: the CAM method for both.
    """
    one = ForwardPass(first, image, first_layer)
    a = one.analysis(first_target, method)
    two = ForwardPass(second, image, second_layer)
    matched = False
    if second_target is None and a.cam.class_name is not None and method not in CLASSLESS:
        second_target = class_named(second, a.cam.class_name)
        matched = second_target is not None
    b = two.analysis(second_target, method)
    same = a.cam.class_name.strip().lower() == b.cam.class_name.strip().lower()
    if method in CLASSLESS or not same:
        return Comparison(a, b, None, matched, None)
    difference = heatmap_difference(a.cam.heatmap, b.cam.heatmap)
    correlation = heatmap_correlation(a.cam.heatmap, b.cam.heatmap)
    return Comparison(a, b, a.cam.class_name, matched, difference, correlation)
