"""Every CAM method against independent references: pytorch-grad-cam (and Captum for Grad-CAM),
on torchvision architectures with seeded random weights, at several layers. Agreement is the
Pearson correlation of the final heatmaps (both min-max scaled and upsampled bilinearly)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import hookviz

from .conftest import random_input

pytorch_grad_cam = pytest.importorskip("pytorch_grad_cam")

# Layers not followed by an in-place op: there the references store the right tensor (see
# test_reference_is_wrong_after_inplace_relu for what happens otherwise).
CASES = {
    "resnet18": ["layer3", "layer4"],
    "resnet50": ["layer2", "layer4"],
    "vgg11": ["features.12", "features.20"],
    "mobilenet_v3_small": ["features.6", "features.12"],
    "densenet121": ["features.denseblock3", "features.denseblock4"],
}
REFERENCE = {
    "gradcam": "GradCAM",
    "gradcam++": "GradCAMPlusPlus",
    "xgradcam": "XGradCAM",
    "layercam": "LayerCAM",
    "hirescam": "HiResCAM",
    "scorecam": "ScoreCAM",
}
MIN_R = 0.999
# The deep ones repeat what the others show, at several seconds a case: the full suite runs
# them, the inner loop does not.
DEEP = {"resnet50", "densenet121"}
NAMES = [pytest.param(name, marks=pytest.mark.slow) if name in DEEP else name for name in CASES]


class _Models(dict):
    """Each architecture built (with seeded random weights) when a test first asks for it."""

    def __missing__(self, name: str) -> hookviz.LoadedModel:
        torch.manual_seed(0)
        self[name] = hookviz.load_model(name, pretrained=False, device="cpu")
        return self[name]


@pytest.fixture(scope="module")
def models():
    return _Models()


def _reference(model: torch.nn.Module, layer: str, x: torch.Tensor, target: int, method: str):
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    cam_class = getattr(pytorch_grad_cam, REFERENCE[method])
    module = dict(model.named_modules())[layer]
    with cam_class(model=model, target_layers=[module]) as cam:
        if method == "scorecam":
            cam.batch_size = 64
        return cam(input_tensor=x, targets=[ClassifierOutputTarget(target)])[0]


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    if not a.any() and not b.any():
        return 1.0  # both blank: the same answer
    return float(np.corrcoef(a.ravel(), b.ravel())[0, 1])


@pytest.mark.parametrize("method", [m for m in REFERENCE if m != "scorecam"])
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.slow
def test_gradient_methods_agree_with_pytorch_grad_cam(models, name, method):
    loaded = models[name]
    # the references need gradients to flow through a model of their own, unfrozen
    peer = _peer(loaded)
    x = random_input(128, 160, seed=5)
    target = hookviz.predict(loaded, x, k=1)[0].index
    for layer in CASES[name]:
        ours = hookviz.grad_cam(loaded, x, layer, target, method=method).heatmap
        theirs = _reference(peer, layer, x, target, method)
        assert _pearson(ours, theirs) >= MIN_R, (layer, _pearson(ours, theirs))


@pytest.mark.parametrize(
    "name", ["resnet18", pytest.param("vgg11", marks=pytest.mark.slow), "mobilenet_v3_small"]
)
@pytest.mark.slow
def test_scorecam_agrees_with_pytorch_grad_cam(models, name):
    loaded = models[name]
    peer = _peer(loaded)
    x = random_input(64, 80, seed=6)
    target = hookviz.predict(loaded, x, k=1)[0].index
    layer = CASES[name][-1]
    ours = hookviz.grad_cam(loaded, x, layer, target, method="scorecam").heatmap
    theirs = _reference(peer, layer, x, target, "scorecam")
    assert _pearson(ours, theirs) >= MIN_R


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.slow
def test_eigencam_is_the_first_principal_component(models, name):
    from pytorch_grad_cam.utils.svd_on_activations import get_2d_projection

    loaded = models[name]
    x = random_input(128, 160, seed=7)
    for layer in CASES[name]:
        result = hookviz.grad_cam(loaded, x, layer, method="eigencam")
        activations = hookviz.feature_maps(loaded, x, layer).activations[None].numpy()
        reference = get_2d_projection(activations)[0]
        # the reference leaves the SVD's arbitrary sign; hookviz fixes it (max >= |min|)
        if np.abs(reference.min()) > reference.max():
            reference = -reference
        expected = np.maximum(reference, 0)
        assert _pearson(result.cam, expected) >= MIN_R
        assert result.weights is None and result.method == "eigencam"


@pytest.mark.parametrize("name", NAMES)
def test_gradcam_agrees_with_captum(models, name):
    from captum.attr import LayerAttribution, LayerGradCam

    loaded = models[name]
    peer = _peer(loaded)
    x = random_input(128, 160, seed=8)
    target = hookviz.predict(loaded, x, k=1)[0].index
    for layer in CASES[name]:
        module = dict(peer.named_modules())[layer]
        attribution = LayerGradCam(peer, module).attribute(x, target=target, relu_attributions=True)
        theirs = LayerAttribution.interpolate(attribution, (128, 160), "bilinear")[0, 0]
        ours = hookviz.grad_cam(loaded, x, layer, target).heatmap
        assert _pearson(ours, theirs.detach().numpy()) >= MIN_R


def test_reference_is_wrong_after_inplace_relu(models):
    """VGG's features.3 is a conv followed by ReLU(inplace=True). pytorch-grad-cam keeps
    ``output.detach()`` (shared storage), which the ReLU then overwrites: it weighs post-ReLU
    activations with pre-ReLU gradients. hookviz keeps a clone, so its map is the one the paper
    defines, computed here from scratch by calling the modules directly."""
    loaded = models["vgg11"]
    peer = _peer(loaded)
    x = random_input(96, 96, seed=9)
    target = hookviz.predict(loaded, x, k=1)[0].index
    features = loaded.model.features
    with torch.enable_grad():
        a = features[:4](x).detach().requires_grad_(True)  # conv output, before the ReLU
        rest = torch.nn.Sequential(*list(features)[4:])
        logits = loaded.model.classifier(torch.flatten(loaded.model.avgpool(rest(a.clone())), 1))
        (g,) = torch.autograd.grad(logits[0, target], a)
    truth = torch.relu((g.mean(dim=(2, 3), keepdim=True) * a.detach()).sum(1))[0]
    ours = hookviz.grad_cam(loaded, x, "features.3", target)
    np.testing.assert_allclose(ours.cam, truth.numpy(), rtol=1e-4, atol=1e-6)
    theirs = _reference(peer, "features.3", x, target, "gradcam")
    expected = hookviz.core.cam.to_pixel_grid(truth, (96, 96))
    assert _pearson(ours.heatmap, expected) > 0.9999
    assert _pearson(theirs, expected) < 0.999  # the reference mixes pre- and post-ReLU tensors


def test_unknown_method_is_refused(models):
    with pytest.raises(hookviz.MethodError, match="gradcam\\+\\+"):
        hookviz.grad_cam(models["resnet18"], random_input(64, 64), "layer4", method="magic")


def test_scorecam_can_be_cancelled(models):
    loaded = models["resnet18"]
    kept = hookviz.ForwardPass(loaded, random_input(64, 64), "layer4")
    with pytest.raises(hookviz.CancelledError):
        kept.grad_cam(3, "scorecam", progress=lambda done, total: done >= 32)
    assert hookviz.count_hooks(loaded.model) == 0


def _peer(loaded: hookviz.LoadedModel) -> torch.nn.Module:
    import copy

    return copy.deepcopy(loaded.model).requires_grad_(True).eval()
