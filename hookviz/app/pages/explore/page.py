"""The Explore page: the original, the CAM overlay, the feature-map grid, the raw heatmap, the
top-5, the downloads and the reproducing snippet, with the display options in the sidebar.

Each picture a display option changes is a fragment, and every picture is cached as encoded
bytes keyed by what it depends on: a display change reruns only the fragments it feeds and
encodes only the picture that changed (``display.FEEDS``). What the class changes is in
fragments too, which a class picked in the sidebar reruns alone (``_now``). Everything is drawn
at display size; the full-resolution overlay and heatmap are built only when downloaded
(``exports``).
"""

from __future__ import annotations

import time

import streamlit as st

import hookviz
from hookviz.app import feedback
from hookviz.app.browser import pictures
from hookviz.app.caches import analyses, encoded
from hookviz.app.method_texts import METHOD_IDEAS, METHOD_LABELS, METHOD_NOTES, method_note
from hookviz.app.pages.explore import channel_overlay, display, exports, found, top_classes
from hookviz.app.sidebar import layer
from hookviz.app.sidebar import scene as scenes
from hookviz.app.sidebar.scene import Scene
from hookviz.app.texts import (
    CAM_HELP,
    CAM_SCORES,
    FEATURE_MAPS_HELP,
    GRAD_CAM_HELP,
    PREDICTIONS_HELP,
)
from hookviz.app.view import fragments, slow_runs, state
from hookviz.app.view.keys import CHANNELS_OPEN, AnalysisKey
from hookviz.app.view.literal import literal
from hookviz.core.features import WEIGHT_ORDERINGS, order_by_weight
from hookviz.core.methods import CLASSLESS

DARK_BACKGROUND = (14, 17, 23)  # Streamlit's dark theme, so the grid's gaps blend in


def page(scene: Scene) -> None:
    if scene.pending:
        _image_sources(scene)
        _slow_method_then_rerun(scene)
        return
    display.display_widgets(scene.analysis, disabled=False)
    results(scene, scene.analysis, scene.view.key, previous=False)


def _image_sources(scene: Scene) -> None:
    """The display-size images the overlays blend over, in the sidebar (nothing shows), sent
    after the results (0.5 MB for the sample: the browser shows the page's first paint before
    it takes them in)."""
    digests = [scene.view.digest] + ([scene.previous_key.digest] if scene.previous_key else [])
    with st.sidebar:
        pictures.image_sources(*digests)


def _now(scene: Scene, previous: bool) -> tuple[Scene, hookviz.Analysis, AnalysisKey]:
    """The scene, analysis and key a fragment of the results draws. A class picked in the
    sidebar reruns only the fragments the class changes (``class_change.rerun_scope``) with the
    last full run's scene, which ``scenes.for_fragment`` brings to the class wished now."""
    if previous:
        return scene, scene.previous, scene.previous_key
    now = scenes.for_fragment(scene)
    if now is None:  # a slow method to run: the full page's path shows its progress
        st.rerun()
    return now, now.analysis, now.view.key


