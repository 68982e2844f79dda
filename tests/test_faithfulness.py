"""Faithfulness metrics against their references: Average Drop and Increase in Confidence give
TorchCAM's ``ClassificationMetric`` numbers, ROAD gives pytorch-grad-cam 1.5.7's (the same noise
from the same seed), deletion and insertion are ``trust_curves``' areas; on a ResNet-18 with
seeded random weights and on the bundled, trained EfficientNet-Lite0, for a Grad-CAM heatmap, a
pixel attribution and a random map. Small inputs keep each test to a second or two."""

from __future__ import annotations

import contextlib
import sys
from functools import partial

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import hookviz
from hookviz.core.inputs import prepare_input
from hookviz.insight import faithfulness as module
from hookviz.insight.faithfulness import METRICS, MetricError, faithfulness

from .conftest import random_input


@pytest.fixture(scope="module")
def lite() -> hookviz.LoadedModel:
    return hookviz.load_model("efficientnet_lite0", device="cpu")  # bundled, trained


@pytest.fixture(scope="module")
def photo(lite) -> torch.Tensor:
    """The sample photo preprocessed for Lite0 and shrunk to 96 x 112: a real picture the
    trained model still recognises, small enough for ROAD's reference to solve quickly."""
    batch, _ = prepare_input(lite, hookviz.sample_image())
    return F.interpolate(batch, size=(96, 112), mode="bilinear", align_corners=False)


def _map(loaded, image, kind: str) -> np.ndarray:
    """A Grad-CAM heatmap, a saliency map or a random map, on the image's pixel grid."""
    if kind == "gradcam":
        return hookviz.grad_cam(loaded, image).heatmap
    if kind == "saliency":
        return hookviz.attribute(loaded, image, "saliency").map
    _, size = prepare_input(loaded, image)
    return np.random.default_rng(7).random(size).astype(np.float32)


def _top_class(loaded, image) -> int:
    return hookviz.predict(loaded, image, k=1)[0].index


# -- Average Drop and Increase in Confidence: TorchCAM's ClassificationMetric ---------------------


class _GivenMap:
    """A TorchCAM CAM extractor that returns a map already made: ClassificationMetric then
    resizes it onto the input, multiplies and scores, as it does any CAM's."""

    def __init__(self, model: torch.nn.Module, heatmap: np.ndarray) -> None:
        self.model = model
        self.heatmap = torch.as_tensor(heatmap)[None]

    def __call__(self, class_idx=None, scores=None, normalized=True, **kwargs):
        return [self.heatmap]

    def fuse_cams(self, cams):
        return cams[0]

    def _hooks_off(self):
        return contextlib.nullcontext()


def _torchcam(loaded, batch, heatmap, index) -> dict[str, float]:
    metrics = pytest.importorskip("torchcam.metrics")
    metric = metrics.ClassificationMetric(
        _GivenMap(loaded.model, heatmap / heatmap.max()), partial(torch.softmax, dim=-1)
    )
    metric.update(batch, class_idx=index)
    summary = metric.summary()
    return {
        "average_drop": summary["avg_drop"],
        "increase_in_confidence": summary["conf_increase"],
    }


@pytest.mark.parametrize("fixture", ["resnet18", "lite"])
def test_average_drop_and_increase_in_confidence_give_torchcams_numbers(request, fixture, sample):
    pytest.importorskip("torchcam")
    loaded = request.getfixturevalue(fixture)
    # Lite0 on the photo: the maps are on its 600 x 512 pixels, the metrics on the model's input
    image = sample if fixture == "lite" else random_input(64, 72, seed=2)
    batch, _ = prepare_input(loaded, image)
    index = _top_class(loaded, image)
    for kind in ("gradcam", "saliency", "random"):
        heatmap = _map(loaded, image, kind)
        asked = ["average_drop", "increase_in_confidence"]
        ours = faithfulness(loaded, image, heatmap, index, asked)
        theirs = _torchcam(loaded, batch, heatmap, index)
        assert ours["average_drop"] == pytest.approx(theirs["average_drop"], abs=1e-5), kind
        assert ours["increase_in_confidence"] == theirs["increase_in_confidence"], kind


