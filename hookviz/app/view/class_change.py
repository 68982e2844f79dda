"""What a class change reruns, worked out in one place.

A class picked in the sidebar (in the class box or on the top-5 radio) reruns only the fragments
of Explore's results that depend on the class, and the other class widget, so that it shows the
new class: not the whole page (decision 0036). The fragments then draw from the last full run's
scene with the class wished now (``hookviz.app.sidebar.scene.for_fragment``). Every change, a class
change included, reruns the whole page where the last full run did not complete (``state._rerun``).
"""

from __future__ import annotations

import streamlit as st

from hookviz.app.view import fragments, state
from hookviz.app.view.keys import CHANNELS_OPEN, SNIPPET_OPEN
from hookviz.core.features import WEIGHT_ORDERINGS


def rerun_scope(results_in_fragments: bool, other_widget: str) -> tuple[str, ...]:
    """The fragments a class change reruns, asked at the moment of the change (the grid's order
    and the panels open then decide some of them).

    The rest of the page does not depend on the class: the original, the top-5, the grid unless
    ordered by channel weight, the snippet while closed (it is the same for every class), the
    texts; the downloads read the class on screen when clicked.

    Args:
        results_in_fragments: whether the last full run drew the results the class changes as
            fragments (Explore, unless a slow method's progress stood in for them). Without
            them, on another page, the whole page reruns.
        other_widget: the fragment of the class widget that was not used
            (``fragments.CLASS_BOX`` or ``fragments.CLASS_TOP5``).

    Returns:
        The fragments' keys, or ``(fragments.WHOLE_PAGE,)``.
    """
    if not results_in_fragments:
        return (fragments.WHOLE_PAGE,)
    scope = [fragments.OVERLAY, fragments.HEATMAP]
    if state.wish("order") in WEIGHT_ORDERINGS:  # the grid's order and signs are the class's
        scope.append(fragments.GRID)
    if st.session_state.get(CHANNELS_OPEN):
        scope.append(fragments.WEIGHTS)
    if st.session_state.get(SNIPPET_OPEN):
        scope.append(fragments.SNIPPET)
    return (*scope, other_widget)
