"""``Probe``: what a CAM method that needs more than the forward pass's activations and one
gradient may ask of the model (Ablation-CAM's forwards with a channel removed at the layer,
SS-CAM's and IS-CAM's masked inputs, Smooth Grad-CAM++'s noisy inputs, Shapley-CAM's second
derivative, FullGrad's bias gradients). Methods reach the model through it only, so every
pass runs under the model's lock, with its hooks removed afterwards, and can be cancelled.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from .grids import grid_view
from .hooks import capture_outputs, replace_output
from .inputs import extract_logits
from .loaded import LoadedModel
from .methods import SCORECAM_BATCH, CancelledError, MethodError

# Inputs per forward pass when a method runs many (Score-CAM's batch size, as its references).
PROBE_BATCH = SCORECAM_BATCH


@dataclass
class Probe:
    """One image's forward pass at one layer, as the costly CAM methods use it.

    Attributes:
        loaded: the model (its lock is taken for every pass).
        inputs: (1, 3, H, W) the model's input.
        layer: the explained layer's name.
        activations: (1, C, h, w) float32 activations of the layer for ``inputs``.
        score: the explained target: a model output -> (N,) scores, differentiable.
        logits: (1, K) the class scores of this forward pass (detached); None for a model
            that scores no classes.
        gradient: () -> (1, C, h, w) the gradient of the target's score at the layer (one
            backward pass of the kept forward pass, computed once).
        gradient_of: score -> (1, C, h, w) the gradient at the layer of another score of the
            model's output (a model output -> (N,) scores), one backward pass of the kept
            forward pass each call.
        progress: called with (steps done, steps in all) before each step of a long method;
            returning True cancels (``CancelledError``).
        options: the method's options, as the caller gave them.
        own_score: the target's score of this forward pass (the one its output gives).
    """

    loaded: LoadedModel
    inputs: torch.Tensor
    layer: str
    activations: torch.Tensor
    score: Callable[[Any], torch.Tensor]
    logits: torch.Tensor | None
    gradient: Callable[[], torch.Tensor]
    gradient_of: Callable[[Callable[[Any], torch.Tensor]], torch.Tensor]
    progress: Callable[[int, int], bool | None] | None = None
    options: dict[str, Any] | None = None
    own_score: float = float("nan")
    # whether the network below the layer may run on the image once (scores_with_layer):
    # None until the first batch has told
    _below_once: bool | None = field(default=None, init=False, repr=False)

    def tick(self, done: int, total: int, what: str) -> None:
        """Report progress; raise ``CancelledError`` when the caller asks to stop."""
        report_progress(self.progress, done, total, what)

    def class_scores(self) -> torch.Tensor:
        """(K,) the class scores of the image (a classifier's method only)."""
        if self.logits is None:
            raise MethodError(
                f"this method compares classes; {self.loaded.name!r} is a "
                f"{self.loaded.task} model and scores none"
            )
        return self.logits[0]

    def scores(
        self,
        inputs: torch.Tensor,
        score: Callable[[Any], torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """(N,) float32 target scores of N inputs, without gradients, ``PROBE_BATCH`` at a
        time (the caller reports progress between its own calls)."""
        score = score or self.score
        found = []
        with self.loaded.lock, torch.inference_mode(False), torch.no_grad():
            for start in range(0, inputs.shape[0], PROBE_BATCH):
                found.append(score(self.loaded.model(inputs[start : start + PROBE_BATCH])).float())
        return torch.cat(found)

    def layer_and_gradient(
        self, inputs: torch.Tensor, score: Callable[[Any], torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A fresh forward pass of N ``inputs`` and one backward of their summed target
        scores: the layer's activations and their gradients, each (N, C, h, w) float32."""
        score = score or self.score
        with (
            self.loaded.lock,
            torch.inference_mode(False),
            torch.enable_grad(),
            capture_outputs(
                self.loaded.model,
                [self.layer],
                track_grad=True,
                grids=grid_view(self.loaded.tokens, inputs),
            ) as captured,
        ):
            output = self.loaded.model(inputs)
            tracked = captured.tracked[self.layer]
            (gradient,) = torch.autograd.grad(score(output).sum(), [tracked], allow_unused=True)
        if gradient is None:
            raise MethodError(f"the target's score does not depend on layer {self.layer!r}")
        activations = captured.activations[self.layer]
        return activations.detach().float(), gradient.detach().float()

    def scores_with_layer(self, replaced: torch.Tensor) -> torch.Tensor:
        """(N,) float32 target scores of the image with the layer's output replaced by each of
        ``replaced`` (N, C, h, w), without gradients, ``PROBE_BATCH`` at a time: its output is
        swapped for the replacements (a transformer's token grid is turned back into tokens)
        and the rest of the network runs on them.

        On a CNN the network below the layer runs on the image once per batch, not once per
        replacement (whose output it would throw away): the network above takes a batch of
        maps as any batch, the image's own skip connections broadcast. The first batch of a
        probe carries the layer's own activations too, which must give the forward pass's own
        score; where they do not, or the model cannot take it (a detector's image list, a
        concatenation of the image's maps), every batch runs on copies of the image, as the
        references run it."""
        found = []
        with self.loaded.lock, torch.inference_mode(False), torch.no_grad():
            for start in range(0, replaced.shape[0], PROBE_BATCH):
                chunk = replaced[start : start + PROBE_BATCH]
                if self._below_once is None:
                    found.append(self._first_batch(chunk))
                else:
                    found.append(self._scores_replaced(chunk, copies=not self._below_once))
        return torch.cat(found)

    def _first_batch(self, chunk: torch.Tensor) -> torch.Tensor:
        """``chunk``'s scores, with the activations themselves run first: the image once below
        the layer is kept for the probe's next batches when they give the pass's own score."""
        checked = torch.cat([self.activations.to(chunk), chunk])
        self._below_once = False
        if self.loaded.tokens is None and math.isfinite(self.own_score):
            try:
                once = self._scores_replaced(checked, copies=False)
            except (RuntimeError, MethodError, ValueError, IndexError):
                once = None
            own = torch.tensor(self.own_score)
            if once is not None and torch.isclose(once[0], own, rtol=1e-4, atol=1e-5):
                self._below_once = True
                return once[1:]
        return self._scores_replaced(checked, copies=True)[1:]

    def _scores_replaced(self, chunk: torch.Tensor, copies: bool) -> torch.Tensor:
        """The target's scores with the layer's output replaced by ``chunk``, the network below
        it run on ``chunk``'s count of copies of the image, or on the image once."""
        count = chunk.shape[0]
        inputs = self.inputs.expand(count, -1, -1, -1) if copies else self.inputs

        def swap(output: torch.Tensor) -> torch.Tensor:
            if output.shape[1:] != chunk.shape[1:] or output.shape[0] != inputs.shape[0]:
                raise MethodError(
                    f"layer {self.layer!r} gives {tuple(output.shape)}, not the "
                    f"{tuple(chunk.shape)} maps this method replaces it with"
                )
            return chunk.to(output.dtype)

        with replace_output(
            self.loaded.model, self.layer, swap, grid_view(self.loaded.tokens, inputs)
        ):
            output = self.loaded.model(inputs)
        scores = self.score(output).float().reshape(-1)
        if scores.shape != (count,):
            raise MethodError(f"{count} replacements gave {scores.numel()} scores")
        return scores

    def logits_of(self, output: Any) -> torch.Tensor:
        """(N, K) class scores of a model output (a classifier's)."""
        return extract_logits(output)


def report_progress(
    progress: Callable[[int, int], bool | None] | None, done: int, total: int, what: str
) -> None:
    """Tell ``progress`` (if any) that ``done`` of ``total`` steps of ``what`` are done; raise
    ``CancelledError`` when it answers True."""
    if progress is not None and progress(done, total):
        raise CancelledError(f"{what} was cancelled")
