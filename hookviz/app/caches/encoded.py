"""The caches of pictures as encoded bytes (JPEG, PNG), the ones the page hands to
``st.image`` or the browser as they are, and the pictures' ids (the browser's cache key).

Bounds: drawn from ``images`` and ``analyses``; the encodings only the browser reads (the
heatmap's colormap indices, the feature-map grids) are ``hookviz.app.browser.cached_payloads``'s.
"""

from __future__ import annotations

import hashlib

import streamlit as st

import hookviz
from hookviz import render
from hookviz.app.caches.analyses import analysis
from hookviz.app.caches.images import display_image
from hookviz.app.view.keys import AnalysisKey


@st.cache_data(max_entries=16, show_spinner=False)
def display_jpeg(digest: str) -> bytes:
    """The display-size image as JPEG."""
    return render.jpeg_bytes(display_image(digest))


# A resource: never mutated by the page (no copy per run).
@st.cache_resource(max_entries=16, show_spinner=False)
def display_png(digest: str) -> bytes:
    """The display-size image as a PNG (lossless: the browser blends these pixels)."""
    return render.png_bytes(display_image(digest))


def picture_id(key: tuple) -> str:  # (any tuple of plain values and targets)
    """A short name for an analysis's pictures (the browser's cache key)."""
    return hashlib.sha1(repr(key).encode()).hexdigest()[:16]


@st.cache_data(max_entries=16, show_spinner=False)
def channel_overlay_jpeg(key: AnalysisKey, channel: int, alpha: float, cmap: str) -> bytes:
    """One channel's map stretched over the display-size image."""
    picture = display_image(key.digest)
    features = analysis(key).features
    single = hookviz.core.cam.to_pixel_grid(
        features.activations[channel], (picture.height, picture.width)
    )
    picture = render.overlay(picture, single, alpha=alpha, cmap=cmap)
    return render.jpeg_bytes(render.fit_within(picture, 512))


def small_overlay(digest: str, cam: hookviz.GradCAM, alpha: float, cmap: str) -> bytes:
    """A CAM over a 360-pixel copy of the image (the panels' side-by-side pictures)."""
    picture = render.fit_within(display_image(digest), 360)
    heat = cam.heatmap_at((picture.height, picture.width))
    return render.jpeg_bytes(render.overlay(picture, heat, alpha=alpha, cmap=cmap))
