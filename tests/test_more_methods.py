"""The CAM methods added after the first seven (issue 34) against pytorch-grad-cam 1.5.7:
``gradcamelementwise``, ``eigengradcam``, ``kpcacam``, ``fem`` and ``randomcam`` (its seeded
draw made the reference's by seeding NumPy), on a ResNet-18 with seeded random weights at two
layers and on the bundled, trained EfficientNet-Lite0 at its default layer. Agreement is the
Pearson correlation of the final heatmaps, as in test_methods_reference.py. The original
``cam`` has no pytorch-grad-cam class: it is checked against the head's weights times the
activations, computed here from the modules, and against Grad-CAM, which equals it / (h*w)."""

from __future__ import annotations

import copy
import re

import numpy as np
import pytest
import torch

import hookviz
from hookviz.core import methods
from hookviz.core.batch import explain_batch

from .conftest import random_input

pytorch_grad_cam = pytest.importorskip("pytorch_grad_cam")
pytest.importorskip("sklearn")  # KPCA_CAM's kernel PCA (hookviz's own is in torch)

REFERENCE = {
    "gradcamelementwise": "GradCAMElementWise",
    "eigengradcam": "EigenGradCAM",
    "kpcacam": "KPCA_CAM",
    "fem": "FEM",
    "randomcam": "RandomCAM",
}
RESNET_LAYERS = ["layer3", "layer4"]
LITE_LAYER = "bn2"
MIN_R = 0.999


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    if not a.any() and not b.any():
        return 1.0  # both blank: the same answer
    return float(np.corrcoef(np.ravel(a), np.ravel(b))[0, 1])


def _peer(loaded: hookviz.LoadedModel) -> torch.nn.Module:
    """The model as the reference gets it: a copy of its own, with gradients on."""
    return copy.deepcopy(loaded.model).requires_grad_(True).eval()


def _sign_fixed(projection):
    """pytorch-grad-cam's ``get_2d_projection`` with hookviz's sign rule applied to its
    result: an SVD's sign is arbitrary, the rule picks the one whose largest magnitude is
    positive (both signs are compared that way, as for Eigen-CAM)."""

    def fixed(batch: np.ndarray) -> np.ndarray:
        found = projection(batch)
        for one in found:
            if np.abs(one.min()) > one.max():
                one *= -1
        return found

    return fixed


def _reference(peer, layer, x, target, method, monkeypatch) -> np.ndarray:
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    if method == "eigengradcam":
        module = pytorch_grad_cam.eigen_grad_cam
        monkeypatch.setattr(module, "get_2d_projection", _sign_fixed(module.get_2d_projection))
    if method == "randomcam":
        np.random.seed(methods.RANDOMCAM_SEED)  # RandomCAM draws from NumPy's global state
    cam_class = getattr(pytorch_grad_cam, REFERENCE[method])
    with cam_class(model=peer, target_layers=[peer.get_submodule(layer)]) as cam:
        return cam(input_tensor=x, targets=[ClassifierOutputTarget(target)])[0]


@pytest.mark.parametrize("method", list(REFERENCE))
def test_agrees_with_pytorch_grad_cam_on_random_resnet(resnet18, method, monkeypatch):
    peer = _peer(resnet18)
    x = random_input(128, 160, seed=5)
    target = hookviz.predict(resnet18, x, k=2)[1].index  # the runner-up: not the default
    for layer in RESNET_LAYERS:
        ours = hookviz.grad_cam(resnet18, x, layer, target, method=method)
        theirs = _reference(peer, layer, x, target, method, monkeypatch)
        assert _pearson(ours.heatmap, theirs) >= MIN_R, (layer, _pearson(ours.heatmap, theirs))
        assert ours.method == method and ours.class_index == target


@pytest.mark.parametrize("method", list(REFERENCE))
def test_agrees_with_pytorch_grad_cam_on_trained_lite0(lite0, method, monkeypatch):
    x = lite0.preprocessing.to_tensor(hookviz.sample_image())
    target = hookviz.predict(lite0, x, k=1)[0].index
    ours = hookviz.grad_cam(lite0, x, LITE_LAYER, target, method=method).heatmap
    theirs = _reference(_peer(lite0), LITE_LAYER, x, target, method, monkeypatch)
    assert _pearson(ours, theirs) >= MIN_R, _pearson(ours, theirs)


def test_kpcacam_on_a_large_layer_agrees(resnet18):
    """1280 positions: above 1024 the first eigenvector comes from LOBPCG, not a full eigh
    (scikit-learn uses ARPACK there)."""
    x = random_input(128, 160, seed=5)
    ours = hookviz.grad_cam(resnet18, x, "layer1", 3, method="kpcacam")
    assert ours.cam.size > methods._KPCA_DENSE
    theirs = _reference(_peer(resnet18), "layer1", x, 3, "kpcacam", None)
    assert _pearson(ours.heatmap, theirs) >= MIN_R


def test_kpcacam_is_kernel_pca_by_hand():
    """The derivation in numpy, without scikit-learn: the sigmoid kernel (gamma = 1/C,
    coef0 = 1) of the centred positions, centred, its largest eigenpair, sqrt(l) v, the sign
    making the largest magnitude positive."""
    a = torch.randn(2, 8, 5, 6, generator=torch.Generator().manual_seed(1)).relu()
    ours, weights = methods.kpcacam(a, None)
    assert weights is None and ours.shape == (2, 5, 6)
    for image, found in zip(a.double().numpy(), ours.numpy(), strict=True):
        x = image.reshape(8, -1).T
        x = x - x.mean(axis=0)
        k = np.tanh(x @ x.T / 8 + 1)
        ones = np.full_like(k, 1 / len(k))
        k = k - ones @ k - k @ ones + ones @ k @ ones
        values, vectors = np.linalg.eigh(k)
        expected = vectors[:, -1] * np.sqrt(values[-1])
        if np.abs(expected.min()) > expected.max():
            expected = -expected
        np.testing.assert_allclose(found.ravel(), expected, rtol=1e-5, atol=1e-6)


