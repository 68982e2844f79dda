"""Work is not redone: a kept forward pass explains any class with a backward pass only; a batch
is explained in one forward and one backward, with the same answer as one image at a time."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

import hookviz

from .conftest import random_input
from .test_cam_analytic import GapLinear, _wrap


class _ForwardCounter:
    """Counts forward calls of a model (a test-only hook, removed on exit)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.calls = 0
        self._handle = model.register_forward_pre_hook(self._count)

    def _count(self, module, inputs) -> None:
        self.calls += 1

    def close(self) -> None:
        self._handle.remove()


def test_forward_pass_explains_other_classes_without_a_new_forward(resnet18):
    x = random_input(160, 200, seed=8)
    kept = hookviz.ForwardPass(resnet18, x, "layer3")
    counter = _ForwardCounter(resnet18.model)
    try:
        results = {target: kept.grad_cam(target) for target in (None, 5, 500, 999)}
    finally:
        counter.close()
    assert counter.calls == 0
    for target, result in results.items():
        fresh = hookviz.grad_cam(resnet18, x, "layer3", target)
        np.testing.assert_allclose(result.heatmap, fresh.heatmap, atol=1e-6)
        assert result.class_index == fresh.class_index
    assert results[None].class_index == kept.predictions[0].index
    assert hookviz.count_hooks(resnet18.model) == 0
    assert all(p.grad is None for p in resnet18.model.parameters())
    with pytest.raises(hookviz.TargetError):
        kept.grad_cam(1000)


def test_a_forward_pass_times_its_backward_passes(resnet18):
    """``backward_seconds``: what one more class costs on a kept forward pass (the page decides
    from it whether to compute the top-5 ahead): none before a gradient, then the fastest
    backward pass so far; Eigen-CAM takes none, a class already computed none again."""
    kept = hookviz.ForwardPass(resnet18, random_input(128, 128, seed=3), "layer2")
    assert kept.backward_seconds is None
    kept.grad_cam(None, "eigencam")
    assert kept.backward_seconds is None
    kept.grad_cam(7)
    first = kept.backward_seconds
    assert first is not None and 0 < first < kept.forward_seconds * 50
    kept.grad_cam(7)  # remembered: no backward pass
    assert kept.backward_seconds == first
    kept.grad_cam(8, "layercam")
    assert 0 < kept.backward_seconds <= first


def test_batch_rows_equal_single_image_results(resnet18):
    images = torch.cat([random_input(96, 128, seed=s) for s in range(4)])
    targets = [3, 17, 3, 900]
    batch = hookviz.grad_cam_batch(resnet18, images, "layer3", targets)
    assert batch.heatmaps.shape == (4, 96, 128) and batch.heatmaps.dtype == np.float32
    assert batch.class_indices.tolist() == targets
    for row, target in enumerate(targets):
        single = hookviz.grad_cam(resnet18, images[row : row + 1], "layer3", target)
        np.testing.assert_allclose(batch.heatmaps[row], single.heatmap, atol=1e-5)
        assert batch.scores[row] == pytest.approx(single.score, rel=1e-4, abs=1e-5)
    default = hookviz.grad_cam_batch(resnet18, images, "layer4")
    tops = [hookviz.predict(resnet18, images[r : r + 1], k=1)[0].index for r in range(4)]
    assert default.class_indices.tolist() == tops
    assert hookviz.count_hooks(resnet18.model) == 0


def test_batch_matches_classic_cam_on_paper():
    torch.manual_seed(4)
    module = GapLinear(3, 6, 3)
    loaded = _wrap(module, 3)
    images = torch.randn(5, 3, 4, 4)  # no upsampling: heatmap = min-max of ReLU(CAM)
    batch = hookviz.grad_cam_batch(loaded, images, "features", [0, 1, 2, 0, 1])
    with torch.no_grad():
        activations = module.features(images)
    for row, target in enumerate([0, 1, 2, 0, 1]):
        cam = torch.relu(torch.einsum("k,khw->hw", module.fc.weight[target], activations[row]))
        expected = (cam - cam.min()) / (cam.max() - cam.min()) if cam.max() > cam.min() else cam
        np.testing.assert_allclose(batch.heatmaps[row], expected.numpy(), atol=1e-5)


def test_batch_refuses_bad_targets(resnet18):
    images = torch.cat([random_input(64, 64, seed=s) for s in range(2)])
    with pytest.raises(hookviz.TargetError, match="2 integer targets"):
        hookviz.grad_cam_batch(resnet18, images, "layer4", [1])
    with pytest.raises(hookviz.TargetError, match="out of range"):
        hookviz.grad_cam_batch(resnet18, images, "layer4", [1, 1000])
    assert hookviz.count_hooks(resnet18.model) == 0


def test_bf16_autocast_agrees_with_float32(lite0, sample):
    x = lite0.preprocessing.to_tensor(sample)
    full = hookviz.grad_cam_batch(lite0, x, "bn2", [652])
    half = hookviz.grad_cam_batch(lite0, x, "bn2", [652], autocast=torch.bfloat16)
    assert half.heatmaps.dtype == np.float32
    r = np.corrcoef(full.heatmaps.ravel(), half.heatmaps.ravel())[0, 1]
    assert r > 0.99


def test_channels_last_gives_the_same_answer(sample):
    torch.manual_seed(0)
    plain = hookviz.load_model("resnet18", pretrained=False, device="cpu")
    torch.manual_seed(0)
    fast = hookviz.load_model("resnet18", pretrained=False, device="cpu", channels_last=True)
    assert fast.model.conv1.weight.is_contiguous(memory_format=torch.channels_last)
    a = hookviz.grad_cam(plain, sample, "layer3", 7)
    b = hookviz.grad_cam(fast, sample, "layer3", 7)
    # channels-last convolutions sum in another order: float32 rounding, amplified a little by
    # the scaling to [0, 1] (measured up to 1.2e-4 on these random weights)
    np.testing.assert_allclose(a.heatmap, b.heatmap, atol=1e-3)
    torch.testing.assert_close(
        hookviz.feature_maps(plain, sample, "layer2").activations,
        hookviz.feature_maps(fast, sample, "layer2").activations,
        rtol=1e-4,
        atol=1e-4,
    )


class _CallCost(torch.nn.Module):
    """Costs a fixed time per forward call, whatever the batch: a model whose batches are
    nearly free per image, as a batched forward on a GPU or many cores is."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(0.2)  # (long beside a pause of the garbage collector)
        return x


def test_the_score_cam_estimate_counts_batches_as_they_run():
    """One masked input per channel, 32 to a batch: the estimate is the batches' time, not the
    channels times one single-image forward (which said 30x too much where batching is
    cheap). The model's cost is a sleep per call, so the time is the model's, not the
    machine's load."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(
        torch.nn.Conv2d(3, 64, 3, padding=1),
        torch.nn.ReLU(),
        _CallCost(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(64, 10),
    )
    loaded = hookviz.wrap_model(module, num_classes=10, device="cpu")
    kept = hookviz.ForwardPass(loaded, random_input(32, 32), "1")
    passes, estimate = kept.scorecam_cost()
    assert passes == 2  # 64 channels, 32 to a batch
    started = time.perf_counter()
    kept.grad_cam(3, "scorecam")
    took = time.perf_counter() - started
    assert took / 2 <= estimate <= took * 2, (estimate, took)