def test_increase_in_confidence_is_one_for_a_class_the_map_helps(resnet18):
    """A map of 0.5 (1 at one pixel, its maximum) halves the input: the class it helps most
    gains (Increase 1, Drop 0), the one it hurts most loses; TorchCAM agrees on both. A map of
    ones changes nothing: no drop, and no increase (O > Y is strict)."""
    x = random_input(48, 48, seed=3)
    heatmap = np.full((48, 48), 0.5, dtype=np.float32)
    heatmap[0, 0] = 1.0
    with torch.no_grad():
        before = torch.softmax(resnet18.model(x), dim=1)[0]
        after = torch.softmax(resnet18.model(x * torch.from_numpy(heatmap)), dim=1)[0]
    helped, hurt = int((after - before).argmax()), int((after - before).argmin())
    asked = ["average_drop", "increase_in_confidence"]
    gains = faithfulness(resnet18, x, heatmap, helped, asked)
    assert gains == {"average_drop": 0.0, "increase_in_confidence": 1.0}
    assert gains == _torchcam(resnet18, x, heatmap, helped)
    loses = faithfulness(resnet18, x, heatmap, hurt, asked)
    assert loses["average_drop"] > 0 and loses["increase_in_confidence"] == 0.0
    assert loses == pytest.approx(_torchcam(resnet18, x, heatmap, hurt), abs=1e-5)
    same = faithfulness(resnet18, x, np.ones((48, 48)), hurt, asked)
    assert same == {"average_drop": 0.0, "increase_in_confidence": 0.0}


# -- ROAD: pytorch-grad-cam's ROAD...Average with ClassifierOutputSoftmaxTarget ----------------


@pytest.fixture(scope="module")
def pgc():
    """pytorch-grad-cam's ROAD metrics and targets (importing it takes seconds: once here)."""
    road = pytest.importorskip("pytorch_grad_cam.metrics.road")
    targets = pytest.importorskip("pytorch_grad_cam.utils.model_targets")
    return road, targets


def _pgc_road(pgc, loaded, batch, saliency, index, seed=0) -> dict[str, float]:
    road, targets = pgc
    wanted = [targets.ClassifierOutputSoftmaxTarget(index)]
    found = {}
    for name, metric in (
        ("road_morf", road.ROADMostRelevantFirstAverage()),
        ("road_lerf", road.ROADLeastRelevantFirstAverage()),
    ):
        with torch.random.fork_rng():
            torch.manual_seed(seed)  # its imputer draws from torch's global generator
            found[name] = float(metric(batch, saliency[None], wanted, loaded.model)[0])
    return found


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("fixture", ["resnet18", "lite"])
@pytest.mark.parametrize("kind", ["gradcam", "saliency", "random"])
@pytest.mark.slow
def test_road_gives_pytorch_grad_cams_numbers(request, fixture, kind, photo, pgc):
    loaded = request.getfixturevalue(fixture)
    # preprocessed tensors: the map's grid is the input's, as pytorch-grad-cam takes it
    x = photo if fixture == "lite" else random_input(64, 72, seed=5)
    heatmap = _map(loaded, x, kind)
    index = _top_class(loaded, x)
    ours = faithfulness(loaded, x, heatmap, index, ["road_morf", "road_lerf"], seed=4)
    theirs = _pgc_road(pgc, loaded, x, heatmap, index, seed=4)
    # the same imputed pixels, bit for bit; only batching the forward passes differs
    assert ours == pytest.approx(theirs, abs=1e-6)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_imputation_is_pytorch_grad_cams_bit_for_bit(pgc):
    road, _ = pgc
    generator = torch.Generator().manual_seed(3)
    values = torch.randn(3, 30, 40, generator=generator)
    keep = torch.rand(30, 40, generator=generator) < 0.3
    with torch.random.fork_rng():
        torch.manual_seed(9)
        theirs = road.NoisyLinearImputer()(values, keep.float())
    ours = module._impute(values, keep, torch.Generator().manual_seed(9))
    assert torch.equal(ours, theirs)
    assert torch.equal(ours[:, keep], values[:, keep])


