"""CAM methods that probe the network beyond one gradient at the layer: Ablation-CAM,
Shapley-CAM, Finer-CAM and FullGrad (pytorch-grad-cam's ``AblationCAM``, ``ShapleyCAM``,
``FinerCAM``, ``FullGrad``). Each is a function of a ``Probe`` returning the map before ReLU
(1, h, w) and its channel weights (1, C) or None; FullGrad's map is on the input's grid.

Every pass they run themselves holds the model's lock, registers its hooks only for that pass
(removed also after an error) and asks ``torch.autograd.grad`` for gradients, so nothing is
written to the parameters' ``.grad`` and the model is left as it was."""

from __future__ import annotations

import numbers
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from .cam import weighted_sum
from .grids import grid_view
from .hooks import capture_outputs, forward_hooks
from .loaded import LoadedModel
from .methods import METHODS, NEEDS_GRADIENT, MethodError, check_method
from .probe import Probe

# The methods' options and their defaults, pytorch-grad-cam's.
ABLATIONCAM_DEFAULTS = {"batch_size": 32}
FINERCAM_DEFAULTS = {"alpha": 1.0, "comparison_categories": (1, 2, 3), "base_method": "gradcam"}
# Ablation-CAM: how far below the layer's smallest activation an ablated channel is set when
# that minimum is not 0 (pytorch-grad-cam's ``AblationLayer``): far below anything the layer
# outputs, so a following ReLU silences the channel as zeroing does after one.
ABLATION_OFFSET = 1e7
# Shapley-CAM: ``sdpa_kernel`` sets process-wide flags and restores on exit what it found on
# entry, so two threads interleaving would leave the fused kernels off for good.
_SDPA_LOCK = threading.Lock()
# Finer-CAM: keeps its score finite when the compared classes' probabilities all underflow
# (pytorch-grad-cam's ``FinerWeightedTarget``).
_EPS_FINER = 1e-9
# FullGrad: the guard of pytorch-grad-cam's ``scale_cam_image`` (a flat map stays flat).
_EPS_SCALE = 1e-7
# FullGrad: the modules whose bias it reads, by exact type as pytorch-grad-cam selects them (a
# subclass may compute something else: timm's BatchNormAct2d also applies its activation).
_BIAS_TYPES = (nn.Conv2d, nn.BatchNorm2d)


def ablationcam(probe: Probe) -> tuple[torch.Tensor, torch.Tensor]:
    """Ablation-CAM, Desai & Ramaswamy 2020 (WACV, "Ablation-CAM: Visual Explanations for
    Deep Convolutional Network via Gradient-free Localization"), as pytorch-grad-cam's
    ``AblationCAM`` computes it: with y the target's score and y_k its score when channel k of
    the layer is ablated,
    w_k = (y - y_k) / y;  L = sum_k w_k A_k.
    No gradient: one forward pass per channel, ``batch_size`` channels at a time (the network
    below the layer runs once per batch; the layer's output is replaced).

    Ablating sets the channel to 0 where the layer's smallest activation is 0 (after a ReLU),
    else to that minimum minus ``ABLATION_OFFSET``, the same value for every channel.
    (pytorch-grad-cam takes the minimum of the batch it is ablating, so the channel at place i
    of a batch, counting from 0, goes i times ``ABLATION_OFFSET`` lower still: its weight would
    depend on its place in the batch. Where a ReLU-like function follows, as usual, both give
    the same scores.)"""
    batch_size = _positive_int(_options(probe, ABLATIONCAM_DEFAULTS), "batch_size")
    a = probe.activations
    original = probe.own_score  # (the forward pass already made: no pass of its own)
    if original == 0.0:
        raise MethodError(
            "Ablation-CAM divides each channel's drop in score by the target's score, which is "
            "0 here: pick another target"
        )
    value = _ablation_value(a)
    channels = a.shape[1]
    ablated = []
    for start in range(0, channels, batch_size):
        probe.tick(start, channels, "Ablation-CAM")
        ablated.append(probe.scores_with_layer(_ablated(a, start, batch_size, value)))
    weights = ((original - torch.cat(ablated)) / original)[None].to(a.device, torch.float32)
    return weighted_sum(a, weights), weights


def _ablation_value(a: torch.Tensor) -> float:
    """What an ablated channel is set to (pytorch-grad-cam's ``AblationLayer``)."""
    low = float(a.min())
    return 0.0 if low == 0.0 else low - ABLATION_OFFSET


