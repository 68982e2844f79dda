"""SS-CAM, IS-CAM and Smooth Grad-CAM++ (``hookviz/core/sampled_methods.py``) against TorchCAM
0.5.0's ``SSCAM``, ``ISCAM`` and ``SmoothGradCAMpp``, with the very same noise: hookviz draws it
from a generator seeded with its ``seed`` option, in TorchCAM's shapes and order, so seeding
torch's global generator with that seed right before TorchCAM runs makes TorchCAM draw the
same numbers. Agreement is the Pearson correlation of the maps at the layer's resolution
(ReLU applied), and, scaled to [0, 1] as TorchCAM scales its maps, their distance from the
exact map: TorchCAM's on a float64 copy of the model, with the same noise. hookviz's float32 map
must be about as close to it as TorchCAM's own float32 map is: the tolerance is the round-off of
this very computation on the machine that runs it (Smooth Grad-CAM++ cubes its gradients, so a
convolution of several noisy copies at once, rounding differently from one copy at a time, moves
its map by 1e-4 on one CPU and 4e-4 on another), not a number measured on one machine.

Two models: a tiny seeded convnet, cheap enough for TorchCAM's default sample counts, and the
seeded random ResNet-18 (in-place ReLUs) at ``layer1`` with fewer samples and a batch size
that leaves a partial last batch. The noise can move a map little (SS-CAM's average over 35
samples is meant to smooth it out: on the tiny convnet another seed's map still correlates at
0.999 with TorchCAM's), so there another seed must differ from TorchCAM's scaled map by far
more than hookviz's does: the agreement is that of the same noise, not of maps the noise
barely moves."""

from __future__ import annotations

import copy
import inspect

import numpy as np
import pytest
import torch
from torch import nn

import hookviz
from hookviz.core.sampled_methods import NOISY_BATCH, SAMPLED_METHODS

from .conftest import random_input

torchcam_methods = pytest.importorskip("torchcam.methods")

REFERENCE = {
    "sscam": "SSCAM",
    "iscam": "ISCAM",
    "smoothgradcam++": "SmoothGradCAMpp",
}
NOISY = ["sscam", "smoothgradcam++"]
MIN_R = 0.999
# hookviz's distance from the exact map, at most ROUNDOFF_RATIO times TorchCAM's own float32
# distance from it (both are float32 round-off of the same arithmetic, in another order), plus a
# few float32 ulps of a map in [0, 1] for maps that both compute almost exactly.
ROUNDOFF_RATIO = 3.0
ULPS = 64 * float(np.finfo(np.float32).eps)
# Another seed's noise moves the scaled map by at least this much (2e-2 to 1 measured): far more
# than any round-off above.
DIFFERENT = 1e-2
TINY_LAYER = "features"
RESNET_LAYER = "layer1"
# On the ResNet-18: a few samples, and 64 channels in batches of 24, 24 and 16.
RESNET_OPTIONS = {
    "sscam": {"num_samples": 2, "batch_size": 24, "seed": 7},
    "iscam": {"num_samples": 2, "batch_size": 24},
    "smoothgradcam++": {"num_samples": 3, "std": 0.5, "seed": 7},
}


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(np.ravel(a), np.ravel(b))[0, 1])