def test_imputation_without_scipy_solves_the_same_system_by_conjugate_gradients(monkeypatch):
    generator = torch.Generator().manual_seed(4)
    values = torch.randn(3, 40, 48, generator=generator)
    # a smooth map's percentile: a large hole, the slowest case for an iterative solver
    rows, columns = torch.meshgrid(torch.arange(40.0), torch.arange(48.0), indexing="ij")
    keep = (rows - 20) ** 2 + (columns - 30) ** 2 > 15**2
    exact = module._impute(values, keep, torch.Generator().manual_seed(1))
    monkeypatch.setitem(sys.modules, "scipy.sparse", None)  # import scipy.sparse now fails
    monkeypatch.setitem(sys.modules, "scipy.sparse.linalg", None)
    iterative = module._impute(values, keep, torch.Generator().manual_seed(1))
    torch.testing.assert_close(iterative, exact, rtol=0, atol=1e-6)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_road_with_every_pixel_tied_imputes_zeros_as_pytorch_grad_cam(resnet18, pgc):
    """A constant map keeps no pixel at any percentile (``map < percentile`` is never true):
    all are imputed from nothing, which is 0 plus the noise, for both."""
    x = random_input(32, 32, seed=6)
    flat = np.full((32, 32), 0.5, dtype=np.float32)
    ours = faithfulness(resnet18, x, flat, 0, ["road_morf", "road_lerf"])
    assert ours == pytest.approx(_pgc_road(pgc, resnet18, x, flat, 0), abs=1e-6)
    assert all(np.isfinite(value) for value in ours.values())


# -- deletion and insertion: trust_curves' areas --------------------------------------------------


def test_deletion_and_insertion_are_trust_curves_areas(resnet18):
    x = random_input(64, 64, seed=11)
    cam = hookviz.grad_cam(resnet18, x)
    ours = faithfulness(resnet18, x, cam, metrics=["deletion", "insertion"], seed=2)
    curves = hookviz.trust_curves(resnet18, x, cam.heatmap, cam.class_index, seed=2)
    assert ours == {"deletion": curves.deletion_auc, "insertion": curves.insertion_auc}


# -- targets, names, maps --------------------------------------------------------------------------


def test_all_metrics_by_default_in_order_and_the_same_for_the_same_seed(resnet18):
    x = random_input(32, 40, seed=8)
    heatmap = np.random.default_rng(1).random((32, 40))
    first = faithfulness(resnet18, x, heatmap)
    assert list(first) == list(METRICS)
    assert all(isinstance(value, float) for value in first.values())
    torch.rand(7)  # torch's global generator moves on: ours has its own
    assert faithfulness(resnet18, x, heatmap) == first
    other = faithfulness(resnet18, x, heatmap, metrics=["road_morf", "road_lerf"], seed=1)
    assert other["road_morf"] != first["road_morf"]  # the noise is drawn from the seed