def _ablated(a: torch.Tensor, start: int, batch_size: int, value: float) -> torch.Tensor:
    """(n, C, h, w): copies of the activations (1, C, h, w), copy i with channel start + i set
    to ``value``, for the channels from ``start`` on (at most ``batch_size``)."""
    count = min(batch_size, a.shape[1] - start)
    copies = a.expand(count, -1, -1, -1).clone()
    rows = torch.arange(count, device=a.device)
    copies[rows, start + rows] = value
    return copies


def shapleycam(probe: Probe) -> tuple[torch.Tensor, torch.Tensor]:
    """Shapley-CAM, Cai 2025 (arXiv:2501.06261, "CAMs as Shapley Value-based Explainers"), as
    pytorch-grad-cam's ``ShapleyCAM`` computes it: the second-order Taylor expansion of the
    score around the activations gives each channel's Shapley value; with G = dy/dA and
    H = d^2y/dA^2 (H A: the Hessian-vector product with the activations themselves),
    w_k = mean_ij (G - 1/2 H A)_kij;  L = sum_k w_k A_k.
    Where the network after the layer is piecewise linear (ReLU, max-pooling, linear layers),
    H A = 0 and it is Grad-CAM."""
    map_, weights, _ = shapley_to_the_output(
        probe.loaded, probe.inputs, probe.layer, lambda _output: probe.score
    )
    return map_, weights


def shapley_to_the_output(
    loaded: LoadedModel,
    inputs: torch.Tensor,
    layer: str,
    target_of: Callable[[Any], Callable[[Any], torch.Tensor]],
) -> tuple[torch.Tensor, torch.Tensor, Any]:
    """Shapley-CAM on a forward pass of its own, the explained target chosen from that pass's
    output (``target_of``: the output, in the graph -> the target's score function): the map
    (1, h, w) before ReLU, its weights (1, C) and the model's output."""
    a, gradient, hessian_product, output = _gradient_and_hessian_product(
        loaded, inputs, layer, target_of
    )
    weights = (gradient - 0.5 * hessian_product).mean(dim=(-2, -1))
    return weighted_sum(a, weights), weights, output


def _gradient_and_hessian_product(
    loaded: LoadedModel,
    inputs: torch.Tensor,
    layer: str,
    target_of: Callable[[Any], Callable[[Any], torch.Tensor]],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, Any]:
    """The activations A, the gradient G = dy/dA and the Hessian-vector product H A, each
    (1, C, h, w) float32, from a fresh forward pass of the image; and its output."""
    try:
        return _second_order_pass(loaded, inputs, layer, target_of, plain_attention=False)
    except _NoSecondDerivative as missing:
        if "attention" not in str(missing):
            raise
    # A transformer's fused attention kernels have no second derivative; the plain one is
    # made of ops that have.
    return _second_order_pass(loaded, inputs, layer, target_of, plain_attention=True)


def _second_order_pass(
    loaded: LoadedModel,
    inputs: torch.Tensor,
    layer: str,
    target_of: Callable[[Any], Callable[[Any], torch.Tensor]],
    plain_attention: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, Any]:
    """One forward pass with plain autograd nodes after the layer (the kept pass records lean
    ones, which need not have a second derivative), the gradient at the layer with its graph,
    and the derivative of that."""
    with loaded.lock, torch.inference_mode(False), torch.enable_grad():
        with (
            _attention(plain_attention),
            capture_outputs(
                loaded.model,
                [layer],
                track_grad=True,
                lean=False,
                grids=grid_view(loaded.tokens, inputs),
            ) as captured,
        ):
            output = loaded.model(inputs)
        tracked = captured.tracked[layer]
        score = target_of(output)
        (gradient,) = torch.autograd.grad(
            score(output).sum(), [tracked], create_graph=True, allow_unused=True
        )
        if gradient is None:
            raise MethodError(f"the target's score does not depend on layer {layer!r}")
        hessian_product = None
        # No graph behind the gradient: it does not depend on A (linear layers after it).
        if gradient.requires_grad:
            hessian_product = _hessian_product(gradient, tracked)
    activations = captured.activations[layer].float()
    gradient = gradient.detach().float()
    if hessian_product is None:
        return activations, gradient, torch.zeros_like(gradient), output
    return activations, gradient, hessian_product.detach().float(), output


class _NoSecondDerivative(MethodError):
    """PyTorch has no second derivative for an op after the layer."""


def _hessian_product(gradient: torch.Tensor, tracked: torch.Tensor) -> torch.Tensor | None:
    """H A: the derivative of G . A (A held fixed) with respect to A; None where G does not
    depend on A."""
    try:
        (found,) = torch.autograd.grad(
            gradient, [tracked], grad_outputs=tracked.detach(), allow_unused=True
        )
    except RuntimeError as error:
        if "derivative for" not in str(error):
            raise
        raise _NoSecondDerivative(
            "Shapley-CAM needs the second derivative of the network after the layer, which "
            f"PyTorch does not have here ({error}); pick a later layer or another method"
        ) from None
    return found


