"""The Explore page: the original, the CAM overlay, the feature-map grid, the raw heatmap, the
top-5, downloads and the reproducing snippet, with the display options in the sidebar.

The pictures and their display options are one fragment: changing an option reruns only the
fragment, and every picture is cached as encoded bytes by what it depends on, so only the
picture that changed is drawn again (the rest are the same bytes, which the browser does not
fetch again). Everything is drawn at display size; the full-resolution overlay and heatmap are
built only when downloaded.
"""

from __future__ import annotations

from collections.abc import Mapping

import streamlit as st

import hookviz
from hookviz import render
from hookviz.core.features import ORDERINGS, WEIGHT_ORDERINGS, order_by_weight
from hookviz.snippet import View as SnippetView
from hookviz.snippet import reproduce_snippet

from . import cached, charts, feedback, state
from .sidebar import Scene
from .texts import (
    FEATURE_MAPS_HELP,
    GRAD_CAM_HELP,
    METHOD_LABELS,
    METHOD_NOTES,
    ORDER_LABELS,
    PREDICTIONS_HELP,
)

MAX_GRID_CHANNELS = 256
DARK_BACKGROUND = (14, 17, 23)  # Streamlit's dark theme, so the grid's gaps blend in


def page(scene: Scene) -> None:
    if scene.pending:
        _scorecam_then_rerun(scene)
        return
    results(scene, scene.analysis, scene.view.key, previous=False)


def _scorecam_then_rerun(scene: Scene) -> None:
    """Score-CAM takes one forward pass per channel: the previous result stays on screen
    (marked as such) with a progress bar and a Cancel button above it while it runs; when it is
    done the page reruns and shows it. Any control change also cancels it (Streamlit stops the
    script at its next progress update; the lock and hooks are released on the way out)."""
    view = scene.view
    top = st.container()
    if scene.previous is not None:
        results(scene, scene.previous, scene.previous_key, previous=True)
    kept = cached.forward_pass(view.digest, view.model, view.pretrained, view.layer)
    passes, seconds = kept.scorecam_cost()
    with top:
        earlier = scene.previous.cam.method if scene.previous is not None else "gradcam"
        st.info(
            f"Score-CAM masks the image with each of the layer's "
            f"{kept.features.num_channels} channels: {passes} batched forward passes, about "
            f"{seconds:.0f} s here. "
            + (
                "The result below is the **previous** one until it is done."
                if scene.previous is not None
                else ""
            )
        )
        st.button(
            "Cancel Score-CAM",
            key="cancel_scorecam",
            on_click=state.choose,
            args=("method", earlier if earlier != "scorecam" else "gradcam"),
        )
        bar = st.progress(0.0, text="Score-CAM…")

    def progress(done: int, total: int) -> bool:
        bar.progress(done / total, text=f"Score-CAM: {done} of {total} channels")
        return False

    try:
        kept.analysis(view.target, "scorecam", progress=progress)
    except hookviz.HookvizError as exc:
        feedback.error(f"Score-CAM failed: {exc}")
        return
    st.rerun()


