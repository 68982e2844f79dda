"""Layer-wise Relevance Propagation against zennit (the reference, a test dependency): every
composite on a ResNet and a VGG with BatchNorm (zennit's canonizers merge it and route the
residual sums), conservation exactly where the rules conserve (bias-free ReLU networks with a
residual sum, pooling and a gate), conditional relevances of a split of a layer's channels
adding up to the whole, and refusals that say why. Real models with random weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from zennit.attribution import Gradient
from zennit.composites import (
    EpsilonAlpha2Beta1,
    EpsilonAlpha2Beta1Flat,
    EpsilonPlus,
    EpsilonPlusFlat,
    LayerMapComposite,
    layer_map_base,
)
from zennit.rules import Epsilon
from zennit.torchvision import ResNetCanonizer, VGGCanonizer
from zennit.types import Convolution

import hookviz
from hookviz.insight.lrp_trace import COMPOSITES

from .conftest import random_input


def _epsilon_everywhere(canonizers):
    """The ``epsilon`` composite as zennit would spell it: the epsilon rule on every
    convolution and dense layer, its basic map elsewhere."""
    rules = [(Convolution, Epsilon()), (nn.Linear, Epsilon())]
    return LayerMapComposite(layer_map_base() + rules, canonizers=canonizers)


ZENNIT = {
    "epsilon": _epsilon_everywhere,
    "epsilon_plus": lambda canonizers: EpsilonPlus(canonizers=canonizers),
    "epsilon_plus_flat": lambda canonizers: EpsilonPlusFlat(canonizers=canonizers),
    "epsilon_alpha2_beta1": lambda canonizers: EpsilonAlpha2Beta1(canonizers=canonizers),
    "epsilon_alpha2_beta1_flat": lambda canonizers: EpsilonAlpha2Beta1Flat(canonizers=canonizers),
}
CANONIZERS = {"resnet18": ResNetCanonizer, "vgg11_bn": VGGCanonizer}


def _with_batch_norm_statistics(loaded: hookviz.LoadedModel) -> hookviz.LoadedModel:
    """Running statistics and affine parameters away from the identity, so that a merge that
    went wrong shows. Their eps is 0: zennit's canonizer leaves a merged BatchNorm dividing by
    sqrt(1 + eps), not the identity, which moves every later activation by 5e-6 a layer."""
    generator = torch.Generator().manual_seed(5)
    for module in loaded.model.modules():
        if isinstance(module, nn.BatchNorm2d):
            count = module.num_features
            module.running_mean.copy_(torch.rand(count, generator=generator) - 0.5)
            module.running_var.copy_(0.5 + 1.5 * torch.rand(count, generator=generator))
            module.weight.data.copy_(0.5 + torch.rand(count, generator=generator))
            module.bias.data.copy_(0.4 * torch.rand(count, generator=generator) - 0.2)
            module.eps = 0.0
    return loaded


@pytest.fixture(scope="module", params=sorted(CANONIZERS))
def batch_normed(request) -> tuple[str, hookviz.LoadedModel]:
    torch.manual_seed(0)
    loaded = hookviz.load_model(request.param, pretrained=False, device="cpu")
    # in float64: the two implementations then agree to its rounding, where in float32 the
    # epsilon rule's sums near zero leave them 1e-4 apart
    loaded.model.double()
    return request.param, _with_batch_norm_statistics(loaded)


def _zennit(loaded: hookviz.LoadedModel, name: str, composite: str, x, index: int) -> np.ndarray:
    """zennit's input relevance of class ``index``, starting from its score (the one-hot's
    slot holds the logit)."""
    with torch.no_grad():
        logits = loaded.model(x)
    start = torch.zeros_like(logits)
    start[0, index] = logits[0, index]
    with Gradient(loaded.model, ZENNIT[composite]([CANONIZERS[name]()])) as attributor:
        _, found = attributor(x.clone().requires_grad_(True), start)
    return found[0].detach().numpy()


@pytest.mark.parametrize("composite", sorted(COMPOSITES))
def test_every_composite_gives_zenniths_relevance(batch_normed, composite) -> None:
    name, loaded = batch_normed
    x = random_input(64, 80, seed=1).double()
    before = {k: v.clone() for k, v in loaded.model.state_dict().items()}
    ours = hookviz.relevance(loaded, x, composite=composite)
    assert ours.composite == composite and ours.input.shape == (3, 64, 80)
    with torch.no_grad():
        logits = loaded.model(x)[0]
    assert ours.class_index == int(logits.argmax())
    assert ours.score == pytest.approx(float(logits.max()), rel=1e-9)
    reference = _zennit(loaded, name, composite, x, ours.class_index)
    error = np.linalg.norm(ours.input - reference) / np.linalg.norm(reference)
    assert error < 1e-6, error
    np.testing.assert_allclose(ours.input, reference, rtol=0, atol=1e-6 * np.abs(reference).max())
    # the model is as it was: nothing merged into its weights, no in-place flag changed
    after = loaded.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    with torch.no_grad():
        assert torch.equal(loaded.model(x)[0], logits)


class _Gated(nn.Module):
    """Conv, ReLU, max pooling, a residual sum, a squeeze-and-excitation gate, average
    pooling and a dense head, all without biases: the rules conserve relevance exactly."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.relu = nn.ReLU(inplace=True)
        self.pool = nn.MaxPool2d(2)
        self.conv = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.squeeze = nn.Linear(8, 8, bias=False)
        self.head = nn.Linear(8, 5, bias=False)

    def forward(self, x):
        x = self.pool(self.relu(self.stem(x)))
        y = F.relu(self.conv(x))
        y += x  # (an in-place residual sum, as torchvision's blocks write it)
        gate = torch.sigmoid(self.squeeze(y.mean(dim=(2, 3))))[:, :, None, None]
        y = y * gate
        return self.head(torch.flatten(F.adaptive_avg_pool2d(y, 1), 1))


