"""``ResultsMemo``: results computed once and shared by every thread that asks for them.

One ``ForwardPass`` serves many threads (the app shares one with every browser session), and
its results are worth keeping: a CAM costs at least a backward pass, Score-CAM hundreds of
forward passes. It keeps them in two memos:

- its CAMs, keyed by (the target's resolved key, the method's name, the method's options as a
  sorted tuple), through ``get_or_compute``;
- its targets' gradients at the layer, keyed by the target's resolved key, through ``get`` and
  ``remember`` (a batched backward of several passes seeds them).

Each memo holds at most ``bound`` results; adding one beyond that drops the oldest one added
(first in, first out: reading a result does not make it younger).

The pending protocol, for a result that is not there yet: the first thread to ask registers
it as pending and computes it; a thread asking for the same key meanwhile waits for that
computation instead of running it twice. When it ends, the waiters learn the outcome from the
pending entry: the very result object (each waiter returns that same object), or, if the
computation raised (failed, cancelled, or its caller's script stopped), nothing, and each
waiter asks again, so one of them computes it itself. Only the computing thread sees the
exception. While it waits, a waiter's progress callback is told how far the computation got,
and may cancel that waiter's wait alone (``CancelledError``); the computation goes on for its
own caller.

Lock order: a memo's lock is innermost. It is held only to read or change the memo, never while
computing, so never together with the model's lock or a graph's backward lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from .methods import CancelledError

Result = TypeVar("Result")
Progress = Callable[[int, int], bool | None]

# How often a waiting thread passes the computing thread's progress on (seconds).
RELAY_SECONDS = 0.05


class ResultsMemo(Generic[Result]):
    """At most ``bound`` results by key, safe to share between threads (see the module)."""

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self._lock = threading.Lock()
        self._results: dict[Hashable, Result] = {}
        self._pending: dict[Hashable, _Pending[Result]] = {}

    def __len__(self) -> int:
        with self._lock:
            return len(self._results)

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._results

    def get(self, key: Hashable) -> Result | None:
        """The result remembered for ``key``, or None."""
        with self._lock:
            return self._results.get(key)

    def remember(self, key: Hashable, result: Result) -> None:
        """Keep ``result`` for ``key``, dropping the oldest beyond ``bound``."""
        with self._lock:
            self._store(key, result)

    def get_or_compute(
        self,
        key: Hashable,
        compute: Callable[[Progress], Result],
        progress: Progress | None = None,
    ) -> Result:
        """The result for ``key``: remembered, or waited for while another thread computes it,
        or ``compute(progress)`` run here and remembered.

        Args:
            key: what the result is remembered by.
            compute: computes the result; it is given the progress callback to report to
                (``progress``, also relayed to the threads waiting for this result).
            progress: told (steps done, steps in all) while this result is computed, here or
                by the thread this one waits for; return True to cancel.

        Raises:
            CancelledError: ``progress`` cancelled this thread's wait for another's result.
            BaseException: whatever ``compute`` raised, when it ran in this thread.
        """
        while True:
            with self._lock:
                remembered = self._results.get(key)
                if remembered is not None:
                    return remembered
                pending = self._pending.get(key)
                if pending is None:
                    pending = self._pending[key] = _Pending()
                    break
            # Another thread computes this very result: wait for it rather than compute it
            # twice. If that thread fails or is cancelled, ask again (and compute it here).
            result = pending.wait(progress)
            if result is not None:
                return result
        try:
            result = compute(pending.relaying(progress))
        except BaseException:  # cancelled, failed, or the caller's script stopped
            with self._lock:
                del self._pending[key]
            pending.finish(None)
            raise
        with self._lock:
            self._store(key, result)
            del self._pending[key]
        pending.finish(result)
        return result

    def _store(self, key: Hashable, result: Result) -> None:
        """Keep ``result`` (the lock held), dropping the oldest beyond ``bound``."""
        while self._results and len(self._results) >= self.bound:
            self._results.pop(next(iter(self._results)))
        self._results[key] = result


class _Pending(Generic[Result]):
    """A result one thread is computing, which the other threads asking for it wait for."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._result: Result | None = None
        self._progress: tuple[int, int] | None = None

    def relaying(self, progress: Progress | None) -> Progress:
        """The computing thread's progress callback, which also records how far it got for
        the waiting threads' own callbacks."""

        def relay(done: int, total: int) -> bool | None:
            self._progress = (done, total)
            return progress(done, total) if progress is not None else None

        return relay

    def finish(self, result: Result | None) -> None:
        """Hand over the result (None: the computation failed or was cancelled)."""
        self._result = result
        self._done.set()

    def wait(self, progress: Progress | None) -> Result | None:
        """The result once finished (None if it failed). Meanwhile the computing thread's
        progress is passed on to ``progress``, which may cancel this caller's wait (raising
        ``CancelledError``; the computation goes on for its own caller)."""
        if progress is None:
            self._done.wait()
            return self._result
        told = None
        while not self._done.wait(RELAY_SECONDS):
            now = self._progress
            if now is not None and now != told:
                told = now
                if progress(*now):
                    raise CancelledError("Score-CAM was cancelled")
        return self._result
