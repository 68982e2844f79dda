"""Telling the user what the page is doing: a working indicator at the top of the main area for
anything that takes more than a moment, and messages for what went wrong.

The indicator lives in one slot the entry point creates before any work starts, so it is the
first thing in the main area whatever the step (loading a model from the sidebar, a forward
pass, a panel's own computation), and it shows the elapsed time.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import streamlit as st

# Each browser session runs its script on its own thread: the slot is per thread, set by the
# entry point at the start of every full run.
_local = threading.local()


def create_slot() -> None:
    """Reserve the indicator's place (call first thing in the main area of a full run)."""
    _local.slot = st.container()


@contextmanager
def working(text: str) -> Iterator[None]:
    """Show ``text`` with a spinner and the elapsed time while the block runs (it appears after
    half a second, so a cache hit never flickers)."""
    slot = getattr(_local, "slot", None)
    if slot is None:
        with st.spinner(text, show_time=True):
            yield
        return
    with slot, st.spinner(text, show_time=True):
        yield


def error(text: str) -> None:
    """An error in the indicator's slot, so it is the first thing the user reads."""
    slot = getattr(_local, "slot", None)
    (slot or st).error(text)


def error_hint(text: str) -> None:
    """What the page does instead, under an error."""
    slot = getattr(_local, "slot", None)
    (slot or st).info(text)