def results(scene: Scene, analysis: hookviz.Analysis, key: tuple, previous: bool) -> None:
    """Lay out the page. The parts no display option changes are drawn once per full run
    (original, predictions, channel weights); each picture a display option changes is its own
    fragment, and each display widget reruns only the fragments it feeds.

    Args:
        scene: what the sidebar resolved.
        analysis: the analysis to draw (the current one, or the previous one while a Score-CAM
            runs).
        key: its cache key (``View.key``).
        previous: draw it marked as the previous result, its options disabled.
    """
    _display_widgets(analysis, disabled=previous)
    if previous:
        st.caption(
            f"**Previous result** ({METHOD_LABELS[analysis.cam.method].split(' (')[0]} at "
            f"{analysis.cam.layer}), shown until Score-CAM is done."
        )
    top = st.columns([1, 1, 1.3], gap="medium")
    with top[0]:
        _original(scene, analysis)
    with top[1]:
        _overlay_panel(key, analysis)
    with top[2]:
        _grid_panel(key, analysis)
        # lazy: its chart and pictures are drawn only while it is open
        behind = st.expander("Channels behind the heatmap", key="channels_open", on_change="rerun")
        if behind.open:
            with behind:
                _channel_weights(analysis)
                _channel_overlay(key, analysis)
    bottom = st.columns([1, 1, 1.3], gap="medium")
    with bottom[0]:
        _heatmap_panel(key, analysis)
    with bottom[1]:
        _predictions(scene.loaded, analysis)
    with bottom[2]:
        st.markdown("**Downloads**")
        _downloads(scene, key, analysis)
        _snippet(scene, analysis)
        device = hookviz.core.devices.describe_device(scene.loaded.device)
        st.caption(
            f"Last analysis: {analysis.seconds * 1000:.0f} ms on {device} · image "
            f"{scene.view.digest[:8]} · the address holds this view: copy it to share"
        )


# ---------------------------------------------------------------- display options

# Which fragments each display option feeds: a change reruns those and nothing else.
# (Each fragment's text and help that no option changes stay outside it, drawn once.)
# The downloads are not among them: they read the options when clicked.
FEEDS = {
    "channels": ("grid", "snippet"),
    "order": ("grid", "snippet"),
    "scale": ("grid", "snippet"),
    "grid_cmap": ("grid", "channel", "snippet"),
    "cam_cmap": ("overlay", "heatmap", "snippet"),
    "alpha": ("overlay", "channel", "snippet"),
}


DISPLAY_FIELDS = ("channels", "order", "scale", "grid_cmap", "cam_cmap", "alpha")


def resolve_display(wishes: Mapping, analysis: hookviz.Analysis) -> dict:
    """The display options for ``analysis`` from the user's wishes, checked against this layer
    (how many channels it has, whether its CAM has channel weights). Pure (no Streamlit): the
    deferred downloads call it at click time, on another thread."""

    def wish(name: str):
        return wishes.get(name, state.FIELDS[name].default)

    def pick(name: str, allowed, fallback):
        value = wish(name)
        return value if value in allowed else fallback

    most = min(analysis.features.num_channels, MAX_GRID_CHANNELS)
    orderings = list(ORDERINGS)
    if analysis.cam.weights is not None:
        orderings += list(WEIGHT_ORDERINGS)
    return {
        "channels": int(min(max(wish("channels"), 1), most)),
        "order": pick("order", orderings, "mean"),
        "scale": pick("scale", render.SCALES, "channel"),
        "grid_cmap": pick("grid_cmap", render.COLORMAPS, "viridis"),
        "cam_cmap": pick("cam_cmap", render.COLORMAPS, "inferno"),
        "alpha": float(min(max(wish("alpha"), 0.0), 1.0)),
        "orderings": orderings,
        "most": most,
    }


def display_options(analysis: hookviz.Analysis) -> dict:
    """``resolve_display`` of the view's wishes, recorded as what the page shows (the URL)."""
    options = resolve_display(state.wishes(), analysis)
    for name in DISPLAY_FIELDS:
        state.shown(name, options[name])
    return options


