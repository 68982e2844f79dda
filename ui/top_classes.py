"""The top-5 classes' pictures, sent ahead: a click on the sidebar's top-5 shows that class's
overlay and heatmap at once, drawn by the browser, while the server's run (which follows, and
keeps the class box, the address and the downloads current) is still on its way.

And the classes the class box lists as the user searches it: once the matches of what was typed
fit in the open list (or an option is pointed at, or reached with the arrow keys), the browser
asks for them (``asked``, a fragment of its own: its run draws nothing else) and a pick among
them is drawn at once too.

A class change is otherwise a server run: a backward pass, new pictures, and two script runs
(the widget's, preempted by the rerun of the pictures it asks for), then the browser's
re-render, three to four times a minimal Streamlit page's reaction. With a forward pass kept, each
of the other four classes costs a backward pass from the class score down to the layer and its
heatmap's colormap indices at display size: about 3-10 ms each at a model's default layer,
computed after the rest of the page. Where the backward passes would cost more than
``BUDGET_SECONDS`` (an early layer of a large model), none are sent ahead and a click waits
for the server, as before.
"""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st

import hookviz
from hookviz.core.features import WEIGHT_ORDERINGS

from . import cached, feedback, heat_picture, sidebar
from .sidebar import Scene
from .state import AUTO

# The methods whose CAM depends on the class and costs one backward pass (Score-CAM takes a
# forward pass per channel; Eigen-CAM has no class)
FOLLOWING_METHODS = ("gradcam", "gradcam++", "xgradcam", "layercam", "hirescam")
# The most the other four classes' backward passes may cost together (on this machine 3-40 ms
# at a model's default layer; at an early layer of a large model they are not sent ahead)
BUDGET_SECONDS = 0.3
# The most classes one question from the class box asks for (about as many as its open list
# shows)
MOST_ASKED = 8
ASKED = "class_box_asked"  # the fragment that answers them


def radio_targets(predictions: tuple[hookviz.Prediction, ...]) -> list[int | None]:
    """The classes of the top-5 radio's options, in its order: the top-1 (the automatic
    choice, None), then #2 to #5."""
    return [None, *(p.index for p in predictions[1:])]


def _context(key: tuple) -> str:
    """The forward pass and method of analysis ``key`` (everything but the class), as an id."""
    return cached.picture_id(("classes", *key[:4], key[5]))


def follow(scene: Scene, analysis: hookviz.Analysis, key: tuple) -> heat_picture.ClassFollow | None:
    """How the overlay and the heatmap of analysis ``key`` follow the top-5 radio and the class
    box in the browser; None for a method outside ``FOLLOWING_METHODS``."""
    if key[5] not in FOLLOWING_METHODS:
        return None
    targets = radio_targets(analysis.predictions)
    box, radio = sidebar.class_widget_keys(scene.view)
    label = sidebar.class_labeller(scene.loaded, analysis.predictions)
    return heat_picture.ClassFollow(
        radio=radio,
        context=_context(key),
        option=str(targets.index(key[4])) if key[4] in targets else None,
        label=label(AUTO if key[4] is None else key[4]),
        # a blank heatmap has a warning under it, which names this class
        ready=not analysis.cam.blank and not st.session_state.get("channels_open"),
        box=box,
        unless_orders=tuple(WEIGHT_ORDERINGS),
    )


def _affordable(key: tuple, count: int) -> bool:
    """Whether ``count`` more classes' backward passes on the forward pass of analysis ``key``
    cost at most ``BUDGET_SECONDS``, as timed on it."""
    # the time of this run is no clock: the browser draws the page on the same cores meanwhile
    kept = cached.forward_pass(*key[:4])
    if kept.backward_seconds is None:  # (the analysis shown was found cached: time one)
        try:
            kept.grad_cam(key[4], key[5])
        except hookviz.HookvizError:
            return False
    return (kept.backward_seconds or 0.0) * count <= BUDGET_SECONDS


