"""Ablation-CAM, Shapley-CAM, Finer-CAM and FullGrad (``hookviz.core.probing_methods``)
against pytorch-grad-cam 1.5.7, on two architectures with seeded random weights: a ResNet-18
(ReLU: piecewise linear) and a MobileNetV3-Small (Hardswish, squeeze-excitation). Agreement is
the Pearson correlation of the final heatmaps, as in test_more_methods.py. Then what the
methods must never do: leave a hook, a ``.grad`` or a changed weight on the model, also when
cancelled or failing half-way.

Shapley-CAM's second-order term vanishes on a piecewise-linear network explaining a logit
(it is Grad-CAM there), so it is also compared explaining a softmax probability, where the
Hessian is not zero."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import hookviz
from hookviz.core.inputs import extract_logits

from .conftest import random_input

pytorch_grad_cam = pytest.importorskip("pytorch_grad_cam")
from pytorch_grad_cam.utils.model_targets import (  # noqa: E402
    ClassifierOutputSoftmaxTarget,
    ClassifierOutputTarget,
)

MIN_R = 0.999
METHODS = ["ablationcam", "shapleycam", "finercam", "fullgrad"]
REFERENCE = {
    "ablationcam": "AblationCAM",
    "shapleycam": "ShapleyCAM",
    "finercam": "FinerCAM",
    "fullgrad": "FullGrad",
}


@pytest.fixture(scope="module")
def mobilenet() -> hookviz.LoadedModel:
    """An untrained MobileNetV3-Small (seeded by its name): Hardswish, squeeze-excitation
    gates, convolutions with biases inside them."""
    return hookviz.load_model("mobilenet_v3_small", pretrained=False, device="cpu")


@pytest.fixture(scope="module")
def peers() -> dict[int, torch.nn.Module]:
    """One copy per model for the reference (it writes .grad and swaps layers on its own)."""
    return {}


def _peer(peers: dict[int, torch.nn.Module], loaded: hookviz.LoadedModel) -> torch.nn.Module:
    if id(loaded) not in peers:
        peers[id(loaded)] = copy.deepcopy(loaded.model).requires_grad_(True).eval()
    return peers[id(loaded)]


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    if not a.any() and not b.any():
        return 1.0  # both blank: the same answer
    return float(np.corrcoef(np.ravel(a), np.ravel(b))[0, 1])


def _softmax_of(index: int):
    """hookviz's target for ``ClassifierOutputSoftmaxTarget(index)``."""
    return lambda output: torch.softmax(extract_logits(output), dim=-1)[:, index]


def _reference(peer, method, layer, x, target, softmax=False, **options) -> np.ndarray:
    """pytorch-grad-cam's heatmap (H, W) of the class ``target`` (its logit, or with
    ``softmax`` its probability)."""
    cam_class = getattr(pytorch_grad_cam, REFERENCE[method])
    layers = [] if method == "fullgrad" else [peer.get_submodule(layer)]
    kwargs = {"batch_size": options.pop("batch_size")} if "batch_size" in options else {}
    with cam_class(peer, layers, **kwargs) as cam:
        if method == "finercam":
            return cam(input_tensor=x, target_idx=target, **options)[0]
        wanted = (
            ClassifierOutputSoftmaxTarget(target) if softmax else ClassifierOutputTarget(target)
        )
        return cam(input_tensor=x, targets=[wanted])[0]


# (model fixture, method, layer, input size, options); the second-ranked class is explained.
CASES = [
    # after a ReLU: the smallest activation is 0, an ablated channel is zeroed
    ("resnet18", "ablationcam", "layer1", 32, {}),
    # convolutions (negative values, then BatchNorm and a ReLU): ablated to min - 1e7
    ("resnet18", "ablationcam", "layer2.1.conv1", 32, {"batch_size": 64}),
    ("mobilenet", "ablationcam", "features.1.block.0.0", 64, {}),
    ("resnet18", "shapleycam", "layer3", 64, {}),
    ("resnet18", "shapleycam", "layer4", 64, {}),
    ("mobilenet", "shapleycam", "features.12", 96, {}),
    ("resnet18", "finercam", "layer4", 64, {}),
    ("resnet18", "finercam", "layer3", 64, {"alpha": 0.5, "comparison_categories": (1, 2)}),
    ("mobilenet", "finercam", "features.12", 96, {}),
    ("resnet18", "fullgrad", "layer4", 64, {}),
    ("mobilenet", "fullgrad", "features.12", 96, {}),
]


