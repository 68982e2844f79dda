"""What Explore asks and remembers around a long method's run: which runs wait for a request
(``runs_on_request``: the slow methods, and any other estimated over ``ASK_OVER_SECONDS``),
whether the user asked for it (one estimated over ``ASK_OVER_SECONDS`` waits for "Compute"), and
how long each run really took (the result is cached: shown again, it costs nothing, and its own
time would be the cache's).
"""

from __future__ import annotations

from typing import Any

import streamlit as st

import hookviz

# A job estimated to take longer than this waits for the user to ask for it.
ASK_OVER_SECONDS = 2.0
ASKED = "explore.compute_asked"  # session: the view key whose slow method the user asked for
RUN_SECONDS = "explore.run_seconds"  # session: view key -> real seconds of its run
_REMEMBERED = 32  # run times kept per session (the oldest dropped first)


def runs_on_request(kept: hookviz.ForwardPass, method: str) -> bool:
    """Whether ``method`` on ``kept`` runs as a slow method does (its estimate and "Compute"
    first, then progress and Cancel, then its real time) rather than inside the page's run: a
    slow method always (a forward pass per channel or sample), any other estimated here over
    ``ASK_OVER_SECONDS`` (Smooth Grad-CAM++ or FullGrad on a large model or input). The
    estimate is free for those: it counts passes already timed."""
    if method in hookviz.SLOW_METHODS:
        return True
    try:
        return kept.method_cost(method).seconds > ASK_OVER_SECONDS
    except hookviz.HookvizError:
        return False  # (the run itself says why the method does not apply)


def must_ask(key: Any, estimate: float) -> bool:
    """Whether the run of ``key``'s method, estimated at ``estimate`` seconds, waits for the
    user's "Compute" (it does once; the run uses the request up: ``take_request``)."""
    return estimate > ASK_OVER_SECONDS and st.session_state.get(ASKED) != key


def ask(key: Any) -> None:
    """The "Compute" button's callback."""
    st.session_state[ASKED] = key


def take_request() -> None:
    """Use the request up: a run stopped by a control change asks again next time."""
    st.session_state.pop(ASKED, None)


def record(key: Any, seconds: float) -> None:
    """Remember how long ``key``'s run really took."""
    kept = st.session_state.setdefault(RUN_SECONDS, {})
    kept.pop(key, None)
    kept[key] = seconds
    while len(kept) > _REMEMBERED:
        kept.pop(next(iter(kept)))


def recorded(key: Any) -> float | None:
    """The real seconds of ``key``'s run in this session, None when it ran elsewhere."""
    return st.session_state.get(RUN_SECONDS, {}).get(key)


def duration(seconds: float) -> str:
    """Seconds in words: "3.4 s", "41 s", "2.7 min"."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"