def _slow_method_then_rerun(scene: Scene) -> None:
    """A long method (Score-CAM, SS-CAM, IS-CAM, Ablation-CAM: a forward pass per channel or
    per sample; any other estimated over ``slow_runs.ASK_OVER_SECONDS`` here) runs with the
    previous result on screen (marked as such), a progress bar and a Cancel button above it;
    when it is done the page reruns and shows it, with the run's real time (``slow_runs``).
    One estimated over ``slow_runs.ASK_OVER_SECONDS`` first says its estimate and waits for
    "Compute". Any control change also cancels a run (Streamlit stops the script at its next
    progress update; the lock and hooks are released on the way out)."""
    view = scene.view
    name = METHOD_LABELS[view.method]
    top = st.container()
    if scene.previous is not None:
        display.display_widgets(scene.previous, disabled=True)
        results(scene, scene.previous, scene.previous_key, previous=True)
    kept = analyses.forward_pass(view.digest, view.model, view.pretrained, view.layer)
    with feedback.working(f"Timing one batch of {name} for the estimate…"):
        cost = kept.method_cost(view.method)
    asking = slow_runs.must_ask(view.key, cost.seconds)
    earlier = scene.previous.cam.method if scene.previous is not None else "gradcam"
    # (back to a method that needs no request: one computed already, or Grad-CAM)
    if earlier in hookviz.SLOW_METHODS or earlier == view.method:
        earlier = "gradcam"
    with top:
        st.info(
            f"{name} runs {cost.describe()}: {method_note(view.method, scene.loaded.task)}. "
            "The layer has "
            f"{kept.features.num_channels} channels. "
            + (
                "The result below is the **previous** one until it is done."
                if scene.previous is not None
                else ""
            )
        )
        if asking:
            st.button(
                f"Compute {name} (about {slow_runs.duration(cost.seconds)})",
                key="compute_slow_method",
                type="primary",
                on_click=slow_runs.ask,
                args=(view.key,),
            )
            if earlier == view.method:
                return  # (Grad-CAM itself is long here: nothing cheaper to go back to)
            st.button(
                f"Back to {METHOD_LABELS[earlier].split(' (')[0]}",
                key="cancel_slow_method",
                on_click=state.choose,
                args=("method", earlier),
            )
            return
        st.button(
            f"Cancel {name}",
            key="cancel_slow_method",
            on_click=state.choose,
            args=("method", earlier),
        )
        bar = st.progress(0.0, text=f"{name}…")

    slow_runs.take_request()
    started = time.perf_counter()

    def progress(done: int, total: int) -> bool:
        elapsed = time.perf_counter() - started
        text = f"{name}: {done} of {total} steps · {slow_runs.duration(elapsed)}"
        if done:  # the estimate, refined from the steps done so far
            text += f", about {slow_runs.duration(elapsed / done * (total - done))} left"
        else:
            text += f" of about {slow_runs.duration(cost.seconds)}"
        bar.progress(min(1.0, done / total), text=text)
        return False

    try:
        made = kept.analysis(analyses.library_target(view.key), view.method, progress=progress)
    except hookviz.HookvizError as exc:
        feedback.error(f"{name} failed: {exc}")
        return
    slow_runs.record(view.key, made.seconds)
    st.rerun()


def results(scene: Scene, analysis: hookviz.Analysis, key: AnalysisKey, previous: bool) -> None:
    """Lay out the results of ``analysis`` (cached by ``key``): the current one, or with
    ``previous`` the one shown before, marked as such while a Score-CAM runs. What neither the
    class nor a display option changes is drawn once per full run (the original, the top-5,
    the texts); the rest is in fragments (module docstring)."""
    said = _zero_gradient_note(scene, analysis)
    if previous:
        st.caption(
            f"**Previous result** ({METHOD_LABELS[analysis.cam.method].split(' (')[0]} at "
            f"{analysis.cam.layer}), shown until "
            f"{METHOD_LABELS[scene.view.method]} is done."
        )
    top = st.columns([1, 1, 1.3], gap="medium")
    with top[0]:
        _original(scene, analysis)
    with top[1]:
        _overlay_panel(scene, previous, said)
        channels, height, width = analysis.features.activations.shape
        with st.expander("What am I looking at?"):
            method = analysis.cam.method
            st.markdown(f"**{METHOD_LABELS[method].split(' (')[0]}.** {METHOD_IDEAS[method]}")
            st.markdown(
                (GRAD_CAM_HELP if method == "gradcam" else CAM_HELP).format(
                    # (in a code span of HTML-enabled markdown: no backtick may end it)
                    layer=analysis.cam.layer.replace("`", "'"),
                    channels=channels,
                    height=height,
                    width=width,
                    subject=CAM_SCORES[scene.loaded.task][0],
                    score=CAM_SCORES[scene.loaded.task][1],
                ),
                unsafe_allow_html=True,
            )
    with top[2]:
        _grid_picture(scene, previous)
        with st.expander("What am I looking at?"):
            st.markdown(
                FEATURE_MAPS_HELP.format(
                    layer=analysis.cam.layer, shape=f"{channels}×{height}×{width}"
                )
            )
        # lazy: its chart and pictures are drawn only while it is open
        behind = st.expander("Channels behind the heatmap", key=CHANNELS_OPEN, on_change="rerun")
        if behind.open:
            with behind:
                _channel_weights(scene, previous)
                channel_overlay.panel(key, analysis, scene.view)
    bottom = st.columns([1, 1, 1.3], gap="medium")
    with bottom[0]:
        st.markdown("**Raw heatmap**")
        _heatmap_picture(scene, previous)
    with bottom[1]:
        if scene.loaded.scores_classes:
            _predictions(scene.loaded, analysis)
        else:
            found.summary(scene, analysis)
    _address(analysis)
    with bottom[2]:
        st.markdown("**Downloads**")
        # drawn once per full run: they read the class on screen when clicked
        exports.downloads(scene)
        _snippet(scene, previous)
        device = hookviz.core.devices.describe_device(scene.loaded.device)
        shared = (
            "the address holds this view and names the photo: whoever opens it on this "
            "server sees the same"
            if scene.view.image_name
            else "the address holds this view: copy it to share"
        )
        st.caption(f"Analysed on {device} · image {scene.view.digest[:8]} · {shared}")
        if not previous:
            _image_sources(scene)
            # last: the rest of the page is on screen while they are computed
            top_classes.send_ahead(analysis, key, lambda spare: overlay_texts(scene, spare))
    if not previous and scene.loaded.task in ("detection", "segmentation"):
        found.side_by_side(scene)
    elif not previous and scene.loaded.task == "embedding":
        found.reverse(scene)