class _Tiny(nn.Module):
    """Two convolutions (the second with BatchNorm and an in-place ReLU), global average
    pooling and a linear head: 12 channels at the explained layer."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(8, 12, 3, stride=2, padding=1),
            nn.BatchNorm2d(12),
            nn.ReLU(inplace=True),
        )
        self.head = nn.Linear(12, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean(dim=(2, 3)))


@pytest.fixture(scope="module")
def tiny() -> hookviz.LoadedModel:
    """The tiny convnet, seeded, its head scaled up so that masked inputs' scores differ by
    enough for the softmax over channels not to flatten the weights to 1/C (unscaled, they
    span 0.083 to 0.084, and another seed moves SS-CAM's scaled map by 7e-4 only)."""
    torch.manual_seed(3)
    module = _Tiny()
    with torch.no_grad():
        module.head.weight.mul_(20.0)
    return hookviz.wrap_model(module, num_classes=5, device="cpu")


def _scaled(cam: np.ndarray) -> np.ndarray:
    """A map scaled to [0, 1] as TorchCAM scales its own (min-max, its epsilon)."""
    cam = cam - cam.min()
    return cam / (cam.max() + 1e-8)


def _agree(ours: np.ndarray, theirs: np.ndarray, exact: np.ndarray) -> None:
    """``ours`` (hookviz, float32) correlates with ``theirs`` (TorchCAM, float32) and is about
    as close to ``exact`` (TorchCAM in float64, the same noise) as ``theirs`` is."""
    assert _pearson(ours, theirs) >= MIN_R, _pearson(ours, theirs)
    our_error = float(np.abs(_scaled(ours) - exact).max())
    their_error = float(np.abs(theirs - exact).max())
    assert our_error <= ROUNDOFF_RATIO * their_error + ULPS, (our_error, their_error)


def _differ(other: np.ndarray, theirs: np.ndarray) -> None:
    assert np.abs(_scaled(other) - theirs).max() >= DIFFERENT


def _options(method: str, **given: object) -> dict:
    """The method's defaults, updated with ``given``."""
    return {**SAMPLED_METHODS[method][1], **given}


def _torchcam(
    loaded: hookviz.LoadedModel,
    layer: str,
    x: torch.Tensor,
    target: int,
    method: str,
    options,
    dtype: torch.dtype = torch.float32,
) -> np.ndarray:
    """TorchCAM's map (h, w) on a copy of the model in ``dtype``, its global generator seeded
    with the ``seed`` option right before it draws (and restored after). The noise is drawn in
    float32 either way, so a float64 copy sees the very same noise."""
    peer = copy.deepcopy(loaded.model).to(dtype).requires_grad_(True).eval()
    x = x.to(dtype)
    settings = {name: value for name, value in options.items() if name != "seed"}
    extractor_class = getattr(torchcam_methods, REFERENCE[method])
    with extractor_class(peer, layer, input_shape=tuple(x.shape[1:]), **settings) as extractor:
        with torch.no_grad():
            peer(x)  # its hooks keep the input and the layer's activations
        with torch.random.fork_rng():
            torch.manual_seed(options.get("seed", 0))
            return extractor(class_idx=target)[0][0].numpy()


def _both(loaded, layer, x, target, method, options) -> tuple[np.ndarray, np.ndarray]:
    """TorchCAM's float32 map and the exact one (float64)."""
    return tuple(
        _torchcam(loaded, layer, x, target, method, options, dtype)
        for dtype in (torch.float32, torch.float64)
    )


def _untouched(loaded: hookviz.LoadedModel) -> bool:
    """No hook of any kind on any module, no parameter with a gradient."""
    model = loaded.model
    hooks = [
        hooks
        for module in model.modules()
        for hooks in (
            module._forward_hooks,
            module._forward_pre_hooks,
            module._backward_hooks,
            module._backward_pre_hooks,
        )
    ]
    return (
        hookviz.count_hooks(model) == 0
        and not any(hooks)
        and all(p.grad is None for p in model.parameters())
    )


def test_defaults_are_torchcams():
    """Every option but ``seed`` is a TorchCAM constructor argument, with its default; and
    TorchCAM's sampling arguments are all options."""
    sampling = {"num_samples", "std", "batch_size"}
    for method, (_, defaults) in SAMPLED_METHODS.items():
        parameters = inspect.signature(getattr(torchcam_methods, REFERENCE[method])).parameters
        theirs = {name: p.default for name, p in parameters.items() if name in sampling}
        ours = {name: value for name, value in defaults.items() if name != "seed"}
        assert ours == theirs, method
        assert defaults.get("seed", 0) == 0
    assert set(SAMPLED_METHODS) == set(REFERENCE)


@pytest.mark.parametrize("method", list(REFERENCE))
def test_agrees_with_torchcam_at_its_defaults(tiny, method):
    x = random_input(32, 32, seed=2)
    target = hookviz.predict(tiny, x, k=2)[1].index  # the runner-up: not the default
    options = _options(method)
    ours = hookviz.grad_cam(tiny, x, TINY_LAYER, target, method=method)
    theirs, exact = _both(tiny, TINY_LAYER, x, target, method, options)
    assert not ours.blank and ours.cam.shape == theirs.shape == (16, 16)
    _agree(ours.cam, theirs, exact)
    assert ours.weights.shape == (12,) and ours.method == method
    if method in NOISY:
        _differ(hookviz.grad_cam(tiny, x, TINY_LAYER, target, method=method, seed=1).cam, theirs)
    if method != "smoothgradcam++":  # a softmax over channels
        assert ours.weights.sum() == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("method", list(REFERENCE))
def test_agrees_with_torchcam_on_random_resnet(resnet18, method):
    """Also counts the progress steps: one per batch of masked inputs (SS-CAM, IS-CAM) or
    per noisy sample (Smooth Grad-CAM++)."""
    x = random_input(32, 32, seed=5)
    target = hookviz.predict(resnet18, x, k=1)[0].index
    options = RESNET_OPTIONS[method]
    told = []
    ours = hookviz.grad_cam(
        resnet18,
        x,
        RESNET_LAYER,
        target,
        method=method,
        progress=lambda done, total: told.append((done, total)),
        **options,
    )
    theirs, exact = _both(resnet18, RESNET_LAYER, x, target, method, options)
    assert not ours.blank and ours.cam.shape == (8, 8)
    _agree(ours.cam, theirs, exact)
    if method == "smoothgradcam++":  # one step per pass of NOISY_BATCH noisy copies
        samples = options["num_samples"]
        assert told == [(done, samples) for done in range(0, samples, NOISY_BATCH)]
    else:
        steps = options["num_samples"] * (3 if "batch_size" in options else 1)
        assert told == [(done, steps) for done in range(steps)]
    assert _untouched(resnet18)


def test_smooth_gradcam_plusplus_over_several_passes_of_noisy_copies_is_torchcams(resnet18):
    """More noisy copies than one pass takes (``NOISY_BATCH``): the copies of the second pass
    get the noise TorchCAM draws for them, and the last copy's gradient and activations are
    those of the second pass's last row."""
    x = random_input(32, 32, seed=8)
    target = hookviz.predict(resnet18, x, k=1)[0].index
    options = {"num_samples": NOISY_BATCH + 2, "std": 0.4, "seed": 3}
    ours = hookviz.grad_cam(resnet18, x, RESNET_LAYER, target, method="smoothgradcam++", **options)
    theirs, exact = _both(resnet18, RESNET_LAYER, x, target, "smoothgradcam++", options)
    _agree(ours.cam, theirs, exact)


@pytest.mark.parametrize("method", list(REFERENCE))
def test_the_same_call_gives_the_same_map(tiny, method):
    x = random_input(32, 32, seed=4)
    first = hookviz.grad_cam(tiny, x, TINY_LAYER, 0, method=method, num_samples=3)
    again = hookviz.grad_cam(tiny, x, TINY_LAYER, 0, method=method, num_samples=3)
    assert np.array_equal(first.cam, again.cam)
    assert np.array_equal(first.weights, again.weights)
    if method in NOISY:
        other = hookviz.grad_cam(tiny, x, TINY_LAYER, 0, method=method, num_samples=3, seed=9)
        assert not np.array_equal(first.cam, other.cam)


@pytest.mark.parametrize("method", list(REFERENCE))
def test_cancelling_leaves_the_model_untouched(resnet18, method):
    """Cancelled at the second step: after one batch of forward passes (SS-CAM, IS-CAM) or one
    forward and backward pass of ``NOISY_BATCH`` noisy copies (Smooth Grad-CAM++)."""
    x = random_input(32, 32, seed=6)
    told = []

    def cancel_second(done: int, total: int) -> bool:
        told.append((done, total))
        return len(told) >= 2

    second = NOISY_BATCH if method == "smoothgradcam++" else 1
    with pytest.raises(hookviz.CancelledError):
        hookviz.grad_cam(
            resnet18,
            x,
            RESNET_LAYER,
            1,
            method=method,
            progress=cancel_second,
            num_samples=second + 1,
        )
    assert [done for done, _ in told] == [0, second]
    assert _untouched(resnet18)


def test_unknown_or_invalid_options_are_refused(tiny):
    x = random_input(32, 32, seed=1)
    refused = [
        ("sscam", {"samples": 3}),
        ("sscam", {"num_samples": 0}),
        ("sscam", {"std": -1.0}),
        ("sscam", {"batch_size": 2.5}),
        ("sscam", {"seed": "zero"}),
        ("iscam", {"std": 0.3}),  # no noise
        ("iscam", {"seed": 1}),  # nothing random
        ("smoothgradcam++", {"batch_size": 8}),  # one sample per pass, as TorchCAM
        ("smoothgradcam++", {"num_samples": True}),
    ]
    for method, options in refused:
        with pytest.raises(hookviz.MethodError):
            hookviz.grad_cam(tiny, x, TINY_LAYER, 0, method=method, **options)
    assert _untouched(tiny)