@contextmanager
def _attention(plain: bool) -> Iterator[None]:
    """With ``plain``, scaled dot-product attention runs unfused while inside."""
    if not plain:
        yield
        return
    with _SDPA_LOCK, sdpa_kernel([SDPBackend.MATH]):
        yield


def finercam(probe: Probe) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Finer-CAM, Zhang et al. 2025 (arXiv:2501.11309, "Finer-CAM: Spotting the Difference
    Reveals Finer Details for Visual Explanation"), as pytorch-grad-cam's ``FinerCAM`` computes
    it: the base method (Grad-CAM by default) explains, instead of the target's logit y_c, its
    margin over the classes most similar to it, the classes j at ranks
    ``comparison_categories`` (1, 2, 3) when all are sorted by |y_j - y_c| (rank 0: the target),
    each weighted by its softmax probability p_j:
    y' = sum_j p_j (y_c - alpha y_j) / (sum_j p_j + 1e-9)
    (alpha = 1: the pure difference; alpha = 0: the target alone, weighted). The probabilities
    are differentiated too. What tells the target from its look-alikes stands out.

    Needs the model's class scores (a classifier)."""
    classes = probe.class_scores().shape[0]  # refuses a model without classes
    options = _options(probe, FINERCAM_DEFAULTS)
    base = _base_method(options["base_method"])
    alpha = float(options["alpha"])
    ranks = _ranks(options["comparison_categories"], classes)
    # (the kept forward pass's graph serves: the margin is a function of its class scores)
    gradient = probe.gradient_of(_finer_score(probe, ranks, alpha))
    return METHODS[base](probe.activations, gradient)


def _finer_score(probe: Probe, ranks: list[int], alpha: float) -> Callable[[Any], torch.Tensor]:
    """Finer-CAM's score of a model output, (N,) (pytorch-grad-cam's ``FinerWeightedTarget``
    with its classes picked as ``FinerCAM`` picks them)."""

    def score(output: Any) -> torch.Tensor:
        logits = probe.logits_of(output)
        main = probe.score(output)
        distance = (logits.detach().float() - main.detach().float()[:, None]).abs()
        order = torch.argsort(distance, dim=-1, stable=True)
        compared = order[:, ranks]
        weights = torch.softmax(logits, dim=-1).gather(1, compared)
        margins = main[:, None] - alpha * logits.gather(1, compared)
        return (weights * margins).sum(dim=1) / (weights.sum(dim=1) + _EPS_FINER)

    return score


def _base_method(name: object) -> str:
    """Finer-CAM's base method, one that weighs the activations by the gradient."""
    base = check_method(str(name))
    if base not in NEEDS_GRADIENT:
        raise MethodError(
            f"finercam's base_method must use the gradient: one of {', '.join(NEEDS_GRADIENT)}; "
            f"got {base!r}"
        )
    return base


def _ranks(given: object, classes: int) -> list[int]:
    """Finer-CAM's comparison ranks that ``classes`` classes have (pytorch-grad-cam drops the
    others)."""
    given = [given] if isinstance(given, numbers.Integral) else given
    if not isinstance(given, (list, tuple)) or not all(map(_is_rank, given)):
        raise MethodError(
            "finercam's comparison_categories are ranks (0: the target itself, 1: the class "
            f"whose logit is closest to it, ...): non-negative integers; got {given!r}"
        )
    kept = [int(rank) for rank in given if rank < classes]
    if not kept:
        raise MethodError(
            f"finercam: none of the comparison_categories {given!r} is a rank among the "
            f"model's {classes} classes"
        )
    return kept


def _is_rank(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 0


def fullgrad(probe: Probe) -> tuple[torch.Tensor, None]:
    """FullGrad, Srinivas & Fleuret 2019 (arXiv:1905.00780, "Full-Gradient Representation for
    Neural Network Visualization", sec. 4), as pytorch-grad-cam's ``FullGrad`` computes it:
    S = psi(|x * dy/dx|) + sum_l sum_c psi(|b_lc * dy/dz_lc|),
    where z_l is the output of every Conv2d and BatchNorm2d with a bias b_l (for BatchNorm,
    its constant term b - mu w / sqrt(var + eps)) and psi scales one channel's map to [0, 1]
    (min-max on its own grid) and resizes it bilinearly to the input. Independent of the
    layer: returns (1, H, W) on the input's grid, non-negative, and no channel weights.

    Resizing is linear, so each layer's channels are summed on their own grid and resized
    once: the same sum, at a fraction of the memory."""
    inputs, input_gradient, biases = _input_and_bias_gradients(probe)
    size = (int(inputs.shape[-2]), int(inputs.shape[-1]))
    total = _scaled_channels(inputs * input_gradient).sum(dim=1)
    for bias, gradient in biases:
        summed = _scaled_channels(bias[None, :, None, None] * gradient).sum(dim=1, keepdim=True)
        total = total + F.interpolate(summed, size=size, mode="bilinear", align_corners=False)[:, 0]
    return total, None


def _scaled_channels(maps: torch.Tensor) -> torch.Tensor:
    """(1, C, h, w) -> |maps|, each channel scaled to [0, 1] (pytorch-grad-cam's
    ``scale_cam_image``: minus its minimum, over its maximum + 1e-7)."""
    maps = maps.abs()
    maps = maps - maps.amin(dim=(-2, -1), keepdim=True)
    return maps / (maps.amax(dim=(-2, -1), keepdim=True) + _EPS_SCALE)


def _input_and_bias_gradients(
    probe: Probe,
) -> tuple[torch.Tensor, torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
    """One forward and one backward pass of the image: the input x (1, 3, H, W), dy/dx, and
    (b_l (C,), dy/dz_l (1, C, h, w)) for every call of a bias module whose output the score
    depends on, all float32."""
    loaded = probe.loaded
    modules = _bias_modules(loaded.model)
    with loaded.lock, torch.inference_mode(False), torch.enable_grad():
        inputs = probe.inputs.detach().clone().requires_grad_(True)
        with _recorded_outputs(modules) as outputs:
            score = probe.score(loaded.model(inputs)).sum()
        tensors = [tensor for _, tensor in outputs]
        found = torch.autograd.grad(score, [inputs, *tensors], allow_unused=True)
        biases = {name: _bias_of(module) for name, module in modules.items()}
    if found[0] is None:
        raise MethodError("the target's score does not depend on the input")
    pairs = [
        (biases[name], gradient.float())
        for (name, _), gradient in zip(outputs, found[1:], strict=True)
        if gradient is not None
    ]
    return inputs.detach().float(), found[0].float(), pairs


def _bias_modules(model: nn.Module) -> dict[str, nn.Module]:
    """The Conv2d and BatchNorm2d modules with a bias, by name."""
    return {
        name: module
        for name, module in model.named_modules()
        if type(module) in _BIAS_TYPES and module.bias is not None
    }


def _bias_of(module: nn.Module) -> torch.Tensor:
    """(C,) float32 constant term of the module's output: a Conv2d's bias; a BatchNorm2d's,
    in eval mode, b - mu w / sqrt(var + eps) (FullGrad's official implementation; with no
    running statistics it normalises by the batch's own, and b is the constant term)."""
    with torch.no_grad():
        bias = module.bias.float()
        if isinstance(module, nn.BatchNorm2d) and module.running_mean is not None:
            scale = module.weight.float() / torch.sqrt(module.running_var.float() + module.eps)
            bias = bias - module.running_mean.float() * scale
        return bias.detach()


@contextmanager
def _recorded_outputs(
    modules: dict[str, nn.Module],
) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """While inside, every call of ``modules`` appends (name, its output) to the list given;
    downstream gets a copy, so an in-place op after the module (ReLU(inplace=True), a residual
    ``+=``) leaves the recorded tensor, and the gradient with respect to it, as they were."""
    recorded: list[tuple[str, torch.Tensor]] = []

    def hook_for(name: str) -> Callable[[nn.Module, tuple[Any, ...], Any], Any]:
        def hook(_module: nn.Module, _inputs: tuple[Any, ...], output: Any) -> Any:
            if not isinstance(output, torch.Tensor) or not output.requires_grad:
                return None
            recorded.append((name, output))
            return output.clone()

        return hook

    with forward_hooks(modules, hook_for):
        yield recorded


def _options(probe: Probe, defaults: dict[str, Any]) -> dict[str, Any]:
    """The method's options: its defaults, updated with the caller's."""
    return {**defaults, **(probe.options or {})}


def _positive_int(options: dict[str, Any], name: str) -> int:
    value = options[name]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise MethodError(f"{name} must be a positive integer, got {value!r}")
    return value


PROBING_METHODS: dict[str, tuple[Callable[[Probe], Any], dict[str, Any]]] = {
    "ablationcam": (ablationcam, ABLATIONCAM_DEFAULTS),
    "shapleycam": (shapleycam, {}),
    "finercam": (finercam, FINERCAM_DEFAULTS),
    "fullgrad": (fullgrad, {}),
}
