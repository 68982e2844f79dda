"""The sidebar's CAM method box: every method and baseline, grouped, and under it what the one
chosen does and what it costs on this model and layer."""

from __future__ import annotations

from contextlib import nullcontext

import streamlit as st

import hookviz
from hookviz.app import feedback
from hookviz.app.method_texts import GROUP_OF, METHOD_GROUPS, METHOD_LABELS, method_note
from hookviz.app.view import state

METHOD_CHOICES = tuple(method for methods in METHOD_GROUPS.values() for method in methods)


def method_section(kept: hookviz.ForwardPass | None = None) -> str:
    """The method box; returns the method chosen. With ``kept`` (the forward pass the method
    will run on), the caption under it says what the method costs here."""
    chosen = state.widget(
        "method",
        st.sidebar.selectbox,
        state.resolve("method", state.options_valid(list(METHOD_CHOICES))),
        "CAM method",
        list(METHOD_CHOICES),
        format_func=lambda m: f"{GROUP_OF[m]} · {METHOD_LABELS[m]}",
        help="How the layer's channels are weighted into the heatmap. *Methods side by side* "
        "shows them all on this image, with how faithful each one is here.",
    )
    cost = ""
    if kept is not None:
        # (a slow method's estimate times one batch of its inputs the first time: say so)
        timing = f"Timing one batch of {METHOD_LABELS[chosen]} for the estimate…"
        try:
            with feedback.working(timing) if chosen in hookviz.SLOW_METHODS else nullcontext():
                described = kept.method_cost(chosen).describe()
            cost = f" Cost of {METHOD_LABELS[chosen].split(' (')[0]} here: {described}."
        except hookviz.HookvizError:
            cost = ""
    note = method_note(chosen, kept.loaded.task) if kept is not None else method_note(chosen)
    st.sidebar.caption(f"{note[0].upper()}{note[1:]}.{cost}")
    return chosen