@pytest.mark.parametrize(("fixture", "method", "layer", "size", "options"), CASES)
@pytest.mark.slow
def test_agrees_with_pytorch_grad_cam(request, peers, fixture, method, layer, size, options):
    loaded = request.getfixturevalue(fixture)
    x = random_input(size, size, seed=5)
    target = hookviz.predict(loaded, x, k=2)[1].index  # the runner-up: not the default
    ours = hookviz.grad_cam(loaded, x, layer, target, method=method, **options)
    theirs = _reference(_peer(peers, loaded), method, layer, x, target, **options)
    r = _pearson(ours.heatmap, theirs)
    assert r >= MIN_R, r
    assert ours.method == method and ours.class_index == target
    assert hookviz.count_hooks(loaded.model) == 0


@pytest.mark.parametrize(
    ("fixture", "layer", "size"), [("resnet18", "layer3", 64), ("mobilenet", "features.12", 96)]
)
def test_shapleycam_of_a_probability_agrees(request, peers, fixture, layer, size):
    """A softmax probability has a Hessian even where the network is piecewise linear."""
    loaded = request.getfixturevalue(fixture)
    x = random_input(size, size, seed=7)
    target = hookviz.predict(loaded, x, k=2)[1].index
    ours = hookviz.grad_cam(loaded, x, layer, _softmax_of(target), method="shapleycam")
    theirs = _reference(_peer(peers, loaded), "shapleycam", layer, x, target, softmax=True)
    assert _pearson(ours.heatmap, theirs) >= MIN_R, _pearson(ours.heatmap, theirs)


def _images_in(model: torch.nn.Module, run, size: tuple[int, int]) -> tuple[int, object]:
    """How many images of ``size`` ``run()`` feeds ``model`` (not the model's layer-listing
    traces, made once a model at sizes of its own), and what it returns."""
    seen = []

    def count(_module, args) -> None:
        if tuple(args[0].shape[-2:]) == size:
            seen.append(int(args[0].shape[0]))

    handle = model.register_forward_pre_hook(count)
    try:
        result = run()
    finally:
        handle.remove()
    return sum(seen), result


class _Concatenating(torch.nn.Module):
    """A DenseNet's way: the head reads ``first``'s maps beside ``second``'s, so the network
    below ``second`` cannot run on one image under a batch of replaced maps."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.first = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.second = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.head = torch.nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = torch.relu(self.first(x))
        b = torch.relu(self.second(a))
        return self.head(torch.cat([a, b], dim=1).mean(dim=(2, 3)))


@pytest.mark.slow
def test_ablationcam_runs_the_network_below_the_layer_once_per_batch_where_it_can(resnet18, peers):
    """Inside a residual block (the skip connection broadcasts one image's maps over the
    batch) the image goes through the network below the layer once per batch of ablated maps,
    not once per map; where the network cannot take that (a concatenation with the image's own
    maps), every batch runs on copies. Both give pytorch-grad-cam's map."""
    x = random_input(32, 32, seed=5)
    fed, cam = _images_in(
        resnet18.model,
        lambda: hookviz.grad_cam(resnet18, x, "layer2.1.conv1", 7, "ablationcam"),
        (32, 32),
    )
    # the kept forward pass, then one image per batch of 32 ablated maps (128 channels: 4
    # batches, the first with the layer's own activations too, which check it)
    assert fed == 1 + 4
    theirs = _reference(_peer(peers, resnet18), "ablationcam", "layer2.1.conv1", x, 7)
    assert _pearson(cam.heatmap, theirs) >= MIN_R

    dense = hookviz.wrap_model(_Concatenating(), num_classes=10, device="cpu")
    fed, cam = _images_in(
        dense.model, lambda: hookviz.grad_cam(dense, x, "second", 4, "ablationcam"), (32, 32)
    )
    # the kept forward, the image tried once (refused at the concatenation), then 9 copies:
    # the 8 channels ablated and the activations themselves
    assert fed == 1 + 1 + 9
    theirs = _reference(_peer(peers, dense), "ablationcam", "second", x, 4)
    assert _pearson(cam.heatmap, theirs) >= MIN_R
    assert hookviz.count_hooks(dense.model) == 0


