"""``FairLock``: a model's lock, served first come, first served.

Every analysis holds its model's lock from registering its hooks to removing them. A plain
``threading.Lock`` lets whichever waiting thread the OS wakes first in, so on a server shared
by a class one student's analysis can wait behind later ones again and again. Here each caller
takes a ticket and callers are let in in ticket order; a long job (Score-CAM, occlusion, a
feature visualization) takes the lock once per slice, so the analyses that arrived meanwhile
run between two slices. ``waiting`` says how many callers hold or wait for the lock, and
``ahead_of`` how many are before a given waiting thread, for a page to say how many are ahead of
its analysis while it waits.
"""

from __future__ import annotations

import threading
from types import TracebackType


class FairLock:
    """A non-reentrant lock whose waiters get in in the order they asked (FIFO).

    Use it as ``threading.Lock``: ``with lock:`` or ``acquire()`` / ``release()``. A caller
    interrupted while waiting (an exception in its thread) gives its turn up: it never blocks
    the callers after it.
    """

    def __init__(self) -> None:
        self._condition = threading.Condition(threading.Lock())
        self._next_ticket = 0
        self._serving = 0  # the ticket that holds (or may take) the lock
        self._given_up: set[int] = set()
        self._held = False
        self._tickets: dict[int, int] = {}  # a waiting thread's ident -> its ticket

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Wait for this caller's turn; False if ``blocking`` is False or ``timeout`` (seconds)
        passes first."""
        with self._condition:
            if not blocking and (self._held or self._serving != self._next_ticket):
                return False
            ticket = self._next_ticket
            self._next_ticket += 1
            me = threading.get_ident()
            self._tickets[me] = ticket
            try:
                got = self._condition.wait_for(
                    lambda: self._serving == ticket and not self._held,
                    None if timeout < 0 else timeout,
                )
            except BaseException:
                self._give_up(ticket)
                raise
            finally:
                del self._tickets[me]
            if not got:
                self._give_up(ticket)
                return False
            self._held = True
            return True

    def release(self) -> None:
        with self._condition:
            if not self._held:
                raise RuntimeError("release of an unheld FairLock")
            self._held = False
            self._advance()

    def locked(self) -> bool:
        with self._condition:
            return self._held

    @property
    def waiting(self) -> int:
        """How many callers hold the lock or wait for it now."""
        with self._condition:
            return self._next_ticket - self._serving - len(self._given_up)

    def ahead_of(self, thread: int) -> int | None:
        """How many callers hold the lock or wait for it before the thread whose ident is
        ``thread`` (``threading.get_ident()``), None while that thread does not wait for it."""
        with self._condition:
            ticket = self._tickets.get(thread)
            if ticket is None:
                return None
            skipped = sum(1 for given in self._given_up if given < ticket)
            return ticket - self._serving - skipped

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()

    def _give_up(self, ticket: int) -> None:
        """(Under the condition.) Drop ``ticket``: skip it when its turn comes."""
        if ticket == self._serving and not self._held:
            self._advance()
        else:
            self._given_up.add(ticket)

    def _advance(self) -> None:
        """(Under the condition.) The next ticket's turn, skipping those given up."""
        self._serving += 1
        while self._serving in self._given_up:
            self._given_up.remove(self._serving)
            self._serving += 1
        self._condition.notify_all()
