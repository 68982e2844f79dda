"""What a CAM method costs on a forward pass already made: how many more forward and backward
passes of the network it runs, and about how long they take here (from the times of the forward
and backward passes this image has already had). A page shows it beside each method and decides
which ones to run only on request (``SLOW``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from .baseline_maps import BASELINE_MAPS
from .methods import NEEDS_GRADIENT, SCORECAM_BATCH, check_method
from .pass_methods import method_options
from .smoothing import AUGMENTATIONS

# The methods whose backward pass runs through the whole network to the input rather than from
# the output to the layer (FullGrad: every bias module's output gradient kept, then each
# channel scaled and resized to the input): about two forward passes' time each (measured
# here: bench/bench_estimates.py), where a backward to a late layer is a hundredth of one.
WHOLE_NETWORK_BACKWARD = frozenset({"fullgrad"})
WHOLE_BACKWARD_FORWARDS = 2


class MethodCost(NamedTuple):
    """``forwards`` and ``backwards``: the passes of the network a method runs beyond the
    forward pass already made (images, not batches: Score-CAM's 512 masked images are 512);
    ``seconds``: about how long they take here."""

    forwards: int
    backwards: int
    seconds: float

    def describe(self) -> str:
        """In words: "1 backward pass, about 0.02 s"; "no more passes" for the free ones."""
        parts = []
        if self.forwards:
            parts.append(f"{self.forwards} forward pass{'es' if self.forwards > 1 else ''}")
        if self.backwards:
            parts.append(f"{self.backwards} backward pass{'es' if self.backwards > 1 else ''}")
        if not parts:
            return "no more passes"
        if self.seconds < 0.01:
            return f"{' and '.join(parts)}, under 0.01 s here"
        when = f"{self.seconds:.0f} s" if self.seconds >= 10 else f"{self.seconds:.2g} s"
        return f"{' and '.join(parts)}, about {when} here"


def passes(method: str, channels: int, blocks: int = 1, **options: Any) -> tuple[int, int]:
    """(forward passes, backward passes) ``method`` runs at a layer of ``channels`` channels,
    beyond the forward pass already made; ``blocks``: the transformer blocks LeGrad averages
    there (a backward pass each)."""
    method = check_method(method)
    chosen = method_options(method, options)
    if method in NEEDS_GRADIENT or method == "finercam":
        counted = (0, 1)
    elif method == "scorecam":
        counted = (channels, 0)
    elif method == "ablationcam":
        counted = (channels + 1, 0)  # (the first batch checks the layer's own activations)
    elif method in ("sscam", "iscam"):
        counted = (channels * int(chosen["num_samples"]), 0)
    elif method == "smoothgradcam++":
        counted = (int(chosen["num_samples"]), int(chosen["num_samples"]))
    elif method == "fullgrad":
        counted = (1, 1)
    elif method == "legrad":
        counted = (1, blocks)
    elif method == "shapleycam":
        counted = (1, 2)  # a backward with its graph kept, then the Hessian-vector product
    else:  # the head's weights, the activations alone, a baseline: nothing more to run
        counted = (0, 0)
    if chosen["aug_smooth"] and method not in BASELINE_MAPS:
        copies = len(AUGMENTATIONS)
        counted = (copies * (counted[0] + 1), copies * counted[1])
    return counted


def method_cost(
    method: str,
    channels: int,
    forward_seconds: float,
    backward_seconds: float | None = None,
    batch_seconds: Callable[[], float] | None = None,
    blocks: int = 1,
    **options: Any,
) -> MethodCost:
    """``passes`` with their time: each backward as long as ``backward_seconds`` (a forward's
    time when none has run yet; ``WHOLE_BACKWARD_FORWARDS`` forwards' for a backward to the
    input, ``WHOLE_NETWORK_BACKWARD``); the forward passes one by one as ``forward_seconds``
    each, or, when there are a batch's worth (``SCORECAM_BATCH``) and ``batch_seconds`` can
    time one batch, in batches of ``SCORECAM_BATCH`` as the slow methods run them."""
    forwards, backwards = passes(method, channels, blocks, **options)
    backward = forward_seconds if backward_seconds is None else backward_seconds
    if check_method(method) in WHOLE_NETWORK_BACKWARD:
        backward = WHOLE_BACKWARD_FORWARDS * forward_seconds
    if forwards >= SCORECAM_BATCH and batch_seconds is not None:
        forward_time = -(-forwards // SCORECAM_BATCH) * batch_seconds()
    else:
        forward_time = forwards * forward_seconds
    return MethodCost(forwards, backwards, forward_time + backwards * backward)
