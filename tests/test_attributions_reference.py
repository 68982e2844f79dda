"""Pixel attributions against Captum 0.9: each method, called with its defaults, gives Captum's
numbers on the same model, input and target (Pearson r >= 0.999, and close value by value), on
a torchvision ResNet with seeded random weights and on the bundled, trained EfficientNet-Lite.
SmoothGrad draws its noise as Captum's NoiseTunnel does, so the same seed gives the same map."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import hookviz

from .conftest import random_input

captum_attr = pytest.importorskip("captum.attr")

MIN_R = 0.999
GRADIENT_METHODS = {
    "saliency": lambda model: captum_attr.Saliency(model),
    "input_x_gradient": lambda model: captum_attr.InputXGradient(model),
    "guided_backprop": lambda model: captum_attr.GuidedBackprop(model),
    "deconvolution": lambda model: captum_attr.Deconvolution(model),
    "integrated_gradients": lambda model: captum_attr.IntegratedGradients(model),
}


@pytest.fixture(scope="module")
def resnet() -> hookviz.LoadedModel:
    return hookviz.load_model("resnet18", pretrained=False, device="cpu")


@pytest.fixture(scope="module")
def lite() -> hookviz.LoadedModel:
    return hookviz.load_model("efficientnet_lite0", device="cpu")  # bundled, trained


def _peer(loaded: hookviz.LoadedModel) -> torch.nn.Module:
    """The model as Captum gets it: a copy of its own (Captum hooks its ReLUs), with its
    in-place ReLUs made out-of-place (a backward hook cannot follow an in-place output)."""
    peer = copy.deepcopy(loaded.model).eval()
    for module in peer.modules():
        if isinstance(module, torch.nn.ReLU):
            module.inplace = False
    return peer


def _agree(ours: np.ndarray, theirs: torch.Tensor) -> None:
    theirs = theirs.detach()[0].numpy()
    assert ours.shape == theirs.shape
    r = float(np.corrcoef(ours.ravel(), theirs.ravel())[0, 1])
    assert r >= MIN_R, r
    np.testing.assert_allclose(ours, theirs, rtol=1e-3, atol=1e-4 * float(np.abs(theirs).max()))


@pytest.mark.parametrize("method", list(GRADIENT_METHODS))
@pytest.mark.parametrize("fixture", ["resnet", "lite"])
@pytest.mark.slow
def test_gradient_methods_give_captums_numbers(request, fixture, method) -> None:
    loaded = request.getfixturevalue(fixture)
    x = random_input(96, 112, seed=11) if fixture == "resnet" else _photo_input(loaded)
    target = hookviz.predict(loaded, x, k=2)[1].index  # the runner-up: not the default
    ours = hookviz.attribute(loaded, x, method, target=target)
    theirs = GRADIENT_METHODS[method](_peer(loaded)).attribute(x, target=target)
    _agree(ours.raw, theirs)
    assert (ours.class_index, ours.method) == (target, method)
    assert ours.map.shape == (96, 112) if fixture == "resnet" else ours.map.shape == x.shape[-2:]


def _photo_input(loaded: hookviz.LoadedModel) -> torch.Tensor:
    """The photo as the model takes it, its centre 128 x 160 (a third of the pixels: integrated
    gradients' 50 passes, twice, cost as the pixels)."""
    x = loaded.preprocessing.to_tensor(hookviz.sample_image())
    top, left = (x.shape[-2] - 128) // 2, (x.shape[-1] - 160) // 2
    return x[..., top : top + 128, left : left + 160].contiguous()


def test_integrated_gradients_options_are_captums(resnet) -> None:
    x = random_input(64, 80, seed=12)
    baseline = torch.full_like(x, 0.3)
    ours = hookviz.attribute(resnet, x, "integrated_gradients", target=7, steps=16,
                             baseline=baseline, batch_size=5)  # fmt: skip
    theirs = captum_attr.IntegratedGradients(_peer(resnet)).attribute(
        x, baselines=baseline, target=7, n_steps=16
    )
    _agree(ours.raw, theirs)
    assert ours.options["steps"] == 16


def test_guided_gradcam_is_captums(resnet) -> None:
    x = random_input(96, 112, seed=13)
    peer = _peer(resnet)
    for layer in ("layer3", "layer4"):
        ours = hookviz.attribute(resnet, x, "guided_gradcam", target=3, layer=layer)
        theirs = captum_attr.GuidedGradCam(peer, peer.get_submodule(layer)).attribute(x, target=3)
        _agree(ours.raw, theirs)
    assert hookviz.attribute(resnet, x, "guided_gradcam", 3).options["layer"] == "layer4"


def test_smoothgrad_draws_captums_noise(resnet) -> None:
    x = random_input(64, 80, seed=14)
    peer = _peer(resnet)
    for base, captum_method in (("saliency", captum_attr.Saliency),
                                ("input_x_gradient", captum_attr.InputXGradient)):  # fmt: skip
        ours = hookviz.attribute(resnet, x, "smoothgrad", target=5, base=base, samples=4,
                                 stdev=0.5, seed=3)  # fmt: skip
        torch.manual_seed(3)
        theirs = captum_attr.NoiseTunnel(captum_method(peer)).attribute(
            x, nt_type="smoothgrad", nt_samples=4, stdevs=0.5, target=5
        )
        _agree(ours.raw, theirs)
    # seeded: the same seed the same map, another seed another
    first, again, other = (
        hookviz.attribute(resnet, x, "smoothgrad", target=5, samples=4, seed=seed).raw
        for seed in (3, 3, 4)
    )
    assert np.array_equal(first, again) and not np.array_equal(first, other)


@pytest.mark.parametrize(("window", "stride"), [(16, 8), (12, 10)])
def test_occlusion_is_captums(resnet, window, stride) -> None:
    x = random_input(48, 56, seed=15)  # (48 - 12) / 10 is not whole: the last window is cut
    ours = hookviz.attribute(resnet, x, "occlusion", target=2, window=window, stride=stride)
    theirs = captum_attr.Occlusion(_peer(resnet)).attribute(
        x, sliding_window_shapes=(3, window, window), strides=(3, stride, stride), target=2
    )
    _agree(ours.raw, theirs)
