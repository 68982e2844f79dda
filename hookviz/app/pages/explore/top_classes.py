"""The top-5 classes' pictures, sent ahead: a click on the sidebar's top-5 shows that class's
overlay and heatmap at once, drawn by the browser, while the server's run (which follows, and
keeps the class box, the address and the downloads current) is still on its way. A server run
alone takes three to four times a minimal Streamlit page's reaction.

With a forward pass kept, each of the other four classes costs a backward pass and its
heatmap's colormap indices at display size (about 3-10 ms each at a model's default layer),
computed after the rest of the page. Where they would cost more than ``BUDGET_SECONDS`` (an
early layer of a large model), none are sent ahead and a click waits for the server.
"""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st

import hookviz
from hookviz.app.browser import pictures
from hookviz.app.caches import analyses, encoded
from hookviz.app.sidebar import classes
from hookviz.app.sidebar.scene import Scene
from hookviz.app.view.keys import CHANNELS_OPEN, AnalysisKey
from hookviz.app.view.target import TOP1, ViewTarget
from hookviz.core.features import WEIGHT_ORDERINGS
from hookviz.core.methods import NEEDS_GRADIENT

# The most the other four classes' backward passes may cost together (on this machine 3-40 ms
# at a model's default layer; at an early layer of a large model they are not sent ahead)
BUDGET_SECONDS = 0.3


def radio_targets(predictions: tuple[hookviz.Prediction, ...]) -> list[ViewTarget]:
    """The targets of the top-5 radio's options, in its order: the top-1 (the automatic
    choice), then the classes #2 to #5."""
    return [TOP1, *(ViewTarget.of_class(p.index) for p in predictions[1:])]


def _context(key: AnalysisKey) -> str:
    """The forward pass and method of analysis ``key`` (everything but the class), as an id."""
    return encoded.picture_id(("classes", *key.seen, key.method))


def follow(
    scene: Scene, analysis: hookviz.Analysis, key: AnalysisKey
) -> pictures.ClassFollow | None:
    """How the overlay and the heatmap of analysis ``key`` follow the top-5 radio in the
    browser; None for a method whose CAM is not one backward pass of the class (Score-CAM
    takes a forward pass per channel; Eigen-CAM has no class), or a model without classes."""
    if key.method not in NEEDS_GRADIENT or not analysis.predictions:
        return None
    targets = radio_targets(analysis.predictions)
    box, radio = classes.widget_keys(scene.view.digest, scene.view.model, scene.view.pretrained)
    return pictures.ClassFollow(
        radio=radio,
        context=_context(key),
        option=str(targets.index(key.target)) if key.target in targets else None,
        # a blank heatmap has a warning under it, which names this class
        ready=not analysis.cam.blank and not st.session_state.get(CHANNELS_OPEN),
        box=box,
        unless_orders=tuple(WEIGHT_ORDERINGS),
    )


def _affordable(key: AnalysisKey, count: int) -> bool:
    """Whether ``count`` more classes' backward passes on the forward pass of analysis ``key``
    cost at most ``BUDGET_SECONDS``, as timed on it."""
    # the time of this run is no clock: the browser draws the page on the same cores meanwhile
    kept = analyses.forward_pass(*key.seen)
    if kept.backward_seconds is None:  # (the analysis shown was found cached: time one)
        try:
            kept.grad_cam(analyses.library_target(key), key.method)
        except hookviz.HookvizError:
            return False
    return (kept.backward_seconds or 0.0) * count <= BUDGET_SECONDS


def send_ahead(
    analysis: hookviz.Analysis,
    key: AnalysisKey,
    texts: Callable[[hookviz.Analysis], tuple[str, str, list[str]]],
) -> None:
    """Compute and send the top-5 classes' overlay and heatmap (``pictures.class_spares``) for
    the forward pass and method of analysis ``key``, where their backward passes cost at most
    ``BUDGET_SECONDS`` together.

    Args:
        texts: the overlay's title, alt text and captions of an analysis (as the overlay
            shows them).
    """
    if key.method not in NEEDS_GRADIENT or not analysis.predictions:
        return
    targets = radio_targets(analysis.predictions)
    if not _affordable(key, len(targets) - 1):
        targets = []  # (an empty set: the browser forgets the last forward pass's)
    records: dict[str, dict] = {}
    keys: dict[str, AnalysisKey] = {}
    for option, target in enumerate(targets):
        spare = key.for_target(target)
        try:
            found = analyses.analysis(spare)  # (its indices: ``class_spares``)
        except hookviz.HookvizError:
            continue  # (a click then shows the error, from the server)
        title, alt, captions = texts(found)
        ready = not found.cam.blank
        records[str(option)] = {"title": title, "alt": alt, "captions": captions, "ready": ready}
        keys[str(option)] = spare
    pictures.class_spares(_context(key), records, keys)
