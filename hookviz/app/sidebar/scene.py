"""The scene: what every page draws from, resolved by the shared sidebar before any page draws
(so a page never shows a new photo beside an old heatmap). The sidebar's widgets are in their
own modules (``image_input``, ``model_picker``, ``layer``, ``classes`` or ``explain``,
``method``); this one
puts their choices together, computes the analysis they ask for, and hands the scene to the
page drawn in the same run (``current``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import streamlit as st
from PIL import Image

import hookviz
from hookviz.app import feedback, memory_budget
from hookviz.app.caches import analyses, images, models
from hookviz.app.sidebar import classes, explain, image_input, layer, method, model_picker
from hookviz.app.view import slow_runs, state
from hookviz.app.view.keys import AnalysisKey, SeenKey, View
from hookviz.app.view.target import ViewTarget, within

_LAST = "hookviz.last_shown"  # the View.key of the last analysis the page showed


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
        previous_key: its cache key.
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
    previous_key: AnalysisKey | None = None
    kept: hookviz.ForwardPass | None = None
    layer_box: tuple[str, str] | None = None

    @property
    def pending(self) -> bool:
        return self.analysis is None


# Each run of a session's script (a full run, or a fragment's) runs on a thread of its own:
# what this run resolved, for the page drawn in the same run to read (``current``), and what it
# has looked up already (``_once``). A full run starts both afresh (``_start_run``).
_local = threading.local()


def current() -> Scene:
    """The scene ``shared_sidebar`` resolved in this run."""
    return _local.scene


def _start_run() -> None:
    _local.scene = None
    _local.memo = {}


def shared_sidebar(results_fragment: bool = False) -> Scene:
    """Draw the shared sidebar and resolve the scene (stops the run with a message when the
    image or the model cannot be had; the view is kept for the next try).

    Args:
        results_fragment: the page draws the results a class changes as fragments
            (Explore): a class change then reruns only those (``class_change.rerun_scope``),
            which draw from this run's scene with the new class (``for_fragment``).
    """
    _start_run()
    digest, name = image_input.image_section()
    image_input.say_what_the_address_holds(digest, name)
    model_name, pretrained = model_picker.model_section()
    loaded = model_picker.load(model_name, pretrained)
    try:
        images.decoded_image(digest)  # (what the model is fed is made from this)
    except memory_budget.ServerBusy as exc:
        feedback.error(str(exc))
        state.stop()
    input_size = loaded.preprocessing.input_size(*images.image_size(digest))
    # not with a slow method: its run draws a progress bar instead of the results fragments
    results_in_fragments = results_fragment and state.wish("method") not in hookviz.SLOW_METHODS
    st.sidebar.header("3 · Layer")
    with st.sidebar:
        chosen_layer, layer_box = layer.layer_section(loaded, model_name, pretrained, input_size)
    kept = _forward(digest, model_name, pretrained, chosen_layer)
    if loaded.scores_classes:
        target = classes.target_section(
            loaded,
            kept.predictions,
            classes.widget_keys(digest, model_name, pretrained),
            results_in_fragments,
        )
    else:
        target = explain.explain_section(
            loaded, SeenKey(digest, model_name, pretrained, chosen_layer)
        )
    chosen_method = method.method_section(kept)
    if loaded.task == "embedding" and target.is_top1:
        st.info(
            f"{model_name.removeprefix(models.EMBEDDER)} as an embedder compares images: upload "
            "a reference image in the sidebar (4 · Compare with an image) to see what makes "
            "the two alike."
        )
        state.stop()
    view = View(digest, name, model_name, pretrained, chosen_layer, target, chosen_method)
    analysis = _analysis_now(kept, view)
    previous_key = st.session_state.get(_LAST) if analysis is None else None
    previous = _previous(previous_key, view)
    _local.scene = Scene(
        view,
        loaded,
        images.display_image(digest),
        images.image_size(digest),
        analysis,
        previous,
        previous_key if previous is not None else None,
        kept,
        layer_box,
    )
    return _local.scene


def for_fragment(last_full_run: Scene) -> Scene | None:
    """The scene a fragment of the results draws from, made from the last full run's.

    Streamlit reruns a fragment alone with the arguments the last full run gave it, so a
    fragment holds ``last_full_run``, that run's scene. Drawing from it is right because a
    change of image, model, weights, layer or method reruns the whole page (decision 0014;
    fragments run alone after a class, a display option, or a widget of their own), so its
    image, model, layer, method, kept forward pass and layer box are current; the display
    options are read from the wishes.
    What is stale in it is the class: its view's target, its analysis and the previous result
    (the one shown while a slow method ran) are the full run's. A class changed since then
    (``class_change.rerun_scope``) is swapped in here.

    Returns:
        ``last_full_run`` itself on a full run or while the class is the full run's; else the
        same scene with the class wished now and its analysis on the kept forward pass (the
        first fragment to ask computes it, the others find it: ``_once``), which ``current``
        then returns too. None when that class needs a slow method's run first (the full
        page's path shows its progress).
    """
    scene = last_full_run
    target = state.wish("target")
    view = scene.view
    loaded = scene.loaded
    if not loaded.scores_classes:
        return scene  # (a box, region or reference is picked by a whole run: the sidebar's)
    if not isinstance(target, ViewTarget) or not within(target, loaded.num_classes, loaded.task):
        return scene
    if target == view.target:
        # back at the full run's class (after another one in a fragment run): the address must
        # name this one again, not the one shown in between
        state.shown("target", target)
        return scene
    chosen = dataclasses.replace(view, target=target)
    kept = scene.kept or _forward(view.digest, view.model, view.pretrained, view.layer)
    analysis = _analysis_now(kept, chosen)
    if analysis is None:
        return None
    state.shown("target", target)
    _local.scene = dataclasses.replace(
        scene, view=chosen, analysis=analysis, previous=None, previous_key=None
    )
    return _local.scene


def _analysis_now(kept: hookviz.ForwardPass, view: View) -> hookviz.Analysis | None:
    """The analysis of ``view`` on its kept forward pass, or None while it is a long method
    still to run (``slow_runs.runs_on_request``: the page says its estimate, then shows its
    progress instead); an error stops the run with a message."""
    done = kept.has_result(analyses.library_target(view.key), view.method)
    if not done and slow_runs.runs_on_request(kept, view.method):
        return None
    # a CAM already computed on this forward pass is there at once: no indicator to show
    working = None if done else lambda: ("Computing the gradient…", kept.loaded.lock)
    return _once(("analysis", view.key), lambda: analyses.analysis(view.key), working)


def _forward(digest: str, name: str, pretrained: bool, layer: str) -> hookviz.ForwardPass:
    return _once(
        ("forward", digest, name, pretrained, layer),
        lambda: analyses.forward_pass(digest, name, pretrained, layer),
        lambda: (f"Hooked forward pass of {name} at {layer}…", models.model(name, pretrained).lock),
    )


def _once(
    key: tuple, compute: Callable[[], Any], working: Callable[[], tuple[str, Any]] | None
) -> Any:
    """``compute()``, looked up once per run: found again by another fragment of the run, it
    needs no indicator, which costs a message to the browser and a timer thread even when the
    value is cached. (A full run empties the memo, ``_start_run``; each entry is keyed by all it
    depends on, so one left by an earlier run of the same thread is still right.) ``working``
    gives the indicator's text and the model's lock, whose queue the indicator follows (other
    sessions' analyses are served first come, first served). An error stops the run with a
    message."""
    memo = vars(_local).setdefault("memo", {})  # (this thread's: a fragment's run may be new)
    if key not in memo:
        try:
            # (the indicator's text is worked out only when the value is: it asks the model
            # how busy it is)
            with feedback.working(*working()) if working else contextlib.nullcontext():
                memo[key] = compute()
        except memory_budget.ServerBusy as exc:
            feedback.error(str(exc))
            state.stop()
        except hookviz.HookvizError as exc:
            feedback.error(f"Analysis failed: {exc}")
            state.stop()
    return memo[key]


def remember_shown(scene: Scene) -> None:
    """Note the analysis now on screen (what a later Score-CAM run keeps showing)."""
    if scene.analysis is not None:
        st.session_state[_LAST] = scene.view.key


def _previous(last: AnalysisKey | None, view: View) -> hookviz.Analysis | None:
    """The result a long run keeps on screen: the last one shown, if it is of the same model
    and weights (it is drawn with the model now loaded: another one's task, layers and classes
    would be named wrong, and a classifier's class is no detector's box)."""
    if last is None or last == view.key:
        return None
    if (last.model, last.pretrained) != (view.model, view.pretrained):
        return None
    try:
        return analyses.analysis(last)
    except (hookviz.HookvizError, KeyError):  # its image may have left the store
        return None