def test_shapleycam_adds_the_second_order_term(resnet18):
    """Explaining a ResNet's logit, the Hessian term is zero and Shapley-CAM is Grad-CAM;
    explaining a probability, it changes the map."""
    x = random_input(64, 64, seed=7)
    kept = hookviz.ForwardPass(resnet18, x, "layer3")
    target = kept.predictions[1].index
    logit = kept.grad_cam(target, "shapleycam")
    np.testing.assert_allclose(logit.weights, kept.grad_cam(target, "gradcam").weights, atol=1e-7)
    probability = _softmax_of(target)
    shapley = kept.grad_cam(probability, "shapleycam").heatmap
    assert _pearson(shapley, kept.grad_cam(probability, "gradcam").heatmap) < 0.99


@pytest.mark.parametrize("which", ["top-1", "class", "probability"])
def test_grad_cam_runs_shapleycam_on_its_own_forward_pass_with_the_same_result(mobilenet, which):
    """``hookviz.grad_cam`` takes the target from Shapley-CAM's own forward pass (no
    ``ForwardPass`` kept first): the map, weights, class, score and probability are what a kept
    forward pass gives, on a network whose Hessian term is not zero (Hardswish, gates)."""
    x = random_input(96, 96, seed=2)
    kept = hookviz.ForwardPass(mobilenet, x, "features.12")
    target = {"top-1": None, "class": kept.predictions[2].index, "probability": _softmax_of(4)}
    before = _state(mobilenet)
    alone = hookviz.grad_cam(mobilenet, x, "features.12", target[which], method="shapleycam")
    expected = kept.grad_cam(target[which], "shapleycam")
    np.testing.assert_allclose(alone.cam, expected.cam, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(alone.weights, expected.weights, rtol=1e-4, atol=1e-7)
    for name in ("class_index", "class_name", "layer", "method", "size", "blank", "frame"):
        assert getattr(alone, name) == getattr(expected, name), name
    np.testing.assert_allclose(alone.probability, expected.probability, rtol=1e-6)
    assert alone.score == pytest.approx(expected.score, rel=1e-6, abs=1e-6)
    _assert_unchanged(mobilenet, before)


def _attention_kernels() -> tuple[bool, ...]:
    backends = torch.backends.cuda
    return (
        backends.flash_sdp_enabled(),
        backends.mem_efficient_sdp_enabled(),
        backends.math_sdp_enabled(),
        backends.cudnn_sdp_enabled(),
    )


def test_shapleycam_on_a_vision_transformer():
    """Fused attention has no second derivative: Shapley-CAM runs its pass again with the
    plain kernel, and leaves the process-wide choice of kernels as it found it."""
    vit = hookviz.load_model("timm:vit_tiny_patch16_224", pretrained=False, device="cpu")
    kernels = _attention_kernels()
    result = hookviz.grad_cam(vit, random_input(64, 64, seed=1), "blocks.10", 3, "shapleycam")
    assert result.cam.shape == (4, 4) and result.weights.shape == (192,)
    assert np.isfinite(result.weights).all() and result.weights.any()
    assert _attention_kernels() == kernels
    assert hookviz.count_hooks(vit.model) == 0


def _state(loaded: hookviz.LoadedModel):
    model = loaded.model
    return (
        {k: v.clone() for k, v in model.state_dict().items()},
        [(name, id(module), module.training) for name, module in model.named_modules()],
        [p.requires_grad for p in model.parameters()],
    )


def _assert_unchanged(loaded: hookviz.LoadedModel, before) -> None:
    weights, modules, trainable = before
    model = loaded.model
    assert hookviz.count_hooks(model) == 0
    assert all(p.grad is None for p in model.parameters())
    after = model.state_dict()
    assert all(torch.equal(weights[k], after[k]) for k in weights)
    assert [(n, id(m), m.training) for n, m in model.named_modules()] == modules
    assert [p.requires_grad for p in model.parameters()] == trainable
    assert torch.is_grad_enabled()


def test_methods_leave_the_model_as_it_was(resnet18):
    x = random_input(32, 48, seed=6)
    before = _state(resnet18)
    hookviz.list_layers(resnet18)  # traced once, outside inference mode (this tests the methods)
    for method in METHODS:
        with torch.inference_mode():  # as a caller's evaluation loop may be
            result = hookviz.grad_cam(resnet18, x, "layer2", 1, method=method)
        assert (result.cam >= 0).all() and result.heatmap.shape == (32, 48)
        if method == "fullgrad":  # the input's grid, whatever the layer
            assert result.cam.shape == (32, 48) and result.weights is None
        else:
            assert result.cam.shape == (4, 6) and result.weights.shape == (128,)
        _assert_unchanged(resnet18, before)


def test_cancelled_ablationcam_leaves_the_model_as_it_was(resnet18):
    x = random_input(32, 32, seed=6)
    before = _state(resnet18)
    told = []

    def progress(done: int, total: int) -> bool:
        told.append((done, total))
        return done > 0  # cancel before the second batch

    with pytest.raises(hookviz.CancelledError):
        hookviz.grad_cam(resnet18, x, "layer2", 1, method="ablationcam", progress=progress)
    assert told == [(0, 128), (32, 128)]
    _assert_unchanged(resnet18, before)


@pytest.mark.parametrize("method", ["shapleycam", "finercam", "fullgrad"])
def test_a_failing_pass_leaves_the_model_as_it_was(resnet18, method):
    """The target fails inside the method's own pass (the only one in which the model's output
    is differentiable): its hooks are gone all the same."""
    x = random_input(48, 48, seed=6)
    before = _state(resnet18)

    def target(output: torch.Tensor) -> torch.Tensor:
        if output.requires_grad:
            raise RuntimeError("failing on purpose")
        return output[:, 1]

    with pytest.raises(RuntimeError, match="failing on purpose"):
        hookviz.grad_cam(resnet18, x, "layer3", target, method=method)
    _assert_unchanged(resnet18, before)


def test_finercam_refuses_a_model_without_classes(embedder):
    x = random_input(48, 48, seed=6)
    with pytest.raises(hookviz.MethodError, match="compares classes"):
        hookviz.grad_cam(embedder, x, "layer4", lambda output: output[:, 0], "finercam")
    assert hookviz.count_hooks(embedder.model) == 0


def test_shapleycam_refuses_a_network_without_second_derivatives(mobilenet):
    """PyTorch has no double backward for Hardsigmoid (MobileNetV3's gates, after this
    layer)."""
    x = random_input(64, 64, seed=6)
    with pytest.raises(hookviz.MethodError, match="second derivative"):
        hookviz.grad_cam(mobilenet, x, "features.9", 1, method="shapleycam")
    assert hookviz.count_hooks(mobilenet.model) == 0


@pytest.mark.parametrize(
    ("method", "options", "message"),
    [
        ("ablationcam", {"batch_size": 0}, "batch_size must be a positive integer"),
        ("finercam", {"base_method": "eigencam"}, "base_method must use the gradient"),
        ("finercam", {"comparison_categories": (1000, 2000)}, "none of the comparison"),
        ("finercam", {"comparison_categories": (-1,)}, "non-negative integers"),
        ("fullgrad", {"alpha": 1.0}, "takes no option 'alpha'"),
    ],
)
def test_bad_options_are_refused(resnet18, method, options, message):
    x = random_input(32, 32, seed=6)
    with pytest.raises(hookviz.MethodError, match=message):
        hookviz.grad_cam(resnet18, x, "layer4", 1, method=method, **options)
    assert hookviz.count_hooks(resnet18.model) == 0


def test_defaults_are_pytorch_grad_cams():
    assert hookviz.method_options("ablationcam", {}) == {
        "batch_size": 32,
        "eigen_smooth": False,
        "aug_smooth": False,
    }
    finer = hookviz.method_options("finercam", {})
    assert finer["alpha"] == 1.0 and finer["comparison_categories"] == (1, 2, 3)
    assert finer["base_method"] == "gradcam"