def _display_widgets(analysis: hookviz.Analysis, disabled: bool) -> None:
    """The display widgets, in the sidebar under the shared sections."""
    options = display_options(analysis)
    sidebar = st.sidebar
    sidebar.header("Display")
    count, most = analysis.features.num_channels, options["most"]

    channel_on = state.wish("channel_overlay") != state.AUTO and st.session_state.get(
        "channels_open"
    )

    def draw(name: str, widget, *args, **kwargs) -> None:
        # the single-channel picture only when it is shown
        feeds = [f for f in FEEDS[name] if f != "channel" or channel_on]
        state.widget(name, widget, options[name], *args, rerun=feeds, disabled=disabled, **kwargs)

    if most > 1:
        draw(
            "channels",
            sidebar.slider,
            "Channels shown",
            1,
            most,
            help=f"This layer has {count} channels; up to {most} can be shown.",
        )
    draw(
        "order",
        sidebar.radio,
        "Channel order",
        options["orderings"],
        horizontal=True,
        format_func=ORDER_LABELS.get,
        help="By activation, by channel number, or by the CAM's channel weight α (how much the "
        "channel counts for the class; + for, − against) or α × mean activation.",
    )
    draw(
        "scale",
        sidebar.radio,
        "Colour scale",
        render.SCALES,
        horizontal=True,
        format_func={"channel": "per channel", "shared": "shared"}.get,
        help="Per channel shows each map's pattern; shared shows which channels are strong.",
    )
    draw("grid_cmap", sidebar.selectbox, "Feature-map colormap", render.COLORMAPS)
    draw("cam_cmap", sidebar.selectbox, "Heatmap colormap", render.COLORMAPS)
    draw("alpha", sidebar.slider, "Heatmap opacity", 0.0, 1.0, step=0.05)


# ---------------------------------------------------------------- panels


def _original(scene: Scene, analysis: hookviz.Analysis) -> None:
    st.markdown("**Original**")
    st.image(cached.display_jpeg(scene.view.digest))
    width, height = scene.original_size
    fed_h, fed_w = analysis.features.input_size
    prep = scene.loaded.preprocessing
    cost = prep.cost(width, height)
    squeeze = prep.squeeze(width, height)
    text = (
        f"{scene.view.image_name or 'sample: Grace Hopper (matplotlib)'} · {width}×{height} px "
        f"· fed to the model whole at {fed_w}×{fed_h} px (no crop)"
    )
    if squeeze > 1.0:
        text += f", squeezed {squeeze:.1f}× along its length (longer than 8:1)"
    if cost > 1.05:
        text += f" · {cost:.1f}× the pixels, so about {cost:.1f}× the time, of a square image"
    st.caption(text)


def _overlay_panel(key: tuple, analysis: hookviz.Analysis) -> None:
    cam = analysis.cam
    channels, height, width = analysis.features.activations.shape
    name = METHOD_LABELS[cam.method].split(" (")[0]
    classless = cam.method == "eigencam"
    subject = "most seen pattern" if classless else f"“{cam.class_name}”"
    st.markdown(f"**{name}: {subject}**")
    _overlay_picture(key, analysis)
    st.caption("0 (no evidence) ← heatmap → 1 (strongest)")
    if classless:
        caption = (
            f"{name} at {cam.layer} · no class: the first principal component of the "
            f"{channels} channels · {METHOD_NOTES[cam.method]}"
        )
    else:
        caption = (
            f"{name} for “{cam.class_name}” at {cam.layer} · class {cam.class_index} · "
            f"p = {cam.probability:.1%} · logit {cam.score:.2f} · {METHOD_NOTES[cam.method]}"
        )
    st.caption(caption)
    if cam.blank:
        st.warning(
            "The heatmap is empty: no channel of this layer gives positive evidence for this "
            "class. Try a deeper layer or another class."
        )
    with st.expander("What am I looking at?"):
        st.markdown(
            GRAD_CAM_HELP.format(layer=cam.layer, channels=channels, height=height, width=width),
            unsafe_allow_html=True,
        )


@st.fragment(key="overlay")
@feedback.guarded
def _overlay_picture(key: tuple, analysis: hookviz.Analysis) -> None:
    options = display_options(analysis)
    st.image(cached.overlay_jpeg(key, options["alpha"], options["cam_cmap"]))
    st.image(cached.colorbar_png(options["cam_cmap"]), width="stretch")
    state.publish()  # a display change reruns only fragments: each keeps the address current


