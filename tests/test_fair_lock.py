"""A model's lock serves its callers first come, first served, and a long job takes it once per
slice, so the analyses other sessions ask for meanwhile run between two slices (real threads,
a real model)."""

from __future__ import annotations

import threading
import time

import pytest

import hookviz
from hookviz.core.fair_lock import FairLock

from .conftest import random_input

PATIENCE = 30.0


def _until(condition, what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.005)


def test_waiters_get_the_lock_in_the_order_they_asked():
    lock = FairLock()
    order: list[int] = []

    def take(index: int) -> None:
        with lock:
            order.append(index)

    lock.acquire()
    threads = []
    for index in range(6):
        thread = threading.Thread(target=take, args=(index,))
        thread.start()
        threads.append(thread)
        _until(lambda index=index: lock.waiting == index + 2, f"waiter {index} queues")
    lock.release()
    for thread in threads:
        thread.join(PATIENCE)
    assert order == list(range(6))
    assert lock.waiting == 0 and not lock.locked()


def test_a_waiter_that_gives_up_never_blocks_those_after_it():
    lock = FairLock()
    lock.acquire()
    assert lock.acquire(timeout=0.05) is False  # (its turn is skipped later)
    assert lock.acquire(blocking=False) is False
    got = []
    late = threading.Thread(target=lambda: got.append(lock.acquire(timeout=PATIENCE)))
    late.start()
    _until(lambda: lock.waiting == 2, "the late waiter queues")
    lock.release()
    late.join(PATIENCE)
    assert got == [True] and lock.locked()
    lock.release()
    assert lock.acquire(blocking=False) and lock.waiting == 1
    lock.release()
    with pytest.raises(RuntimeError, match="unheld"):
        lock.release()


def test_each_waiter_is_told_how_many_are_ahead_of_it_as_they_go():
    """``ahead_of``: the holder and the waiters before a thread, falling as they finish; a
    waiter that gave up no longer counts; None for a thread that does not wait."""
    lock = FairLock()
    lock.acquire()
    ready = [threading.Event() for _ in range(3)]
    idents: list[int] = []

    def take(index: int) -> None:
        idents.append(threading.get_ident())
        with lock:
            ready[index].wait(PATIENCE)

    threads = []
    for index in range(3):
        thread = threading.Thread(target=take, args=(index,))
        thread.start()
        threads.append(thread)
        _until(lambda index=index: lock.waiting == index + 2, f"waiter {index} queues")
    assert [lock.ahead_of(ident) for ident in idents] == [1, 2, 3]
    assert lock.ahead_of(threading.get_ident()) is None  # (this thread holds it)
    lock.release()
    _until(lambda: lock.ahead_of(idents[0]) is None, "the first waiter gets in")
    assert [lock.ahead_of(ident) for ident in idents[1:]] == [1, 2]
    gave_up = []
    quitter = threading.Thread(target=lambda: gave_up.append(lock.acquire(timeout=0.3)))
    quitter.start()
    quitter.join(PATIENCE)
    assert gave_up == [False]
    ready[0].set()
    _until(lambda: lock.ahead_of(idents[1]) is None, "the second waiter gets in")
    assert lock.ahead_of(idents[2]) == 1
    ready[1].set()
    ready[2].set()
    for thread in threads:
        thread.join(PATIENCE)
    assert lock.waiting == 0 and not lock.locked()


LONG_JOBS = {
    "scorecam": lambda loaded, x, progress: hookviz.grad_cam(
        loaded, x, "layer4", 1, method="scorecam", progress=progress
    ),
    "occlusion": lambda loaded, x, progress: hookviz.attribute(
        loaded, x, "occlusion", 1, window=8, stride=4, batch_size=8, progress=progress
    ),
}


@pytest.mark.parametrize("name", list(LONG_JOBS))
@pytest.mark.slow
def test_a_long_job_lets_an_analysis_asked_meanwhile_through(name):
    """Score-CAM and occlusion run a batch of forward passes at a time, each under the lock:
    a Grad-CAM another session asks for once the long job has started is done before it."""
    loaded = hookviz.load_model("resnet18", pretrained=False, device="cpu")
    x = random_input(64, 64, seed=3)
    hookviz.grad_cam(loaded, x, "layer4")  # (the layer table traced, the code warm)
    batches_done = []
    finished: dict[str, float] = {}

    def progress(done: int, total: int) -> None:
        batches_done.append(done)

    def long_job() -> None:
        LONG_JOBS[name](loaded, x, progress)
        finished["long"] = time.monotonic()

    job = threading.Thread(target=long_job)
    job.start()
    _until(lambda: len(batches_done) >= 2, f"{name} has started")
    hookviz.grad_cam(loaded, x, "layer3", 2)
    finished["gradcam"] = time.monotonic()
    seen = len(batches_done)
    job.join(PATIENCE * 4)
    assert "long" in finished
    assert finished["gradcam"] < finished["long"]
    assert seen < len(batches_done), f"the Grad-CAM waited for the whole {name}"
