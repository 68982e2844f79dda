"""The caches of dataset runs (``hookviz.open_run``): a run folder, reopened when its files
change, and its rows' pictures.

Bounds: keyed by the run folder and its files' modification time, or by an image's path;
nothing here shares a key with the page's own image or models.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

import hookviz
from hookviz import render


@st.cache_resource(max_entries=4, show_spinner=False)
def dataset_run(folder: str, stamp: float) -> hookviz.Run:
    """A run folder, reopened whenever ``stamp`` (its files' modification time) changes."""
    return hookviz.open_run(Path(folder).expanduser())


@st.cache_data(max_entries=256, show_spinner=False)
def run_picture(path: str) -> bytes | None:
    """A 240-pixel copy of a run's image, or None when the file is gone or unreadable."""
    try:
        image = hookviz.load_image(path)
    except (hookviz.ImageError, OSError):
        return None
    return render.jpeg_bytes(render.fit_within(image, 240))


@st.cache_data(max_entries=256, show_spinner=False)
def run_overlay(folder: str, stamp: float, row: int, alpha: float, cmap: str) -> bytes | None:
    """Row ``row``'s CAM over a 240-pixel copy of its image: the overlay the run wrote where it
    wrote one (``--overlays``), else drawn here from its image; None when neither is there."""
    run = dataset_run(folder, stamp)
    written = run.overlay_path(row)
    if written is not None:
        return run_picture(str(written))
    found = run.input_path(row)
    if found is None:
        return None
    try:
        image = hookviz.load_image(found)
    except (hookviz.ImageError, OSError):
        return None
    picture = render.fit_within(image, 240)
    heat = run.heatmap_at(row, (picture.height, picture.width))
    return render.jpeg_bytes(render.overlay(picture, heat, alpha=alpha, cmap=cmap))


@st.cache_resource(max_entries=4, show_spinner=False)
def dataset_circuit(folder: str, stamp: str) -> tuple[hookviz.Circuit, str, str]:
    """A ``hookviz circuit`` folder's circuit, its model and weights; reopened whenever
    ``stamp`` changes (a RunError, with how to finish it, while it is not complete)."""
    root = Path(folder).expanduser()
    job = hookviz.open_run(root / "upper").manifest["job"]
    return hookviz.open_circuit(root), str(job["model"]), str(job["weights"])


@st.cache_resource(max_entries=4, show_spinner=False)
def dataset_concepts(folder: str, stamp: str) -> hookviz.FolderConcepts:
    """A ``hookviz concepts`` folder's concepts; reopened whenever ``stamp`` changes (a
    RunError while they are not written yet)."""
    return hookviz.open_concepts(Path(folder).expanduser())
