"""What the methods cost on one kept forward pass (``ForwardPass.method_cost``,
``ForwardPass.scorecam_cost``): the passes ``method_costs.py`` counts, with times measured on
this image. A backward pass takes as long as the pass's fastest so far (before the first, the
default target's backward is run and timed: its gradient is kept); a batch of the slow methods'
inputs is timed the first time an estimate needs it (that costs the batch), then remembered."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import torch

from ..errors import HookvizError
from .inputs import extract_logits
from .legrad import block_count
from .loaded import LoadedModel
from .method_costs import WHOLE_NETWORK_BACKWARD, MethodCost, method_cost, passes
from .methods import SCORECAM_BATCH, check_method
from .probe import Probe


class CostEstimates:
    """The cost estimates of one kept forward pass: of the input ``inputs`` (1, 3, H, W) at
    ``layer``, whose activations have ``channels`` channels."""

    def __init__(self, loaded: LoadedModel, inputs: torch.Tensor, layer: str, channels: int):
        self._loaded = loaded
        self._inputs = inputs
        self._layer = layer
        self._channels = channels
        self._batch_seconds: float | None = None  # one batch of Score-CAM's masked inputs
        self._ablation_batch_seconds: float | None = None  # one batch of ablated maps
        self._input_seconds: float | None = None  # one forward of the input, with gradients

    def scorecam_cost(self) -> tuple[int, float]:
        """(forward passes, estimated seconds) Score-CAM will take here: one masked input per
        channel, in batches of ``SCORECAM_BATCH``, each batch timed as Score-CAM runs it
        (without gradients or hooks) on one such batch, the first time this is asked (it costs
        that batch). A caller showing progress can refine it from the batches done."""
        batches = -(-self._channels // SCORECAM_BATCH)
        if self._batch_seconds is None:
            count = min(SCORECAM_BATCH, self._channels)
            probe = self._inputs.expand(count, -1, -1, -1).clone()
            with self._loaded.lock, torch.no_grad():
                started = time.perf_counter()
                extract_logits(self._loaded.model(probe))
                self._batch_seconds = time.perf_counter() - started
        return batches, batches * self._batch_seconds

    def method_cost(
        self,
        method: str,
        forward_seconds: float,
        backward_seconds: float | None,
        default_probe: Callable[[], Probe | None],
        /,
        **options: Any,
    ) -> MethodCost:
        """What ``method`` with ``options`` costs beyond the kept forward pass.

        Args:
            method: a method's name.
            forward_seconds: the kept forward pass's time.
            backward_seconds: its fastest backward pass so far (None before the first).
            default_probe: the ``Probe`` of the pass's default target (None where it has none),
                asked only to time a batch of ablated maps.
            options: the method's options.
        """
        method = check_method(method)
        forwards, backwards = passes(method, self._channels, **options)
        backward_to_layer = method not in WHOLE_NETWORK_BACKWARD
        if backward_seconds is None and backward_to_layer and backwards:
            backward_seconds = self._one_backward(default_probe, forward_seconds)
        if 0 < forwards < SCORECAM_BATCH:
            # (the pass's own time counts the image's preprocessing, which the method's passes
            # of the input do not: on a 3000 x 2000 photo it is longer than Lite0's forward)
            forward_seconds = self._one_input()
        blocks = 1
        if method == "legrad":
            blocks = block_count(self._loaded.model, self._layer, options.get("blocks"))
        if method == "ablationcam":
            batch_seconds = functools.partial(self._one_ablation_batch, default_probe)
        else:
            batch_seconds = self._one_batch
        return method_cost(
            method,
            self._channels,
            forward_seconds,
            backward_seconds,
            batch_seconds,
            blocks,
            **options,
        )

    def _one_input(self) -> float:
        """Seconds of one forward pass of the input alone, recording a graph as the methods
        that run a few passes of their own do (Smooth Grad-CAM++, FullGrad, Shapley-CAM,
        ``aug_smooth``), timed the first time it is asked (it costs that forward)."""
        if self._input_seconds is None:
            with self._loaded.lock, torch.inference_mode(False), torch.enable_grad():
                inputs = self._inputs.detach().clone().requires_grad_(True)
                started = time.perf_counter()
                extract_logits(self._loaded.model(inputs))
                self._input_seconds = time.perf_counter() - started
        return self._input_seconds

    def _one_backward(
        self, default_probe: Callable[[], Probe | None], forward_seconds: float
    ) -> float:
        """Seconds of one backward pass to the layer, timed on the default target's gradient
        (which the pass keeps: a CAM of that target then needs no backward of its own). Above
        a late layer it is a small share of the forward pass (a hundredth at Lite0's last
        stage, measured), so a forward's time would say far too much. Where there is no
        default target, or its score does not reach the layer, the forward pass's time."""
        probe = default_probe()
        if probe is None:
            return forward_seconds
        started = time.perf_counter()
        try:
            probe.gradient()
        except HookvizError:
            return forward_seconds
        return time.perf_counter() - started

    def _one_ablation_batch(self, default_probe: Callable[[], Probe | None]) -> float:
        """Seconds of one batch of ``SCORECAM_BATCH`` ablated maps as Ablation-CAM runs it (on
        a CNN the network below the layer runs on the image once, the rest on the batch:
        much less than a batch of copies of the image), timed the first time it is asked."""
        if self._ablation_batch_seconds is None:
            probe = default_probe()
            if probe is None:  # no default target (an embedder without a reference)
                return self._one_batch()
            count = min(SCORECAM_BATCH, self._channels)
            maps = probe.activations.expand(count, -1, -1, -1).clone()
            started = time.perf_counter()
            probe.scores_with_layer(maps)
            self._ablation_batch_seconds = time.perf_counter() - started
        return self._ablation_batch_seconds

    def _one_batch(self) -> float:
        """Seconds of one forward pass of ``SCORECAM_BATCH`` copies of the input (timed the
        first time it is asked: it costs that batch)."""
        self.scorecam_cost()
        return float(self._batch_seconds)
