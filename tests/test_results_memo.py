"""``ResultsMemo``'s pending protocol with real threads: a result two threads ask for at once
is computed once and both get that very object; a failure reaches the waiting thread, which
then computes the result itself; a waiter may cancel its own wait alone; and the bound drops
the oldest result added first. Each thread proves where it is by an event, never by a sleep:
a waiting thread's progress callback is told the computing thread's progress only while it
waits."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from hookviz.core.methods import CancelledError
from hookviz.core.results_memo import ResultsMemo

WAIT = 30  # seconds before a test that would otherwise hang fails instead


class _Asker:
    """One thread's part in a race for a key: what its ``compute`` was asked, and an event set
    when its progress callback is told anything (it is then waiting for another thread)."""

    def __init__(self, result: object, *, cancel: bool = False) -> None:
        self.result = result
        self.computed = 0
        self.told = threading.Event()
        self._cancel = cancel

    def compute(self, relay) -> object:
        self.computed += 1
        return self.result

    def progress(self, done: int, total: int) -> bool:
        self.told.set()
        return self._cancel


def _computing_until(waiter: _Asker, outcome: object) -> _Asker:
    """An asker whose computation sets ``started``, reports progress, then holds until
    ``waiter`` has been told it (so ``waiter`` surely waits for it), then returns ``outcome``
    or raises it."""
    asker = _Asker(outcome)
    asker.started = threading.Event()

    def compute(relay) -> object:
        asker.computed += 1
        asker.started.set()
        relay(1, 2)
        assert waiter.told.wait(WAIT), "the second thread never waited for the first"
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    asker.compute = compute
    return asker


def test_a_result_two_threads_ask_for_is_computed_once_and_both_get_it():
    memo: ResultsMemo[object] = ResultsMemo(4)
    waiter = _Asker(object())
    first = _computing_until(waiter, object())
    with ThreadPoolExecutor(max_workers=1) as pool:
        computing = pool.submit(memo.get_or_compute, "key", first.compute)
        assert first.started.wait(WAIT)  # (the first thread computes: the key is pending)
        waited = memo.get_or_compute("key", waiter.compute, waiter.progress)
        computed = computing.result(timeout=WAIT)
    assert computed is first.result and waited is first.result
    assert (first.computed, waiter.computed) == (1, 0)
    assert memo.get("key") is first.result and "key" in memo and len(memo) == 1


def test_a_failure_reaches_the_waiting_thread_which_computes_the_result_itself():
    memo: ResultsMemo[object] = ResultsMemo(4)
    waiter = _Asker(object())
    first = _computing_until(waiter, ValueError("the computation failed"))
    with ThreadPoolExecutor(max_workers=1) as pool:
        computing = pool.submit(memo.get_or_compute, "key", first.compute)
        assert first.started.wait(WAIT)  # (the first thread computes: the key is pending)
        waited = memo.get_or_compute("key", waiter.compute, waiter.progress)
        with pytest.raises(ValueError, match="the computation failed"):
            computing.result(timeout=WAIT)
    assert waited is waiter.result
    assert (first.computed, waiter.computed) == (1, 1)
    assert memo.get_or_compute("key", _Asker(object()).compute) is waiter.result


def test_a_waiting_thread_may_cancel_its_own_wait_alone():
    memo: ResultsMemo[object] = ResultsMemo(4)
    waiter = _Asker(object(), cancel=True)
    first = _computing_until(waiter, object())
    with ThreadPoolExecutor(max_workers=1) as pool:
        computing = pool.submit(memo.get_or_compute, "key", first.compute)
        assert first.started.wait(WAIT)  # (the first thread computes: the key is pending)
        with pytest.raises(CancelledError):
            memo.get_or_compute("key", waiter.compute, waiter.progress)
        computed = computing.result(timeout=WAIT)
    assert computed is first.result and waiter.computed == 0
    assert memo.get("key") is first.result


def test_the_bound_drops_the_oldest_result_added_first():
    """Reading a result does not make it younger: the first added goes first."""
    memo: ResultsMemo[str] = ResultsMemo(2)
    memo.remember("a", "A")
    memo.get_or_compute("b", lambda relay: "B")
    assert memo.get("a") == "A"  # (read, still the oldest)
    memo.remember("c", "C")
    assert ("a" in memo, memo.get("b"), memo.get("c"), len(memo)) == (False, "B", "C", 2)
    memo.get_or_compute("d", lambda relay: "D")
    assert ("b" in memo, memo.get("c"), memo.get("d"), len(memo)) == (False, "C", "D", 2)