def _grid_channels(analysis: hookviz.Analysis, options: dict):
    features, weights = analysis.features, analysis.cam.weights
    if options["order"] in WEIGHT_ORDERINGS and weights is not None:
        order, signs = order_by_weight(
            features.activations, weights, options["order"], options["channels"]
        )
        return tuple(order), tuple(signs)
    return tuple(features.channel_order(options["order"], options["channels"])), None


def _grid_panel(key: tuple, analysis: hookviz.Analysis) -> None:
    features = analysis.features
    channels, height, width = features.activations.shape
    st.markdown(f"**Feature maps of {features.layer}**")
    _grid_picture(key, analysis)
    with st.expander("What am I looking at?"):
        st.markdown(
            FEATURE_MAPS_HELP.format(layer=features.layer, shape=f"{channels}×{height}×{width}")
        )


@st.fragment(key="grid")
@feedback.guarded
def _grid_picture(key: tuple, analysis: hookviz.Analysis) -> None:
    options = display_options(analysis)
    channels, height, width = analysis.features.activations.shape
    st.image(_grid_png(key, analysis, options), width="stretch")
    st.caption(
        f"{options['channels']} of {channels} channels, {height}×{width} cells each; channel "
        "number in each corner"
    )
    state.publish()


def _grid_png(key: tuple, analysis: hookviz.Analysis, options: dict) -> bytes:
    order, signs = _grid_channels(analysis, options)
    dark = st.context.theme.type == "dark"
    background = DARK_BACKGROUND if dark else (255, 255, 255)
    return cached.grid_png(key, order, signs, options["scale"], options["grid_cmap"], background)


def _channel_weights(analysis: hookviz.Analysis) -> None:
    """The CAM's channel weights as a chart (no display option changes it)."""
    cam, features = analysis.cam, analysis.features
    if cam.weights is None:
        st.caption(f"{cam.method} weighs each location separately: no single α per channel.")
        return
    order, values = order_by_weight(features.activations, cam.weights, "weight", 20)
    st.altair_chart(charts.channel_weights(order, values), width="stretch")
    st.caption(
        f"The 20 channels with the largest |α| for “{cam.class_name}”. The heatmap is the ReLU "
        "of the sum of every channel's map times its α."
    )


@st.fragment(key="channel")
@feedback.guarded
def _channel_overlay(key: tuple, analysis: hookviz.Analysis) -> None:
    """One channel's map over the image, when asked for."""
    options = display_options(analysis)
    features = analysis.features
    count = features.num_channels
    wished = state.wish("channel_overlay")
    strongest = int(features.channel_order("mean", 1)[0])
    st.session_state["channel_overlay_on"] = wished != state.AUTO
    if not st.checkbox(
        "Overlay one channel on the image",
        key="channel_overlay_on",
        on_change=_toggle_channel_overlay,
        args=(strongest,),
    ):
        state.shown("channel_overlay", state.AUTO)
        state.publish()
        return
    channel = state.widget(
        "channel_overlay",
        st.selectbox,
        state.resolve("channel_overlay", lambda c: 0 <= c < count, strongest),
        "Channel",
        list(range(count)),
        key=f"channel_overlay@{features.layer}",
    )
    st.image(cached.channel_overlay_jpeg(key, int(channel), options["alpha"], options["grid_cmap"]))
    st.caption(f"Channel {channel} of {features.layer}, stretched over the image.")
    state.publish()


def _toggle_channel_overlay(strongest: int) -> None:
    """The overlay check box turns the single-channel view on at the strongest channel, or off
    (the chosen channel is a field of the view; on/off is whether it is set)."""
    on = st.session_state["channel_overlay_on"]
    state.choose("channel_overlay", strongest if on else state.AUTO)


def _heatmap_panel(key: tuple, analysis: hookviz.Analysis) -> None:
    cam = analysis.cam
    st.markdown("**Raw heatmap**")
    _heatmap_picture(key, analysis)
    height, width = cam.size
    st.caption(
        f"{cam.cam.shape[0]}×{cam.cam.shape[1]} cells, upsampled bilinearly to {width}×{height} "
        "px (the download) and to the display size here; 0 (dark) to 1 (bright)"
    )


