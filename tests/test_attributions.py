"""Pixel attributions as a user meets them: on the image's own pixels whatever the model
resized, for any target (a detector's box too), the model left as it was after every method
(also when a method fails half way), perturbation methods that find what a model reads, and
clear messages for a method or an option that does not exist. Captum's numbers:
``test_attributions_reference.py``."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

import hookviz
from hookviz.targets import Box

from .conftest import random_input

METHODS = hookviz.attribution_methods()
QUICK = {"occlusion": {"window": 32, "stride": 32}, "rise": {"masks": 32},
         "integrated_gradients": {"steps": 4}, "smoothgrad": {"samples": 2}}  # fmt: skip


class PatchReader(nn.Module):
    """A real, tiny classifier whose class 0 is the mean of the red channel plus ``offset``
    over a known patch (rows 8-15, columns 20-31 of a 32 x 48 input) and class 1 that of the
    rest, through a ReLU (so the guided rules have something to change)."""

    def __init__(self, offset: float) -> None:
        super().__init__()
        self.offset = offset
        self.mask = torch.zeros(32, 48)
        self.mask[8:16, 20:32] = 1
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        red = self.relu(x[:, 0] + self.offset)
        inside = (red * self.mask).sum(dim=(1, 2)) / self.mask.sum()
        outside = (red * (1 - self.mask)).sum(dim=(1, 2)) / (1 - self.mask).sum()
        return torch.stack([inside, outside], dim=1)


@pytest.fixture(scope="module")
def reader() -> hookviz.LoadedModel:
    return hookviz.wrap_model(PatchReader(offset=2.0), num_classes=2, device="cpu")


@pytest.fixture(scope="module")
def plain_reader() -> hookviz.LoadedModel:
    """Without the offset: a hidden pixel takes its whole contribution away (RISE's masked
    scores then carry no constant that would drown the patch at a few hundred masks)."""
    return hookviz.wrap_model(PatchReader(offset=0.0), num_classes=2, device="cpu")


@pytest.fixture(scope="module")
def resnet() -> hookviz.LoadedModel:
    return hookviz.load_model("resnet18", pretrained=False, device="cpu")


def _state(loaded: hookviz.LoadedModel):
    model = loaded.model
    return (
        [(name, type(module)) for name, module in model.named_modules()],
        {name: value.clone() for name, value in model.state_dict().items()},
    )


def _unchanged(loaded: hookviz.LoadedModel, before) -> None:
    modules, weights = _state(loaded)
    assert modules == before[0]  # the same module tree: every ReLU is back
    assert all(torch.equal(weights[k], before[1][k]) for k in weights)
    model = loaded.model
    assert all(p.grad is None and not p.requires_grad for p in model.parameters())
    assert hookviz.count_hooks(model) == 0
    assert not model.training


@pytest.mark.parametrize("method", METHODS)
def test_every_method_leaves_the_model_as_it_was(resnet, method) -> None:
    before = _state(resnet)
    x = random_input(64, 64, seed=1)
    result = hookviz.attribute(resnet, x, method, **QUICK.get(method, {}))
    assert result.raw.shape == (3, 64, 64) and result.raw.dtype == np.float32
    assert np.isfinite(result.raw).all() and np.abs(result.raw).max() > 0
    assert result.map.min() >= 0 and result.map.max() == pytest.approx(1.0)
    _unchanged(resnet, before)


@pytest.mark.parametrize("method", ["guided_backprop", "deconvolution"])
def test_a_method_that_fails_half_way_still_restores_the_relus(resnet, method) -> None:
    before = _state(resnet)
    calls = []

    def fails_after_the_first_call(output: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        if len(calls) > 1:  # the resolution's call passes, the attribution's fails
            raise RuntimeError("the score broke")
        return output[:, 0]

    with pytest.raises(RuntimeError, match="the score broke"):
        hookviz.attribute(resnet, random_input(48, 48), method, target=fails_after_the_first_call)
    _unchanged(resnet, before)
    assert resnet.lock.acquire(blocking=False)  # and the lock was released
    resnet.lock.release()


@pytest.mark.slow
def test_an_image_is_attributed_on_its_own_pixels(resnet) -> None:
    image = Image.fromarray(np.random.default_rng(0).integers(0, 255, (300, 170, 3), np.uint8))
    for method in ("saliency", "occlusion"):
        result = hookviz.attribute(resnet, image, method, **QUICK.get(method, {}))
        assert result.raw.shape == (3, 300, 170) and result.map.shape == (300, 170)
        assert result.size == (300, 170)


def test_the_guided_rules_differ_from_the_plain_gradient_only_through_relus(reader) -> None:
    # below -2 the ReLU is closed: no gradient passes there with the plain or guided rule,
    # deconvolution passes the (positive) gradient anyway
    x = torch.zeros(1, 3, 32, 48)
    x[0, 0, 8:12] = -5.0
    plain = hookviz.attribute(reader, x, "saliency", target=0).raw
    guided = hookviz.attribute(reader, x, "guided_backprop", target=0).raw
    deconvolution = hookviz.attribute(reader, x, "deconvolution", target=0).raw
    assert np.array_equal(plain, guided)  # the gradient is never negative here
    assert (plain[0, 8:12, 20:32] == 0).all() and (deconvolution[0, 8:12, 20:32] > 0).all()
    assert (plain[0, 12:16, 20:32] > 0).all() and (plain[1:] == 0).all()


@pytest.mark.parametrize("method", ["occlusion", "rise", "integrated_gradients", "saliency"])
def test_each_method_finds_the_patch_a_class_reads(plain_reader, method) -> None:
    x = torch.rand(1, 3, 32, 48, generator=torch.Generator().manual_seed(2))
    options = {"occlusion": {"window": 4, "stride": 4}, "rise": {"masks": 400, "cells": 6}}
    result = hookviz.attribute(plain_reader, x, method, target=0, **options.get(method, {}))
    patch = np.zeros((32, 48), bool)
    patch[8:16, 20:32] = True
    red = result.raw[0]
    # the patch stands out of the rest by more than the rest varies
    contrast = red[patch].mean() - red[~patch].mean()
    assert contrast > 3 * red[~patch].std() and contrast > 0, method
    if method == "occlusion":  # exact: hiding a patch pixel drops the score by its share
        inside, outside = result.raw[0][patch], result.raw[0][~patch]
        assert np.allclose(inside, inside.mean(), rtol=0.3) and np.abs(outside).max() < 1e-6


def test_integrated_gradients_add_up_to_the_score_change(resnet) -> None:
    # completeness (Sundararajan et al.): the attributions sum to f(x) - f(baseline)
    x = random_input(40, 40, seed=4)
    result = hookviz.attribute(resnet, x, "integrated_gradients", target=1, steps=200)
    with torch.no_grad():
        change = float(resnet.model(x)[0, 1] - resnet.model(torch.zeros_like(x))[0, 1])
    assert result.raw.sum() == pytest.approx(change, rel=0.02, abs=1e-3)


def test_rise_is_seeded(reader) -> None:
    x = torch.rand(1, 3, 32, 48)
    first = hookviz.attribute(reader, x, "rise", masks=50, seed=1).raw
    assert np.array_equal(first, hookviz.attribute(reader, x, "rise", masks=50, seed=1).raw)
    assert not np.array_equal(first, hookviz.attribute(reader, x, "rise", masks=50, seed=2).raw)


@pytest.mark.slow
def test_a_detectors_box_is_attributed_on_the_images_pixels(detector) -> None:
    image = hookviz.sample_image().resize((256, 200))
    found = [d for d in hookviz.detect(detector, image, min_score=0.0) if d.box[2] > d.box[0]]
    box = found[0]
    result = hookviz.attribute(detector, image, "saliency", target=Box(box.box, box.label))
    assert result.raw.shape == (3, 200, 256) and result.class_index == box.label
    assert np.abs(result.raw).max() > 0


def test_unknown_methods_and_options_are_refused_with_what_exists(resnet) -> None:
    x = random_input(32, 32)
    with pytest.raises(hookviz.AttributionError, match="choose one of saliency"):
        hookviz.attribute(resnet, x, "magic")
    with pytest.raises(hookviz.AttributionError, match="takes steps, baseline, batch_size"):
        hookviz.attribute(resnet, x, "integrated_gradients", stepz=3)
    with pytest.raises(hookviz.AttributionError, match="no options"):
        hookviz.attribute(resnet, x, "saliency", steps=3)
    with pytest.raises(hookviz.AttributionError, match="base"):
        hookviz.attribute(resnet, x, "smoothgrad", base="occlusion")
    with pytest.raises(hookviz.AttributionError, match="window"):
        hookviz.attribute(resnet, x, "occlusion", window=0)
    with pytest.raises(hookviz.TargetError):
        hookviz.attribute(resnet, x, "saliency", target=5000)


def test_the_baselines_read_the_image_or_nothing(reader) -> None:
    x = torch.zeros(1, 3, 32, 48)
    x[..., 30:] = 1.0  # a vertical edge between columns 29 and 30
    edges = hookviz.attribute(reader, x, "edges").raw[0]
    assert (
        (edges[:, 29:31] == 4.0).all() and (edges[:, :28] == 0).all() and edges[:, 32:].max() == 0
    )
    centre = hookviz.attribute(reader, x, "centre", sigma=0.2).raw[0]
    assert np.unravel_index(centre.argmax(), centre.shape) in {
        (15, 23),
        (15, 24),
        (16, 23),
        (16, 24),
    }
    first = hookviz.attribute(reader, x, "random", seed=5).raw
    assert np.array_equal(first, hookviz.attribute(reader, x, "random", seed=5).raw)
    assert np.array_equal(first[0], first[1])  # the same map in every channel


@pytest.mark.parametrize("method", ["occlusion", "rise", "integrated_gradients"])
def test_a_long_method_reports_progress_and_can_be_cancelled(reader, method) -> None:
    x = torch.rand(1, 3, 32, 48)
    options = {"occlusion": {"window": 8, "stride": 8, "batch_size": 4},
               "rise": {"masks": 40, "batch_size": 10},
               "integrated_gradients": {"steps": 12, "batch_size": 3}}[method]  # fmt: skip
    seen = []
    hookviz.attribute(reader, x, method, progress=lambda d, t: seen.append((d, t)), **options)
    assert len(seen) >= 3 and seen[0][0] == 0 and all(d < t for d, t in seen)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    with pytest.raises(hookviz.CancelledError):
        hookviz.attribute(reader, x, method, progress=lambda d, t: d > 0, **options)
    assert reader.lock.acquire(blocking=False)
    reader.lock.release()
