"""Grad-CAM against answers known on paper.

For a network ending in global average pooling and a linear layer, d y_c / d A_k[i, j] = W[c, k]
/ (h w) at every position, so Grad-CAM's weights are W[c] / (h w) and its map is the classic CAM
(Zhou et al. 2016) divided by h w, exactly.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import hookviz
from hookviz.core.preprocess import Preprocessing


class GapLinear(nn.Module):
    """features (1x1 conv) -> global average pool -> linear."""

    def __init__(self, in_channels: int, channels: int, classes: int) -> None:
        super().__init__()
        self.features = nn.Conv2d(in_channels, channels, kernel_size=1, bias=False)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(self.features(x)).flatten(1))


def _wrap(module: nn.Module, classes: int) -> hookviz.LoadedModel:
    prep = Preprocessing(size=8, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0), min_side=2)
    return hookviz.wrap_model(module, num_classes=classes, preprocessing=prep, device="cpu")


def test_hand_computed_example():
    # A_0 = red channel, A_1 = green channel; class 0 scores mean(A_0) - 2 mean(A_1).
    module = GapLinear(3, 2, 2)
    with torch.no_grad():
        module.features.weight.copy_(torch.tensor([[1.0, 0, 0], [0, 1.0, 0]]).view(2, 3, 1, 1))
        module.fc.weight.copy_(torch.tensor([[1.0, -2.0], [0.5, 1.0]]))
        module.fc.bias.copy_(torch.tensor([0.1, -0.3]))
    red = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    green = torch.tensor([[0.0, 1.0], [3.0, 0.0]])
    x = torch.stack([red, green, torch.zeros(2, 2)])[None]
    loaded = _wrap(module, 2)

    cam = hookviz.grad_cam(loaded, x, "features", target=0)

    # CAM_0 = A_0 - 2 A_1 = [[1, -2], [-6, 2]]; ReLU -> [[1, 0], [0, 2]]; / (h w = 4)
    np.testing.assert_allclose(cam.cam, [[0.25, 0.0], [0.0, 0.5]], atol=1e-7)
    np.testing.assert_allclose(cam.weights, [0.25, -0.5], atol=1e-7)
    # score = mean(A_0) - 2 mean(A_1) + 0.1 = 0.75 - 2 + 0.1
    assert cam.score == pytest.approx(-1.15, abs=1e-6)
    # The heatmap is on the input's own 2x2 grid: min-max of the map above.
    np.testing.assert_allclose(cam.heatmap, [[0.5, 0.0], [0.0, 1.0]], atol=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_grad_cam_equals_classic_cam_for_every_class(seed):
    torch.manual_seed(seed)
    module = GapLinear(3, 16, 5)
    loaded = _wrap(module, 5)
    x = torch.randn(1, 3, 6, 10)
    with torch.no_grad():
        activations = module.features(x)[0]  # (16, 6, 10)
    for target in range(5):
        cam = hookviz.grad_cam(loaded, x, "features", target=target)
        classic = torch.einsum("k,khw->hw", module.fc.weight[target], activations)
        expected = torch.relu(classic) / (6 * 10)
        np.testing.assert_allclose(cam.cam, expected.numpy(), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(
            cam.weights, (module.fc.weight[target] / 60).numpy(), rtol=1e-5, atol=1e-8
        )
        assert cam.class_index == target


def test_default_target_is_top1_and_probability_matches_softmax():
    torch.manual_seed(3)
    module = GapLinear(3, 8, 4)
    loaded = _wrap(module, 4)
    x = torch.randn(1, 3, 5, 5)
    with torch.no_grad():
        logits = module(x)[0]
    cam = hookviz.grad_cam(loaded, x, "features")
    assert cam.class_index == int(logits.argmax())
    assert cam.score == pytest.approx(float(logits.max()), rel=1e-5)
    assert cam.probability == pytest.approx(float(torch.softmax(logits, 0).max()), rel=1e-5)


def test_map_with_no_positive_evidence_is_blank_not_noise():
    module = GapLinear(3, 1, 2)
    with torch.no_grad():
        module.features.weight.fill_(1.0)
        module.fc.weight.copy_(torch.tensor([[1.0], [-1.0]]))
    loaded = _wrap(module, 2)
    x = torch.rand(1, 3, 4, 4) + 0.1  # all activations positive, so class 1 has only negative
    cam = hookviz.grad_cam(loaded, x, "features", target=1)
    assert cam.blank
    assert not cam.heatmap.any()
    assert cam.heatmap.shape == (4, 4)


def test_heatmap_is_bilinear_not_blocky():
    module = GapLinear(3, 1, 1)
    with torch.no_grad():
        module.features.weight.copy_(torch.tensor([1.0, 0, 0]).view(1, 3, 1, 1))
        module.fc.weight.fill_(1.0)
    # downsample inside the model so the heatmap must be upsampled: a 2x2 map onto 8x8
    model = nn.Sequential()
    model.add_module("pool", nn.AvgPool2d(4))
    model.add_module("net", module)
    loaded = _wrap(model, 1)
    x = torch.zeros(1, 3, 8, 8)
    x[0, 0, :4, :4] = 1.0  # only the top-left cell is red
    cam = hookviz.grad_cam(loaded, x, "pool", target=0)
    assert cam.cam.shape == (2, 2)
    assert cam.heatmap.shape == (8, 8)
    assert cam.heatmap[0, 0] == pytest.approx(1.0)
    assert cam.heatmap[-1, -1] == pytest.approx(0.0)
    # bilinear: values fall off smoothly across the middle instead of jumping at the cell edge
    assert len(np.unique(np.round(cam.heatmap[0], 4))) > 2
