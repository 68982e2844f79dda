"""How faithful an explanation is to the model: what happens to the target class's probability
when the pixels a heatmap points at are kept, removed or revealed.

Six metrics, each computed as its reference computes it, so a figure here can stand next to a
published one:

- ``deletion``, ``insertion``: the areas under ``trust_curves``' curves (Petsiuk et al. 2018).
- ``average_drop``, ``increase_in_confidence``: the input multiplied by the map (Chattopadhyay
  et al. 2018), as TorchCAM's ``ClassificationMetric``.
- ``road_morf``, ``road_lerf``: pixels removed and filled by noisy linear imputation (Rong et al.
  2022, "Remove And Debias"), as pytorch-grad-cam's ROAD metrics.
"""

from __future__ import annotations

import numbers
import time
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ..attributions.attribute import Attribution
from ..core.cam import GradCAM
from ..core.inputs import ImageInput, extract_logits, prepare_input
from ..core.loaded import LoadedModel
from ..core.targets import Class, TargetContext, Text, resolve_target
from ..errors import HookvizError, TargetError
from .evidence import trust_curves
from .metric_names import METRICS

# pytorch-grad-cam's defaults for ROAD...Average: the percentiles of the map that split the
# pixels kept from those removed, and the standard deviation of the imputation's noise.
ROAD_PERCENTILES = (10, 20, 30, 40, 50, 60, 70, 80, 90)
ROAD_NOISE = 0.01
# the imputations both ROAD metrics of one map run: one per percentile each
ROAD_IMPUTATIONS = 2 * len(ROAD_PERCENTILES)
# A removed pixel is the weighted mean of its eight neighbours: (row offset, column offset) and
# weight, in pytorch-grad-cam's order (the order its sums run in).
_NEIGHBOURS = (
    ((1, 1), 1 / 12),
    ((0, 1), 1 / 6),
    ((-1, 1), 1 / 12),
    ((1, -1), 1 / 12),
    ((0, -1), 1 / 6),
    ((-1, -1), 1 / 12),
    ((1, 0), 1 / 6),
    ((-1, 0), 1 / 6),
)
# TorchCAM divides the drop by Y + 1e-7 (a class of probability 0 drops by 0, not NaN).
_EPSILON = 1e-7


class MetricError(HookvizError, ValueError):
    """An unknown faithfulness metric, or an explanation that is not a non-negative map on the
    image's pixel grid."""


