"""CAM methods that average over many perturbed copies of the input: SS-CAM, IS-CAM and
Smooth Grad-CAM++ (TorchCAM's ``SSCAM``, ``ISCAM``, ``SmoothGradCAMpp``). Each is a function
of a ``Probe`` returning the map before ReLU (1, h, w) and its channel weights (1, C).

The noise is drawn as TorchCAM draws it, N(0, std^2) on the CPU, one tensor per sample in the
order TorchCAM draws them, but from a ``torch.Generator`` seeded with the ``seed`` option: the
same call gives the same map, and seeding torch's global generator with that seed before
TorchCAM runs gives it the very same noise."""

from __future__ import annotations

import math
from collections.abc import Callable
from numbers import Integral, Real
from typing import Any

import torch
import torch.nn.functional as F

from .cam import weighted_sum
from .methods import MethodError
from .probe import Probe

# TorchCAM's guard in the min-max scaling of the masks and in Smooth Grad-CAM++'s alpha.
_EPS = 1e-8
# Smooth Grad-CAM++'s noisy copies per forward and backward pass (TorchCAM runs one at a time):
# on a 2-core CPU four copies of a ResNet-18 input in one pass take 25% less than one by one.
# A backward pass keeps the graph of every copy, so fewer than Score-CAM's batch.
NOISY_BATCH = 8


def sscam(probe: Probe) -> tuple[torch.Tensor, torch.Tensor]:
    """SS-CAM, Wang et al. 2020 (arXiv:2006.14255), as TorchCAM's ``SSCAM`` computes it:
    Score-CAM whose masks are smoothed by noise. With M_k the channel A_k scaled to [0, 1]
    (min-max per channel at the layer's resolution, then upsampled bilinearly to the input,
    ``_masks``) and delta_n ~ N(0, std^2) drawn for every pixel of every mask,

        w_k = softmax_k( (1/N) sum_n Y^c((M_k + delta_n) ⊙ X) );  L = sum_k w_k A_k,

    the average over the N noisy samples of the target's score (a class's logit) of the input
    masked by each noisy channel. TorchCAM subtracts the score of the unmasked input from
    every score first: a shift the softmax over channels cancels, so it is left out here (one
    forward pass less, the same weights)."""
    options = probe.options or {}
    num_samples = _positive_int(options, "num_samples")
    std = _non_negative(options, "std")
    batch_size = _positive_int(options, "batch_size")
    generator = _generator(options)
    masks = _masks(probe)
    channels = masks.shape[0]
    batches = math.ceil(channels / batch_size)
    total = torch.zeros(channels, device=probe.activations.device)
    for sample in range(num_samples):
        # drawn in TorchCAM's shape, (1, C, H, W), so that the numbers land where its do
        noise = _noise(generator, std, (1, channels, *masks.shape[2:]), masks.device)
        noisy = noise.view_as(masks).add_(masks)
        total += _masked_scores(
            probe,
            lambda chunk, noisy=noisy: noisy[chunk],
            batch_size,
            (sample * batches, num_samples * batches, "SS-CAM"),
        )
    weights = torch.softmax(total / num_samples, dim=0)[None]
    return weighted_sum(probe.activations, weights), weights


def iscam(probe: Probe) -> tuple[torch.Tensor, torch.Tensor]:
    """IS-CAM, Naidu et al. 2020 (arXiv:2010.03023), as TorchCAM's ``ISCAM`` computes it:
    Score-CAM with the scores integrated along a path of growing masks. With M_k the channel
    A_k scaled to [0, 1] (as in ``sscam``) and the coefficients
    c_n = sum_{j=1..n} j/N = n(n+1)/(2N) for n = 1..N (TorchCAM's running sum; they reach
    (N+1)/2, so the last masks brighten the input),

        w_k = softmax_k( (1/N) sum_n Y^c(c_n M_k ⊙ X) );  L = sum_k w_k A_k,

    the average of the target's score (a class's logit) along the path. No noise: the same
    input always gives the same map. TorchCAM's subtraction of the unmasked input's score is
    left out, as in ``sscam`` (the softmax cancels it)."""
    options = probe.options or {}
    num_samples = _positive_int(options, "num_samples")
    batch_size = _positive_int(options, "batch_size")
    masks = _masks(probe)
    channels = masks.shape[0]
    batches = math.ceil(channels / batch_size)
    total = torch.zeros(channels, device=probe.activations.device)
    coefficient = 0.0
    for sample in range(num_samples):
        coefficient += (sample + 1) / num_samples
        total += _masked_scores(
            probe,
            lambda chunk, scale=coefficient: masks[chunk] * scale,
            batch_size,
            (sample * batches, num_samples * batches, "IS-CAM"),
        )
    weights = torch.softmax(total / num_samples, dim=0)[None]
    return weighted_sum(probe.activations, weights), weights


