"""The CAM methods that need more than the forward pass's activations and one gradient at the
layer, by name: each takes a ``Probe`` (``probe.py``) and returns the map before ReLU, (1, h, w)
(or (1, H, W) on the input's grid: FullGrad), and its channel weights (1, C) or None. Each
comes with its options' defaults (the reference implementation's), which ``probe.options``
holds with the caller's values applied."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .baseline_maps import BASELINE_MAPS
from .legrad import LEGRAD
from .methods import MethodError, check_method
from .probe import Probe
from .probing_methods import PROBING_METHODS
from .sampled_methods import SAMPLED_METHODS

PassMethod = Callable[[Probe], tuple[torch.Tensor, torch.Tensor | None]]

PASS_METHODS: dict[str, tuple[PassMethod, dict[str, Any]]] = {
    **SAMPLED_METHODS,
    **PROBING_METHODS,
    **LEGRAD,
}

# Options every method takes (pytorch-grad-cam's ``__call__`` arguments): run by method_dispatch.py.
COMMON_OPTIONS = {"eigen_smooth": False, "aug_smooth": False}


def method_options(method: str, given: dict[str, Any] | None = None) -> dict[str, Any]:
    """The options ``method`` runs with: its defaults and the common ones,
    updated with ``given``; a MethodError names an option it does not take.
    ``hookviz.method_options("sscam")`` lists a method's options and their defaults."""
    method = check_method(method)
    given = given or {}
    defaults = dict(COMMON_OPTIONS)
    if method in PASS_METHODS:
        defaults.update(PASS_METHODS[method][1])
    elif method in BASELINE_MAPS:
        defaults.update(BASELINE_MAPS[method][1])
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise MethodError(
            f"{method} takes no option {', '.join(map(repr, unknown))}; its options: "
            f"{', '.join(sorted(defaults))}"
        )
    return {**defaults, **given}