def faithfulness(
    loaded: LoadedModel,
    image: ImageInput,
    explanation: Any,
    target: Any = None,
    metrics: Iterable[str] | str | None = None,
    *,
    seed: int = 0,
) -> dict[str, float]:
    """How faithful ``explanation`` is to the model on ``image``, by each of ``metrics``.

    Every metric follows the softmax probability of the target class; the map is moved onto the
    model input's grid (bilinearly) first. Y is that probability on the model's input.

    - ``deletion`` (lower is better), ``insertion`` (higher is better): the areas under the
      curves of ``trust_curves`` (pixels removed, or revealed on a blurred copy, most salient
      first), with its defaults.
    - ``average_drop`` = max(0, Y - O) / (Y + 1e-7) (lower is better) and
      ``increase_in_confidence`` = 1.0 if O > Y else 0.0, with O the probability on the
      normalised input multiplied by the map divided by its maximum: TorchCAM's
      ``ClassificationMetric`` with ``logits_fn=partial(torch.softmax, dim=-1)``, for one image.
      Averaged over images they are the figures of the Grad-CAM++ paper's tables.
    - ``road_morf`` (lower is better), ``road_lerf`` (higher is better): the change in the
      probability, P(imputed) - Y, averaged over the percentiles 10, 20, ..., 90. At percentile
      q the pixels whose map value is at least the map's q-th percentile are removed (MoRF: the
      most relevant, 90% of them at q = 10; LeRF ranks by 1 - map) and filled by noisy linear
      imputation. Pixels tied at the threshold go together (pytorch-grad-cam's rule): a map
      that is 0 on a tenth of the image or more keeps no pixel at q = 10 in MoRF, and all are
      imputed as 0 (the dataset mean after normalisation) plus the noise. This is the number
      pytorch-grad-cam's ``ROADMostRelevantFirstAverage`` and ``ROADLeastRelevantFirstAverage``
      return with ``ClassifierOutputSoftmaxTarget(target)`` (with ``ClassifierOutputTarget``
      they would give the change in the logit instead).

    Only Average Drop and Increase in Confidence depend on the map's scale; the others rank
    pixels. The imputation's noise comes from a generator seeded with ``seed`` for each ROAD
    metric, drawn as pytorch-grad-cam draws it from torch's global generator, so the same call
    gives the same number (and pytorch-grad-cam's, after ``torch.manual_seed(seed)``).

    Args:
        loaded: a classifier (or a zero-shot model over its labels).
        image: the image (PIL or preprocessed (1, 3, H, W) tensor).
        explanation: a ``GradCAM`` (its ``heatmap``), an ``Attribution`` (its ``map``) or a
            non-negative (H, W) array or tensor on the image's pixel grid, of any scale.
        target: the class: an index, a ``hookviz.targets.Class`` or ``Text``; None: the class
            the explanation explains when it is a ``GradCAM`` or an ``Attribution``, else the
            model's top class.
        metrics: names from ``METRICS`` (default: all of them).
        seed: for ROAD's noise and the random order behind ``trust_curves``.

    Returns:
        The metrics asked for, by name, in the order asked.

    Raises:
        MetricError: an unknown metric, or a map of the wrong shape, negative or not finite.
        TargetError: a model or target without a class probability to follow.
    """
    names = _metric_names(metrics)
    batch, size = prepare_input(loaded, image)
    heatmap = _map_of(explanation, size)
    if not names:
        return {}
    if not loaded.scores_classes:
        raise TargetError(
            f"{', '.join(names)} follow the softmax probability of a class; {loaded.name!r} "
            f"({loaded.task}) has none: its output is not one score per class"
        )
    with loaded.lock, torch.no_grad():
        logits = extract_logits(loaded.model(batch))
    context = TargetContext(loaded, logits, size, (int(batch.shape[2]), int(batch.shape[3])))
    index = _class_index(context, target, explanation, names)
    probability = torch.softmax(logits.float(), dim=1)[0, index]
    saliency = _on_grid(heatmap, batch)

    found: dict[str, float] = {}
    if "deletion" in names or "insertion" in names:
        curves = trust_curves(loaded, image, heatmap.numpy(), index, seed=seed, baseline=False)
        found["deletion"], found["insertion"] = curves.deletion_auc, curves.insertion_auc
    if "average_drop" in names or "increase_in_confidence" in names:
        peak = float(heatmap.max())
        scaled = _on_grid(heatmap / peak if peak > 0 else heatmap, batch)
        kept = _probabilities(loaded, batch * scaled.to(batch), index)[0]
        found["average_drop"] = float(torch.relu(probability - kept) / (probability + _EPSILON))
        found["increase_in_confidence"] = float(kept > probability)
    for name, ranking in (("road_morf", saliency), ("road_lerf", 1 - saliency)):
        if name in names:
            found[name] = _road(loaded, batch, ranking, index, probability, seed)
    return {name: found[name] for name in names}


