"""The options every CAM method takes and the ways to combine layers, against their references:
``eigen_smooth`` and ``aug_smooth`` as pytorch-grad-cam 1.5.7 computes them, several layers
fused as TorchCAM's ``fuse_cams`` and ``RefineCAM`` and pytorch-grad-cam's several target
layers; the baselines wherever a method name is (the edge map against SciPy's Sobel); the batch
API equal to one image at a time; and the passes a method is said to cost equal to the passes
it runs, counted on the model."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import hookviz
from hookviz.core.batch import explain_batch
from hookviz.core.shared_passes import layer_passes

from .conftest import random_input

pytorch_grad_cam = pytest.importorskip("pytorch_grad_cam")
torchcam = pytest.importorskip("torchcam")

MIN_R = 0.999


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(np.ravel(a), np.ravel(b))[0, 1])


def _peer(loaded: hookviz.LoadedModel) -> torch.nn.Module:
    return copy.deepcopy(loaded.model).requires_grad_(True).eval()


def _pgc(peer, layers, x, target, name="GradCAM", **call) -> np.ndarray:
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

    cam_class = getattr(pytorch_grad_cam, name)
    modules = [peer.get_submodule(layer) for layer in layers]
    with cam_class(model=peer, target_layers=modules) as cam:
        return cam(input_tensor=x, targets=[ClassifierOutputTarget(target)], **call)[0]


def _sign_fixed_projection(monkeypatch) -> None:
    """pytorch-grad-cam's own sign-corrected projection (Seg-Eigen-CAM's rule, which hookviz
    applies) in place of its plain one: an SVD's sign is arbitrary."""
    from pytorch_grad_cam import base_cam
    from pytorch_grad_cam.utils import svd_on_activations as svd

    monkeypatch.setattr(base_cam, "get_2d_projection", svd.get_2d_projection_with_sign_correction)
    for module in ("layer_cam", "hirescam"):
        monkeypatch.setattr(
            getattr(pytorch_grad_cam, module),
            "get_2d_projection",
            svd.get_2d_projection_with_sign_correction,
        )


@pytest.mark.parametrize(
    ("method", "reference"),
    [("gradcam", "GradCAM"), ("gradcam++", "GradCAMPlusPlus"), ("layercam", "LayerCAM"),
     ("hirescam", "HiResCAM"), ("xgradcam", "XGradCAM")],
)  # fmt: skip
@pytest.mark.slow
def test_eigen_smooth_is_pytorch_grad_cams(resnet18, method, reference, monkeypatch):
    _sign_fixed_projection(monkeypatch)
    x = random_input(128, 160, seed=5)
    target = hookviz.predict(resnet18, x, k=2)[1].index
    for layer in ("layer3", "layer4"):
        ours = hookviz.grad_cam(resnet18, x, layer, target, method=method, eigen_smooth=True)
        theirs = _pgc(_peer(resnet18), [layer], x, target, reference, eigen_smooth=True)
        plain = hookviz.grad_cam(resnet18, x, layer, target, method=method).heatmap
        assert _pearson(ours.heatmap, theirs) >= MIN_R, (layer, _pearson(ours.heatmap, theirs))
        assert not np.allclose(ours.heatmap, plain, atol=1e-3)  # the option changed the map


def test_aug_smooth_is_pytorch_grad_cams(resnet18):
    x = random_input(96, 128, seed=3)
    target = hookviz.predict(resnet18, x, k=1)[0].index
    ours = hookviz.grad_cam(resnet18, x, "layer3", target, aug_smooth=True)
    theirs = _pgc(_peer(resnet18), ["layer3"], x, target, aug_smooth=True)
    assert _pearson(ours.heatmap, theirs) >= MIN_R, _pearson(ours.heatmap, theirs)
    assert ours.heatmap.shape == x.shape[-2:]
    assert hookviz.count_hooks(resnet18.model) == 0


def test_aug_smooth_refuses_a_target_that_moves_with_the_flip():
    detector = hookviz.load_model("fasterrcnn_mobilenet_v3_large_320_fpn", pretrained=False)
    box = hookviz.targets.Box((10, 10, 60, 60), 1)
    with pytest.raises(hookviz.MethodError, match="aug_smooth flips the image"):
        hookviz.grad_cam(detector, random_input(96, 96, seed=1), None, box, aug_smooth=True)