# ---------------------------------------------------------------- panels


def _zero_gradient_note(scene: Scene, analysis: hookviz.Analysis) -> bool:
    """Say why a gradient CAM is blank where the class score does not depend on the layer
    (instead of showing a blank map without a word)."""
    info = layer.zero_gradient(scene.loaded, analysis.cam.layer, analysis.cam.method)
    if info is None:
        return False
    st.warning(
        f"The heatmap is blank by construction: {info.note}. Pick ★ "
        f"{hookviz.layer_table(scene.loaded).default} (the last block's first norm) or an "
        "earlier layer."
    )
    return True


def _swap(
    scene: Scene,
    analysis: hookviz.Analysis,
    key: AnalysisKey,
    previous: bool,
    *more,
    of_class: bool = True,
) -> pictures.Swap | None:
    """How a picture follows the layer box in the browser (``pictures.Swap``): its
    context is the analysis key without the layer (without the class and method too where
    the picture is not ``of_class``), with ``more``, what else the picture depends on. It is
    ready to be swapped for another layer's, or to stand in for one, unless a warning beside
    it names its layer or the panel of its channels is open; a previous result (shown while
    a Score-CAM runs) does not follow the box."""
    if previous or scene.layer_box is None:
        return None
    box, label = scene.layer_box
    picture_context = (key.digest, key.model, key.pretrained)
    if of_class:
        picture_context += (key.target, key.method)
    cam = analysis.cam
    noted = cam.blank or layer.zero_gradient(scene.loaded, cam.layer, cam.method) is not None
    return pictures.Swap(
        box=box,
        label=label,
        context=encoded.picture_id(("swap", *picture_context, *more)),
        ready=not noted and not st.session_state.get(CHANNELS_OPEN),
        elsewhere=(layer.LAYER_NOTE,),
    )


def _original(scene: Scene, analysis: hookviz.Analysis) -> None:
    st.markdown("**Original**")
    if scene.loaded.task in ("detection", "segmentation"):
        st.image(found.marked_original(scene), caption=found.original_caption(scene))
    else:
        st.image(encoded.display_jpeg(scene.view.digest))
    width, height = scene.original_size
    fed_h, fed_w = analysis.features.input_size
    prep = scene.loaded.preprocessing
    cost = prep.cost(width, height)
    squeeze = prep.squeeze(width, height)
    fed = (
        f"resized whole to the model's fixed {fed_w}×{fed_h} px input (no crop; the heatmap is "
        "mapped back onto the whole image)"
        if prep.fixed
        else f"fed to the model whole at {fed_w}×{fed_h} px (no crop)"
    )
    text = (
        f"{literal(scene.view.image_name or 'sample: Grace Hopper (matplotlib)')} · "
        f"{width}×{height} px "
        f"· {fed}"
    )
    if squeeze > 1.0:
        text += f", squeezed {squeeze:.1f}× along its length (longer than 8:1)"
    if cost >= 1.5:  # worth saying only for long images
        text += f" · {cost:.1f}× the pixels, so about {cost:.1f}× the time, of a square image"
    st.caption(text)


