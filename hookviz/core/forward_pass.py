"""``ForwardPass``: one hooked forward pass of one image at one layer, kept so that any number
of classes can then be explained with a backward pass only (switching the class in the app costs
no new forward). Its results: ``Prediction`` and ``Analysis``.

Safe to call from many threads on one shared ``LoadedModel``: the model's lock is held from
registering the hooks to removing them, so concurrent callers never read each other's
activations. One ``ForwardPass`` may itself be shared by many threads (the app caches it for
every browser session): its remembered results are guarded by a lock of their own.
"""

from __future__ import annotations

import numbers
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from PIL import Image

from ..errors import HookvizError, TargetError
from .cam import GradCAM, cam_result
from .cost_estimates import CostEstimates
from .features import FeatureMaps
from .frame import image_frame
from .grids import grid_view
from .hooks import capture_outputs
from .inputs import ImageInput, check_num_classes, extract_logits, prepare_input
from .layers import layer_table
from .loaded import LoadedModel
from .method_costs import MethodCost
from .method_dispatch import augmented_map, raw_map
from .methods import check_method
from .outputs import detached
from .pass_methods import method_options
from .probe import Probe
from .results_memo import ResultsMemo
from .smoothing import check_augmentable
from .targets import Class, Resolved, TargetContext, resolve_target

# CAM results (and target gradients) a ForwardPass remembers, oldest dropped first.
_REMEMBERED = 16


class Prediction(NamedTuple):
    """One of the top-k classes: ``(index, name, probability)``."""

    index: int
    name: str
    probability: float


@dataclass(frozen=True)
class Analysis:
    """Everything one forward (+ one backward) gives: predictions, feature maps and Grad-CAM.

    Attributes:
        predictions: the top-k classes, most probable first (empty for a model that does not
            score classes: a detector, a segmenter, an embedder).
        features: the layer's feature maps.
        cam: the Grad-CAM of ``cam.target`` at the same layer.
        image_size: (H, W) of the heatmap grid (the original image or the given tensor).
        seconds: compute time behind this result: the forward pass plus this backward pass.
    """

    predictions: tuple[Prediction, ...]
    features: FeatureMaps
    cam: GradCAM
    image_size: tuple[int, int]
    seconds: float

    def _repr_png_(self) -> bytes:
        """The overlay and the feature-map grid side by side, for Jupyter."""
        from .. import render  # deferred: pictures only when asked for

        return render.analysis_picture_png(self)


