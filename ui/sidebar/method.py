"""The sidebar's CAM method box."""

from __future__ import annotations

import streamlit as st

import hookviz
from ui.texts import METHOD_LABELS
from ui.view import state


def method_section() -> str:
    """The method box; returns the method chosen."""
    methods = list(hookviz.METHODS)
    return state.widget(
        "method",
        st.sidebar.selectbox,
        state.resolve("method", state.options_valid(methods), "gradcam"),
        "CAM method",
        methods,
        format_func=METHOD_LABELS.get,
        help="How the layer's channels are weighted into the heatmap.",
    )