def road_imputation_seconds(loaded: LoadedModel, image: ImageInput) -> float:
    """Seconds one of ROAD's imputations takes on ``image`` (timed here: it costs one): the
    pixels of the model input above the median of a smooth ranking (the distance from the
    centre, as a CAM's blob ranks them) removed and imputed. ``faithfulness`` with both ROAD
    metrics runs ``ROAD_IMPUTATIONS`` of them, besides its forward passes; their time grows
    faster than the pixels (a sparse solve over the removed ones), so time it on the input
    itself.

    Raises:
        ImageError: an image the model cannot take.
    """
    batch, _ = prepare_input(loaded, image)
    values = batch[0].detach().float().cpu()
    height, width = values.shape[-2:]
    rows = torch.linspace(-1, 1, height)[:, None]
    columns = torch.linspace(-1, 1, width)[None, :]
    ranking = -(rows**2 + columns**2)  # highest at the centre
    keep = ranking < float(ranking.median())
    generator = torch.Generator().manual_seed(0)
    # a corner first, untimed: the solver's first call imports scipy (seconds on a busy machine)
    side = min(8, height, width)
    corner = torch.ones(side, side, dtype=torch.bool)
    corner[side // 2, side // 2] = False
    _impute(values[:, :side, :side], corner, generator)
    started = time.perf_counter()
    _impute(values, keep, generator)
    return time.perf_counter() - started


def _metric_names(metrics: Iterable[str] | str | None) -> list[str]:
    if metrics is None:
        return list(METRICS)
    asked = [metrics] if isinstance(metrics, str) else list(metrics)
    unknown = [name for name in asked if name not in METRICS]
    if unknown:
        raise MetricError(
            f"unknown faithfulness metric {', '.join(map(repr, unknown))}; the metrics are "
            f"{', '.join(METRICS)}"
        )
    return list(dict.fromkeys(asked))


def _map_of(explanation: Any, size: tuple[int, int]) -> torch.Tensor:
    """The explanation as a (H, W) float32 map on the image's grid, refused unless it is one,
    finite and non-negative."""
    if isinstance(explanation, GradCAM):
        values = explanation.heatmap
    elif isinstance(explanation, Attribution):
        values = explanation.map
    elif isinstance(explanation, torch.Tensor):
        values = explanation.detach().float().cpu().numpy()
    else:
        values = explanation
    try:
        heatmap = torch.as_tensor(np.asarray(values, dtype=np.float32))
    except (TypeError, ValueError) as exc:
        raise MetricError(
            "an explanation is a GradCAM, an Attribution or an (H, W) map; got "
            f"{type(explanation).__name__}"
        ) from exc
    if tuple(heatmap.shape) != tuple(size):
        raise MetricError(
            f"the map is {tuple(heatmap.shape)}; give it on the image's pixel grid "
            f"{tuple(size)} (H, W), as GradCAM.heatmap and Attribution.map are"
        )
    if not bool(torch.isfinite(heatmap).all()):
        raise MetricError("the map has NaN or infinite values")
    if bool((heatmap < 0).any()):
        raise MetricError(
            "the map has negative values; give a non-negative map (an Attribution's .map, or "
            "the absolute value of a signed attribution)"
        )
    return heatmap


def _class_index(context: TargetContext, target: Any, explanation: Any, names: list[str]) -> int:
    """The class whose probability the metrics follow."""
    if target is None and isinstance(explanation, (GradCAM, Attribution)):
        # a map is scored for what it explains (a Grad-CAM of a second class, say)
        target = explanation.class_index if explanation.class_index >= 0 else None
    is_index = isinstance(target, numbers.Integral) and not isinstance(target, bool)
    if target is not None and not is_index and not isinstance(target, (Class, Text)):
        raise TargetError(
            f"{', '.join(names)} follow the softmax probability of a class: give a class index "
            f"(int), a hookviz.targets.Class or Text, not a {type(target).__name__}"
        )
    return resolve_target(context, target).index


def _on_grid(heatmap: torch.Tensor, batch: torch.Tensor) -> torch.Tensor:
    """The map resized bilinearly onto the model input's (h, w) grid (as TorchCAM resizes a
    CAM and ``trust_curves`` a heatmap)."""
    return F.interpolate(
        heatmap[None, None], size=batch.shape[-2:], mode="bilinear", align_corners=False
    )[0, 0]


def _probabilities(loaded: LoadedModel, inputs: torch.Tensor, index: int) -> torch.Tensor:
    """The softmax probability of class ``index`` for each input (one forward pass)."""
    with loaded.lock, torch.no_grad():
        logits = extract_logits(loaded.model(inputs))
    return torch.softmax(logits.float(), dim=1)[:, index]


def _road(
    loaded: LoadedModel,
    batch: torch.Tensor,
    ranking: torch.Tensor,
    index: int,
    probability: torch.Tensor,
    seed: int,
) -> float:
    """The mean over ``ROAD_PERCENTILES`` of the change in the probability when the pixels
    ranked at or above each percentile of ``ranking`` are removed and imputed (pytorch-grad-cam's
    ``RemoveMostRelevantFirst``, which keeps ``mask < np.percentile(mask, q)``)."""
    generator = torch.Generator().manual_seed(seed)
    values = batch[0].detach().float().cpu()
    imputed = []
    for percentile in ROAD_PERCENTILES:
        threshold = np.percentile(ranking.numpy(), percentile)
        imputed.append(_impute(values, ranking < float(threshold), generator))
    changed = _probabilities(loaded, torch.stack(imputed).to(batch), index)
    return float((changed - probability).mean())


def _impute(values: torch.Tensor, keep: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """``values`` (C, H, W) with the pixels not in ``keep`` (H, W) replaced by noisy linear
    imputation: each the weighted mean of its neighbours inside the image, known or imputed
    (one sparse linear system for all of them), plus Gaussian noise."""
    channels = values.shape[0]
    flat = values.reshape(channels, -1)
    missing = torch.nonzero(~keep.flatten()).flatten()
    if bool(keep.any()):
        solution = _solve(values, keep, missing)
    else:
        # nothing left to interpolate from (a map whose ties fill the percentile): the
        # system is singular with b = 0, and 0 is what pytorch-grad-cam's solver returns
        solution = torch.zeros(len(missing), channels)
    # pytorch-grad-cam's torch.randn_like(res.t()), with res the solution as scipy returns it
    # (column-major, so res.t() is a contiguous (C, N) tensor): the same draw from our generator
    noise = torch.randn(channels, len(missing), generator=generator)
    filled = flat.clone()
    filled[:, missing] = solution.t() + ROAD_NOISE * noise
    return filled.view_as(values)


def _solve(values: torch.Tensor, keep: torch.Tensor, missing: torch.Tensor) -> torch.Tensor:
    """The imputed values, (N, C) float32: by scipy's sparse LU where scipy is installed
    (pytorch-grad-cam's solver, SuperLU, on its very system: the same numbers to about 1e-14),
    else by conjugate gradients in torch (hookviz does not require scipy): values within about
    1e-7, far below the noise added next, in about twice the time.

    The matrix is symmetric, and diagonally dominant with every row of a connected group of
    missing pixels reaching a known one (there is one whenever any pixel is kept), so it
    factors without pivoting: SuperLU's symmetric mode with a minimum-degree ordering of A + A^T
    takes about 2/3 of the time of spsolve's default (a column ordering with partial pivoting)
    on a 224 x 224 image."""
    try:
        from scipy.sparse import csc_matrix
        from scipy.sparse.linalg import splu
    except ImportError:
        return _conjugate_gradients(values.double(), keep)[:, keep.logical_not()].t().float()
    indices, weights, rhs = _linear_system(values.reshape(values.shape[0], -1), keep, missing)
    count = len(missing)
    matrix = csc_matrix((weights.numpy(), indices.numpy()), shape=(count, count))
    factors = splu(
        matrix,
        permc_spec="MMD_AT_PLUS_A",
        diag_pivot_thresh=0.0,
        options={"SymmetricMode": True},
    )
    solution = factors.solve(rhs.numpy())
    return torch.tensor(solution, dtype=torch.float32).reshape(count, -1)


def _linear_system(
    flat: torch.Tensor, keep: torch.Tensor, missing: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """pytorch-grad-cam's ``setup_sparse_system``, vectorised: for each missing pixel i, the
    equation sum_j w_ij x_j - s_i x_i = -sum_k w_ik v_k over its missing neighbours j and known
    neighbours k, where s_i is the total weight of its neighbours inside the image.

    Returns the matrix's (2, nnz) indices and (nnz,) values, and the (N, C) right-hand side, in
    float64."""
    height, width = keep.shape
    count = len(missing)
    unknown = torch.full((height * width,), -1, dtype=torch.long)
    unknown[missing] = torch.arange(count)
    row, column = missing // width, missing % width
    total = torch.ones(count, dtype=torch.float64)
    rhs = torch.zeros(count, flat.shape[0], dtype=torch.float64)
    indices, weights = [], []
    for (down, right), weight in _NEIGHBOURS:
        y, x = row + down, column + right
        inside = (y >= 0) & (x >= 0) & (y < height) & (x < width)
        total[~inside] -= weight
        equation = torch.nonzero(inside).flatten()
        neighbour = (y * width + x)[inside]
        variable = unknown[neighbour]
        free = variable >= 0
        indices.append(torch.stack([equation[free], variable[free]]))
        weights.append(torch.full((int(free.sum()),), weight, dtype=torch.float64))
        # weight * value in float32, as numpy computes it there
        known = (weight * flat[:, neighbour[~free]]).t().double()
        rhs.index_add_(0, equation[~free], -known)
    diagonal = torch.arange(count)
    indices.append(torch.stack([diagonal, diagonal]))
    weights.append(-total)
    return torch.cat(indices, dim=1), torch.cat(weights), rhs


def _conjugate_gradients(
    values: torch.Tensor, keep: torch.Tensor, tolerance: float = 1e-8
) -> torch.Tensor:
    """The same system on the pixel grid, solved by conjugate gradients for each channel: s x -
    N(x) = N(v) on the missing pixels, where N sums a grid's neighbours with their weights
    (the system negated, so symmetric positive definite), to a residual of ``tolerance`` times
    the right-hand side's. Returns (C, H, W), 0 on the pixels kept."""
    height, width = keep.shape
    missing = keep.logical_not().to(values.dtype)

    def neighbours(grid: torch.Tensor) -> torch.Tensor:
        padded = F.pad(grid, (1, 1, 1, 1))  # outside the image: no neighbour
        found = torch.zeros_like(grid)
        for (down, right), weight in _NEIGHBOURS:
            found.add_(
                padded[:, 1 + down : 1 + down + height, 1 + right : 1 + right + width], alpha=weight
            )
        return found

    total = neighbours(torch.ones_like(values[:1]))
    rhs = missing * neighbours(values * keep)
    solution = torch.zeros_like(rhs)
    residual = rhs.clone()
    direction = residual.clone()
    norm = (residual * residual).sum(dim=(1, 2), keepdim=True)
    stop = tolerance**2 * norm
    for _ in range(int(missing.sum())):  # exact arithmetic would need at most N steps
        if bool((norm <= stop).all()):
            break
        product = missing * (total * direction - neighbours(direction))
        curvature = (direction * product).sum(dim=(1, 2), keepdim=True)
        step = torch.where(curvature > 0, norm / curvature, 0.0)
        solution += step * direction
        residual -= step * product
        new_norm = (residual * residual).sum(dim=(1, 2), keepdim=True)
        direction = residual + torch.where(norm > 0, new_norm / norm, 0.0) * direction
        norm = new_norm
    return solution
