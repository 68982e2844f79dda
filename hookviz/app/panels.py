"""What the Beyond and Diagnose pages share: their heading, the note while a slow method is still
to run, and the choice of the one panel shown (part of the view, so a link opens that panel)."""

from __future__ import annotations

import streamlit as st

from hookviz.app.method_texts import METHOD_LABELS
from hookviz.app.sidebar.scene import Scene
from hookviz.app.view import state


def header(title: str, scene: Scene) -> bool:
    """The page's heading; False (after saying so) when there is no analysis to show yet."""
    st.markdown(f"### {title}")
    if scene.pending:
        name = METHOD_LABELS[scene.view.method]
        st.info(f"{name} is still to run: open **Explore** to run it, or pick another method.")
        return False
    return True


def explains_classes(scene: Scene, what: str) -> bool:
    """Whether the model scores classes, which ``what`` explains; False (after saying so, and
    where to look instead) for a detector, a segmenter or an embedder."""
    loaded = scene.loaded
    if loaded.scores_classes:
        return True
    st.info(
        f"{what} explains a classifier's classes; {scene.view.model} is "
        f"{_TASKS.get(loaded.task, 'not a classifier')}. **Explore** shows its "
        f"{_FOUND.get(loaded.task, 'heatmaps')} and each one's CAM."
    )
    return False


_TASKS = {
    "detection": "a detector",
    "segmentation": "a segmenter",
    "embedding": "an embedder (a classifier without its head)",
}
_FOUND = {
    "detection": "boxes",
    "segmentation": "regions",
    "embedding": "likeness to a reference image",
}


def pick(field: str, panels: dict[str, str]) -> str:
    """A segmented control of ``panels`` (name -> label) bound to the view's ``field`` (its
    default, ``fields``, where the wish is not one of them)."""
    return state.widget(
        field,
        st.segmented_control,
        state.resolve(field, state.options_valid(panels)),
        "Panel",
        list(panels),
        format_func=panels.get,
        required=True,
        label_visibility="collapsed",
    )
