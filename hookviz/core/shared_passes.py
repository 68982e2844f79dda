"""Several callers' forward passes as one batch: what lets a GPU serve a room.

On a GPU one image uses a sliver of the device; thirty students' analyses one after another
cost thirty times one. ``forward_passes`` runs several images through the model in one hooked
forward and hands back one ``ForwardPass`` per image that behaves exactly as that image's own
(same predictions, feature maps and every CAM, any class later), and ``seed_gradients`` gives
all of them their first target's gradient from one backward pass. ``Batcher`` collects the
requests different threads (browser sessions) make within a few milliseconds and runs them
that way.

Rows of a batch are independent in inference (BatchNorm uses its running statistics; nothing
mixes images), so row i of the batched output, and its gradient, is image i's alone. Only
classifiers whose output is one tensor are batched, and only images fed at the same size; the
rest run alone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from ..errors import HookvizError
from .forward_pass import ForwardPass, SharedGraph, _hooked_forward, resolve_layer
from .inputs import ImageInput, prepare_input
from .loaded import LoadedModel
from .targets import resolve_target

DEFAULT_WINDOW_S = 0.005
DEFAULT_MAX_BATCH = 8


def can_batch(loaded: LoadedModel) -> bool:
    """Whether ``loaded``'s analyses can share a batch: a classifier (its output one tensor of
    class scores per image)."""
    return loaded.task == "classification"


def forward_passes(
    loaded: LoadedModel, images: Sequence[ImageInput], layer: str | None = None, k: int = 5
) -> list[ForwardPass]:
    """One ``ForwardPass`` per image, from a single hooked forward of all of them.

    Each equals ``ForwardPass(loaded, image, layer, k)``: the same predictions, feature maps
    and CAMs, for any target asked later (a later backward runs on the shared graph and keeps
    its own row). The passes share one graph: it is freed when all of them are dropped.

    Raises:
        HookvizError: the model's analyses cannot share a batch (``can_batch``), or the images
            are fed at different sizes.
    """
    if not can_batch(loaded):
        raise HookvizError(f"{loaded.name!r} is a {loaded.task} model: it is not batched")
    started = time.perf_counter()
    prepared = [prepare_input(loaded, image) for image in images]
    return _batched(loaded, images, prepared, resolve_layer(loaded, layer), k, started)


def _batched(
    loaded: LoadedModel,
    images: Sequence[ImageInput],
    prepared: Sequence[tuple[torch.Tensor, tuple[int, int]]],
    name: str,
    k: int,
    started: float,
) -> list[ForwardPass]:
    """``forward_passes`` of images already prepared (their inputs and grids)."""
    shapes = {tuple(batch.shape) for batch, _ in prepared}
    if len(shapes) != 1:
        raise HookvizError(f"images fed at different sizes cannot share a batch: {shapes}")
    batch = torch.cat([one for one, _ in prepared])
    output, captured = _hooked_forward(loaded, [name], batch)
    if not isinstance(output, torch.Tensor):
        raise HookvizError(f"{loaded.name!r} does not return one tensor: it is not batched")
    graph = SharedGraph(captured.tracked[name])
    passes = []
    for row, (image, (one, size)) in enumerate(zip(images, prepared, strict=True)):
        made = ForwardPass.__new__(ForwardPass)
        made.loaded, made.layer = loaded, name
        activations = captured.activations[name][row]
        made._adopt(image, one, size, output[row : row + 1], activations, graph, row, k, started)
        passes.append(made)
    return passes


def seed_gradients(passes: Sequence[ForwardPass], targets: Sequence[object]) -> None:
    """Give each pass (of one ``forward_passes`` batch) the gradient of its target's score
    from one backward pass of all of them: a gradient method's CAM of that target then costs
    no backward of its own."""
    graph = passes[0]._graph
    chosen = []
    for made, target in zip(passes, targets, strict=True):
        try:
            chosen.append((made, resolve_target(made.context, target)))
        except HookvizError:
            continue  # (a target that does not apply: that caller is told when it asks)
    if not chosen:
        return
    with graph.lock, torch.inference_mode(False), torch.enable_grad():
        total = sum(resolved.score(made._output).sum() for made, resolved in chosen)
        if not total.requires_grad:
            return  # (each pass reports it when asked, naming its layer)
        (gradient,) = torch.autograd.grad(
            total, [graph.tracked], retain_graph=True, allow_unused=True
        )
    if gradient is None:
        return
    for made, resolved in chosen:
        made.seed_gradient(resolved.key, gradient[made._row].float())


def layer_passes(
    loaded: LoadedModel, image: ImageInput, layers: Sequence[str], k: int = 5
) -> list[ForwardPass]:
    """One ``ForwardPass`` per layer (resolved names, each once) of one image, from a single
    forward that hooks them all: each equals ``ForwardPass(loaded, image, layer, k)``. Layer
    fusion uses them; ``seed_layer_gradients`` then differentiates all layers at once."""
    started = time.perf_counter()
    batch, size = prepare_input(loaded, image)
    output, captured = _hooked_forward(loaded, layers, batch)
    passes = []
    for name in layers:
        made = ForwardPass.__new__(ForwardPass)
        made.loaded, made.layer = loaded, name
        graph = SharedGraph(captured.tracked[name])
        made._adopt(image, batch, size, output, captured.activations[name][0], graph, 0, k, started)
        # the passes after the first adopt its picture: a tensor's (its normalisation undone)
        # is then drawn once, not once per layer
        image = made.picture
        passes.append(made)
    return passes


def seed_layer_gradients(passes: Sequence[ForwardPass], target: object) -> None:
    """Give each pass of ``layer_passes`` the gradient of ``target``'s score at its layer, all
    from one backward pass (a pass the score does not depend on is left to say so when
    asked)."""
    try:
        resolved = resolve_target(passes[0].context, target)
    except HookvizError:
        return  # (the first pass asked reports it)
    with torch.inference_mode(False), torch.enable_grad():
        value = resolved.score(passes[0]._output).sum()
        if not value.requires_grad:
            return
        gradients = torch.autograd.grad(
            value, [made._graph.tracked for made in passes], retain_graph=True, allow_unused=True
        )
    for made, gradient in zip(passes, gradients, strict=True):
        if gradient is not None:
            made.seed_gradient(resolved.key, gradient[0].float())


@dataclass
class _Request:
    image: ImageInput
    target: object
    prepared: tuple[torch.Tensor, tuple[int, int]]
    done: threading.Event = field(default_factory=threading.Event)
    result: ForwardPass | None = None
    error: BaseException | None = None


class Batcher:
    """Forward passes of one model asked by several threads, run in batches.

    ``forward_pass(image, layer, target)`` returns what ``ForwardPass(loaded, image, layer)``
    would, with ``target``'s gradient seeded. A request waits ``window_s`` for others of the
    same layer and input size (at most ``max_batch`` in all); they then run as one batched
    forward and one backward. A model that cannot batch, or a window of 0, runs each alone.
    """

    def __init__(
        self,
        loaded: LoadedModel,
        window_s: float = DEFAULT_WINDOW_S,
        max_batch: int = DEFAULT_MAX_BATCH,
    ) -> None:
        self.loaded = loaded
        self.window_s = window_s
        self.max_batch = max_batch
        self._lock = threading.Lock()
        self._open: dict[tuple, list[_Request]] = {}
        self.batches_run: list[int] = []  # the size of each batch run (for benchmarks)

    def forward_pass(
        self, image: ImageInput, layer: str | None = None, target: object = None, k: int = 5
    ) -> ForwardPass:
        if self.window_s <= 0 or not can_batch(self.loaded):
            return ForwardPass(self.loaded, image, layer, k)
        name = resolve_layer(self.loaded, layer)
        prepared = prepare_input(self.loaded, image)
        key = (name, tuple(prepared[0].shape), k)
        request = _Request(image, target, prepared)
        with self._lock:
            waiting = self._open.get(key)
            leader = waiting is None
            if leader:
                waiting = self._open[key] = []
            waiting.append(request)
            full = len(waiting) >= self.max_batch
            if full:
                del self._open[key]  # the next request starts a new batch
        if leader:
            try:
                if not full:
                    time.sleep(self.window_s)
            finally:  # (whatever happens to this thread, the batch runs: others wait on it)
                with self._lock:
                    if self._open.get(key) is waiting:
                        del self._open[key]
                self._run(waiting, name, k)
        request.done.wait()
        if request.error is not None:
            raise request.error
        return request.result

    def _run(self, requests: list[_Request], layer: str, k: int) -> None:
        try:
            images = [r.image for r in requests]
            prepared = [r.prepared for r in requests]
            passes = _batched(self.loaded, images, prepared, layer, k, time.perf_counter())
            self.batches_run.append(len(passes))
            seed_gradients(passes, [r.target for r in requests])
            for request, made in zip(requests, passes, strict=True):
                request.result = made
        except BaseException as error:  # every caller of the batch is told
            for request in requests:
                request.error = error
        finally:
            for request in requests:
                request.done.set()
