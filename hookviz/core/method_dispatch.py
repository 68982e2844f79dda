"""Which function makes a CAM method's map on a kept forward pass (``ForwardPass``).

Every method is a function of what the kept pass gives it, its ``Probe`` (``probe.py``): the
layer's activations, the target's gradient there (one backward pass, shared by the gradient
methods), and the model for the methods that run more passes. ``raw_map`` picks the function
by the method's kind, the first that applies:

===============  ==============================  ============================================
kind             methods                         map
===============  ==============================  ============================================
gradient         ``NEEDS_GRADIENT``              ``METHODS[method](activations, gradient)``
masked inputs    ``scorecam``                    the masked inputs' scores (``score_weights``)
head weights     ``cam``                         the classifier head's weights for the class
more passes      ``PASS_METHODS``                ``PASS_METHODS[method][0](probe)``
baseline         ``BASELINE_MAPS``               a map of the input alone
activations      the rest (Eigen-CAM, ...)       ``METHODS[method](activations, None)``
===============  ==============================  ============================================
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .baseline_maps import BASELINE_MAPS
from .cam import upsample_and_scale, weighted_sum
from .methods import (
    METHODS,
    NEEDS_GRADIENT,
    CancelledError,
    MethodError,
    head_weights,
    score_weights,
)
from .pass_methods import PASS_METHODS
from .probe import Probe
from .smoothing import AUGMENTATIONS, smoothed
from .targets import Class, Resolved

RawMap = tuple[torch.Tensor, torch.Tensor | None]


def raw_map(method: str, probe: Probe, resolved: Resolved) -> RawMap:
    """``method``'s map of ``resolved`` before ReLU, (1, h, w) (or (1, H, W) on the input's
    grid), and its channel weights (1, C) or None; ``eigen_smooth`` applied when
    ``probe.options`` asks for it."""
    gradient = None
    if method in NEEDS_GRADIENT:
        # (kept for eigen_smooth too, which smooths what the gradient weighted)
        gradient = probe.gradient()
        raw, weights = METHODS[method](probe.activations, gradient)
    else:
        raw, weights = _map_maker(method)(method, probe, resolved)
    if probe.options["eigen_smooth"]:
        raw = smoothed(method, probe.activations, gradient, weights, raw)
    return raw, weights


def augmented_map(
    inputs: torch.Tensor,
    progress: Callable[[int, int], bool | None] | None,
    raw_of: Callable[[torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """``aug_smooth``: (H, W) on the grid of ``inputs`` (1, 3, H, W), the mean of the method's
    maps over ``AUGMENTATIONS``; ``raw_of`` makes the map before ReLU (1, h, w) of each changed
    copy of the input, which is upsampled to the input's grid, scaled to [0, 1] and flipped
    back (as pytorch-grad-cam's ``forward_augmentation_smoothing``)."""
    size = (int(inputs.shape[2]), int(inputs.shape[3]))
    maps = []
    for step, (flip, factor) in enumerate(AUGMENTATIONS):
        if progress is not None and progress(step, len(AUGMENTATIONS)):
            raise CancelledError("aug_smooth was cancelled")
        changed = inputs * factor
        raw = raw_of(changed.flip(-1) if flip else changed)
        cam = upsample_and_scale(torch.relu(raw), size)[0]
        maps.append(cam.flip(-1) if flip else cam)
    return torch.stack(maps).mean(dim=0)


def _map_maker(method: str) -> Callable[[str, Probe, Resolved], RawMap]:
    """The function that makes the map of a method that needs no gradient of its own."""
    if method == "scorecam":
        return _masked_inputs_map
    if method == "cam":
        return _head_weights_map
    if method in PASS_METHODS:
        return _more_passes_map
    if method in BASELINE_MAPS:
        return _baseline_map
    return _activations_map


def _masked_inputs_map(method: str, probe: Probe, resolved: Resolved) -> RawMap:
    """Score-CAM: each channel masks the input; the target's scores weigh the channels."""

    def scored(inputs: torch.Tensor) -> torch.Tensor:
        # The model's lock for one batch only: the analyses other callers asked for
        # meanwhile run between two batches.
        with probe.loaded.lock, torch.no_grad():
            return probe.score(probe.loaded.model(inputs))

    weights = score_weights(scored, probe.inputs, probe.activations[0], progress=probe.progress)
    weights = weights[None]
    return weighted_sum(probe.activations, weights), weights


def _head_weights_map(method: str, probe: Probe, resolved: Resolved) -> RawMap:
    """CAM: the activations weighted by the head's weights for the class
    (``head_weights``)."""
    if probe.logits is None or not isinstance(resolved.target, Class):
        raise MethodError(
            f"CAM explains a classifier's class; {resolved.name!r} is not one (use "
            "'gradcam', which explains any target)"
        )
    weights = head_weights(
        probe.loaded.model,
        probe.activations,
        probe.logits,
        torch.tensor([resolved.index]),
        probe.layer,
    )
    return weighted_sum(probe.activations, weights), weights


def _more_passes_map(method: str, probe: Probe, resolved: Resolved) -> RawMap:
    """A method of ``pass_methods.py``: it runs the passes it needs through the probe."""
    return PASS_METHODS[method][0](probe)


def _baseline_map(method: str, probe: Probe, resolved: Resolved) -> RawMap:
    """A baseline: a map of the input alone, with its own options."""
    function, defaults = BASELINE_MAPS[method]
    return function(probe.inputs, **{k: probe.options[k] for k in defaults})[None], None


def _activations_map(method: str, probe: Probe, resolved: Resolved) -> RawMap:
    """A method of the activations alone (Eigen-CAM, KPCA-CAM, FEM, Random-CAM)."""
    return METHODS[method](probe.activations, None)
