"""Pixel attributions: how much each input pixel counts for a target's score.

``attribute(loaded, image, method, target=None, **options)`` runs one method and returns an
``Attribution``: ``.raw`` (3, H, W), signed, on the image's pixel grid, and ``.map`` (H, W) in
[0, 1] for display. The methods and their options, with Captum's defaults so that the same
call gives Captum's numbers on the model's input:

- ``saliency``: the gradient's absolute value (Simonyan et al. 2014; Captum ``Saliency``,
  ``abs=True``).
- ``input_x_gradient``: input times gradient (Shrikumar et al. 2016; ``InputXGradient``).
- ``guided_backprop``, ``deconvolution``: the gradient with the ReLUs' backward changed
  (``relu_rules``; ``GuidedBackprop``, ``Deconvolution``).
- ``guided_gradcam``: guided backprop times the Grad-CAM of ``layer`` (default: the model's
  default layer) upsampled to the input by nearest neighbour (Selvaraju et al. 2017;
  ``GuidedGradCam``).
- ``integrated_gradients``: (x - baseline) times the gradient averaged along the straight path
  from ``baseline`` (default 0) to x, ``steps`` points (default 50) of Gauss-Legendre
  quadrature (Sundararajan et al. 2017; ``IntegratedGradients``); ``batch_size`` points per
  forward (default: all).
- ``smoothgrad``: another method (``base``, default ``saliency``) averaged over ``samples``
  (default 5) copies of the input with Gaussian noise of standard deviation ``stdev`` (default
  1.0, in the model input's units) added (Smilkov et al. 2017; ``NoiseTunnel``, ``smoothgrad``).
  The noise is drawn from a generator seeded with ``seed`` (default 0): the same every call.
- ``occlusion``, ``rise``: perturbation methods, in ``perturbation``.

The target is resolved as a CAM's is (``hookviz.targets``), so every target that explains a
CAM explains an attribution. The methods of one pass resolve it on that pass. The others run on
copies of the input, so a target that needs the clean output to resolve (the default top-1, a
box, a region) costs one more forward pass; a class given by the caller costs none, and the
clean score and probability the result reports are computed when first read
(``clean_score``). A tensor input is attributed on its own grid; a PIL image's
attribution is computed on the model's input and resized (bilinear) onto the image's pixels.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..core.baseline_maps import BASELINE_ALIASES
from ..core.inputs import ImageInput, prepare_input
from ..core.layers import default_layer
from ..core.loaded import LoadedModel
from ..core.methods import CancelledError
from ..core.outputs import detached
from ..core.pipeline import grad_cam
from ..core.targets import Class, Resolved, TargetContext, resolve_target
from ..errors import HookvizError
from .clean_score import CleanScore
from .relu_rules import relu_rule

# The share of the largest values a display map lets saturate: Captum's visualisation default
# (``outlier_perc=2``), so a few extreme pixels do not leave the rest dark.
OUTLIER_SHARE = 0.02


class AttributionError(HookvizError, ValueError):
    """Unknown attribution method, or an option it does not take."""


@dataclass(frozen=True)
class Attribution:
    """A pixel attribution.

    Attributes:
        method: the method's name (``"saliency"``, ``"integrated_gradients"``, ...).
        raw: (3, H, W) float32, signed, on the image's pixel grid.
        class_index: the target's class, label or category (-1 for one without).
        class_name: its name, or the target in words.
        size: (H, W) of the pixel grid.
        clean: where ``score`` and ``probability`` come from (a pass that ran, or one run
            when they are first read); never compared.
        options: the options the method ran with, defaults filled in.
        target: the target as resolved; never compared.
    """

    method: str
    raw: np.ndarray
    class_index: int
    class_name: str
    size: tuple[int, int]
    clean: CleanScore = field(repr=False, compare=False)
    options: dict[str, Any] = field(default_factory=dict)
    target: Any = field(default=None, repr=False, compare=False)

    @property
    def score(self) -> float:
        """The target's score on the unperturbed input. For a method that ran on copies of
        it with a class given, the first read of this or ``probability`` runs one forward
        pass (under the model's lock: read it outside an analysis)."""
        return self.clean.value()[0]

    @property
    def probability(self) -> float:
        """The model's confidence in the target where it has one (NaN otherwise), on the
        unperturbed input; computed as ``score`` is."""
        return self.clean.value()[1]

    @cached_property
    def map(self) -> np.ndarray:
        """(H, W) float32 in [0, 1]: the absolute attribution summed over the colour channels,
        divided by the value below which 98% of the total lies (clipped at 1)."""
        return display_map(np.abs(self.raw).sum(axis=0))


def display_map(magnitude: np.ndarray) -> np.ndarray:
    """``magnitude`` (>= 0) scaled to [0, 1], saturating the largest ``OUTLIER_SHARE`` of its
    sum (as Captum's visualisation does); all zeros stays all zeros."""
    values = np.sort(magnitude.ravel())
    total = float(values.sum())
    if total <= 0 or not math.isfinite(total):
        return np.zeros_like(magnitude, dtype=np.float32)
    position = int(np.searchsorted(np.cumsum(values), total * (1 - OUTLIER_SHARE)))
    threshold = float(values[min(position, values.size - 1)])
    return np.clip(magnitude / threshold, 0, 1).astype(np.float32)


Score = Callable[[Any], torch.Tensor]
Progress = Callable[[int, int], "bool | None"]


def _checked(progress: Progress | None) -> Callable[[int, int], None]:
    """``progress`` as the methods call it: a True answer becomes ``CancelledError``."""

    def report(done: int, total: int) -> None:
        if progress is not None and progress(done, total):
            raise CancelledError("the attribution was cancelled")

    return report


Method = Callable[[LoadedModel, torch.Tensor, Score, dict[str, Any]], torch.Tensor]


def _gradient(loaded: LoadedModel, x: torch.Tensor, score: Score) -> torch.Tensor:
    """d score / d x for every image of the batch ``x`` (each image's own score)."""
    x = x.detach().requires_grad_(True)
    (gradient,) = torch.autograd.grad(score(loaded.model(x)).sum(), x)
    return gradient


def _saliency(loaded, x, score, options) -> torch.Tensor:
    return _gradient(loaded, x, score).abs()


def _input_x_gradient(loaded, x, score, options) -> torch.Tensor:
    return x * _gradient(loaded, x, score)


def _guided_backprop(loaded, x, score, options) -> torch.Tensor:
    with relu_rule(loaded.model, "guided"):
        return _gradient(loaded, x, score)


def _deconvolution(loaded, x, score, options) -> torch.Tensor:
    with relu_rule(loaded.model, "deconvolution"):
        return _gradient(loaded, x, score)


def _integrated_gradients(loaded, x, score, options) -> torch.Tensor:
    steps = options["steps"]
    baseline = _baseline(options["baseline"], x)
    points, weights = np.polynomial.legendre.leggauss(steps)
    alphas = torch.tensor(0.5 * (1 + points), dtype=x.dtype, device=x.device)
    step_sizes = torch.tensor(0.5 * weights, dtype=x.dtype, device=x.device)
    batch_size = options["batch_size"] or steps
    total = torch.zeros_like(x)
    for start in range(0, steps, batch_size):
        options["_progress"](start, steps)
        alpha = alphas[start : start + batch_size].view(-1, 1, 1, 1)
        path = baseline + alpha * (x - baseline)
        gradients = _gradient(loaded, path, score)
        total += (gradients * step_sizes[start : start + batch_size].view(-1, 1, 1, 1)).sum(
            dim=0, keepdim=True
        )
    return (x - baseline) * total


def _smoothgrad(loaded, x, score, options) -> torch.Tensor:
    base = options["base"]
    if base not in _NOISE_BASES:
        raise AttributionError(
            f"smoothgrad averages one of {', '.join(_NOISE_BASES)}; got base={base!r}"
        )
    samples = options["samples"]
    generator = torch.Generator(device=x.device).manual_seed(options["seed"])
    shape = (samples, *x.shape[1:])
    # drawn as Captum's NoiseTunnel draws it, so the same seed gives the same noise
    noise = torch.normal(0.0, torch.full(shape, float(options["stdev"]), device=x.device),
                         generator=generator)  # fmt: skip
    noisy = x.repeat_interleave(samples, dim=0) + noise
    method = _METHODS[base][0]
    return method(loaded, noisy, score, _with_defaults(base, {})).mean(dim=0, keepdim=True)


def _baseline(value: Any, x: torch.Tensor) -> torch.Tensor:
    if isinstance(value, (int, float)):
        return torch.full_like(x, float(value))
    baseline = torch.as_tensor(value, dtype=x.dtype, device=x.device)
    if baseline.dim() == 3:
        baseline = baseline[None]
    try:
        return baseline.expand_as(x)
    except RuntimeError as exc:
        raise AttributionError(
            f"the baseline's shape {tuple(baseline.shape)} does not fit the input's "
            f"{tuple(x.shape)}"
        ) from exc


# name -> (function, default options). Options not listed are refused.
_METHODS: dict[str, tuple[Method, dict[str, Any]]] = {
    "saliency": (_saliency, {}),
    "input_x_gradient": (_input_x_gradient, {}),
    "guided_backprop": (_guided_backprop, {}),
    "deconvolution": (_deconvolution, {}),
    "guided_gradcam": (_guided_backprop, {"layer": None}),  # times the CAM: see attribute
    "integrated_gradients": (_integrated_gradients, {"steps": 50, "baseline": 0.0,
                                                     "batch_size": None}),
    "smoothgrad": (_smoothgrad, {"base": "saliency", "samples": 5, "stdev": 1.0, "seed": 0}),
}  # fmt: skip
_SLICED: set[str] = set()  # the methods that take the model's lock per batch (``register``)
_NOISE_BASES = ("saliency", "input_x_gradient", "guided_backprop", "deconvolution")


def register(name: str, method: Method, defaults: dict[str, Any], *, sliced: bool = False) -> None:
    """Add a method (the perturbation methods register themselves here). ``sliced``: it takes
    the model's lock itself, once per batch of forward passes."""
    _METHODS[name] = (method, defaults)
    if sliced:
        _SLICED.add(name)


def attribution_methods() -> tuple[str, ...]:
    """The names ``attribute`` takes (the package registers the perturbation methods)."""
    return tuple(_METHODS)


def _with_defaults(method: str, options: dict[str, Any]) -> dict[str, Any]:
    defaults = _METHODS[method][1]
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        takes = ", ".join(defaults) if defaults else "no options"
        raise AttributionError(f"{method} does not take {', '.join(unknown)} (it takes {takes})")
    return {**defaults, **options}


def attribute(
    loaded: LoadedModel,
    image: ImageInput,
    method: str,
    target: object = None,
    *,
    progress: Progress | None = None,
    **options: Any,
) -> Attribution:
    """Attribute ``target``'s score to the input's pixels with ``method``.

    Args:
        loaded: the model.
        image: a PIL image (attributed on the model's input, then resized onto the image's
            pixels) or a preprocessed (1, 3, H, W) tensor (attributed on its own grid).
        method: one of ``attribution_methods()`` (see the module's text for each one's
            options and their defaults).
        target: what to explain, as for ``grad_cam`` (None: the model's own choice).
        progress: the methods that run many passes (integrated gradients, SmoothGrad,
            occlusion, RISE) call it with (passes done, passes in all) as they go; returning
            True cancels (``CancelledError``), and a caller may also raise from it.
        **options: the method's options.

    Raises:
        AttributionError: unknown method, or an option it does not take.
        TargetError: a target that does not apply.
    """
    names = attribution_methods()
    method = BASELINE_ALIASES.get(method, method)
    if method not in names:
        raise AttributionError(
            f"unknown attribution method {method!r}; choose one of {', '.join(names)}"
        )
    chosen = _with_defaults(method, options)
    coarse = None
    if method == "guided_gradcam":
        chosen["layer"] = chosen["layer"] or default_layer(loaded)
        coarse = _coarse_cam(loaded, image, chosen["layer"], target)
    batch, size = prepare_input(loaded, image)
    function = _METHODS[method][0]
    # a method run in slices takes the lock once per batch itself: other callers' analyses
    # run between its batches
    sliced = method in _SLICED
    with (
        nullcontext() if sliced else loaded.lock,
        torch.inference_mode(False),
        torch.enable_grad(),
    ):
        if method in _ONE_PASS:
            raw, resolved, score = _one_pass(loaded, batch.float(), size, target, method)
            clean = CleanScore.known(score, resolved.probability)
        else:
            resolved, clean = _resolved_for_copies(loaded, batch, size, target, sliced)
            # (the input's pixels per pixel of the grid returned, for options given in pixels)
            scale = batch.shape[-1] / size[1]
            run = {**chosen, "_scale": scale, "_progress": _checked(progress)}
            raw = function(loaded, batch.float(), resolved.score, run)
        if coarse is not None:  # Grad-CAM upsampled by nearest neighbour, as Captum does
            grid = tuple(raw.shape[-2:])
            raw = raw * F.interpolate(coarse[None, None], size=grid, mode="nearest")[0]
        raw = raw[0].detach().float()
    if tuple(raw.shape[-2:]) != size:
        raw = F.interpolate(raw[None], size=size, mode="bilinear", align_corners=False)[0]
    return Attribution(
        method=method,
        raw=raw.cpu().numpy().astype(np.float32),
        class_index=resolved.index,
        class_name=resolved.name,
        size=size,
        clean=clean,
        options=chosen,
        target=resolved.target,
    )


# The gradient methods of one forward and one backward, by the ReLU rule they use and what they
# make of the input x and its gradient g. The target is resolved on that same forward (its
# output's values do not depend on the rule), so they cost what the gradient costs.
_ONE_PASS: dict[str, tuple[Any, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]] = {
    "saliency": (None, lambda x, g: g.abs()),
    "input_x_gradient": (None, lambda x, g: x * g),
    "guided_backprop": ("guided", lambda x, g: g),
    "deconvolution": ("deconvolution", lambda x, g: g),
    "guided_gradcam": ("guided", lambda x, g: g),  # (times the CAM: see attribute)
}


def _one_pass(
    loaded: LoadedModel, batch: torch.Tensor, size: tuple[int, int], target: object, method: str
) -> tuple[torch.Tensor, Resolved, float]:
    rule, make = _ONE_PASS[method]
    x = batch.detach().requires_grad_(True)
    with relu_rule(loaded.model, rule) if rule else nullcontext():
        output = loaded.model(x)
        clean = detached(output)
        input_size = (int(batch.shape[2]), int(batch.shape[3]))
        resolved = resolve_target(TargetContext(loaded, clean, size, input_size), target)
        scores = resolved.score(output)
        (gradient,) = torch.autograd.grad(scores.sum(), x)
    return make(batch, gradient), resolved, float(scores.detach().reshape(-1)[0])


def _resolved_for_copies(
    loaded: LoadedModel, batch: torch.Tensor, size: tuple[int, int], target: object, sliced: bool
) -> tuple[Resolved, CleanScore]:
    """``target`` resolved for a method that runs on copies of ``batch``, and the clean score
    and probability to report. A class (or an integer) resolves from the model alone, so no
    pass runs here: the clean numbers come from one when first read. Any other target
    resolves against a clean forward pass (under the model's lock, which a method run in
    slices does not hold yet), whose numbers are kept."""
    given = _class_given(loaded, target)
    if given is None:
        with loaded.lock if sliced else nullcontext():
            resolved, score = _resolved(loaded, batch, size, target)
        return resolved, CleanScore.known(score, resolved.probability)
    # as Class.resolve would give it; the probability is read from ``clean``, never from here
    resolved = Resolved(given, ("class", given.index), given.index,
                        loaded.class_name(given.index), math.nan, given)  # fmt: skip
    # (a copy: the caller may change its tensor before the numbers are read)
    clean_input = batch.detach().clone()
    return resolved, CleanScore.when_read(partial(_clean_numbers, loaded, clean_input, size, given))


def _class_given(loaded: LoadedModel, target: object) -> Class | None:
    """``target`` as a ``Class`` when it is one or an integer, its index checked (the same
    ``TargetError`` as resolving it); None for any other target, and for no target."""
    if isinstance(target, numbers.Integral) and not isinstance(target, bool):
        target = Class(int(target))
    if not isinstance(target, Class):
        return None
    target.resolve_index(loaded)
    return target


def _clean_numbers(
    loaded: LoadedModel, batch: torch.Tensor, size: tuple[int, int], target: Class
) -> tuple[float, float]:
    """The score and probability of ``target`` on a clean forward pass of ``batch``: the
    numbers the default path keeps, by the same function."""
    with loaded.lock:
        resolved, score = _resolved(loaded, batch, size, target)
    return score, resolved.probability


def _resolved(
    loaded: LoadedModel, batch: torch.Tensor, size: tuple[int, int], target: object
) -> tuple[Resolved, float]:
    """``target`` resolved against a clean forward pass of ``batch``, and its score there."""
    with torch.no_grad():
        output = detached(loaded.model(batch))
    input_size = (int(batch.shape[2]), int(batch.shape[3]))
    resolved = resolve_target(TargetContext(loaded, output, size, input_size), target)
    return resolved, float(resolved.score(output).reshape(-1)[0])


def _coarse_cam(loaded: LoadedModel, image: ImageInput, layer: str, target: object) -> torch.Tensor:
    """Grad-CAM's map of ``layer`` before upsampling (ReLU applied, not scaled), the part of
    its grid that covers the image."""
    cam = grad_cam(loaded, image, layer, target)
    coarse = torch.from_numpy(np.ascontiguousarray(cam.cam, dtype=np.float32))
    height = max(1, round(coarse.shape[0] * cam.frame[0]))
    width = max(1, round(coarse.shape[1] * cam.frame[1]))
    return coarse[:height, :width].to(loaded.device)