def smoothgradcam_plusplus(probe: Probe) -> tuple[torch.Tensor, torch.Tensor]:
    """Smooth Grad-CAM++, Omeiza et al. 2019 (arXiv:1908.01224), as TorchCAM's
    ``SmoothGradCAMpp`` computes it: Grad-CAM++ whose higher derivatives are averaged over N
    noisy copies of the input, X + delta_n with delta_n ~ N(0, std^2) per pixel. With G_n the
    gradient of the target's score (a class's logit) at the layer for copy n, D2 = mean_n G_n^2
    and D3 = mean_n G_n^3 (the exponential output's second and third derivatives), and A the
    activations of the image itself,

        alpha_kij = D2_kij / (2 D2_kij + sum_ab A_kab D3_kab + eps);
        w_k = sum_ij alpha_kij ReLU(G_N,kij);  L = sum_k w_k A'_k.

    As TorchCAM computes it, the ReLU'd gradient G_N and the activations A' the weights are
    applied to are those of the last noisy copy (its hooks keep recording during the noisy
    passes), and the sum over positions in alpha's denominator weighs each activation by D3
    at its own position (``gradcam_plusplus`` multiplies the channel's summed activations by
    the third derivative at (i, j)). The copies run ``NOISY_BATCH`` per pass (a progress step
    and a chance to cancel each)."""
    options = probe.options or {}
    num_samples = _positive_int(options, "num_samples")
    std = _non_negative(options, "std")
    generator = _generator(options)
    squares = cubes = torch.zeros_like(probe.activations)
    shape = tuple(probe.inputs.shape)
    for start in range(0, num_samples, NOISY_BATCH):
        probe.tick(start, num_samples, "Smooth Grad-CAM++")
        count = min(NOISY_BATCH, num_samples - start)
        noise = torch.cat(
            [_noise(generator, std, shape, probe.inputs.device) for _ in range(count)]
        )
        activations, gradient = probe.layer_and_gradient(
            probe.inputs + noise.to(probe.inputs.dtype)
        )
        squares = squares + gradient.pow(2).sum(dim=0, keepdim=True)
        cubes = cubes + gradient.pow(3).sum(dim=0, keepdim=True)
        activations, gradient = activations[-1:], gradient[-1:]  # (the last copy's, as above)
    squares, cubes = squares / num_samples, cubes / num_samples
    spread = (cubes * probe.activations).sum(dim=(-2, -1), keepdim=True)
    alpha = squares / (2 * squares + spread + _EPS)
    weights = (alpha * torch.relu(gradient)).sum(dim=(-2, -1))
    return weighted_sum(activations, weights), weights


def _masks(probe: Probe) -> torch.Tensor:
    """(C, 1, H, W) float32: each channel of the layer scaled to [0, 1] (min-max over its own
    positions, at the layer's resolution) and upsampled bilinearly to the input, as TorchCAM's
    Score-CAM family makes its masks (pytorch-grad-cam's Score-CAM upsamples first)."""
    activations = probe.activations.float()
    low = activations.amin(dim=(-2, -1), keepdim=True)
    scaled = activations - low
    scaled = scaled / (scaled.amax(dim=(-2, -1), keepdim=True) + _EPS)
    size = tuple(probe.inputs.shape[-2:])
    upsampled = F.interpolate(scaled, size, mode="bilinear", align_corners=False)
    return upsampled[0][:, None]


def _masked_scores(
    probe: Probe,
    mask_of: Callable[[slice], torch.Tensor],
    batch_size: int,
    progress: tuple[int, int, str],
) -> torch.Tensor:
    """(C,) the target's score of the input times each channel's mask, ``batch_size`` masked
    inputs at a time; ``progress`` is (steps done before, steps in all, the method's name),
    told before each batch."""
    done, steps, what = progress
    channels = probe.activations.shape[1]
    found = []
    for batch, start in enumerate(range(0, channels, batch_size)):
        probe.tick(done + batch, steps, what)
        masks = mask_of(slice(start, min(start + batch_size, channels)))
        found.append(probe.scores(masks.to(probe.inputs.dtype) * probe.inputs))
    return torch.cat(found).to(probe.activations.device)


def _noise(
    generator: torch.Generator, std: float, shape: tuple[int, ...], device: torch.device
) -> torch.Tensor:
    """N(0, std^2) of ``shape``, drawn on the CPU as TorchCAM's ``Normal(0, std).sample``
    draws it (the same numbers for the same generator state), then moved to ``device``."""
    return torch.normal(0.0, std, shape, generator=generator).to(device)


def _generator(options: dict[str, Any]) -> torch.Generator:
    """A CPU generator seeded with the ``seed`` option: the same draws on every device."""
    seed = options["seed"]
    if isinstance(seed, bool) or not isinstance(seed, Integral):
        raise MethodError(f"seed must be an integer, got {seed!r}")
    return torch.Generator().manual_seed(int(seed))


def _positive_int(options: dict[str, Any], name: str) -> int:
    value = options[name]
    if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
        raise MethodError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _non_negative(options: dict[str, Any], name: str) -> float:
    value = options[name]
    if isinstance(value, bool) or not isinstance(value, Real) or not 0 <= value < math.inf:
        raise MethodError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


# TorchCAM's defaults (its constructors'), plus the seed of the noise.
SAMPLED_METHODS: dict[str, tuple[Callable[[Probe], tuple], dict[str, Any]]] = {
    "sscam": (sscam, {"num_samples": 35, "std": 2.0, "batch_size": 32, "seed": 0}),
    "iscam": (iscam, {"num_samples": 10, "batch_size": 32}),
    "smoothgradcam++": (smoothgradcam_plusplus, {"num_samples": 4, "std": 0.3, "seed": 0}),
}