@st.fragment(key=fragments.OVERLAY)
@feedback.guarded
def _overlay_panel(scene: Scene, previous: bool, said: bool) -> None:
    """The CAM over the image, with what it is of (a class change reruns this alone)."""
    shown = state.on_screen()
    shown.pop("analysis", None)  # (no download of a class not on screen if this fails)
    with feedback.fragment_slot():
        scene, analysis, key = _now(scene, previous)
        shown["analysis"] = analysis
        # drawn in the browser, which follows the opacity and colormap widgets itself: their
        # changes rerun no picture here (``display.FEEDS``)
        options = display.display_options(analysis)
        title, alt, captions = overlay_texts(scene, analysis)
        # the texts that name the layer or the class are the picture's own: they change with it
        pictures.overlay(
            key,
            options["alpha"],
            options["cam_cmap"],
            title,
            alt,
            captions,
            _swap(scene, analysis, key, previous),
            None if previous else top_classes.follow(scene, analysis, key),
        )
        if analysis.cam.blank and not said:
            st.warning(
                "The heatmap is empty: no channel of this layer gives positive evidence for "
                "this class. Try a deeper layer or another class."
            )
    if not previous:
        scenes.remember_shown(scene)
        state.publish()


def overlay_texts(scene: Scene, analysis: hookviz.Analysis) -> tuple[str, str, list[str]]:
    """The overlay's title, alt text and captions (what it is of, at which layer, its time)."""
    cam = analysis.cam
    channels = analysis.features.num_channels
    name = METHOD_LABELS[cam.method].split(" (")[0]
    classless = cam.method in CLASSLESS
    subject = "most seen pattern" if classless else f"“{cam.class_name}”"
    if not classless and not scene.loaded.scores_classes:
        subject, details = found.subject(cam, scene.loaded)
        note = method_note(cam.method, scene.loaded.task)  # (a box's score is no class's)
        caption = f"{name} for {subject} at {cam.layer} · {details} · {note}"
    elif classless:
        caption = (
            f"{name} at {cam.layer} · no class: from the {channels} channels alone · "
            f"{METHOD_NOTES[cam.method]}"
        )
    else:
        caption = (
            f"{name} for “{cam.class_name}” at {cam.layer} · class {cam.class_index} · "
            f"p = {cam.probability:.1%} · logit {cam.score:.2f} · {METHOD_NOTES[cam.method]}"
        )
    device = hookviz.core.devices.describe_device(scene.loaded.device)
    seconds = _real_seconds(scene, analysis)
    if seconds is None:
        timing = f"Computed earlier on {device} (kept on the server: shown without running)"
    else:
        timing = f"Computed in {_seconds_text(seconds)} on {device}"
    captions = ["0 (no evidence) ← heatmap → 1 (strongest)", caption, timing]
    return f"{name}: {subject}", f"{name} heatmap over the image: {subject}", captions


def _real_seconds(scene: Scene, analysis: hookviz.Analysis) -> float | None:
    """How long ``analysis`` took to compute: a run on request as this session timed it (a slow
    method's is None when it ran before, elsewhere: shown again, its result costs nothing); any
    other method's own time (cheap: computed again when its cached result has gone)."""
    key = None
    if analysis is scene.analysis:
        key = scene.view.key
    elif analysis is scene.previous:
        key = scene.previous_key
    recorded = slow_runs.recorded(key) if key is not None else None
    if recorded is not None:  # (a run on request: its result is shown from the cache)
        return recorded
    return analysis.seconds if analysis.cam.method not in hookviz.SLOW_METHODS else None