class ForwardPass:
    """One hooked forward pass of one image at one layer, kept for explaining any class.

    The hook lives only during the forward (registered and removed under the model's lock).
    What is kept is the autograd graph from the layer's output to the model's output (frozen
    weights: nothing upstream of the layer is in it), so ``grad_cam(target)`` costs a backward
    pass only. Drop the object to free that graph.

    Attributes:
        loaded: the model.
        layer: the hooked layer.
        predictions: the top-k classes (empty for a model that does not score classes).
        output: the model's output, detached (a detector's detections, a segmenter's scores).
        context: what targets are resolved against (``hookviz.targets``).
        features: the layer's feature maps, (C, h, w).
        image_size: (H, W) of the heatmap grid.
        picture: the analysed picture (the PIL image, or the tensor with its normalisation
            undone), which the results carry for drawing themselves in a notebook.
        forward_seconds: time of preprocessing plus the forward pass.
        backward_seconds: time of the fastest backward pass to the layer so far (what one
            more class costs), None before the first; the fastest, since the first one in a
            process also pays for warming up.
    """

    def __init__(
        self, loaded: LoadedModel, image: ImageInput, layer: str | None = None, k: int = 5
    ) -> None:
        started = time.perf_counter()
        self.loaded = loaded
        self.layer = resolve_layer(loaded, layer)
        batch, image_size = prepare_input(loaded, image)
        output, captured = _hooked_forward(loaded, [self.layer], batch)
        graph = SharedGraph(captured.tracked[self.layer])
        activations = captured.activations[self.layer][0]
        self._adopt(image, batch, image_size, output, activations, graph, 0, k, started)

    def _adopt(
        self,
        image: ImageInput,
        batch: torch.Tensor,
        image_size: tuple[int, int],
        output: Any,
        activations: torch.Tensor,
        graph: SharedGraph,
        row: int,
        k: int,
        started: float,
    ) -> None:
        """Set this pass up from its forward: ``output`` (in the graph) and ``activations`` of
        its image, row ``row`` of ``graph``'s tracked layer output."""
        self.image_size = image_size
        self.picture = (
            image if isinstance(image, Image.Image) else self.loaded.preprocessing.to_picture(batch)
        )
        self._output = output  # holds the graph back to the layer
        self.output = detached(output)
        self._logits: torch.Tensor | None = None
        if self.loaded.scores_classes:
            self._logits = extract_logits(output)
            check_num_classes(self.loaded, self._logits)
        grid = (int(batch.shape[2]), int(batch.shape[3]))
        self.context = TargetContext(self.loaded, self.output, self.image_size, grid)
        self.frame = image_frame(self.loaded, batch)
        self._batch = batch  # kept for Score-CAM, which masks the input
        self._graph, self._row = graph, row
        self._activations = activations
        # CAMs by (target key, method, options); gradients by target key (a batched backward
        # may seed them). Each is safe to share between threads (``results_memo.py``).
        self._results: ResultsMemo[GradCAM] = ResultsMemo(_REMEMBERED)
        self._gradients: ResultsMemo[torch.Tensor] = ResultsMemo(_REMEMBERED)
        self.features = FeatureMaps(self.layer, self._activations.float().cpu(), grid)
        self.predictions = (
            () if self._logits is None else tuple(top_k(self.loaded, self._logits.detach(), k))
        )
        self.forward_seconds = time.perf_counter() - started
        self.backward_seconds: float | None = None
        self._costs = CostEstimates(self.loaded, batch, self.layer, int(activations.shape[0]))

    def grad_cam(
        self,
        target: object = None,
        method: str = "gradcam",
        *,
        progress: Callable[[int, int], bool | None] | None = None,
        **options: Any,
    ) -> GradCAM:
        """The CAM of ``target`` (default: the top-1 class, a detector's most confident box, a
        segmenter's largest category; see ``hookviz.targets``).

        Most gradient methods cost one backward pass; Eigen-CAM, KPCA-CAM, FEM, Random-CAM,
        CAM and the baselines none; the slow ones a forward pass per channel or sample, in
        batches (``progress`` is told how far they got and may cancel); ``method_cost`` says
        what each costs here. The last few results are remembered, so asking again costs
        nothing.

        Args:
            target: a class index, a target of ``hookviz.targets`` (``Box``, ``Region``,
                ``Similarity``, ...) or a callable scoring the model's output.
            method: a name of ``hookviz.METHODS`` or ``hookviz.BASELINES`` (as for
                ``hookviz.grad_cam``).
            progress: the slow methods (``hookviz.SLOW_METHODS``, aug_smooth): called with
                (steps done, steps in all) before each step; return True to cancel (raises
                ``CancelledError``).
            options: ``eigen_smooth=True`` (the first principal component of the weighted
                activations instead of their sum) and ``aug_smooth=True`` (the mean of the
                maps of the image flipped and scaled by 0.9, 1 and 1.1), as pytorch-grad-cam
                defines them; and the method's own (``hookviz.method_options(method)``).

        Raises:
            TargetError: ``target`` does not apply (a class index out of range, a box nothing
                detected overlaps), or its score does not depend on the layer.
            MethodError: unknown method; ``"cam"`` where the model has no linear head on the
                global average pool of the layer, or the target is not a class.
        """
        method = check_method(method)
        chosen = method_options(method, options)
        if chosen["aug_smooth"]:
            check_augmentable(self.loaded)
        resolved = resolve_target(self.context, target)
        key = (resolved.key, method, _hashable(chosen))
        # Computed once however many threads ask at once (the others wait for it).
        return self._results.get_or_compute(
            key, lambda relay: self._compute(resolved, method, chosen, relay), progress
        )

    def has_result(self, target: object, method: str = "gradcam", **options: Any) -> bool:
        """Whether ``grad_cam(target, method, **options)`` is already computed (a UI can skip
        warnings)."""
        method = check_method(method)
        chosen = _hashable(method_options(method, options))
        key = (resolve_target(self.context, target).key, method, chosen)
        return key in self._results

    def scorecam_cost(self) -> tuple[int, float]:
        """(forward passes, estimated seconds) Score-CAM will take here, its first batch timed
        the first time this is asked (``CostEstimates.scorecam_cost``)."""
        return self._costs.scorecam_cost()

    def method_cost(self, method: str, **options: Any) -> MethodCost:
        """What ``grad_cam(target, method, **options)`` costs here beyond this forward pass:
        its passes of the network and about how long they take (``cost_estimates.py``)."""
        return self._costs.method_cost(
            method, self.forward_seconds, self.backward_seconds, self._default_probe, **options
        )

    def _default_probe(self) -> Probe | None:
        """The ``Probe`` of the default target, None where there is none (an embedder without
        a reference)."""
        try:
            resolved = resolve_target(self.context, None)
        except HookvizError:
            return None
        return self._probe(resolved, {}, None)

    def _compute(
        self,
        resolved: Resolved,
        method: str,
        options: dict[str, Any],
        progress: Callable[[int, int], bool | None] | None,
    ) -> GradCAM:
        if options["aug_smooth"]:
            cam, weights = self._augmented(resolved, method, options, progress), None
        else:
            probe = self._probe(resolved, options, progress)
            raw, weights = raw_map(method, probe, resolved)  # (``method_dispatch.py``)
            cam = torch.relu(raw[0])
            weights = None if weights is None else weights[0]
        return cam_result(
            cam,
            weights,
            self.image_size,
            class_index=resolved.index,
            class_name=resolved.name,
            score=float(resolved.score(self.output)[0]),
            probability=resolved.probability,
            layer=self.layer,
            method=method,
            image=self.picture,
            target=resolved.target,
            frame=self.frame,
        )

    def _augmented(
        self,
        resolved: Resolved,
        method: str,
        options: dict[str, Any],
        progress: Callable[[int, int], bool | None] | None,
    ) -> torch.Tensor:
        """``aug_smooth`` (``augmented_map``): each changed copy of the input gets a forward
        pass of its own; the target is the one resolved on the image itself, for every copy."""
        inner = {**options, "aug_smooth": False}

        def raw_of(changed: torch.Tensor) -> torch.Tensor:
            copy = ForwardPass(self.loaded, changed, self.layer)
            again = resolve_target(copy.context, resolved.target)
            raw, _ = raw_map(method, copy._probe(again, inner, None), again)
            return raw

        return augmented_map(self._batch, progress, raw_of)

    def _probe(
        self,
        resolved: Resolved,
        options: dict[str, Any],
        progress: Callable[[int, int], bool | None] | None,
    ) -> Probe:
        """What the methods may ask of this forward pass (``method_dispatch.py``)."""
        return Probe(
            loaded=self.loaded,
            inputs=self._batch,
            layer=self.layer,
            activations=self._activations.float()[None],
            score=resolved.score,
            logits=None if self._logits is None else self._logits.detach().float(),
            gradient=lambda: self._target_gradient(resolved)[None],
            gradient_of=lambda score: self._backward(lambda: score(self._output).sum())[None],
            progress=progress,
            options=options,
            own_score=float(resolved.score(self.output)[0]),
        )

    def gradient_of(self, score: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """The gradient of any scalar ``score(logits)`` (e.g. the difference of two logits)
        with respect to the layer's activations: (C, h, w) float32, one backward pass."""
        return self._backward(lambda: score(self.class_scores()))

    def class_scores(self) -> torch.Tensor:
        """(1, num_classes) class scores, in the graph (a model that scores classes only)."""
        if self._logits is None:
            raise TargetError(
                f"{self.loaded.name!r} is a {self.loaded.task} model: it has no class scores"
            )
        return self._logits

    def _target_gradient(self, resolved: Resolved) -> torch.Tensor:
        """The gradient of the target's score at the layer, (C, h, w): computed once per
        target (the gradient methods share it), or seeded by a batched backward."""
        kept = self._gradients.get(resolved.key)
        if kept is not None:
            return kept
        gradient = self._backward(lambda: resolved.score(self._output).sum())
        self.seed_gradient(resolved.key, gradient)
        return gradient

    def seed_gradient(self, key: object, gradient: torch.Tensor) -> None:
        """Remember ``gradient`` (C, h, w) as that of the target whose resolved key is ``key``
        (the oldest of ``_REMEMBERED`` dropped first)."""
        self._gradients.remember(key, gradient)

    def _backward(self, score: Callable[[], torch.Tensor]) -> torch.Tensor:
        """The gradient of the scalar ``score()`` with respect to the layer's activations:
        (C, h, w) float32, one backward pass."""
        # Grad mode is thread-local and the caller may be in no_grad/inference mode: even the
        # indexing that picks the score must happen with grad enabled to stay in the graph.
        with self._graph.lock, torch.inference_mode(False), torch.enable_grad():
            started = time.perf_counter()
            value = score()
            if not value.requires_grad:
                raise TargetError(f"the scores do not depend on layer {self.layer!r}")
            # Gradient w.r.t. the activation only: no parameter gradients, nothing written to
            # .grad, and the backward stops at the layer. retain_graph: other classes may follow.
            (gradient,) = torch.autograd.grad(
                value, [self._graph.tracked], retain_graph=True, allow_unused=True
            )
            spent = time.perf_counter() - started
            self.backward_seconds = min(spent, self.backward_seconds or spent)
        if gradient is None:
            raise TargetError(f"the score does not depend on layer {self.layer!r}")
        return gradient[self._row].float()

    @property
    def activations(self) -> torch.Tensor:
        """The layer's activations A, (C, h, w), on the model's device (read-only use)."""
        return self._activations

    @property
    def logits(self) -> torch.Tensor:
        """(num_classes,) class scores, detached, on the model's device."""
        return self.class_scores()[0].detach()

    def analysis(
        self,
        target: object = None,
        method: str = "gradcam",
        *,
        progress: Callable[[int, int], bool | None] | None = None,
        **options: Any,
    ) -> Analysis:
        """Predictions, feature maps and the CAM of ``target``, as one result."""
        started = time.perf_counter()
        cam = self.grad_cam(target, method, progress=progress, **options)
        seconds = self.forward_seconds + time.perf_counter() - started
        return Analysis(self.predictions, self.features, cam, self.image_size, seconds)


class SharedGraph:
    """The tracked output of the hooked layer (N rows, one per image of the forward) and the
    lock its backward passes take: the passes of one batched forward share it."""

    def __init__(self, tracked: torch.Tensor) -> None:
        self.tracked = tracked
        self.lock = threading.Lock()


def _hooked_forward(
    loaded: LoadedModel, layers: Sequence[str], batch: torch.Tensor
) -> tuple[Any, Any]:
    """One forward of ``batch`` with ``layers``' outputs tracked for gradients: the output (in
    the graph) and the capture."""
    # Grad mode is thread-local: enable it here so a caller inside torch.no_grad() or
    # torch.inference_mode() (a validation loop, a Streamlit callback) still gets a graph.
    with (
        loaded.lock,
        torch.inference_mode(False),
        torch.enable_grad(),
        capture_outputs(
            loaded.model, layers, track_grad=True, grids=grid_view(loaded.tokens, batch)
        ) as captured,
    ):
        output = loaded.model(batch)
    return output, captured


def _hashable(options: dict[str, Any]) -> tuple:
    """Options as part of a remembered result's key (lists become tuples)."""
    return tuple(
        (name, tuple(value) if isinstance(value, list) else value)
        for name, value in sorted(options.items())
    )


def check_target(loaded: LoadedModel, target: object, *, classes_only: bool = False) -> None:
    """Refuse, before any work, a target that cannot apply: an integer that is not a class
    index in range, or anything that is not a target; with ``classes_only`` (views that
    explain classes only), anything but None or a class index, and a model without classes.
    (A target of ``hookviz.targets`` is checked against the image when it is resolved.)"""
    if classes_only and not loaded.scores_classes:
        raise TargetError(
            f"this explains a classifier's classes; {loaded.name!r} is a {loaded.task} model"
        )
    if target is None:
        return
    if not classes_only and (callable(target) or hasattr(target, "resolve")):
        return
    if isinstance(target, bool) or not isinstance(target, numbers.Integral):
        kinds = "(int)" if classes_only else "(int), a hookviz.targets target or a callable"
        raise TargetError(f"target must be a class index {kinds}, got {type(target).__name__}")
    Class(int(target)).resolve_index(loaded)


def top_k(loaded: LoadedModel, logits: torch.Tensor, k: int) -> list[Prediction]:
    """The k most probable classes of the first row of ``logits``."""
    probabilities = torch.softmax(logits.float(), dim=1)[0]
    values, indices = probabilities.topk(max(1, min(k, probabilities.numel())))
    return [
        Prediction(int(i), loaded.class_name(int(i)), float(p))
        for p, i in zip(values.tolist(), indices.tolist(), strict=True)
    ]


def resolve_layer(loaded: LoadedModel, layer: str | None) -> str:
    """The hookable layer called ``layer``, or the default one for None (LayerError if not)."""
    table = layer_table(loaded)
    if layer is None:
        return table.default
    return table.get(layer).name
