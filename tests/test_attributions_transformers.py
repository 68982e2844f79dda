"""Pixel attributions on vision transformers (a timm ViT and a timm Swin, random weights) against
Captum 0.9, as on CNNs: each method Captum runs on these models gives Captum's numbers. Their
blocks use GELU, not ReLU, so guided backprop and deconvolution change nothing there: they are
the plain gradient, in Captum as here. Guided Grad-CAM needs a token layer's Grad-CAM, which
Captum's ``LayerGradCam`` does not lay out on the patch grid; it is checked against its
definition instead: guided backprop times the layer's Grad-CAM, upsampled by nearest neighbour."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import hookviz

from .conftest import random_input
from .test_attributions_reference import GRADIENT_METHODS, _agree, _peer

captum_attr = pytest.importorskip("captum.attr")
pytest.importorskip("timm")

TRANSFORMERS = {"vit": "timm:vit_tiny_patch16_224", "swin": "timm:swin_tiny_patch4_window7_224"}


@pytest.fixture(scope="module", params=list(TRANSFORMERS))
def transformer(request) -> hookviz.LoadedModel:
    return hookviz.load_model(TRANSFORMERS[request.param], pretrained=False, device="cpu")


@pytest.fixture(scope="module")
def x() -> torch.Tensor:
    return random_input(224, 224, seed=21)


def _captum(method: str, peer: torch.nn.Module, x: torch.Tensor, target: int) -> torch.Tensor:
    explainer = GRADIENT_METHODS[method](peer)
    if method == "integrated_gradients":
        return explainer.attribute(x, target=target, n_steps=4)
    return explainer.attribute(x, target=target)


@pytest.mark.parametrize("method", list(GRADIENT_METHODS))
@pytest.mark.slow
def test_gradient_methods_give_captums_numbers_on_a_transformer(transformer, x, method) -> None:
    target = hookviz.predict(transformer, x, k=2)[1].index  # the runner-up: not the default
    options = {"steps": 4} if method == "integrated_gradients" else {}
    ours = hookviz.attribute(transformer, x, method, target=target, **options)
    _agree(ours.raw, _captum(method, _peer(transformer), x, target))
    assert ours.map.shape == (224, 224)


@pytest.mark.slow
def test_smoothgrad_and_occlusion_give_captums_numbers_on_a_transformer(transformer, x) -> None:
    peer = _peer(transformer)
    ours = hookviz.attribute(transformer, x, "smoothgrad", target=4, samples=2, stdev=0.3, seed=2)
    torch.manual_seed(2)
    theirs = captum_attr.NoiseTunnel(captum_attr.Saliency(peer)).attribute(
        x, nt_type="smoothgrad", nt_samples=2, stdevs=0.3, target=4
    )
    _agree(ours.raw, theirs)
    ours = hookviz.attribute(transformer, x, "occlusion", target=4, window=112, stride=112)
    theirs = captum_attr.Occlusion(peer).attribute(
        x, sliding_window_shapes=(3, 112, 112), strides=(3, 112, 112), target=4
    )
    _agree(ours.raw, theirs)


def test_guided_backprop_on_gelu_blocks_is_the_gradient(transformer, x) -> None:
    gradient = hookviz.attribute(transformer, x, "input_x_gradient", target=1).raw / x[0].numpy()
    for method in ("guided_backprop", "deconvolution"):
        raw = hookviz.attribute(transformer, x, method, target=1).raw
        np.testing.assert_allclose(raw, gradient, rtol=1e-3, atol=1e-5 * np.abs(raw).max())


def test_guided_gradcam_on_a_token_layer_is_guided_backprop_times_its_gradcam(transformer, x):
    layer = hookviz.default_layer(transformer)
    ours = hookviz.attribute(transformer, x, "guided_gradcam", target=3, layer=layer)
    guided = hookviz.attribute(transformer, x, "guided_backprop", target=3).raw
    cam = hookviz.grad_cam(transformer, x, layer, 3).cam  # on the layer grid, not normalised
    upsampled = F.interpolate(torch.from_numpy(cam)[None, None], size=(224, 224), mode="nearest")
    expected = guided * upsampled[0].numpy()
    assert ours.options["layer"] == layer
    np.testing.assert_allclose(ours.raw, expected, rtol=1e-3, atol=1e-5 * np.abs(expected).max())
