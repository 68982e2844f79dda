"""Telling the user what the page is doing: a working indicator at the top of the main area for
anything that takes more than a moment, and messages for what went wrong.

The indicator lives in one slot the entry point creates before any work starts, so it is the
first thing in the main area whatever the step (loading a model from the sidebar, a forward
pass, a panel's own computation), and it shows the elapsed time.
"""

from __future__ import annotations

import functools
import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any, TypeVar

import streamlit as st
from streamlit.runtime.scriptrunner import add_script_run_ctx, get_script_run_ctx

LOG = logging.getLogger("hookviz.app")
F = TypeVar("F", bound=Callable[..., object])

# Each browser session runs its script on its own thread: the slot is per thread, set by the
# entry point at the start of every full run.
_local = threading.local()


def create_slot() -> None:
    """Reserve the indicator's place (call first thing in the main area of a full run)."""
    _local.slot = st.container()


@contextmanager
def fragment_slot() -> Iterator[None]:
    """A slot at the top of a fragment for the block's indicator and errors: a fragment's rerun
    cannot write into the full run's slot, outside its own body."""
    outer = getattr(_local, "slot", None)
    _local.slot = st.container()
    try:
        yield
    finally:
        _local.slot = outer


@contextmanager
def working(text: str, queue: Any = None) -> Iterator[None]:
    """Show ``text`` with a spinner and the elapsed time while the block runs (it appears after
    half a second, so a cache hit never flickers). With ``queue`` (a model's lock: anything
    with ``ahead_of(thread ident)``), a line under it says, while this run waits for that lock,
    how many other sessions' analyses are ahead, counting down as they finish."""
    with getattr(_local, "slot", None) or nullcontext(), st.spinner(text, show_time=True):
        if queue is None:
            yield
            return
        with _following(queue, st.empty()):
            yield


# How often the queue line is brought up to date, seconds (its first time with the spinner).
_QUEUE_EVERY = 0.25
_QUEUE_FIRST = 0.5


@contextmanager
def _following(queue: Any, line: Any) -> Iterator[None]:
    """While the block runs, a thread of this session (the script thread is the one waiting)
    writes into ``line`` how many are ahead of the script thread in ``queue``."""
    waiter = threading.get_ident()
    stop = threading.Event()

    def follow() -> None:
        shown = None
        pause = _QUEUE_FIRST
        while not stop.wait(pause):
            pause = _QUEUE_EVERY
            text = queue_text(queue.ahead_of(waiter))
            if text != shown:
                line.caption(text) if text else line.empty()
                shown = text

    thread = threading.Thread(target=follow, daemon=True, name="hookviz-queue")
    add_script_run_ctx(thread, get_script_run_ctx())
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=1.0)
        line.empty()


def queue_text(ahead: int | None) -> str | None:
    """What a waiting session is told, with ``ahead`` analyses before its own (None or 0:
    nothing, it is not waiting)."""
    if not ahead:
        return None
    if ahead == 1:
        return "The model is busy with another session's analysis; yours is next."
    return f"The model is busy with other sessions' analyses: {ahead} are ahead of yours."


def error(text: str) -> None:
    """An error in the indicator's slot, so it is the first thing the user reads."""
    (getattr(_local, "slot", None) or st).error(text)


def error_hint(text: str) -> None:
    """What the page does instead, under an error."""
    (getattr(_local, "slot", None) or st).info(text)


def report_unexpected() -> None:
    """For an exception that is a bug: its traceback to the server log with an id, only the id
    to the page (call inside ``except``)."""
    error_id = uuid.uuid4().hex[:8]
    LOG.exception("unexpected error %s", error_id)
    st.error(
        f"Something went wrong on our side (error id **{error_id}**). It has been logged on "
        "the server; try another setting, or reload the page."
    )


def guarded(body: F) -> F:
    """Run a fragment's body behind the same boundary as the whole page: Streamlit would
    otherwise draw its own error box for an exception inside a fragment."""

    @functools.wraps(body)
    def run(*args, **kwargs):
        try:
            return body(*args, **kwargs)
        except Exception:
            report_unexpected()
            return None

    return run  # type: ignore[return-value]
