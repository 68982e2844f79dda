"""The model-randomisation sanity check (Adebayo et al. 2018, "Sanity Checks for Saliency Maps",
arXiv:1810.03292): an explanation that describes the model must change when the model's learned
weights are destroyed. The weights are re-initialised from the top of the network down, one
step at a time (cascading), and the explanation is computed again after each step; its
similarity to the original (Spearman rank correlation and SSIM) should fall. A picture that
survives the network's randomisation reflects the image, not the model: guided backprop's
famously does, and so does an edge map.

The randomisation works on a copy of the model (the caller's is never changed); each module is
re-initialised with its own ``reset_parameters`` (PyTorch's default initialisation for its type)
under a seed derived from ``seed`` and its position, so the check gives the same numbers every
time.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..attributions import attribute, attribution_methods
from ..core.fair_lock import FairLock
from ..core.hooks import ForwardHook, forward_hooks
from ..core.inputs import ImageInput, extract_logits, prepare_input
from ..core.layers import default_layer
from ..core.loaded import LoadedModel
from ..core.methods import METHODS
from ..core.pipeline import grad_cam
from ..errors import HookvizError

# The rank correlation with the original above which, with the whole network randomised, the
# picture is said to survive (Adebayo et al.'s guided backprop stays near 0.9; a gradient CAM
# falls near 0).
SURVIVES = 0.5
DEFAULT_STEPS = 8  # the cascade's length when the network has more parametrised modules
_SIDE = 224  # maps are compared on this many pixels along the long side
_SSIM_WINDOW = 7  # SSIM's uniform window and constants (Wang et al. 2004, scikit-image's)
_K1, _K2 = 0.01, 0.03


@dataclass(frozen=True)
class SanityCheck:
    """A model-randomisation sanity check of one explanation.

    Attributes:
        method: the explanation method checked.
        layer: the CAM's layer (None for a pixel attribution).
        original: (h, w) float32 in [0, 1], the explanation on the trained model.
        steps: the cascade, top down: at step k every module of ``modules[0..k]`` is
            randomised; each step is named by the lowest module it reaches.
        modules: the module names each step randomises.
        maps: (h, w) float32 in [0, 1], the explanation after each step.
        rank_correlation: Spearman's rank correlation of each step's map with the original.
        ssim: the structural similarity of each step's map with the original.
        flagged: True when the picture survives the whole network's randomisation (the last
            step's rank correlation is at least ``SURVIVES``): it does not depend on what the
            model learned.
    """

    method: str
    layer: str | None
    original: np.ndarray
    steps: list[str]
    modules: list[list[str]]
    maps: list[np.ndarray]
    rank_correlation: list[float]
    ssim: list[float]

    @property
    def flagged(self) -> bool:
        return bool(self.rank_correlation) and self.rank_correlation[-1] >= SURVIVES


def sanity_check(
    loaded: LoadedModel,
    image: ImageInput,
    method: str,
    layer: str | None = None,
    target: object = None,
    *,
    steps: int = DEFAULT_STEPS,
    seed: int = 0,
) -> SanityCheck:
    """Randomise ``loaded``'s weights from the top down and see whether ``method``'s
    explanation of ``image`` changes.

    Args:
        loaded: the model (left unchanged: the check randomises a copy).
        image: a PIL image or a preprocessed tensor.
        method: a CAM method (``hookviz.METHODS``) or a pixel attribution
            (``hookviz.attribution_methods()``), with its default options.
        layer: the CAM's layer (default: the model's default layer); unused by attributions.
        target: what to explain (None: the trained model's own choice, kept for every step).
        steps: how many cascading steps: the modules with parameters, in reverse order of
            execution, are split into this many consecutive groups (fewer when there are
            fewer modules).
        seed: the re-initialisation's seed.

    Raises:
        HookvizError: an unknown method, or a model without parameters.
    """
    explain = _explainer(loaded, method)
    layer = (layer or default_layer(loaded)) if method in METHODS else None
    target = _fixed_target(loaded, image, target)
    original = _resized(explain(loaded, image, layer, target))
    groups = _cascade(loaded, image, max(1, int(steps)))
    randomised = _copy(loaded)
    by_name = dict(randomised.model.named_modules())
    maps, rank_correlation, ssim = [], [], []
    position = 0
    for group in groups:
        for name in group:
            _reinitialise(by_name[name], seed * 100_003 + position)
            position += 1
        picture = _resized(explain(randomised, image, layer, target))
        maps.append(picture)
        rank_correlation.append(spearman(original, picture))
        ssim.append(structural_similarity(original, picture))
    return SanityCheck(
        method=method,
        layer=layer,
        original=original,
        steps=[group[-1] for group in groups],
        modules=groups,
        maps=maps,
        rank_correlation=rank_correlation,
        ssim=ssim,
    )


Explain = Callable[[LoadedModel, ImageInput, "str | None", object], np.ndarray]


def _explainer(loaded: LoadedModel, method: str) -> Explain:
    if method in METHODS:
        return lambda model, image, layer, target: (
            grad_cam(model, image, layer, target, method=method).heatmap
        )
    if method in attribution_methods():
        return lambda model, image, layer, target: attribute(model, image, method, target).map
    raise HookvizError(
        f"unknown method {method!r}: a CAM method ({', '.join(METHODS)}) or a pixel "
        f"attribution ({', '.join(attribution_methods())})"
    )


def _fixed_target(loaded: LoadedModel, image: ImageInput, target: object) -> object:
    """The trained model's own choice, fixed: the randomised ones would choose another."""
    if target is not None or not loaded.scores_classes:
        return target
    batch, _ = prepare_input(loaded, image)
    with loaded.lock, torch.no_grad():
        return int(extract_logits(loaded.model(batch))[0].argmax())


def _cascade(loaded: LoadedModel, image: ImageInput, steps: int) -> list[list[str]]:
    """The modules with parameters of their own, last executed first, in ``steps`` groups."""
    order: list[str] = []

    def note_for(name: str) -> ForwardHook:
        def note(module: nn.Module, _inputs, _output) -> None:
            if name not in order and _own_parameters(module):
                order.append(name)

        return note

    batch, _ = prepare_input(loaded, image)
    modules = dict(loaded.model.named_modules())  # the model itself too, named ""
    with loaded.lock, forward_hooks(modules, note_for), torch.no_grad():
        loaded.model(batch)
    if not order:
        raise HookvizError(f"{loaded.name!r} has no parameters to randomise")
    top_down = order[::-1]
    count = min(steps, len(top_down))
    bounds = np.linspace(0, len(top_down), count + 1).round().astype(int)
    return [top_down[a:b] for a, b in itertools.pairwise(bounds)]


def _own_parameters(module: nn.Module) -> bool:
    return any(True for _ in module.parameters(recurse=False))


def _copy(loaded: LoadedModel) -> LoadedModel:
    return dataclasses.replace(loaded, model=copy.deepcopy(loaded.model), lock=FairLock(), memo={})


def _reinitialise(module: nn.Module, seed: int) -> None:
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed)
        reset = getattr(module, "reset_parameters", None)
        if callable(reset):
            reset()
        else:  # a module without PyTorch's own initialisation: a plain normal draw
            for parameter in module.parameters(recurse=False):
                parameter.normal_(0.0, 0.02)
        if isinstance(module, nn.modules.batchnorm._NormBase) and module.affine:
            # its learned affine transform is what the cascade destroys (reset_parameters sets
            # it to the identity and clears the running statistics the eval mode reads)
            module.weight.normal_(1.0, 0.1)
            module.bias.normal_(0.0, 0.1)
    module.requires_grad_(False)


