"""Beyond one heatmap: evidence against, contrast, gallery, layer sweep, step-through and the
deletion/insertion trust check, on models whose answers are known."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import hookviz

from .conftest import random_input
from .test_cam_analytic import GapLinear, _wrap
from .test_geometry import RedDetector, _photo
from .test_reuse_and_batch import _ForwardCounter


@pytest.fixture(scope="module")
def gap():
    torch.manual_seed(21)
    module = GapLinear(3, 6, 4)
    return module, _wrap(module, 4)


def test_contrast_and_evidence_against_on_paper(gap):
    module, loaded = gap
    x = torch.randn(1, 3, 5, 7)
    with torch.no_grad():
        a = module.features(x)[0]
    kept = hookviz.ForwardPass(loaded, x, "features")
    w = module.fc.weight
    why = hookviz.contrast(kept, 1, 3)
    expected = torch.relu(torch.einsum("k,khw->hw", w[1] - w[3], a)) / 35
    np.testing.assert_allclose(why.cam, expected.numpy(), rtol=1e-5, atol=1e-7)
    against = hookviz.evidence_against(kept, 2)
    expected = torch.relu(-torch.einsum("k,khw->hw", w[2], a)) / 35
    np.testing.assert_allclose(against.cam, expected.numpy(), rtol=1e-5, atol=1e-7)
    assert against.class_index == 2 and why.class_index == 1


def test_gallery_is_the_top5_from_one_forward(resnet18):
    x = random_input(96, 112, seed=31)
    kept = hookviz.ForwardPass(resnet18, x, "layer4")
    counter = _ForwardCounter(resnet18.model)
    try:
        cams = hookviz.gallery(kept)
    finally:
        counter.close()
    assert counter.calls == 0
    assert [c.class_index for c in cams] == [p.index for p in kept.predictions]
    for cam in cams:
        fresh = hookviz.grad_cam(resnet18, x, "layer4", cam.class_index)
        np.testing.assert_allclose(cam.heatmap, fresh.heatmap, atol=1e-6)


@pytest.mark.slow
def test_layer_sweep_one_forward_equals_single_layer_results(resnet18):
    x = random_input(96, 112, seed=32)
    layers = hookviz.stage_layers(resnet18)
    assert layers == ["relu", "layer1", "layer2", "layer3", "layer4"]
    counter = _ForwardCounter(resnet18.model)
    try:
        sweep = hookviz.layer_sweep(resnet18, x, target=77)
    finally:
        counter.close()
    assert counter.calls == 1
    assert [c.layer for c in sweep] == layers
    for cam in sweep:
        single = hookviz.grad_cam(resnet18, x, cam.layer, 77)
        np.testing.assert_allclose(cam.cam, single.cam, rtol=1e-4, atol=1e-7)
    assert hookviz.count_hooks(resnet18.model) == 0


def test_steps_are_consistent(resnet18):
    x = random_input(96, 112, seed=33)
    kept = hookviz.ForwardPass(resnet18, x, "layer3")
    steps = hookviz.grad_cam_steps(kept, 5)
    np.testing.assert_allclose(steps.weights, steps.gradients.mean(axis=(1, 2)), rtol=1e-5)
    total = np.einsum("k,khw->hw", steps.weights, steps.activations)
    np.testing.assert_allclose(steps.weighted_sum, total, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(steps.cam, np.maximum(total, 0), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(steps.cam - steps.removed, total, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(steps.heatmap, kept.grad_cam(5).heatmap, atol=1e-6)


def test_trust_curves_reward_the_right_heatmap():
    prep = hookviz.Preprocessing(size=64, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0))
    loaded = hookviz.wrap_model(
        RedDetector(), categories=["red", "not red"], preprocessing=prep, device="cpu"
    )
    image = _photo(240, 160, (180, 40, 236, 100))
    cam = hookviz.grad_cam(loaded, image, "features", target=0)
    curves = hookviz.trust_curves(loaded, image, cam.heatmap, 0, steps=10)
    full = hookviz.predict(loaded, image, k=2)
    red = next(p.probability for p in full if p.index == 0)
    assert curves.deletion[0] == pytest.approx(red, rel=1e-5)
    assert curves.insertion[-1] == pytest.approx(red, rel=1e-5)
    assert curves.deletion_auc < curves.deletion_random_auc
    assert curves.insertion_auc > curves.insertion_random_auc
    assert curves.fractions.shape == curves.deletion.shape == (11,)