def _spares(
    key: tuple,
    targets: dict[str, int | None],
    labels: Callable[[int], str],
    texts: Callable[[hookviz.Analysis], tuple[str, str, list[str]]],
) -> tuple[dict[str, dict], dict[str, tuple]]:
    """The records of the classes ``targets`` (name -> class) on the forward pass and method of
    analysis ``key``, as ``heat_picture.class_spares`` takes them: each with the overlay's
    texts, its label in the class box, and whether it is ``ready``; and their analyses' keys."""
    records: dict[str, dict] = {}
    keys: dict[str, tuple] = {}
    for name, target in targets.items():
        spare = (*key[:4], target, key[5])
        try:
            found = cached.analysis(*spare)  # (its indices: ``class_spares``)
        except hookviz.HookvizError:
            continue  # (a click then shows the error, from the server)
        title, alt, captions = texts(found)
        records[name] = {
            "title": title,
            "alt": alt,
            "captions": captions,
            "label": labels(AUTO if target is None else target),
            "ready": not found.cam.blank,
        }
        keys[name] = spare
    return records, keys


def send_ahead(
    scene: Scene,
    analysis: hookviz.Analysis,
    key: tuple,
    texts: Callable[[hookviz.Analysis], tuple[str, str, list[str]]],
) -> None:
    """Compute and send the top-5 classes' overlay and heatmap (``heat_picture.class_spares``)
    for the forward pass and method of analysis ``key``, where their backward passes cost at
    most ``BUDGET_SECONDS`` together; and draw the fragment that answers the class box's
    questions (``asked``).

    Args:
        texts: the overlay's title, alt text and captions of an analysis (as the overlay
            shows them).
    """
    if key[5] not in FOLLOWING_METHODS:
        return
    targets = radio_targets(analysis.predictions)
    if not _affordable(key, len(targets) - 1):
        targets = []  # (an empty set: the browser forgets the last forward pass's)
    labels = sidebar.class_labeller(scene.loaded, analysis.predictions)
    records, keys = _spares(key, {str(i): t for i, t in enumerate(targets)}, labels, texts)
    for option, record in records.items():
        record["option"] = option  # (the radio's)
    heat_picture.class_spares(_context(key), records, keys)
    box, _ = sidebar.class_widget_keys(scene.view)
    asked(key, box, scene.loaded, analysis.predictions, texts)


@st.fragment(key=ASKED)
@feedback.guarded
def asked(
    key: tuple,
    box: str,
    loaded: hookviz.LoadedModel,
    predictions: tuple[hookviz.Prediction, ...],
    texts: Callable[[hookviz.Analysis], tuple[str, str, list[str]]],
) -> None:
    """The classes the class box lists as the user searches it, sent for the browser to draw
    the moment one is picked: the browser asks for the labels it lists (``heat_picture.ask``),
    which reruns this fragment alone, and the answer goes in a hidden element of its own. A
    label two classes share (a checkpoint's class names may repeat) is not answered: a pick of
    one waits for the server."""
    context = _context(key)
    question = heat_picture.ask(box, context, MOST_ASKED)
    # (none asked in this run, or asked of another forward pass's pictures: nothing to answer)
    wanted = question["labels"][:MOST_ASKED] if question and question["context"] == context else []
    # the box's plain names, as the browser reads them (runs of spaces folded): the classes
    # outside the top-5 (whose labels carry their rank)
    top = {p.index for p in predictions}
    by_label: dict[str, list[int]] = {}
    for index in range(loaded.num_classes):
        if index not in top:
            by_label.setdefault(" ".join(loaded.class_name(index).split()), []).append(index)
    targets = {label: by_label[label][0] for label in wanted if len(by_label.get(label, ())) == 1}
    if not _affordable(key, len(targets)):
        targets = {}
    labels = sidebar.class_labeller(loaded, predictions)
    records, keys = _spares(key, targets, labels, texts)
    heat_picture.class_spares(context, records, keys, element=heat_picture.ASKED_SPARES)
