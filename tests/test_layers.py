"""Layer discovery by tracing: execution order, shapes, the default target, clear errors."""

from __future__ import annotations

import pytest

import hookviz


def test_resnet_layers_in_execution_order_with_shapes(resnet18):
    layers = hookviz.list_layers(resnet18)
    names = [layer.name for layer in layers]
    assert names.index("conv1") < names.index("bn1") < names.index("layer1.0.conv1")
    assert names.index("layer3") < names.index("layer4.0.conv1") < names.index("layer4")
    shapes = {layer.name: layer.shape for layer in layers}
    assert shapes["conv1"] == (64, 112, 112)
    assert shapes["layer2"] == (128, 28, 28)
    assert shapes["layer4"] == (512, 7, 7)
    assert "fc" not in names  # 2-D output: not a feature map


def test_default_layer_is_the_last_spatial_layer(resnet18, vgg11, lite0):
    assert hookviz.default_layer(resnet18) == "layer4"
    # avgpool's 7x7 output is a fixed-size resampling, not a grid over the image
    assert hookviz.default_layer(vgg11) == "features"
    table = hookviz.layer_table(vgg11)
    assert not table.get("avgpool").aligned
    assert table.get("features").aligned
    assert hookviz.default_layer(lite0) == "bn2"


def test_layer_table_is_traced_once_per_model(resnet18):
    assert hookviz.layer_table(resnet18) is hookviz.layer_table(resnet18)


def test_unknown_layer_message_suggests_close_names(resnet18):
    with pytest.raises(hookviz.LayerError, match="did you mean 'layer4'"):
        hookviz.layer_table(resnet18).get("layer44")


def test_describe_is_readable(resnet18):
    assert hookviz.layer_table(resnet18).get("layer4").describe() == "layer4 · 512×7×7 · Sequential"


def test_a_float64_model_is_traced_in_its_own_dtype(resnet18):
    """The layer listing probes the model with an input of the model's dtype: a float64 copy
    (a reference computation, say) lists the same layers and explains in float64."""
    import copy

    import torch

    double = hookviz.wrap_model(
        copy.deepcopy(resnet18.model).double(), num_classes=1000, device="cpu"
    )
    names = [layer.name for layer in hookviz.list_layers(double)]
    assert names == [layer.name for layer in hookviz.list_layers(resnet18)]
    x = torch.rand(1, 3, 32, 32, dtype=torch.float64)
    cam = hookviz.grad_cam(double, x, "layer4", 3)
    assert cam.heatmap.shape == (32, 32) and not cam.blank