def test_an_option_a_method_does_not_take_is_refused(resnet18):
    with pytest.raises(hookviz.MethodError, match="no option 'steps'"):
        hookviz.grad_cam(resnet18, random_input(64, 64), "layer4", method="gradcam", steps=3)
    assert hookviz.method_options("Grad-CAM++") == {"eigen_smooth": False, "aug_smooth": False}


def _torchcam_maps(peer, layers, x, target) -> list[torch.Tensor]:
    from torchcam.methods import GradCAM

    with GradCAM(peer, layers, input_shape=tuple(x.shape[1:])) as extractor:
        scores = peer(x)
        return extractor(target, scores)


@pytest.mark.parametrize("fuse", ["max", "refinecam", "mean"])
def test_layers_fused_as_the_references_fuse_them(resnet18, fuse):
    x = random_input(128, 128, seed=7)
    target = 11
    layers = ["layer2", "layer3", "layer4"]
    fused = hookviz.grad_cam(resnet18, x, layers, target, fuse=fuse)
    assert fused.layer == "layer2+layer3+layer4" and fused.cam.shape == (16, 16)
    if fuse == "mean":  # pytorch-grad-cam's several target layers: on the input's grid
        theirs = _pgc(_peer(resnet18), layers, x, target)
        assert _pearson(fused.heatmap, theirs) >= MIN_R, _pearson(fused.heatmap, theirs)
        return
    from torchcam.methods import RefineCAM
    from torchcam.methods.core import _CAM

    peer = _peer(resnet18)
    maps = _torchcam_maps(peer, layers, x, target)
    fused_by = _CAM.fuse_cams if fuse == "max" else RefineCAM.fuse_cams
    theirs = fused_by(maps)[0]
    assert _pearson(fused.cam, theirs.detach().numpy()) >= MIN_R


@pytest.mark.parametrize(
    ("method", "options"),
    [("gradcam", {}), ("gradcam++", {}), ("layercam", {"eigen_smooth": True}), ("eigencam", {})],
)
def test_fused_layers_come_from_one_forward_and_equal_each_layer_alone(resnet18, method, options):
    x = random_input(96, 112, seed=8)
    layers = ["layer4", "layer2", "layer3.1"]
    hookviz.layer_table(resnet18)  # (traced once per model: forwards not counted here)
    forwards = []
    handle = resnet18.model.register_forward_hook(lambda *_: forwards.append(1))
    try:
        fused = hookviz.grad_cam(resnet18, x, layers, 5, method=method, fuse="mean", **options)
    finally:
        handle.remove()
    assert len(forwards) == 1
    alone = [hookviz.grad_cam(resnet18, x, layer, 5, method=method, **options) for layer in layers]
    assert fused.layer == "+".join(layers)
    expected = hookviz.fuse_cams(alone, "mean")
    np.testing.assert_allclose(fused.cam, expected.cam, rtol=1e-5, atol=1e-6)
    assert (fused.class_index, fused.score) == (alone[0].class_index, alone[0].score)


def test_the_layers_of_a_tensor_share_the_picture_one_pass_draws(resnet18):
    x = random_input(48, 64, seed=10)
    passes = layer_passes(resnet18, x, ["layer2", "layer3", "layer4"])
    assert all(made.picture is passes[0].picture for made in passes)
    alone = hookviz.ForwardPass(resnet18, x, "layer3").picture
    assert np.array_equal(np.asarray(passes[1].picture), np.asarray(alone))


@pytest.mark.slow
def test_fusing_a_slow_method_runs_each_layer_as_alone(resnet18):
    x = random_input(48, 48, seed=9)
    layers = ["layer3", "layer4"]
    fused = hookviz.grad_cam(resnet18, x, layers, 2, method="ablationcam", fuse="max",
                             batch_size=256)  # fmt: skip
    alone = [hookviz.grad_cam(resnet18, x, layer, 2, method="ablationcam") for layer in layers]
    np.testing.assert_allclose(fused.cam, hookviz.fuse_cams(alone).cam, rtol=1e-5, atol=1e-6)


def test_a_fusion_hookviz_does_not_know_is_refused(resnet18):
    with pytest.raises(hookviz.MethodError, match="unknown fusion"):
        hookviz.grad_cam(resnet18, random_input(64, 64), ["layer3", "layer4"], fuse="min")


