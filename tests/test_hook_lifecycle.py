"""Hooks live for one call: nothing is left behind on success or on any failure, the shared
model is never changed, and snapshots survive the in-place ReLUs that follow them."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import hookviz
from hookviz.core.preprocess import Preprocessing

from .conftest import random_input


def _state(loaded: hookviz.LoadedModel) -> tuple:
    model = loaded.model
    return (
        hookviz.count_hooks(model),
        [m.training for m in model.modules()],
        [p.requires_grad for p in model.parameters()],
        [p.grad for p in model.parameters()],
    )


def _assert_untouched(loaded: hookviz.LoadedModel) -> None:
    hooks, training, requires_grad, grads = _state(loaded)
    assert hooks == 0
    assert not any(training), "a module was switched to train mode"
    assert not any(requires_grad), "a parameter was unfrozen"
    assert all(g is None for g in grads), "a parameter gained a .grad"
    assert loaded.lock.acquire(blocking=False), "the model lock was left held"
    loaded.lock.release()


@pytest.mark.parametrize("call", ["predict", "feature_maps", "grad_cam", "analyze"])
def test_no_hooks_and_no_side_effects_after_success(resnet18, call):
    x = random_input()
    if call == "predict":
        hookviz.predict(resnet18, x)
    else:
        getattr(hookviz, call)(resnet18, x, "layer3")
    _assert_untouched(resnet18)


def test_no_hooks_after_invalid_target(resnet18):
    with pytest.raises(hookviz.TargetError, match="0 to 999"):
        hookviz.grad_cam(resnet18, random_input(), "layer4", target=1000)
    with pytest.raises(ValueError, match="out of range"):
        hookviz.grad_cam(resnet18, random_input(), "layer4", target=-1)
    with pytest.raises(hookviz.TargetError):
        hookviz.grad_cam(resnet18, random_input(), "layer4", target=2.5)  # type: ignore[arg-type]
    _assert_untouched(resnet18)


def test_no_hooks_after_unknown_layer(resnet18):
    with pytest.raises(hookviz.LayerError, match="layer9"):
        hookviz.grad_cam(resnet18, random_input(), "layer9")
    _assert_untouched(resnet18)


def test_shared_module_cannot_be_a_target(resnet18):
    # torchvision's BasicBlock calls its one ReLU object twice per forward
    table = hookviz.layer_table(resnet18)
    excluded = {layer.name: layer for layer in table.excluded}
    assert "layer1.0.relu" in excluded
    assert "runs 2 times" in excluded["layer1.0.relu"].reason
    assert "layer1.0.relu" not in [layer.name for layer in hookviz.list_layers(resnet18)]
    with pytest.raises(hookviz.LayerError, match="runs 2 times"):
        hookviz.feature_maps(resnet18, random_input(), "layer1.0.relu")
    _assert_untouched(resnet18)


def test_capture_refuses_a_second_call_of_the_same_module():
    # Below the layer table: the hook itself refuses to silently keep the last of two calls.
    relu = nn.ReLU()
    model = nn.Sequential(nn.Conv2d(3, 4, 3), relu, nn.Conv2d(4, 4, 3), relu)
    with (
        pytest.raises(hookviz.LayerError, match="more than once"),
        torch.no_grad(),
        hookviz.capture_outputs(model, ["1"], track_grad=False),
    ):
        model(torch.randn(1, 3, 16, 16))
    assert hookviz.count_hooks(model) == 0


class _Boom(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("boom inside the forward")


def test_no_hooks_after_exception_inside_forward():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), _Boom())
    prep = Preprocessing(size=16, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0))
    loaded = hookviz.wrap_model(model, num_classes=2, preprocessing=prep, device="cpu")
    # the layer table traces with a forward too: give it one that works, then break it
    loaded.memo["layer_table"] = hookviz.LayerTable(
        (hookviz.LayerInfo("0", "Conv2d", (4, 14, 14), 1, True),), "0"
    )
    for call in (hookviz.grad_cam, hookviz.feature_maps):
        with pytest.raises(RuntimeError, match="boom"):
            call(loaded, torch.randn(1, 3, 16, 16), "0")
        _assert_untouched(loaded)


def test_grad_cam_works_inside_no_grad_and_inference_mode(resnet18):
    x = random_input(seed=4)
    expected = hookviz.grad_cam(resnet18, x, "layer4", target=3).heatmap
    with torch.no_grad():
        inside_no_grad = hookviz.grad_cam(resnet18, x, "layer4", target=3).heatmap
    with torch.inference_mode():
        inside_inference = hookviz.grad_cam(resnet18, x, "layer4", target=3).heatmap
    assert torch.equal(torch.from_numpy(expected), torch.from_numpy(inside_no_grad))
    assert torch.equal(torch.from_numpy(expected), torch.from_numpy(inside_inference))
    _assert_untouched(resnet18)


@pytest.mark.parametrize("track_grad", [False, True])
def test_snapshot_keeps_negatives_when_inplace_relu_follows(vgg11, track_grad):
    # features.0 is a Conv2d followed by ReLU(inplace=True): a snapshot that shares storage
    # with the output would come back with every negative value zeroed.
    x = random_input(seed=1)
    with torch.no_grad():
        expected = vgg11.model.features[0](x)[0]
    if track_grad:
        captured = hookviz.analyze(vgg11, x, "features.0", target=0).features.activations
    else:
        captured = hookviz.feature_maps(vgg11, x, "features.0").activations
    assert (captured < 0).any()
    torch.testing.assert_close(captured, expected)
    _assert_untouched(vgg11)


def test_snapshot_before_inplace_relu_in_resnet(resnet18):
    x = random_input(seed=2)
    with torch.no_grad():
        expected = resnet18.model.bn1(resnet18.model.conv1(x))[0]
    captured = hookviz.analyze(resnet18, x, "bn1", target=7).features.activations
    assert (captured < 0).any()
    torch.testing.assert_close(captured, expected)


def test_hooked_forward_gives_the_same_scores_as_a_plain_forward(resnet18):
    # The hook swaps the layer output for a copy: the network's answer must not change.
    x = random_input(seed=5)
    with torch.no_grad():
        plain = torch.softmax(resnet18.model(x), 1)[0]
    analysis = hookviz.analyze(resnet18, x, "layer2", target=0)
    for prediction in analysis.predictions:
        assert prediction.probability == pytest.approx(float(plain[prediction.index]), rel=1e-5)


def test_forward_hooks_context_manager_removes_on_error():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())
    seen = []

    def hook_for(name):
        return lambda module, inputs, output: seen.append(name)

    with pytest.raises(KeyError), hookviz.forward_hooks(dict(model.named_children()), hook_for):
        model(torch.randn(1, 3, 8, 8))
        raise KeyError("caller error")
    assert seen == ["0", "1"]
    assert hookviz.count_hooks(model) == 0