@st.fragment(key="heatmap")
@feedback.guarded
def _heatmap_picture(key: tuple, analysis: hookviz.Analysis) -> None:
    st.image(cached.heatmap_jpeg(key, display_options(analysis)["cam_cmap"]))


def _predictions(loaded: hookviz.LoadedModel, analysis: hookviz.Analysis) -> None:
    st.markdown("**Top-5 predictions**")
    # One bar per class, most probable first, on the full 0-100 % scale. Plain bars rather than
    # a chart: a Vega chart on the page is re-laid out on every update (about 30 ms of every
    # display change here), and it kept a class's old rank after a new image.
    for rank, p in enumerate(analysis.predictions, start=1):
        st.progress(p.probability, text=f"{rank}. {p.name} ({p.index}) · {p.probability:.1%}")
    with st.expander("What am I looking at?"):
        st.markdown(PREDICTIONS_HELP.format(classes=loaded.num_classes))


def _downloads(scene: Scene, key: tuple, analysis: hookviz.Analysis) -> None:
    """The three downloads, each built when clicked (on a separate thread, no Streamlit calls
    inside) with the display options of that moment: a display change never redraws them, and
    the full-resolution overlay and heatmap are only computed for a download."""
    wishes, digest, cam = state.wishes(), scene.view.digest, analysis.cam

    def overlay_png() -> bytes:
        options = resolve_display(wishes, analysis)
        picture = render.overlay(
            cached.decoded_image(digest),
            cam.heatmap,
            alpha=options["alpha"],
            cmap=options["cam_cmap"],
        )
        return render.png_bytes(picture)

    def heatmap_npy() -> bytes:
        return render.npy_bytes(cam.heatmap)

    def grid_png() -> bytes:
        options = resolve_display(wishes, analysis)
        order, signs = _grid_channels(analysis, options)
        grid = render.feature_grid(
            analysis.features.activations,
            list(order),
            cmap=options["grid_cmap"],
            scale=options["scale"],
            columns=render.grid_columns(len(order)),
            signs=None if signs is None else list(signs),
        )
        return render.png_bytes(grid)

    st.download_button(
        "Download overlay (PNG)",
        overlay_png,
        "gradcam_overlay.png",
        "image/png",
        key="download_overlay",
        on_click="ignore",
        help="At the image's full resolution, with the heatmap opacity and colormap shown.",
    )
    st.download_button(
        "Download heatmap (.npy)",
        heatmap_npy,
        "gradcam_heatmap.npy",
        "application/octet-stream",
        key="download_heatmap",
        on_click="ignore",
        help="float32 array (H, W) in [0, 1] on the original image's pixel grid",
    )
    st.download_button(
        "Download feature maps (PNG)",
        grid_png,
        f"feature_maps_{analysis.features.layer}.png",
        "image/png",
        key="download_grid",
        on_click="ignore",
        help="The grid shown, with the channels, order, scale and colormap chosen.",
    )


@st.fragment(key="snippet")
@feedback.guarded
def _snippet(scene: Scene, analysis: hookviz.Analysis) -> None:
    """The script that recreates this view, written only while its expander is open."""
    box = st.expander("Reproduce in Python", key="snippet_open", on_change="rerun")
    if not box.open:
        return
    options = display_options(analysis)
    view = scene.view
    snippet_view = SnippetView(
        model=view.model,
        pretrained=view.pretrained,
        image=view.image_name,
        layer=analysis.cam.layer,
        target=view.target,
        method=analysis.cam.method,
        channels=options["channels"],
        order=options["order"],
        scale=options["scale"],
        grid_cmap=options["grid_cmap"],
        cam_cmap=options["cam_cmap"],
        alpha=options["alpha"],
        columns=render.grid_columns(options["channels"]),
    )
    box.code(reproduce_snippet(snippet_view), language="python")
