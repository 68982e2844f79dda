"""The whole network at a glance (``hookviz.overview``): each stage's Grad-CAM equals
``hookviz.grad_cam`` at its layer, its strongest channels are the feature maps' strongest by
mean, and its receptive field equals the one measured by autograd (the input pixels one cell's
gradient reaches) on networks whose every unit is active, and the textbook figures. Real
torchvision and timm models with random weights."""

from __future__ import annotations

import numpy as np
import pytest
import timm
import torch
import torchvision

import hookviz

from .conftest import random_input


def test_each_stage_is_the_layers_own_cam_and_strongest_channels(resnet18, sample) -> None:
    found = hookviz.overview(resnet18, sample, channels=3)
    assert found.layers == hookviz.stage_layers(resnet18, count=64)
    assert found.layers == ["relu", "layer1", "layer2", "layer3", "layer4"]
    for stage in found:
        reference = hookviz.grad_cam(resnet18, sample, stage.layer, target=found.class_index)
        np.testing.assert_allclose(stage.cam.cam, reference.cam, rtol=1e-4, atol=1e-6)
        assert stage.cam.class_index == reference.class_index == found.class_index
        maps = hookviz.feature_maps(resnet18, sample, stage.layer).activations
        assert stage.shape == tuple(maps.shape)
        means = maps.mean(dim=(1, 2))
        assert list(stage.channels) == means.argsort(descending=True)[:3].tolist()
        np.testing.assert_allclose(stage.maps, maps[list(stage.channels)].numpy(), rtol=1e-5)
    assert len(found) == 5 and found[-1].layer == "layer4"
    assert found.class_name == resnet18.class_name(found.class_index)


def test_every_layer_and_chosen_layers_in_execution_order(resnet18) -> None:
    x = random_input(seed=2)
    every = hookviz.overview(resnet18, x, layers="all")
    distinct = [layer.name for layer in hookviz.layer_table(resnet18).distinct if layer.aligned]
    assert every.layers == distinct
    chosen = hookviz.overview(resnet18, x, layers=["layer3", "layer1.0.conv1", "layer3"], target=7)
    assert chosen.layers == ["layer1.0.conv1", "layer3"] and chosen.class_index == 7
    with pytest.raises(hookviz.LayerError):
        hookviz.overview(resnet18, x, layers=["nosuch"])
    with pytest.raises(hookviz.LayerError, match="does not follow the image"):
        hookviz.overview(resnet18, x, layers=["avgpool"])
    with pytest.raises(ValueError, match="how many strongest channels"):
        hookviz.overview(resnet18, x, channels=0)


def test_a_detector_is_refused_before_any_work(detector, sample) -> None:
    with pytest.raises(hookviz.TargetError, match="classifier's classes"):
        hookviz.overview(detector, sample)


def _all_active(model: torch.nn.Module) -> torch.nn.Module:
    """Every unit on for a positive input: positive convolution weights, BatchNorm as a
    positive shift, and each max pooling an average over the same window (a max's gradient
    reaches its winner alone). The gradient then reaches every input pixel of the receptive
    field, which the swaps leave as it was."""
    for parent in list(model.modules()):
        for child_name, child in parent.named_children():
            if isinstance(child, torch.nn.MaxPool2d):
                pool = torch.nn.AvgPool2d(child.kernel_size, child.stride, child.padding)
                setattr(parent, child_name, pool)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Conv2d):
                module.weight.abs_()
            elif isinstance(module, torch.nn.BatchNorm2d):
                module.weight.fill_(1.0)
                module.bias.fill_(0.1)
                module.running_mean.zero_()
                module.running_var.fill_(1.0)
    return model.eval()


def _measured_field(model: torch.nn.Module, layer: str, size: int) -> tuple[int, int]:
    """The rows and columns of the input the centre cell of ``layer``'s output depends on."""
    kept = {}
    module = dict(model.named_modules())[layer]
    handle = module.register_forward_hook(lambda _m, _i, output: kept.setdefault("out", output))
    x = torch.ones(1, 3, size, size, requires_grad=True)
    try:
        model(x)
    finally:
        handle.remove()
    out = kept["out"]
    centre = out[0, :, out.shape[2] // 2, out.shape[3] // 2].sum()
    (gradient,) = torch.autograd.grad(centre, x)
    reached = gradient[0].abs().sum(dim=0) > 0
    rows, columns = reached.any(dim=1).nonzero(), reached.any(dim=0).nonzero()
    return int(rows.max() - rows.min() + 1), int(columns.max() - columns.min() + 1)


@pytest.mark.parametrize(
    ("architecture", "expected"),
    [
        # textbook figures at 224 (VGG-11's convolutions and pools; ResNet-18's stages)
        ("vgg11", {"features.0": 3, "features.2": 4, "features.5": 10, "features.10": 30,
                   "features.15": 70}),
        ("resnet18", {"conv1": 7, "maxpool": 11, "layer1": 43, "layer2": 99, "layer3": 211}),
    ],
)  # fmt: skip
def test_the_receptive_fields_are_those_autograd_measures(architecture, expected) -> None:
    torch.manual_seed(0)
    model = _all_active(getattr(torchvision.models, architecture)())
    loaded = hookviz.wrap_model(model, name=architecture, num_classes=1000)
    found = hookviz.overview(loaded, torch.ones(1, 3, 224, 224), layers=list(expected))
    fields = {stage.layer: stage.receptive_field for stage in found}
    for layer, side in expected.items():
        assert fields[layer] == (side, side), (layer, fields[layer])
        assert _measured_field(model, layer, 224) == (side, side), layer


def test_after_global_attention_a_transformer_sees_the_whole_input() -> None:
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=10)
    loaded = hookviz.wrap_model(model, name="vit", num_classes=10)
    found = hookviz.overview(loaded, random_input(seed=3))
    assert found.layers[0] == "blocks.0.norm1" and len(found) >= 2
    # before the first attention, a token sees its 16x16 patch; after it, the whole input
    assert found[0].receptive_field == (16, 16)
    assert all(stage.receptive_field == (224, 224) for stage in found[1:])
    assert all(stage.shape[1:] == (14, 14) for stage in found)