def _seconds_text(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else slow_runs.duration(seconds)


@st.fragment(key=fragments.ADDRESS)
@feedback.guarded
def _address(analysis: hookviz.Analysis) -> None:
    """Draws nothing: the display changes no picture here reruns (opacity, heatmap colormap)
    rerun this, which records them as shown and keeps the address current."""
    display.display_options(analysis)
    state.publish()


@st.fragment(key=fragments.GRID)
@feedback.guarded
def _grid_picture(scene: Scene, previous: bool) -> None:
    """Laid out and coloured in the browser, which follows the "channels shown", channel-order,
    colour-scale and colormap widgets itself (``display.FEEDS``): it gets every grid they can
    ask for at once. (A class change, or an order by the class's channel weights, reruns it.)"""
    scene, analysis, key = _now(scene, previous)
    grid(scene, analysis, key, display.display_options(analysis), previous)
    state.publish()


def grid(
    scene: Scene,
    analysis: hookviz.Analysis,
    key: AnalysisKey,
    options: dict,
    previous: bool,
    on_present: bool = False,
) -> None:
    """The feature-map grid of ``analysis`` (on Present: it does not follow the layer box, and
    its caption is short)."""
    features = analysis.features
    channels, height, width = features.activations.shape
    dark = st.context.theme.type == "dark"
    background = DARK_BACKGROUND if dark else (255, 255, 255)
    orders = display.grid_orders(analysis, options)
    corner = "" if on_present else "; channel number in each corner"
    pictures.grid(
        key,
        orders,
        options,
        background,
        wished=int(state.wish("channels")),
        title=f"Feature maps of {features.layer}",
        caption=f"{{n}} of {channels} channels, {height}×{width} cells each{corner}",
        alt=f"feature maps of {features.layer}: {{n}} channels",
        # the feature maps are the class's only when ordered by its channel weights: a grid
        # seen under another class stands in for this one's
        swap=_swap(
            scene,
            analysis,
            key,
            previous or on_present,
            background,
            tuple(orders),
            of_class=any(name in WEIGHT_ORDERINGS for name in orders),
        ),
    )


@st.fragment(key=fragments.WEIGHTS)
@feedback.guarded
def _channel_weights(scene: Scene, previous: bool) -> None:
    """The CAM's channel weights as a chart (no display option changes it; the class does)."""
    _, analysis, _ = _now(scene, previous)
    cam, features = analysis.cam, analysis.features
    if cam.weights is None:
        st.caption(f"{cam.method} weighs each location separately: no single α per channel.")
        return
    # charts imports Altair and pandas (about 0.5 s on a cold start): only once this opens
    from hookviz.app import charts

    order, values = order_by_weight(features.activations, cam.weights, "weight", 20)
    # The chart is drawn in the browser after the rest: its room is kept from the start, so the
    # controls below do not jump down under the pointer when it appears.
    with st.container(height=charts.channel_weights_height(len(order)), border=False):
        st.altair_chart(charts.channel_weights(order, values), width="stretch")
    st.caption(
        f"The 20 channels with the largest |α| for “{cam.class_name}”. The heatmap is the ReLU "
        "of the sum of every channel's map times its α."
    )


@st.fragment(key=fragments.HEATMAP)
@feedback.guarded
def _heatmap_picture(scene: Scene, previous: bool) -> None:
    """The heatmap alone (a class change reruns this: it is the overlay's indices, sent with
    it, under the new analysis's id)."""
    scene, analysis, key = _now(scene, previous)
    cmap = display.display_options(analysis)["cam_cmap"]
    cam = analysis.cam
    height, width = cam.size
    caption = (
        f"{cam.cam.shape[0]}×{cam.cam.shape[1]} cells, upsampled bilinearly to {width}×{height} "
        "px (the download) and to the display size here; 0 (dark) to 1 (bright)"
    )
    pictures.heatmap(
        key,
        cmap,
        f"raw heatmap of {cam.layer}",
        [caption],
        _swap(scene, analysis, key, previous),
        None if previous else top_classes.follow(scene, analysis, key),
    )


@st.fragment(key=fragments.SNIPPET)
@feedback.guarded
def _snippet(scene: Scene, previous: bool) -> None:
    """The "Reproduce in Python" script, of the class shown (a class change reruns this only
    while it is open: closed, it is the same expander for every class)."""
    scene, analysis, _ = _now(scene, previous)
    exports.snippet(scene, analysis)


def _predictions(loaded: hookviz.LoadedModel, analysis: hookviz.Analysis) -> None:
    st.markdown("**Top-5 predictions**")
    # One bar per class, most probable first, on the full 0-100 % scale. Plain bars rather than
    # a chart: a Vega chart on the page is re-laid out on every update (about 30 ms of every
    # display change here), and it kept a class's old rank after a new image.
    for rank, p in enumerate(analysis.predictions, start=1):
        named = f"{rank}. {literal(p.name)} ({p.index}) · {p.probability:.1%}"
        st.progress(p.probability, text=named)
    with st.expander("What am I looking at?"):
        st.markdown(PREDICTIONS_HELP.format(classes=loaded.num_classes))