def test_the_baselines_are_methods_wherever_a_method_is(resnet18):
    """``edges`` by ``grad_cam``, ``attribute`` and the batch API is the Sobel magnitude of
    the luminance (SciPy's, an independent oracle); ``center`` is ``centre``'s other
    spelling; a baseline is the same for every class."""
    ndimage = pytest.importorskip("scipy.ndimage")
    x = random_input(64, 80, seed=4)
    luma = (0.299 * x[0, 0] + 0.587 * x[0, 1] + 0.114 * x[0, 2]).double().numpy()
    sobel = np.hypot(ndimage.sobel(luma, 1, mode="nearest"), ndimage.sobel(luma, 0, mode="nearest"))
    expected = (sobel - sobel.min()) / (sobel.max() - sobel.min())
    cam = hookviz.grad_cam(resnet18, x, "layer4", 3, method="edges")
    np.testing.assert_allclose(cam.heatmap, expected, atol=1e-5)
    assert cam.method == "edges" and cam.weights is None
    raw = hookviz.attribute(resnet18, x, "edges").raw  # the magnitude itself, in each channel
    np.testing.assert_allclose(raw, np.broadcast_to(sobel, raw.shape), rtol=1e-5, atol=1e-5)
    batch = explain_batch(resnet18, x.repeat(2, 1, 1, 1), "layer4", [3, 7], "edges")
    np.testing.assert_allclose(batch.cams[0], batch.cams[1])
    centre = hookviz.grad_cam(resnet18, x, method="center", sigma=0.1)
    assert centre.method == "centre"
    assert centre.heatmap[32, 40] == pytest.approx(1.0, abs=0.02) and centre.heatmap[0, 0] < 0.01


@pytest.mark.parametrize(
    ("method", "options"),
    [("edges", {}), ("gradcam", {"eigen_smooth": True}), ("fullgrad", {}),
     ("shapleycam", {}), ("finercam", {})],
)  # fmt: skip
def test_the_batch_api_gives_what_each_image_gets_alone(resnet18, method, options):
    images = torch.cat([random_input(64, 64, seed=s) for s in (1, 2, 3)])
    batch = explain_batch(resnet18, images, "layer3", [5, 6, 7], method, **options)
    for i in range(3):
        alone = hookviz.grad_cam(resnet18, images[i : i + 1], "layer3", 5 + i, method=method,
                                 **options)  # fmt: skip
        np.testing.assert_allclose(batch.cams[i], alone.cam, rtol=1e-4, atol=1e-6)
        assert batch.class_indices[i] == 5 + i
    assert hookviz.count_hooks(resnet18.model) == 0


def _forward_images(model: torch.nn.Module, run) -> int:
    """How many images ``run()`` passes forward to ``model``'s head, its last module (a
    pre-hook there counts each call's batch): Ablation-CAM runs the network below its layer
    on the image once per batch, and the rest once per ablated map."""
    seen = []
    head = list(model.children())[-1]
    handle = head.register_forward_pre_hook(lambda _m, args: seen.append(int(args[0].shape[0])))
    try:
        run()
    finally:
        handle.remove()
    return sum(seen)


@pytest.mark.parametrize(
    ("method", "options"),
    [("gradcam", {}), ("scorecam", {}), ("ablationcam", {}), ("fullgrad", {}),
     ("smoothgradcam++", {"num_samples": 3}), ("sscam", {"num_samples": 2}),
     ("iscam", {"num_samples": 2}), ("gradcam", {"aug_smooth": True}), ("edges", {})],
)  # fmt: skip
@pytest.mark.slow
def test_the_cost_said_is_the_passes_run(vgg11, method, options):
    """A method's forward passes, as ``method_cost`` counts them, are the images the model
    is run on when the method runs (the passes beyond the forward pass already made)."""
    x = random_input(32, 32, seed=8)
    kept = hookviz.ForwardPass(vgg11, x, "features.15")
    said = kept.method_cost(method, **options)
    ran = _forward_images(vgg11.model, lambda: kept.grad_cam(4, method, **options))
    assert said.forwards == ran, (said, ran)
    assert said.seconds >= 0 and ("pass" in said.describe())
