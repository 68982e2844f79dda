"""The caches of the browser's own inputs for the pictures it colours itself: an analysis's
heatmap as colormap indices and its feature-map grids as series, each encoded once
(``payloads``). (The display image's PNG is ``hookviz.app.caches.encoded.display_png``.)

Here, in the browser's package, not in ``hookviz.app.caches``: the encoding is the browser's wire
format, and the caches never import the browser (which draws with them).
"""

from __future__ import annotations

import streamlit as st

from hookviz.app.browser import payloads
from hookviz.app.caches.analyses import analysis
from hookviz.app.caches.images import display_image
from hookviz.app.view.keys import AnalysisKey, SeenKey


# Resources: never mutated by the page (no copy per run).
@st.cache_resource(max_entries=64, show_spinner=False)
def heat_indices(key: AnalysisKey) -> tuple[bytes, int, int]:
    """The heatmap of analysis ``key`` on the display-size image's grid, as the browser takes
    it (``payloads.heat_indices``), with the grid's width and height."""
    picture = display_image(key.digest)
    packed = payloads.heat_indices(analysis(key).cam, picture.width, picture.height)
    return packed, picture.width, picture.height


@st.cache_resource(max_entries=16, show_spinner=False)
def grid_series(
    seen: SeenKey,
    orders: tuple[tuple[str, tuple[int, ...], tuple[float, ...] | None], ...],
    background: tuple[int, int, int],
    _key: AnalysisKey,
) -> dict:
    """The feature-map grids of every channel order and count, as the browser takes them
    (``payloads.grid_series``). Cached by ``seen``, what the feature maps depend on, not by the
    class: a class change keeps the grid (the orders' channels and signs name what it does
    change). ``_key``: the analysis shown, whose feature maps these are (not part of the
    key)."""
    return payloads.grid_series(analysis(_key).features, orders, background)
