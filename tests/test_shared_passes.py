"""Several sessions' forward passes as one batch (what lets a GPU serve a room), on the CPU: each
image's pass from a batched forward gives what its own pass gives, for every method and any
class asked later; a batched backward seeds each first gradient; the ``Batcher`` groups the
requests of concurrent threads by layer and input size. Real models, real threads."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import hookviz
from hookviz.core.shared_passes import Batcher, forward_passes, seed_gradients

from .conftest import random_input

METHODS = ["gradcam", "gradcam++", "xgradcam", "layercam", "hirescam", "eigencam", "scorecam",
           "fullgrad", "shapleycam"]  # fmt: skip


@pytest.fixture(scope="module")
def resnet() -> hookviz.LoadedModel:
    return hookviz.load_model("resnet18", pretrained=False, device="cpu")


def _same(batched: hookviz.GradCAM, alone: hookviz.GradCAM) -> None:
    assert (batched.class_index, batched.method) == (alone.class_index, alone.method)
    scale = max(float(np.abs(alone.cam).max()), 1e-12)
    np.testing.assert_allclose(batched.cam, alone.cam, rtol=1e-4, atol=1e-5 * scale)
    assert batched.score == pytest.approx(alone.score, rel=1e-5, abs=1e-6)


@pytest.mark.slow
def test_each_pass_of_a_batch_is_its_images_own(resnet):
    images = [random_input(48, 64, seed=seed) for seed in (1, 2, 3)]
    batched = forward_passes(resnet, images, "layer3")
    for made, image in zip(batched, images, strict=True):
        alone = hookviz.ForwardPass(resnet, image, "layer3")
        assert [p.index for p in made.predictions] == [p.index for p in alone.predictions]
        np.testing.assert_allclose(
            made.features.activations, alone.features.activations, rtol=1e-4, atol=1e-5
        )
        for method in METHODS:
            _same(made.grad_cam(None, method), alone.grad_cam(None, method))
        _same(made.grad_cam(7), alone.grad_cam(7))  # a class asked later, on the shared graph


def test_one_backward_seeds_every_first_gradient(resnet):
    images = [random_input(48, 64, seed=seed) for seed in (4, 5, 6, 7)]
    targets = [None, 3, 11, None]
    batched = forward_passes(resnet, images, "layer4")
    seed_gradients(batched, targets)
    for made, image, target in zip(batched, images, targets, strict=True):
        cam = made.grad_cam(target, "gradcam++")
        assert made.backward_seconds is None  # no backward of its own
        _same(cam, hookviz.grad_cam(resnet, image, "layer4", target, method="gradcam++"))


def test_images_fed_at_different_sizes_are_not_batched(resnet):
    with pytest.raises(hookviz.HookvizError, match="different sizes"):
        forward_passes(resnet, [random_input(48, 64), random_input(64, 48)], "layer4")


def test_concurrent_requests_run_in_batches_by_layer_and_size(resnet):
    batcher = Batcher(resnet, window_s=0.3, max_batch=4)
    hookviz.layer_table(resnet)  # (traced before the threads start)
    asks = [(random_input(48, 64, seed=10 + i), "layer4", i) for i in range(6)]
    asks += [
        (random_input(64, 64, seed=30), "layer4", 2),
        (random_input(48, 64, seed=31), "layer3", 5),
    ]
    results: dict[int, hookviz.ForwardPass] = {}

    def ask(index: int) -> None:
        image, layer, target = asks[index]
        results[index] = batcher.forward_pass(image, layer, target)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(asks))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(batcher.batches_run) == [1, 1, 2, 4]  # 6 alike (4 + 2), two of their own
    for index, (image, layer, target) in enumerate(asks):
        _same(results[index].grad_cam(target), hookviz.grad_cam(resnet, image, layer, target))


def test_a_model_that_cannot_batch_runs_each_alone(detector):
    batcher = Batcher(detector, window_s=0.3)
    made = batcher.forward_pass(random_input(96, 96, seed=2))
    assert batcher.batches_run == [] and isinstance(made, hookviz.ForwardPass)
