"""Hooks as an instrument: statistics, gradient flow and interventions, on hand-built models
whose answers are known on paper, and against direct computation on a real architecture."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

import hookviz
from hookviz.core.preprocess import Preprocessing

from .conftest import random_input

PREP = Preprocessing(size=8, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0), min_side=2)


class Chain(nn.Module):
    """x -> conv a (1x1) -> conv b (1x1) -> global mean -> linear c: score = c b a mean(x_R)."""

    def __init__(self, a: float, b: float, c: float, dead: bool = False) -> None:
        super().__init__()
        self.first = nn.Conv2d(3, 1, 1, bias=False)
        self.second = nn.Conv2d(1, 1, 1, bias=False)
        self.head = nn.Linear(1, 2)
        with torch.no_grad():
            self.first.weight.zero_()
            self.first.weight[0, 0] = 0.0 if dead else a
            self.second.weight.fill_(b)
            self.head.weight.copy_(torch.tensor([[c], [-c]]))
            self.head.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.second(self.first(x)).mean(dim=(2, 3)))


def _wrap(module: nn.Module, classes: int = 2) -> hookviz.LoadedModel:
    return hookviz.wrap_model(module, num_classes=classes, preprocessing=PREP, device="cpu")


def test_a_dead_layer_shows_zero_fraction_one():
    loaded = _wrap(Chain(2.0, 3.0, 0.5, dead=True))
    stats = {s.name: s for s in hookviz.layer_stats(loaded, torch.rand(1, 3, 4, 6) + 0.1)}
    assert list(stats) == ["first", "second"]
    dead = stats["first"]
    assert dead.zero_fraction == 1.0
    assert dead.mean == dead.std == dead.min == dead.max == 0.0
    assert dead.shape == (1, 8, 8)  # traced at the native size
    assert dead.histogram.sum() == 4 * 6


def test_statistics_match_the_numbers():
    loaded = _wrap(Chain(2.0, -3.0, 0.5))
    x = torch.zeros(1, 3, 2, 2)
    x[0, 0] = torch.tensor([[0.0, 1.0], [2.0, 3.0]])  # first = 2 x_R = [0, 2, 4, 6]
    first = hookviz.layer_stats(loaded, x, bins=3)[0]
    assert (first.mean, first.min, first.max) == (3.0, 0.0, 6.0)
    assert first.std == pytest.approx(math.sqrt(5.0))
    assert first.zero_fraction == 0.25
    assert first.histogram.tolist() == [1, 1, 2]  # 0 in [0,2), 2 in [2,4), 4 and 6 in [4,6]


def test_gradient_norms_of_a_linear_chain():
    a, b, c = 2.0, -3.0, 0.5
    loaded = _wrap(Chain(a, b, c))
    x = torch.rand(1, 3, 4, 5)
    records = {r.name: r for r in hookviz.gradient_flow(loaded, x, target=0)}
    cells = 4 * 5
    # d score / d second_ij = c / (h w) at each of h w cells -> norm |c| / sqrt(h w)
    assert records["second"].grad_norm == pytest.approx(abs(c) / math.sqrt(cells), rel=1e-6)
    assert records["second"].grad_rms == pytest.approx(abs(c) / cells, rel=1e-6)
    # one layer earlier the gradient is multiplied by b
    assert records["first"].grad_norm == pytest.approx(abs(b * c) / math.sqrt(cells), rel=1e-6)
    assert hookviz.count_hooks(loaded.model) == 0


def test_switching_off_the_only_channel_a_class_uses_leaves_the_bias():
    torch.manual_seed(0)
    features = nn.Conv2d(3, 4, 3, padding=1)
    head = nn.Linear(4, 3)
    with torch.no_grad():
        head.weight.zero_()
        head.weight[1, 2] = 5.0  # class 1 depends on channel 2 only
        head.weight[0, 0] = 1.0
        head.bias.copy_(torch.tensor([0.1, -0.7, 0.3]))
    model = nn.Sequential()
    model.add_module("features", features)
    model.add_module("pool", nn.AdaptiveAvgPool2d(1))
    model.add_module("flat", nn.Flatten())
    model.add_module("head", head)
    loaded = _wrap(model, 3)
    x = torch.rand(1, 3, 6, 6)
    result = hookviz.intervene(loaded, x, "features", [2], scale=0.0)
    assert result.scores[1] == pytest.approx(-0.7, abs=1e-6)
    assert result.original_scores[1] != pytest.approx(-0.7, abs=1e-3)
    assert result.scores[0] == pytest.approx(result.original_scores[0], rel=1e-6)
    doubled = hookviz.intervene(loaded, x, "features", [2], scale=2.0)
    assert doubled.scores[1] + 0.7 == pytest.approx(2 * (result.original_scores[1] + 0.7), rel=1e-5)
    # the model itself is untouched, and nothing is left on it
    with torch.no_grad():
        assert torch.allclose(model(x)[0], torch.from_numpy(result.original_scores))
    assert hookviz.count_hooks(model) == 0
    with pytest.raises(hookviz.LayerError, match="out of range"):
        hookviz.intervene(loaded, x, "features", [9])
    assert hookviz.count_hooks(model) == 0


def test_stats_of_a_real_network_match_its_feature_maps(resnet18):
    x = random_input(96, 128, seed=11)
    stats = {s.name: s for s in hookviz.layer_stats(resnet18, x)}
    assert list(stats) == [layer.name for layer in hookviz.list_layers(resnet18)]
    for name in ("bn1", "layer2", "layer4"):
        maps = hookviz.feature_maps(resnet18, x, name).activations.numpy()
        assert stats[name].mean == pytest.approx(maps.mean(), rel=1e-4, abs=1e-6)
        assert stats[name].std == pytest.approx(maps.std(), rel=1e-4)
        assert stats[name].min == pytest.approx(maps.min()) and stats[name].max == pytest.approx(
            maps.max()
        )
        assert stats[name].zero_fraction == pytest.approx((maps == 0).mean())
    assert stats["bn1"].min < 0  # taken before the in-place ReLU that follows
    assert stats["relu"].zero_fraction > 0.2  # after a ReLU, many zeros


def test_gradient_flow_matches_a_direct_gradient(resnet18):
    x = random_input(96, 128, seed=12)
    records = {r.name: r for r in hookviz.gradient_flow(resnet18, x, target=42)}
    for name in ("layer2", "layer4"):
        kept = hookviz.ForwardPass(resnet18, x, name)
        direct = kept.gradient_of(lambda logits: logits[0, 42])
        assert records[name].grad_norm == pytest.approx(float(direct.norm()), rel=1e-4)
    assert all(r.grad_norm > 0 for r in records.values())
    assert hookviz.count_hooks(resnet18.model) == 0
    assert all(p.grad is None for p in resnet18.model.parameters())


def test_keep_only_the_strongest_channels(resnet18):
    x = random_input(96, 96, seed=13)
    keep = hookviz.strongest_channels(resnet18, x, "layer4", 16)
    others = [c for c in range(512) if c not in keep]
    result = hookviz.intervene(resnet18, x, "layer4", others, 0.0)
    maps = hookviz.feature_maps(resnet18, x, "layer4").activations
    assert (
        len(keep) == 16 and maps.mean(dim=(1, 2))[keep].min() >= maps.mean(dim=(1, 2))[others].max()
    )
    assert not np.allclose(result.scores, result.original_scores)


@pytest.mark.slow
def test_grad_cam_under_an_intervention(resnet18):
    x = random_input(96, 112, seed=14)
    untouched = hookviz.intervene(resnet18, x, "layer3", [0, 1], 1.0, cam_layer="layer4", target=9)
    plain = hookviz.grad_cam(resnet18, x, "layer4", 9)
    np.testing.assert_allclose(untouched.cam.heatmap, plain.heatmap, atol=1e-5)
    # switching off every channel of the explained layer leaves nothing to explain
    everything = hookviz.intervene(resnet18, x, "layer4", range(512), 0.0, cam_layer="layer4")
    assert everything.cam.blank and not everything.cam.heatmap.any()
    assert everything.cam.class_index == untouched.original[0].index
    # switching off earlier channels changes the map downstream
    changed = hookviz.intervene(
        resnet18, x, "layer2", range(0, 128, 2), 0.0, cam_layer="layer4", target=9
    )
    assert not np.allclose(changed.cam.heatmap, plain.heatmap, atol=1e-3)
    assert hookviz.count_hooks(resnet18.model) == 0
