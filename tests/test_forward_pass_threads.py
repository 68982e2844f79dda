"""One ``ForwardPass`` shared by many threads, as the app shares one with every browser session:
its remembered results stay whole while threads read, add and evict them, a result several
threads ask for at once is computed once, and a Score-CAM one session waits for reports its
progress there and can be cancelled there alone."""

from __future__ import annotations

import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from torch import nn

import hookviz
from hookviz.core import forward_pass

from .conftest import random_input

CLASSES = 64
LAYER = "2"  # the second convolution


@pytest.fixture(scope="module")
def tiny() -> hookviz.LoadedModel:
    """A two-convolution classifier with random weights (seeded): a backward costs little, so
    many calls race in a short test."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        module = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(8, 16, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(16, CLASSES),
        )
    return hookviz.wrap_model(module, num_classes=CLASSES, device="cpu")


@pytest.fixture
def often_switching():
    """Threads switch as often as the interpreter allows, so that unguarded reads and writes
    interleave far more than at the default 5 ms."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


@pytest.mark.parametrize("method", ["gradcam++", "scorecam"])
def test_a_result_many_threads_ask_at_once_is_computed_once(tiny, method, often_switching):
    """Eight threads ask for the same class at once: one computes, all get its very result
    (each computation makes its own object). Score-CAM's progress pauses the computation, so
    that every other thread surely asks while it runs."""
    kept = hookviz.ForwardPass(tiny, random_input(24, 24), LAYER)
    barrier = threading.Barrier(8)

    def pause(done: int, total: int) -> None:
        time.sleep(0.3)

    def ask(_: int) -> hookviz.GradCAM:
        barrier.wait()
        return kept.grad_cam(5, method, progress=pause if method == "scorecam" else None)

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(ask, range(8)))
    assert all(result is results[0] for result in results)
    alone = hookviz.ForwardPass(tiny, random_input(24, 24), LAYER).grad_cam(5, method)
    np.testing.assert_allclose(results[0].heatmap, alone.heatmap, rtol=1e-5, atol=1e-6)


def test_threads_asking_many_classes_through_a_tiny_cache(tiny, monkeypatch, often_switching):
    """Two results remembered, twelve threads asking 64 classes with three methods: every
    answer is for the class and method asked and equals the serial one, nothing raises, and
    the cache never holds more than two results."""
    monkeypatch.setattr(forward_pass, "_REMEMBERED", 2)
    image = random_input(24, 24, seed=1)
    methods = ("eigencam", "gradcam", "eigencam", "layercam")
    serial_pass = hookviz.ForwardPass(tiny, image, LAYER)
    serial = {
        (index, method): serial_pass.grad_cam(index, method).heatmap
        for index in range(CLASSES)
        for method in set(methods)
    }
    kept = hookviz.ForwardPass(tiny, image, LAYER)
    barrier = threading.Barrier(12)
    problems: list[str] = []
    largest = [0]

    def work(seed: int) -> None:
        barrier.wait()
        for call in range(60):
            index, method = (seed * 7 + call) % CLASSES, methods[(seed + call) % len(methods)]
            try:
                cam = kept.grad_cam(index, method)
            except Exception as exc:  # a half-evicted cache shows as KeyError or RuntimeError
                problems.append(f"{index} {method}: {exc!r}")
                continue
            largest[0] = max(largest[0], len(kept._results))
            if (cam.class_index, cam.method) != (index, method):
                problems.append(f"asked {index} {method}, got {cam.class_index} {cam.method}")
            elif not np.allclose(cam.heatmap, serial[index, method], rtol=1e-5, atol=1e-6):
                problems.append(f"{index} {method}: not the serial heatmap")

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert problems == []
    assert largest[0] <= 2
    remembered = [
        (index, method)
        for index in range(CLASSES)
        for method in set(methods)
        if kept.has_result(index, method)
    ]
    assert len(remembered) == 2


def test_a_session_waiting_for_a_score_cam_sees_its_progress_and_may_cancel_alone(tiny):
    kept = hookviz.ForwardPass(tiny, random_input(24, 24, seed=2), LAYER)
    first_running, second_told = threading.Event(), threading.Event()
    told: list[tuple[int, int]] = []

    def first_progress(done: int, total: int) -> bool:
        first_running.set()
        assert second_told.wait(30), "the waiting session was never told the progress"
        return False

    def second_progress(done: int, total: int) -> bool:
        told.append((done, total))
        second_told.set()
        return True  # cancel this session's wait only

    with ThreadPoolExecutor(max_workers=1) as pool:
        first = pool.submit(kept.grad_cam, 3, "scorecam", progress=first_progress)
        assert first_running.wait(30)
        with pytest.raises(hookviz.CancelledError):
            kept.grad_cam(3, "scorecam", progress=second_progress)
        result = first.result(timeout=60)
    assert told == [(0, 16)]
    assert result.class_index == 3 and result.method == "scorecam"
    assert kept.grad_cam(3, "scorecam") is result


def test_a_waiting_session_computes_itself_when_the_computing_one_cancels(tiny):
    kept = hookviz.ForwardPass(tiny, random_input(24, 24, seed=3), LAYER)
    first_running, second_waiting = threading.Event(), threading.Event()

    def first_progress(done: int, total: int) -> bool:
        first_running.set()
        assert second_waiting.wait(30)
        return True  # the computing session cancels

    def second_progress(done: int, total: int) -> bool:
        second_waiting.set()
        return False

    with ThreadPoolExecutor(max_workers=1) as pool:
        first = pool.submit(kept.grad_cam, 4, "scorecam", progress=first_progress)
        assert first_running.wait(30)
        second = kept.grad_cam(4, "scorecam", progress=second_progress)
        with pytest.raises(hookviz.CancelledError):
            first.result(timeout=60)
    alone = hookviz.ForwardPass(tiny, random_input(24, 24, seed=3), LAYER).grad_cam(4, "scorecam")
    assert second.class_index == 4
    np.testing.assert_allclose(second.heatmap, alone.heatmap, rtol=1e-5, atol=1e-6)
    assert kept.has_result(4, "scorecam")