def _resized(picture: np.ndarray) -> np.ndarray:
    height, width = picture.shape
    scale = min(1.0, _SIDE / max(height, width))
    size = (max(1, round(height * scale)), max(1, round(width * scale)))
    tensor = torch.from_numpy(np.ascontiguousarray(picture, dtype=np.float32))[None, None]
    return F.interpolate(tensor, size=size, mode="area")[0, 0].numpy()


def _ranks(values: np.ndarray) -> np.ndarray:
    """Ranks with ties averaged (as Spearman's coefficient needs for flat regions)."""
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    ranks = np.empty(values.size, dtype=np.float64)
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], values.size]
    for start, end in zip(starts, ends, strict=True):
        ranks[order[start:end]] = (start + end - 1) / 2
    return ranks


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation of two maps (0 where either is flat)."""
    ra, rb = _ranks(a.ravel()), _ranks(b.ravel())
    if ra.std() == 0 or rb.std() == 0:
        return 0.0
    return float(np.corrcoef(ra, rb)[0, 1])


def structural_similarity(a: np.ndarray, b: np.ndarray) -> float:
    """The mean SSIM of two maps in [0, 1] (Wang et al. 2004) with a uniform 7 x 7 window and
    sample covariances, over the positions where the window fits, as scikit-image's
    ``structural_similarity(a, b, data_range=1)`` computes it."""
    x = torch.from_numpy(np.asarray(a, np.float64))[None, None]
    y = torch.from_numpy(np.asarray(b, np.float64))[None, None]
    window = min(_SSIM_WINDOW, x.shape[-1], x.shape[-2])
    kernel = torch.full((1, 1, window, window), 1.0 / window**2, dtype=torch.float64)
    norm = window**2 / (window**2 - 1) if window > 1 else 1.0

    def mean(t: torch.Tensor) -> torch.Tensor:
        return F.conv2d(t, kernel)

    mx, my = mean(x), mean(y)
    vx = norm * (mean(x * x) - mx * mx)
    vy = norm * (mean(y * y) - my * my)
    cxy = norm * (mean(x * y) - mx * my)
    c1, c2 = _K1**2, _K2**2
    ssim = ((2 * mx * my + c1) * (2 * cxy + c2)) / ((mx**2 + my**2 + c1) * (vx + vy + c2))
    return float(ssim.mean())
