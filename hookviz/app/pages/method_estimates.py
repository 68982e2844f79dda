"""About how long the Methods page's jobs on request take, said on their buttons before they
start: from the times measured on this image's shared forward pass (``ForwardPass.method_cost``
for the CAM methods, the time of one batch of the input for the forward passes of the pixel
attributions), and from the pictures' own times."""

from __future__ import annotations

import contextlib
import functools
import math
import time

import numpy as np

import hookviz
from hookviz.core.methods import SCORECAM_BATCH
from hookviz.insight.faithfulness import ROAD_IMPUTATIONS
from hookviz.insight.sanity import spearman, structural_similarity

# The slow pixel attributions' passes with their default options (``hookviz.attribute``):
# integrated gradients' 50 path points (each a forward and a backward, counted as three
# forwards), RISE's 2000 masks, SmoothGrad's 5 noisy copies; occlusion's windows are counted on
# the input.
_IG_STEPS = 50
_RISE_MASKS = 2000
_SMOOTHGRAD_SAMPLES = 5
_OCCLUSION_WINDOW, _OCCLUSION_STRIDE = 16, 8
_SANITY_SIDE = 224  # the sanity check compares maps at most this large (hookviz.insight.sanity)


def one_input_seconds(kept: hookviz.ForwardPass) -> float:
    """Seconds of one forward pass of the input when run in a batch (a batch of copies is
    timed the first time: ``ForwardPass.scorecam_cost``)."""
    batches, seconds = kept.scorecam_cost()
    return seconds / batches / min(SCORECAM_BATCH, kept.features.num_channels)


def slow_seconds(kept: hookviz.ForwardPass, method: str, **options: int) -> float:
    """About how long ``method`` (a CAM method or a pixel attribution) takes on ``kept``'s
    image, beyond the shared forward pass for a CAM method; ``options``: the method's, where
    they differ from the defaults (``steps``, ``masks``, ``window``, ``stride``)."""
    if method in hookviz.METHODS:
        return kept.method_cost(method, **options).seconds
    one = one_input_seconds(kept)
    height, width = kept.features.input_size
    if method == "integrated_gradients":
        return options.get("steps", _IG_STEPS) * 3 * one
    if method == "rise":
        return options.get("masks", _RISE_MASKS) * one
    if method == "smoothgrad":
        # the noisy copies' forward and backward in one batch, and the clean output once
        return (options.get("samples", _SMOOTHGRAD_SAMPLES) * 3 + 1) * one
    if method in hookviz.BASELINES:
        return 0.0  # a map of the image alone: no pass of the network (measured: 0.05-0.1 s)
    if method == "guided_gradcam":
        return 6 * one  # guided backprop's pass and the layer's Grad-CAM
    if method == "occlusion":
        # window and stride are in the image's pixels, the windows on the model input's grid
        # (``hookviz.attribute``): a window of 16 image pixels is 7 input pixels on a
        # 512-pixel-wide photo fed at 224, and there are 4x as many windows as at 16
        scale = width / kept.image_size[1]
        window = min(max(1, round(options.get("window", _OCCLUSION_WINDOW) * scale)), height, width)
        stride = max(1, round(options.get("stride", _OCCLUSION_STRIDE) * scale))
        rows = math.ceil((height - window) / stride) + 1
        columns = math.ceil((width - window) / stride) + 1
        return (rows * columns + 1) * one  # (and the image itself once)
    return 3 * one  # a forward and a backward


def scores_seconds(kept: hookviz.ForwardPass) -> float:
    """About how long one map's quick faithfulness scores take: a deletion and an insertion
    curve of 17 points each (``hookviz.trust_curves``), the image once and the image times
    the map, each input a forward pass (run in batches)."""
    return (2 * 17 + 2) * one_input_seconds(kept)


def road_seconds(kept: hookviz.ForwardPass, imputation: float) -> float:
    """About how long one map's ROAD scores take: ``ROAD_IMPUTATIONS`` imputations of
    ``imputation`` seconds each (``road_imputation_seconds``, timed on this input), the image
    once and each imputed input a forward pass (run in batches)."""
    return ROAD_IMPUTATIONS * imputation + (ROAD_IMPUTATIONS + 1) * one_input_seconds(kept)


def sanity_seconds(forward: float, own: float, steps: int) -> float:
    """About how long the sanity check of one method takes: the trained model's map and one
    per step of the cascade, each a forward pass of its own plus the method's own time
    (``own``, measured on this page); two more forward passes (the target, the order of the
    modules); the model's copy and its modules re-initialised (about two forward passes of
    Lite0, measured); and each step's map compared with the original (a rank correlation and
    an SSIM, about a forward pass of Lite0 here: ``comparison_seconds``)."""
    return (steps + 1) * (forward + own) + 4 * forward + steps * comparison_seconds()


@functools.cache
def comparison_seconds() -> float:
    """Seconds the sanity check takes to compare two maps (at most ``_SANITY_SIDE`` pixels on
    a side, as it compares them), timed once per process on two fixed maps of that size."""
    generator = np.random.default_rng(0)
    first, second = generator.random((2, _SANITY_SIDE, _SANITY_SIDE), dtype=np.float32)
    structural_similarity(first, second)  # untimed: the first call sets up its convolution
    started = time.perf_counter()
    spearman(first, second)
    structural_similarity(first, second)
    return time.perf_counter() - started


def duration(seconds: float) -> str:
    """Seconds in words: "under 1 s", "3.4 s", "41 s", "2.7 min"."""
    if seconds < 1:
        return "under 1 s"
    if seconds < 10:
        return f"{seconds:.1f} s"
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def methods_seconds(kept: hookviz.ForwardPass, methods: tuple[str, ...]) -> float:
    """About how long ``methods`` take one after another on ``kept``'s image (a method that
    does not apply here counts nothing: it only says why)."""
    total = 0.0
    for method in methods:
        with contextlib.suppress(hookviz.HookvizError):
            total += slow_seconds(kept, method)
    return total
