"""About how long the Methods page's jobs on request take, said on their buttons before they
start: from the times measured on this image's shared forward pass (``ForwardPass.method_cost``
for the CAM methods, the time of one batch of the input for the forward passes of the pixel
attributions), and from the pictures' own times."""

from __future__ import annotations

import math

import hookviz
from hookviz.core.methods import SCORECAM_BATCH

# The slow pixel attributions' passes with their default options (``hookviz.attribute``):
# integrated gradients' 50 path points (each a forward and a backward, counted as three
# forwards), RISE's 2000 masks; occlusion's windows are counted on the input.
_IG_STEPS = 50
_RISE_MASKS = 2000
_OCCLUSION_WINDOW, _OCCLUSION_STRIDE = 16, 8


def one_input_seconds(kept: hookviz.ForwardPass) -> float:
    """Seconds of one forward pass of the input when run in a batch (a batch of copies is
    timed the first time: ``ForwardPass.scorecam_cost``)."""
    batches, seconds = kept.scorecam_cost()
    return seconds / batches / min(SCORECAM_BATCH, kept.features.num_channels)


def slow_seconds(kept: hookviz.ForwardPass, method: str) -> float:
    """About how long ``method`` (a CAM method or a pixel attribution) takes on ``kept``'s
    image, beyond the shared forward pass for a CAM method."""
    if method in hookviz.METHODS:
        return kept.method_cost(method).seconds
    one = one_input_seconds(kept)
    height, width = kept.features.input_size
    if method == "integrated_gradients":
        return _IG_STEPS * 3 * one
    if method == "rise":
        return _RISE_MASKS * one
    if method == "occlusion":
        rows = math.ceil(max(height - _OCCLUSION_WINDOW, 0) / _OCCLUSION_STRIDE) + 1
        columns = math.ceil(max(width - _OCCLUSION_WINDOW, 0) / _OCCLUSION_STRIDE) + 1
        return rows * columns * one
    return 3 * one  # a forward and a backward


def scores_seconds(kept: hookviz.ForwardPass) -> float:
    """About how long one map's quick faithfulness scores take: a deletion and an insertion
    curve of 17 points each (``hookviz.trust_curves``), the image once and the image times
    the map, each input a forward pass (run in batches)."""
    return (2 * 17 + 2) * one_input_seconds(kept)


def sanity_seconds(forward: float, own: float, steps: int) -> float:
    """About how long the sanity check of one method takes: the trained model's map and one
    per step of the cascade, each a forward pass of its own plus the method's own time
    (``own``, measured on this page), and two more forward passes (the target, the order of
    the modules)."""
    return (steps + 1) * (forward + own) + 2 * forward


def duration(seconds: float) -> str:
    """Seconds in words: "under 1 s", "3.4 s", "41 s", "2.7 min"."""
    if seconds < 1:
        return "under 1 s"
    if seconds < 10:
        return f"{seconds:.1f} s"
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"