def test_randomcam_is_seeded_and_classless(resnet18):
    x = random_input(64, 80, seed=2)
    kept = hookviz.ForwardPass(resnet18, x, "layer4")
    first, again, other = (kept.grad_cam(t, "randomcam") for t in (3, 3, 7))
    assert np.array_equal(first.cam, hookviz.grad_cam(resnet18, x, "layer4", 3, "randomcam").cam)
    assert np.array_equal(first.cam, again.cam) and np.array_equal(first.cam, other.cam)
    drawn = np.random.RandomState(methods.RANDOMCAM_SEED).uniform(-1, 1, 512)
    np.testing.assert_allclose(first.weights, drawn.astype(np.float32))
    assert "randomcam" in methods.CLASSLESS


def test_new_methods_in_a_batch_are_the_single_image_ones(resnet18):
    images = torch.cat([random_input(64, 80, seed=s) for s in (1, 2)])
    for method in [*REFERENCE, "cam"]:
        batch = explain_batch(resnet18, images, "layer4", [3, 5], method)
        for i, target in enumerate((3, 5)):
            single = hookviz.grad_cam(resnet18, images[i : i + 1], "layer4", target, method)
            np.testing.assert_allclose(batch.cams[i], single.cam, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(("fixture", "layer"), [("resnet18", "layer4"), ("resnet18", "layer4.1"),
                                                ("lite0", LITE_LAYER)])  # fmt: skip
def test_cam_is_the_heads_weights_times_the_activations(request, fixture, layer):
    loaded = request.getfixturevalue(fixture)
    x = random_input(96, 128, seed=4)
    target = hookviz.predict(loaded, x, k=2)[1].index
    head = loaded.model.fc if fixture == "resnet18" else loaded.model.classifier
    ours = hookviz.grad_cam(loaded, x, layer, target, method="cam")
    a = hookviz.feature_maps(loaded, x, layer).activations
    expected = torch.relu(torch.einsum("k,khw->hw", head.weight[target].detach(), a))
    np.testing.assert_array_equal(ours.weights, head.weight[target].detach().numpy())
    np.testing.assert_allclose(ours.cam, expected.numpy(), rtol=1e-5, atol=1e-5)
    # Grad-CAM's weights are the head's / (h*w) there: the same map, scaled
    gradcam = hookviz.grad_cam(loaded, x, layer, target)
    h, w = ours.cam.shape
    scale = float(np.abs(ours.cam).max())
    np.testing.assert_allclose(ours.cam / (h * w), gradcam.cam, atol=1e-5 * scale / (h * w))
    assert _pearson(ours.heatmap, gradcam.heatmap) > 0.9999
    assert ours.method == "cam" and ours.class_index == target


def test_cam_is_refused_where_it_does_not_apply(resnet18):
    x = random_input(64, 80, seed=3)
    with pytest.raises(hookviz.MethodError, match="no linear layer from the 256 channels"):
        hookviz.grad_cam(resnet18, x, "layer3", method="cam")
    # the same 512 channels, but the residual sum and a ReLU run before the pooling
    with pytest.raises(hookviz.MethodError, match="something else runs between them"):
        hookviz.grad_cam(resnet18, x, "layer4.1.bn2", method="cam")
    with pytest.raises(hookviz.MethodError, match="explains a classifier's class"):
        hookviz.grad_cam(resnet18, x, "layer4", lambda out: out[:, 3] - out[:, 4], "cam")
    with pytest.raises(hookviz.MethodError, match="explains a classifier's class"):
        explain_batch(resnet18, x, "layer4", [lambda out: out[:, 3]], "cam")
    assert hookviz.count_hooks(resnet18.model) == 0


def test_new_methods_leave_the_model_as_it_was(resnet18):
    x = random_input(64, 64, seed=6)
    before = {k: v.clone() for k, v in resnet18.model.state_dict().items()}
    for method in [*REFERENCE, "cam"]:
        result = hookviz.grad_cam(resnet18, x, "layer4", 1, method=method)
        assert result.cam.shape == (2, 2) and (result.cam >= 0).all()
    assert hookviz.count_hooks(resnet18.model) == 0
    assert all(p.grad is None for p in resnet18.model.parameters())
    after = resnet18.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_every_method_is_named_and_described_everywhere():
    """The page's labels and notes and the command line's help name every method (the help
    lists them by hand: ``hookviz.cli`` must not import torch)."""
    import argparse

    from hookviz import cli
    from hookviz.app.method_texts import METHOD_IDEAS, METHOD_LABELS, METHOD_NOTES
    from hookviz.app.sidebar.method import METHOD_CHOICES

    offered = {*hookviz.METHODS, *hookviz.BASELINES}
    assert set(METHOD_LABELS) == set(METHOD_NOTES) == set(METHOD_IDEAS) == offered
    assert sorted(METHOD_CHOICES) == sorted(offered)  # each once, in a group
    commands = next(a for a in cli._parser()._actions if isinstance(a, argparse._SubParsersAction))
    help_text = next(
        a.help for a in commands.choices["cam"]._actions if "--method" in a.option_strings
    )
    named = set(re.findall(r"[a-z+]+", help_text))
    assert set(hookviz.METHODS) | set(hookviz.BASELINES) <= named, named
    assert {"eigencam", "kpcacam", "fem", "randomcam", *hookviz.BASELINES} == methods.CLASSLESS
    assert methods.CLASSLESS.isdisjoint(methods.NEEDS_GRADIENT)
