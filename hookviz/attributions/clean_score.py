"""``CleanScore``: the target's score and probability on the unperturbed input, as an
``Attribution`` reports them.

A method that runs on copies of the input (SmoothGrad's noisy ones, integrated gradients' scaled
ones, occlusion's and RISE's masked ones) never scores the input itself; resolving a class
target needs no pass either (its score is its logit, whatever the output). Its score and
probability then cost one more forward pass, which Captum does not run: ``when_read`` defers it
to the first time either number is read, so a caller that reads only the map never pays for it.
Where a pass ran anyway (a default target resolved against it), ``known`` keeps its numbers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class CleanScore:
    """A (score, probability) pair: known, or computed once, on first read.

    Safe to share between threads (a page caches results for all its sessions): the first
    readers wait for one computation and all see its numbers. A computation that raises is
    tried again on the next read. Pickling and copying compute the numbers and carry them
    alone, never the model and input the computation holds.
    """

    def __init__(self, compute: Callable[[], tuple[float, float]] | None,
                 value: tuple[float, float] | None) -> None:  # fmt: skip
        self._compute = compute
        self._value = value
        self._lock = threading.Lock()

    @classmethod
    def known(cls, score: float, probability: float) -> CleanScore:
        """Numbers a pass already gave."""
        return cls(None, (float(score), float(probability)))

    @classmethod
    def when_read(cls, compute: Callable[[], tuple[float, float]]) -> CleanScore:
        """Numbers ``compute()`` gives (a forward pass), called the first time they are read.
        It must not need a lock the reader may hold: readers read results after an analysis,
        outside the model's lock."""
        return cls(compute, None)

    def value(self) -> tuple[float, float]:
        """(score, probability), computed now if this is the first read."""
        if self._compute is not None:
            with self._lock:
                if self._compute is not None:  # (another reader may have computed it meanwhile)
                    self._value = self._compute()
                    self._compute = None  # lets the model and input it held go
        return self._value  # type: ignore[return-value]

    @property
    def pending(self) -> bool:
        """Whether the numbers are still to be computed (no pass has run for them yet)."""
        return self._compute is not None

    def __getstate__(self) -> dict[str, Any]:
        return {"value": self.value()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._compute, self._value = None, tuple(state["value"])
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        if self.pending:
            return "CleanScore(computed when read)"
        score, probability = self._value  # type: ignore[misc]
        return f"CleanScore(score={score!r}, probability={probability!r})"