@pytest.fixture(scope="module")
def gated() -> hookviz.LoadedModel:
    torch.manual_seed(3)
    return hookviz.wrap_model(_Gated(), name="gated", num_classes=5)


@pytest.mark.parametrize("composite", ["epsilon", "epsilon_plus", "epsilon_plus_flat"])
def test_relevance_is_conserved_where_the_rules_conserve(gated, composite) -> None:
    x = random_input(24, 24, seed=2).abs()  # (positive: the head's best class scores > 0)
    found = hookviz.relevance(gated, x, layer="conv", composite=composite)
    assert found.score > 0
    assert float(found.input.sum()) == pytest.approx(found.score, rel=1e-4)
    # all of it passes the layer too (conv's output feeds the sum, which shares it on)
    assert found.layer_relevance.shape == (8,)
    assert float(found.layer_relevance.sum()) <= found.score * (1 + 1e-4)


def test_conditional_relevances_of_a_split_add_up_to_the_whole(resnet18) -> None:
    x = random_input(64, 64, seed=4)
    whole = hookviz.relevance(resnet18, x, layer="layer3", composite="epsilon_plus")
    channels = whole.layer_relevance.shape[0]
    halves = [range(0, channels, 2), range(1, channels, 2)]
    parts = hookviz.conditional_relevance(
        resnet18, x, halves, layer="layer3", composite="epsilon_plus"
    )
    assert [p.channels for p in parts] == [tuple(h) for h in halves]
    np.testing.assert_allclose(
        parts[0].input + parts[1].input, whole.input, rtol=0,
        atol=1e-5 * np.abs(whole.input).max(),
    )  # fmt: skip
    # the layer's own relevance is read before any condition: the same in every part
    for part in parts:
        np.testing.assert_allclose(part.layer_relevance, whole.layer_relevance, rtol=1e-5)
    # one channel alone: relevance flows only through it
    strongest, amount = whole.top_channels(1)[0]
    alone = hookviz.relevance(
        resnet18, x, layer="layer3", channels=[strongest], composite="epsilon_plus"
    )
    assert amount == pytest.approx(float(whole.layer_relevance.max()))
    assert not np.allclose(alone.input, whole.input)
    assert np.abs(alone.input).sum() > 0


def test_the_heatmap_lies_on_the_images_pixels(resnet18, sample) -> None:
    found = hookviz.relevance(resnet18, sample, target=7)
    width, height = sample.size
    assert found.class_index == 7 and found.size == (height, width)
    assert found.heatmap.shape == (height, width) and found.heatmap.dtype == np.float32
    assert found.input.shape[0] == 3
    on_input = found.heatmap_at(found.input.shape[1:])
    np.testing.assert_allclose(on_input, found.input.sum(axis=0), rtol=1e-6, atol=1e-9)
    assert found._repr_png_().startswith(b"\x89PNG")


class _Attending(nn.Module):
    """A patch embedding and one attention layer: a transformer in miniature."""

    def __init__(self) -> None:
        super().__init__()
        self.patches = nn.Conv2d(3, 16, 8, stride=8)
        self.attention = nn.MultiheadAttention(16, 2, batch_first=True)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        tokens = self.patches(x).flatten(2).transpose(1, 2)
        mixed, _ = self.attention(tokens, tokens, tokens)
        return self.head(mixed.mean(dim=1))


def test_attention_is_refused_with_its_reason() -> None:
    loaded = hookviz.wrap_model(_Attending(), name="attending", num_classes=4)
    with pytest.raises(hookviz.RelevanceError, match=r"attention.*not supported"):
        hookviz.relevance(loaded, random_input(32, 32))
    # and the model still runs as it did
    assert loaded.model(random_input(32, 32)).shape == (1, 4)


def test_bad_requests_say_what_is_wrong(resnet18, detector) -> None:
    x = random_input(64, 64)
    with pytest.raises(hookviz.RelevanceError, match=r"unknown composite 'lrp'.*epsilon_plus"):
        hookviz.relevance(resnet18, x, composite="lrp")
    with pytest.raises(hookviz.RelevanceError, match=r"numbered 0 to 255.*256"):
        hookviz.relevance(resnet18, x, layer="layer3", channels=[3, 256])
    with pytest.raises(hookviz.LayerError):
        hookviz.relevance(resnet18, x, layer="no.such.layer")
    with pytest.raises(hookviz.RelevanceError, match="pass layer= to rank"):
        hookviz.relevance(resnet18, x).top_channels()
    with pytest.raises(hookviz.RelevanceError, match="detector"):
        hookviz.relevance(detector, x)