def test_target_defaults_to_the_class_the_explanation_explains(resnet18):
    x = random_input(32, 32, seed=9)
    top = _top_class(resnet18, x)
    second = 1 if top != 1 else 2
    cam = hookviz.grad_cam(resnet18, x, target=second)
    asked = ["average_drop", "road_morf"]
    assert faithfulness(resnet18, x, cam, metrics=asked) == faithfulness(
        resnet18, x, cam.heatmap, second, asked
    )
    # a plain map explains nothing in particular: the model's top class
    assert faithfulness(resnet18, x, cam.heatmap, metrics=asked) == faithfulness(
        resnet18, x, cam.heatmap, top, asked
    )
    assert faithfulness(resnet18, x, cam.heatmap, hookviz.targets.Class(second), asked) == (
        faithfulness(resnet18, x, cam.heatmap, second, asked)
    )
    attribution = hookviz.attribute(resnet18, x, "saliency", target=second)
    assert faithfulness(resnet18, x, attribution, metrics=asked) == faithfulness(
        resnet18, x, attribution.map, second, asked
    )


def test_a_tensor_map_and_any_scale_give_the_same_numbers(resnet18):
    x = random_input(32, 32, seed=10)
    heatmap = np.random.default_rng(2).random((32, 32)).astype(np.float32)
    asked = ["average_drop", "increase_in_confidence", "road_lerf"]
    reference = faithfulness(resnet18, x, heatmap, 3, asked)
    assert faithfulness(resnet18, x, torch.from_numpy(heatmap), 3, asked) == reference
    scaled = faithfulness(resnet18, x, heatmap * 4.0, 3, asked)
    assert scaled == pytest.approx(reference, abs=1e-6)


def test_unknown_metrics_are_refused_with_the_valid_names(resnet18):
    x = random_input(16, 16)
    with pytest.raises(MetricError, match="unknown faithfulness metric 'drop'") as info:
        faithfulness(resnet18, x, np.ones((16, 16)), metrics=["deletion", "drop"])
    assert all(name in str(info.value) for name in METRICS)
    assert isinstance(info.value, hookviz.HookvizError)
    assert faithfulness(resnet18, x, np.ones((16, 16)), metrics=[]) == {}
    one = faithfulness(resnet18, x, np.ones((16, 16)), metrics="average_drop")
    assert list(one) == ["average_drop"]


@pytest.mark.parametrize(
    ("heatmap", "message"),
    [
        (np.ones((16, 17)), r"the map is \(16, 17\); give it on the image's pixel grid \(16, 16\)"),
        (np.ones((3, 16, 16)), r"the map is \(3, 16, 16\)"),
        (-np.ones((16, 16)), "negative values"),
        (np.full((16, 16), np.nan), "NaN or infinite"),
        ("a map", r"an explanation is a GradCAM, an Attribution or an \(H, W\) map; got str"),
        (object(), r"an explanation is a GradCAM, an Attribution or an \(H, W\) map"),
    ],
)
def test_maps_that_are_not_non_negative_maps_on_the_images_grid_are_refused(
    resnet18, heatmap, message
):
    with pytest.raises(MetricError, match=message):
        faithfulness(resnet18, random_input(16, 16), heatmap)


def test_a_map_on_the_input_grid_of_a_resized_photo_is_refused(lite, sample):
    with pytest.raises(MetricError, match=r"pixel grid \(600, 512\)"):
        faithfulness(lite, sample, np.ones((224, 224)), metrics=["average_drop"])


def test_models_and_targets_without_a_class_probability_are_refused(embedder, resnet18):
    x = random_input(32, 32)
    wanted = r"road_morf follow the softmax probability of a class; 'resnet18' \(embedding\)"
    with pytest.raises(hookviz.TargetError, match=wanted):
        faithfulness(embedder, x, np.ones((32, 32)), metrics=["road_morf"])
    box = hookviz.targets.Box((0, 0, 8, 8), 1)
    with pytest.raises(hookviz.TargetError, match="give a class index"):
        faithfulness(resnet18, x, np.ones((32, 32)), box, ["average_drop"])
    with pytest.raises(hookviz.TargetError, match="out of range"):
        faithfulness(resnet18, x, np.ones((32, 32)), 1000, ["average_drop"])
    with pytest.raises(hookviz.TargetError):
        faithfulness(resnet18, x, np.ones((32, 32)), True, ["average_drop"])
