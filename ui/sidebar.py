"""The shared sidebar (image, model, layer, class, method) and the scene it resolves: the one
analysis every page shows, computed before any page draws, so a page never shows a new photo
beside an old heatmap.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass

import streamlit as st
from PIL import Image

import hookviz
from hookviz.core.features import WEIGHT_ORDERINGS

from . import cached, feedback, image_input, model_picker, state
from .state import AUTO, View
from .texts import METHOD_LABELS

_LAST = "hookviz.last_shown"  # the View.key of the last analysis the page showed
# The fragments of Explore's results a class changes (the rest of the page does not depend on
# the class: the original, the top-5, the grid unless ordered by channel weight, the snippet
# while closed, the texts; the downloads read the class on screen when clicked).
CLASS_FRAGMENTS = ("overlay", "heatmap")
# The sidebar's two class widgets, each a fragment: a change in one redraws the other with the
# pictures (the one changed already shows the change)
CLASS_BOX, CLASS_TOP5 = "class_box", "class_top5"
LAYER_NOTE = "layer_note"  # the caption under the layer box (its type and shape)


def class_fragments() -> tuple[str, ...]:
    """The fragments a class change reruns on Explore, asked at the moment of the change (they
    depend on the grid's order and on whether the channel weights are open)."""
    scope = list(CLASS_FRAGMENTS)
    if state.wish("order") in WEIGHT_ORDERINGS:  # the grid's order and signs are the class's
        scope.append("grid")
    if st.session_state.get("channels_open"):
        scope.append("weights")
    if st.session_state.get("snippet_open"):  # (closed, it is the same for every class)
        scope.append("snippet")
    return tuple(scope)


@dataclass(frozen=True)
class Scene:
    """Everything the pages draw from, resolved by the sidebar.

    Attributes:
        view: the resolved choices.
        loaded: the model.
        image: the display-size image (every picture is drawn on its grid).
        original_size: (width, height) of the uploaded or sample image.
        analysis: the current analysis; None while a Score-CAM is still to run.
        previous: the analysis shown before (kept on screen while a Score-CAM runs), or None.
        previous_key: its cache key (``View.key``).
        kept: the forward pass at ``view.layer`` (a class change needs only a backward on it).
        layer_box: the layer box's widget key and its label of ``view.layer``: the browser
            draws the pictures of a layer it was sent before as soon as that box shows it
            (``browser.pictures``).
    """

    view: View
    loaded: hookviz.LoadedModel
    image: Image.Image
    original_size: tuple[int, int]
    analysis: hookviz.Analysis | None
    previous: hookviz.Analysis | None = None
    previous_key: tuple | None = None
    kept: hookviz.ForwardPass | None = None
    layer_box: tuple[str, str] | None = None

    @property
    def pending(self) -> bool:
        return self.analysis is None


# Each session runs its script on its own thread: the scene of the current run, for the page
# script to read.
_local = threading.local()


def current_scene() -> Scene:
    """The scene ``shared_sidebar`` resolved in this run."""
    return _local.scene


def shared_sidebar(results_fragment: bool = False) -> Scene:
    """Draw the shared sidebar and resolve the scene (stops the run with a message when the
    image or the model cannot be had; the view is kept for the next try).

    Args:
        results_fragment: the page draws the results a class changes as fragments
            (Explore, ``class_fragments``): a class change then reruns only those, which
            resolve the new class themselves (``with_wished_target``).
    """
    digest, name = image_input.image_section()
    model_name, pretrained = model_picker.model_section()
    loaded = model_picker.load(model_name, pretrained)
    original = cached.decoded_image(digest)
    input_size = loaded.preprocessing.input_size(original.width, original.height)
    # not with Score-CAM: its run draws a progress bar instead of the results fragments
    fragments = results_fragment and state.wish("method") != "scorecam"
    st.sidebar.header("3 · Layer")
    with st.sidebar:
        layer, layer_box = _layer_section(loaded, model_name, pretrained, input_size)
    kept = _forward(digest, model_name, pretrained, layer)
    target = _target_section(
        loaded,
        kept.predictions,
        _identity(digest, model_name, pretrained),
        class_fragments if fragments else (),
    )
    method = _method_section()
    view = View(digest, name, model_name, pretrained, layer, target, method)
    analysis = _analysis_now(kept, view)
    previous_key = st.session_state.get(_LAST) if analysis is None else None
    previous = _previous(previous_key, view)
    _local.scene = Scene(
        view,
        loaded,
        cached.display_image(digest),
        original.size,
        analysis,
        previous,
        previous_key if previous is not None else None,
        kept,
        layer_box,
    )
    return _local.scene


def _identity(digest: str, model: str, pretrained: bool) -> str:
    """The image and model the class widgets' keys follow (their labels follow this image's
    predictions)."""
    return f"{digest[:10]}:{model}:{pretrained}"


def class_widget_keys(view: View) -> tuple[str, str]:
    """The widget keys of the class box and of the top-5 radio for ``view``'s image and model
    (the pictures follow the radio in the browser, ``top_classes``)."""
    return _class_keys(_identity(view.digest, view.model, view.pretrained))


def _class_keys(identity: str) -> tuple[str, str]:
    return f"target@{identity}", f"target_top@{identity}"


def with_wished_target(scene: Scene) -> Scene | None:
    """The scene for the class the user chose last. On a full run that is ``scene`` itself (the
    sidebar resolved it); on a rerun of the class's fragments alone (a class picked in the
    sidebar), the same view with that class and its analysis (computed by the first of them).
    None when that class needs a Score-CAM run first (the full page's path shows its
    progress)."""
    wished = state.wish("target")
    target = None if wished == AUTO else wished
    view = scene.view
    if not (target is None or 0 <= target < scene.loaded.num_classes):
        return scene
    if target == view.target:
        # back at the full run's class (after another one in a fragment run): the address must
        # name this one again, not the one shown in between
        state.shown("target", wished)
        return scene
    chosen = dataclasses.replace(view, target=target)
    kept = scene.kept or _forward(view.digest, view.model, view.pretrained, view.layer)
    analysis = _analysis_now(kept, chosen)
    if analysis is None:
        return None
    state.shown("target", wished)
    _local.scene = dataclasses.replace(
        scene, view=chosen, analysis=analysis, previous=None, previous_key=None
    )
    return _local.scene


def _analysis_now(kept: hookviz.ForwardPass, view: View) -> hookviz.Analysis | None:
    """The analysis of ``view`` on its kept forward pass, or None while it is a Score-CAM still
    to run (the page shows its progress instead); an error stops the run with a message."""
    if view.method == "scorecam" and not kept.has_result(view.target, view.method):
        return None
    memo = _this_run()
    if ("analysis", view.key) in memo:
        return memo["analysis", view.key]
    # a CAM already computed on this forward pass is there at once: no indicator to show
    done = kept.has_result(view.target, view.method)
    try:
        with contextlib.nullcontext() if done else feedback.working("Computing the gradient…"):
            found = memo["analysis", view.key] = cached.analysis(*view.key)
    except hookviz.HookvizError as exc:
        feedback.error(f"Analysis failed: {exc}")
        state.stop()
    return found


def _this_run() -> dict:
    """What this run has looked up already (each run has a thread of its own): found again by
    another fragment of the run, it needs no indicator, which costs a message to the browser
    and a timer thread even when the value is cached."""
    memo = getattr(_local, "memo", None)
    if memo is None:
        memo = _local.memo = {}
    return memo


def remember_shown(scene: Scene) -> None:
    """Note the analysis now on screen (what a later Score-CAM run keeps showing)."""
    if scene.analysis is not None:
        st.session_state[_LAST] = scene.view.key


def _previous(last: tuple | None, view: View) -> hookviz.Analysis | None:
    if last is None or last == view.key:
        return None
    try:
        return cached.analysis(*last)
    except (hookviz.HookvizError, KeyError):  # its image may have left the store
        return None


# ---------------------------------------------------------------- layer


def _layer_section(
    loaded: hookviz.LoadedModel, name: str, pretrained: bool, input_size: tuple[int, int]
) -> tuple[str, tuple[str, str]]:
    """The layer box with what it picked, and the box's widget key and label of it. A pick
    reruns the whole page, not fragments: a layer change redraws most of it anyway, and a
    fragment run that computes a new layer's forward pass is long enough to be interrupted by
    the next control change, which left the last layer's slider beside the new layer's
    pictures (7 of 10 tries with a slider step 50-150 ms after the pick; none as a full run).
    (The browser shows the pictures of a layer it has seen at once, ``browser.pictures.Swap``.)"""
    table = hookviz.layer_table(loaded)
    every = bool(state.wish("all_modules"))
    layers = {layer.name: layer for layer in (table.hookable if every else table.distinct)}
    names = list(layers)
    shapes = cached.layer_shapes(name, pretrained, *input_size)
    wished = state.wish("layer")
    if wished is not None and wished not in layers:
        wished = table.canonical(wished)  # a name for the same tensor
    current = state.shown("layer", wished if wished in layers else table.default)

    def label(layer: str) -> str:
        # name and shape only: the sidebar is narrow (the type is in the caption below)
        channels, height, width = shapes.get(layer) or layers[layer].shape
        star = "  ★" if layer == table.default else ""
        blank = "  (no gradient)" if layers[layer].zero_gradient else ""
        return f"{layer} · {channels}×{height}×{width}{star}{blank}"

    height, width = input_size
    # the labels carry this image's shapes: a new input size needs a fresh widget
    key = f"layer@{height}x{width}:{every}"
    chosen = state.widget(
        "layer",
        st.selectbox,
        current,
        "Target layer",
        names,
        format_func=label,
        key=key,
        help="Modules whose output is a map of the image (a transformer's patch tokens count, "
        "as a grid), in execution order, with their output shape for this image (★ = the "
        "default: the last layer whose grid follows the image and reaches the class score; "
        "'no gradient': the class score does not depend on it). Deep layers: coarse maps of "
        "object parts; early layers: fine maps of edges and colours.",
    )
    # (keyed: the browser fades it while it shows another layer's pictures, ``browser.pictures``)
    st.container(key=LAYER_NOTE).caption(
        f"{layers[chosen].type_name} · output {'×'.join(map(str, shapes.get(chosen, ())))} for "
        "this image" + (" (the patch tokens, as a grid)" if loaded.tokens is not None else "")
    )
    if layers[chosen].note:
        st.warning(f"{layers[chosen].note}. Pick ★ {table.default} for a heatmap.")
    state.widget(
        "all_modules",
        st.toggle,
        every,
        f"Show every module ({len(table.hookable)} instead of {len(table.distinct)})",
        help="The short list leaves out Identity modules and containers that only pass on "
        "their last child's output (the same tensor under a second name).",
    )
    if table.excluded:
        with st.expander(f"{len(table.excluded)} modules can't be picked"):
            for layer in table.excluded:
                st.caption(layer.reason)
    return chosen, (key, label(chosen))


def _forward(digest: str, name: str, pretrained: bool, layer: str) -> hookviz.ForwardPass:
    memo, key = _this_run(), ("forward", digest, name, pretrained, layer)
    if key in memo:
        return memo[key]
    try:
        with feedback.working(f"Hooked forward pass of {name} at {layer}…"):
            found = memo[key] = cached.forward_pass(digest, name, pretrained, layer)
            return found
    except hookviz.HookvizError as exc:
        feedback.error(f"Analysis failed: {exc}")
        state.stop()


# ---------------------------------------------------------------- class and method


def _target_section(
    loaded: hookviz.LoadedModel,
    predictions: tuple[hookviz.Prediction, ...],
    identity: str,
    rerun: Callable[[], tuple[str, ...]] | tuple[str, ...],
) -> int | None:
    """The class: a box with every class, and this image's top-5 as one-click choices. Both show
    the one wish; a change in either redraws the other with the pictures the class changes
    (``rerun``); without those (another page, a Score-CAM run) the whole page reruns.

    Args:
        identity: the image and model: the widgets' keys follow it, since their labels follow
            this image's predictions (the browser would keep the old label of an unchanged
            choice, "Top prediction: <the previous image's class>", under the same key).
    """
    st.sidebar.header("4 · Target class")
    top = {p.index: p for p in predictions}
    rest = sorted((i for i in range(loaded.num_classes) if i not in top), key=loaded.class_name)
    label = _class_labeller(loaded, predictions)

    def scope(other: str) -> Callable[[], tuple[str, ...]]:
        def fragments() -> tuple[str, ...]:
            pictures = tuple(rerun() if callable(rerun) else rerun)
            return (*pictures, other) if pictures else (state.WHOLE_PAGE,)

        return fragments

    options = [AUTO, *top, *rest]
    valid = state.options_valid(options)  # (both widgets resolve the wish alike)
    with st.sidebar:
        target = _class_box(options, valid, label, identity, scope(CLASS_TOP5))
        # Top-1 follows each image, so it is the automatic choice
        quick = [AUTO, *list(top)[1:]]
        _class_top5(quick, valid, label, identity, scope(CLASS_BOX))
    return None if target == AUTO else int(target)


def _class_labeller(
    loaded: hookviz.LoadedModel, predictions: tuple[hookviz.Prediction, ...]
) -> Callable[[int], str]:
    """The class widgets' label of each option (``AUTO`` or a class index) for this image's
    predictions: "Top-1: <name> (p)", "#<rank> <name> (p)" for the top-5, the name for the rest."""
    top = {p.index: p for p in predictions}
    ranks = {index: rank for rank, index in enumerate(top, start=1)}

    def label(index: int) -> str:
        if index == AUTO:
            best = predictions[0]
            return f"Top-1: {best.name} ({best.probability:.1%})"
        if index in top:
            return f"#{ranks[index]} {loaded.class_name(index)} ({top[index].probability:.1%})"
        return loaded.class_name(index)

    return label


@st.fragment(key=CLASS_BOX)
def _class_box(
    options: list[int],
    valid: Callable[[int], bool],
    label: Callable[[int], str],
    identity: str,
    scope: Callable[[], tuple[str, ...]],
) -> int:
    """Every class, searchable; the choice shown is the wish (a class picked in the top-5
    reruns this)."""
    return state.widget(
        "target",
        st.selectbox,
        state.resolve("target", valid, AUTO),
        "Explain the class",
        options,
        format_func=label,
        key=_class_keys(identity)[0],
        rerun=scope,
        help="By default the top prediction of each image; then the top-5; type to search all "
        "classes.",
    )


@st.fragment(key=CLASS_TOP5)
def _class_top5(
    quick: list[int],
    valid: Callable[[int], bool],
    label: Callable[[int], str],
    identity: str,
    scope: Callable[[], tuple[str, ...]],
) -> None:
    """This image's top-5 as radio buttons: one click (a box of 1,000 options takes 30-40 ms
    in the browser just to close and send), and the ranking in view. The wish is lit, or no
    button for another class (a class picked in the box reruns this)."""
    target = state.wish("target")
    target = target if valid(target) else AUTO  # as the box resolves it
    state.widget(
        "target",
        st.radio,
        target if target in quick else None,
        "This image's top 5",
        quick,
        format_func=label,
        key=_class_keys(identity)[1],
        rerun=scope,
        second=True,
        help="One click explains one of the model's five most probable classes for this image.",
    )


def _method_section() -> str:
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
