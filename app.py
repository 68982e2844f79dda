"""hookviz, the Streamlit page: UI only (widgets, layout, caching wrappers, error display).

All tensor work happens in the ``hookviz`` library; this file never imports torch.
Run with:  streamlit run app.py
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

import altair as alt
import pandas as pd
import streamlit as st
from PIL import Image

import hookviz
from hookviz import render
from hookviz.core.features import ORDERINGS, WEIGHT_ORDERINGS, order_by_weight
from hookviz.snippet import View, reproduce_snippet

IMAGE_TYPES = ["png", "jpg", "jpeg", "jfif", "webp", "bmp", "gif", "tif", "tiff"]
WEIGHTS = ("pretrained", "untrained")
AUTO = -1  # target option meaning "whatever the top-1 prediction is"
DISPLAY_LONG_SIDE = 1024  # images are shown (not analysed) at most this large
MAX_GRID_CHANNELS = 256
DEFAULTS = {
    "model": hookviz.DEFAULT_MODEL,
    "weights": "pretrained",
    "target": AUTO,
    "channels": 64,
    "order": "mean",
    "scale": "channel",
    "grid_cmap": "viridis",
    "cam_cmap": "inferno",
    "alpha": 0.5,
    "method": "gradcam",
}
METHOD_LABELS = {
    "gradcam": "Grad-CAM",
    "gradcam++": "Grad-CAM++",
    "xgradcam": "XGrad-CAM",
    "layercam": "Layer-CAM",
    "hirescam": "HiResCAM",
    "scorecam": "Score-CAM (slow: one forward per channel)",
    "eigencam": "Eigen-CAM (no class: first principal component)",
}
ORDER_LABELS = {
    "mean": "mean activation",
    "max": "max activation",
    "index": "index",
    "weight": "CAM weight α",
    "weight_x_mean": "α × mean",
}
METHOD_NOTES = {
    "gradcam": "channel weight = average gradient of the class score",
    "gradcam++": "channel weight = positive gradients, each weighted by a closed-form alpha",
    "xgradcam": "channel weight = gradient averaged with the activation as weights",
    "layercam": "every cell weighted by its own positive gradient (finer maps at early layers)",
    "hirescam": "every cell weighted by its own gradient, no averaging (faithful to the score)",
    "scorecam": "channel weight = class score of the image masked by that channel (no gradient)",
    "eigencam": "first principal component of the activations: what the layer sees most",
}
DARK_BACKGROUND = (14, 17, 23)
LOG = logging.getLogger("hookviz.app")  # Streamlit's dark theme, so the grid's gaps blend in

FEATURE_MAPS_HELP = """
A **feature map** is what one channel (one learned filter) of a layer outputs: a small image that
is bright where the filter's pattern occurs. Early layers respond to edges and colours, deep
layers to textures and object parts.

**How it was captured:** hookviz registered a *forward hook* on `{layer}`: a function PyTorch
calls right after that module computes its output. The hook copied (cloned) the output tensor of
shape {shape}, then was removed. A clone matters: the next module may be an in-place ReLU that
would overwrite a mere view.
"""

GRAD_CAM_HELP = """
**Grad-CAM** asks which regions of the image raise the score of the class.

1. The forward pass runs with the same hook on `{layer}`; it keeps the activations *A*
   ({channels} channels of {height}×{width}).
2. `torch.autograd.grad` computes the gradient of the class score (the logit, before softmax)
   with respect to *A* — only *A*, not the weights, so the backward stops at this layer.
3. Each channel's gradient is averaged over its {height}×{width} cells: the channel's weight
   α<sub>k</sub> (how much that channel helps the class).
4. The channels are summed with those weights; a ReLU keeps only positive evidence.
5. The {height}×{width} map is stretched bilinearly over your image and scaled to 0–1.

**Why coarse?** A deep layer has few cells ({height}×{width} here), each summarising a large
patch of the image. Pick an earlier layer for a finer, but less class-specific, map.
"""

PREDICTIONS_HELP = """
The model's **softmax probabilities** for its {classes} classes, computed from the whole image
(no crop) in the same forward pass. With untrained weights they are meaningless by design.
"""


# ---------------------------------------------------------------- cached work (plain-value keys)


@st.cache_resource(max_entries=4, show_spinner="Loading the model…")
def get_model(name: str, pretrained: bool) -> hookviz.LoadedModel:
    """One shared, frozen model per (name, weights); at most four kept in memory."""
    loaded = hookviz.load_model(name, pretrained=pretrained)
    hookviz.layer_table(loaded)  # trace once here, under the spinner, not on first analysis
    return loaded


@st.cache_data(max_entries=16, show_spinner=False)
def decode_image(data: bytes) -> Image.Image:
    """The uploaded bytes as an RGB image (raises hookviz.ImageError for bad files)."""
    return hookviz.load_image(data)


# A live resource tied to a model (it holds an autograd graph), so cache_resource like the
# models, bounded: each entry keeps the graph from the layer to the scores for fast class
# switches (tens to a few hundred MB on the CPU, depending on the layer).
@st.cache_resource(max_entries=4, show_spinner="Running the hooked forward pass…")
def forward_pass(data: bytes, model: str, pretrained: bool, layer: str) -> hookviz.ForwardPass:
    """One hooked forward per (image, model, layer); every class is then a backward pass."""
    return hookviz.ForwardPass(get_model(model, pretrained), decode_image(data), layer)


@st.cache_data(max_entries=24, show_spinner="Computing the gradient…")
def run_analysis(
    data: bytes, model: str, pretrained: bool, layer: str, target: int | None, method: str
) -> hookviz.Analysis:
    """Predictions, feature maps and a CAM: switching back to a seen view recomputes nothing,
    a new class on the same image and layer costs a backward pass only."""
    return forward_pass(data, model, pretrained, layer).analysis(target, method)


def scorecam_analysis(
    data: bytes, model: str, pretrained: bool, layer: str, target: int | None
) -> hookviz.Analysis:
    """Score-CAM, with its cost shown before it runs and a progress bar while it runs.

    Changing any control cancels it: Streamlit stops a running script at its next page update
    (the progress bar), and the lock and hooks are released on the way out.
    """
    kept = forward_pass(data, model, pretrained, layer)
    if kept.has_result(target, "scorecam"):
        return kept.analysis(target, "scorecam")
    passes, seconds = kept.scorecam_cost()
    note = st.info(
        f"Score-CAM masks the image with each of the layer's "
        f"{kept.features.num_channels} channels: {passes} batched forward passes, about "
        f"{seconds:.0f} s here. Change any control to cancel."
    )
    bar = st.progress(0.0, text="Score-CAM…")

    def progress(done: int, total: int) -> bool:
        bar.progress(done / total, text=f"Score-CAM: {done} of {total} channels")
        return False

    analysis = kept.analysis(target, "scorecam", progress=progress)
    bar.empty()
    note.empty()
    return analysis


@st.cache_data(max_entries=8, show_spinner="Measuring every layer in one forward pass…")
def run_layer_stats(data: bytes, model: str, pretrained: bool) -> list[hookviz.LayerStats]:
    return hookviz.layer_stats(get_model(model, pretrained), decode_image(data))


@st.cache_data(max_entries=8, show_spinner="One backward pass through every layer…")
def run_gradient_flow(
    data: bytes, model: str, pretrained: bool, target: int | None
) -> list[hookviz.GradientRecord]:
    return hookviz.gradient_flow(get_model(model, pretrained), decode_image(data), target)


@st.cache_data(max_entries=16, show_spinner="Forward pass with the intervention…")
def run_intervention(
    data: bytes,
    model: str,
    pretrained: bool,
    layer: str,
    channels: tuple[int, ...],
    scale: float,
    target: int,
) -> hookviz.Intervention:
    loaded = get_model(model, pretrained)
    return hookviz.intervene(
        loaded, decode_image(data), layer, channels, scale, cam_layer=layer, target=target
    )


@st.cache_data(max_entries=8, show_spinner="A backward pass per top-5 class…")
def run_gallery(data: bytes, model: str, pretrained: bool, layer: str, method: str) -> list:
    return hookviz.gallery(forward_pass(data, model, pretrained, layer), method)


@st.cache_data(max_entries=8, show_spinner="Backward passes for the contrast…")
def run_against_and_contrast(
    data: bytes, model: str, pretrained: bool, layer: str, first: int, second: int
) -> tuple[hookviz.GradCAM, hookviz.GradCAM]:
    kept = forward_pass(data, model, pretrained, layer)
    return hookviz.evidence_against(kept, first), hookviz.contrast(kept, first, second)


@st.cache_data(max_entries=8, show_spinner="One forward and one backward over every stage…")
def run_layer_sweep(data: bytes, model: str, pretrained: bool, target: int | None) -> list:
    return hookviz.layer_sweep(get_model(model, pretrained), decode_image(data), target=target)


@st.cache_data(max_entries=8, show_spinner=False)
def run_steps(
    data: bytes, model: str, pretrained: bool, layer: str, target: int
) -> hookviz.GradCAMSteps:
    return hookviz.grad_cam_steps(forward_pass(data, model, pretrained, layer), target)


@st.cache_data(max_entries=8, show_spinner="Deleting and inserting pixels in heatmap order…")
def run_trust(
    data: bytes, model: str, pretrained: bool, layer: str, target: int, method: str
) -> hookviz.TrustCurves:
    loaded = get_model(model, pretrained)
    heatmap = forward_pass(data, model, pretrained, layer).grad_cam(target, method).heatmap
    return hookviz.trust_curves(loaded, decode_image(data), heatmap, target)


@st.cache_data(max_entries=1)
def sample_bytes() -> bytes:
    return hookviz.sample_image_path().read_bytes()


# ---------------------------------------------------------------- URL <-> widget state


def restore_from_url() -> None:
    """On a session's first run, keep the view described by the URL for the widgets to adopt.

    Values are only adopted by each widget after validation against its real options, so a
    stale or hand-edited link can never break the page.
    """
    if "url_pending" not in st.session_state:
        st.session_state["url_pending"] = {k: v for k, v in st.query_params.items()}


def adopt(key: str, valid: Collection | Callable[[Any], bool], *, parse=str, default=None) -> None:
    """Give widget ``key`` its value before it is drawn: from the URL on a session's first run if
    valid, otherwise keep the current value if still valid, otherwise the default.

    Args:
        key: the widget key (also the query parameter's name).
        valid: the allowed values, or a predicate.
        parse: turns the query parameter's text into a value (ValueError if it can't).
        default: fallback value; ``DEFAULTS[key]`` when not given.
    """
    is_valid = valid if callable(valid) else valid.__contains__
    pending = st.session_state["url_pending"].pop(key, None)
    if pending is not None:
        try:
            value = parse(pending)
        except ValueError:
            value = None
        if value is not None and is_valid(value):
            st.session_state[key] = value
            return
    if key not in st.session_state or not is_valid(st.session_state[key]):
        st.session_state[key] = DEFAULTS.get(key) if default is None else default


def write_url(view: View) -> None:
    """Put the current view in the URL (defaults left out), so the address can be shared."""
    values = {
        "model": view.model,
        "weights": "pretrained" if view.pretrained else "untrained",
        "layer": view.layer,
        "target": AUTO if view.target is None else view.target,
        "channels": view.channels,
        "order": view.order,
        "scale": view.scale,
        "grid_cmap": view.grid_cmap,
        "cam_cmap": view.cam_cmap,
        "alpha": view.alpha,
        "method": view.method,
    }
    wanted = {k: str(v) for k, v in values.items() if k == "layer" or v != DEFAULTS.get(k)}
    if dict(st.query_params) != wanted:
        st.query_params.from_dict(wanted)


# ---------------------------------------------------------------- sidebar sections


@dataclass(frozen=True)
class ImageChoice:
    data: bytes
    name: str | None  # None: the sample


def image_ui() -> ImageChoice:
    st.sidebar.header("1 · Image")
    upload = st.sidebar.file_uploader(
        "Upload an image",
        type=IMAGE_TYPES,
        key="upload",
        help="PNG, JPEG, WebP, BMP, GIF (first frame) or TIFF. Without one, the sample is used.",
    )
    if upload is not None:
        data = upload.getvalue()
        try:
            decode_image(data)
            return ImageChoice(data, upload.name)
        except hookviz.ImageError as exc:
            st.error(f"Could not use **{upload.name}**: {exc}")
            st.info("Showing the sample image instead. Upload another file to try again.")
    return ImageChoice(sample_bytes(), None)


def model_ui() -> tuple[str, bool]:
    st.sidebar.header("2 · Model")
    catalog = {info.name: info for info in hookviz.model_catalog()}
    names = list(catalog)

    def label(name: str) -> str:
        status = catalog[name].status
        return f"{name} ({'offline' if status == 'bundled' else status})"

    adopt("model", names)
    name = st.sidebar.selectbox(
        "Network",
        names,
        format_func=label,
        key="model",
        help="Bundled models work offline. torchvision models download their weights once.",
    )
    adopt("weights", list(WEIGHTS))
    weights = st.sidebar.radio(
        "Weights",
        WEIGHTS,
        horizontal=True,
        key="weights",
        help="Untrained = random weights: a sanity check (a good explanation should change) and "
        "usable for every architecture without downloads.",
    )
    if weights == "untrained":
        st.sidebar.caption("⚠️ Untrained: random weights, predictions and heatmaps are noise.")
    return name, weights == "pretrained"


def layer_ui(loaded: hookviz.LoadedModel) -> str:
    st.sidebar.header("3 · Layer")
    table = hookviz.layer_table(loaded)
    layers = {layer.name: layer for layer in table.hookable}
    names = list(layers)
    adopt("layer", names, default=table.default)  # a new model starts at its default layer
    name = st.sidebar.selectbox(
        "Target layer",
        names,
        format_func=lambda n: layers[n].describe() + ("  ★ default" if n == table.default else ""),
        key="layer",
        help="Every module with a 4-D output, in execution order, with its output shape. Deep "
        "layers: coarse maps of object parts; early layers: fine maps of edges and colours.",
    )
    if table.excluded:
        with st.sidebar.expander(f"{len(table.excluded)} layers can't be picked"):
            for layer in table.excluded:
                st.caption(layer.reason)
    return name


def target_ui(
    loaded: hookviz.LoadedModel, predictions: tuple[hookviz.Prediction, ...]
) -> tuple[int, str]:
    st.sidebar.header("4 · Target class")
    top = {p.index: p for p in predictions}
    rest = sorted((i for i in range(loaded.num_classes) if i not in top), key=loaded.class_name)
    options = [AUTO, *top, *rest]

    def label(index: int) -> str:
        if index == AUTO:
            best = predictions[0]
            return f"Top prediction: {best.name} ({best.probability:.1%})"
        if index in top:
            rank = list(top).index(index) + 1
            return f"#{rank} {loaded.class_name(index)} ({top[index].probability:.1%})"
        return loaded.class_name(index)

    adopt("target", options, parse=int)
    target = st.sidebar.selectbox(
        "Explain the class",
        options,
        format_func=label,
        key="target",
        help="By default the top prediction of each image; then the top-5; type to search all "
        "classes.",
    )
    adopt("method", list(hookviz.METHODS))
    method = st.sidebar.selectbox(
        "CAM method",
        list(hookviz.METHODS),
        format_func=METHOD_LABELS.get,
        key="method",
        help="How the layer's channels are weighted into the heatmap.",
    )
    return target, method


@dataclass(frozen=True)
class DisplayOptions:
    channels: int
    order: str
    scale: str
    grid_cmap: str
    cam_cmap: str
    alpha: float


def display_ui(num_channels: int, has_weights: bool) -> DisplayOptions:
    st.sidebar.header("Display")
    most = min(num_channels, MAX_GRID_CHANNELS)
    adopt("channels", lambda n: 1 <= n <= most, parse=int, default=min(64, most))
    channels = (
        st.sidebar.slider(
            "Channels shown",
            1,
            most,
            key="channels",
            help=f"This layer has {num_channels} channels; up to {most} can be shown.",
        )
        if most > 1
        else 1
    )
    orderings = list(ORDERINGS) + (list(WEIGHT_ORDERINGS) if has_weights else [])
    adopt("order", orderings)
    order = st.sidebar.radio(
        "Channel order",
        orderings,
        horizontal=True,
        key="order",
        format_func=ORDER_LABELS.get,
        help="By activation, by channel number, or by the CAM's channel weight α (how much the "
        "channel counts for the class; + for, − against) or α × mean activation.",
    )
    adopt("scale", list(render.SCALES))
    scale = st.sidebar.radio(
        "Colour scale",
        render.SCALES,
        horizontal=True,
        key="scale",
        format_func={"channel": "per channel", "shared": "shared"}.get,
        help="Per channel shows each map's pattern; shared shows which channels are strong.",
    )
    adopt("grid_cmap", list(render.COLORMAPS))
    grid_cmap = st.sidebar.selectbox("Feature-map colormap", render.COLORMAPS, key="grid_cmap")
    adopt("cam_cmap", list(render.COLORMAPS))
    cam_cmap = st.sidebar.selectbox("Heatmap colormap", render.COLORMAPS, key="cam_cmap")
    adopt("alpha", lambda a: 0.0 <= a <= 1.0, parse=float)
    alpha = st.sidebar.slider("Heatmap opacity", 0.0, 1.0, step=0.05, key="alpha")
    return DisplayOptions(channels, order, scale, grid_cmap, cam_cmap, alpha)


# ---------------------------------------------------------------- main area


@dataclass(frozen=True)
class PanelState:
    """What the optional panels below the results need: the image, the choices, the result."""

    image: Image.Image
    choice: ImageChoice
    model: str
    pretrained: bool
    layer: str
    method: str
    target: int | None
    analysis: hookviz.Analysis
    options: DisplayOptions


def original_ui(image: Image.Image, choice: ImageChoice, analysis: hookviz.Analysis) -> None:
    st.markdown("**Original**")
    st.image(render.fit_within(image, DISPLAY_LONG_SIDE), output_format="JPEG")
    height, width = analysis.features.input_size
    st.caption(
        f"{choice.name or 'sample: Grace Hopper (matplotlib)'} · {image.width}×{image.height} px "
        f"· fed to the model whole at {width}×{height} px (no crop)"
    )


def cam_ui(image: Image.Image, analysis: hookviz.Analysis, options: DisplayOptions) -> Image.Image:
    cam = analysis.cam
    channels, height, width = analysis.features.activations.shape
    name = METHOD_LABELS[cam.method].split(" (")[0]
    subject = "most seen pattern" if cam.method == "eigencam" else f"“{cam.class_name}”"
    st.markdown(f"**{name}: {subject}**")
    overlay = render.overlay(image, cam.heatmap, alpha=options.alpha, cmap=options.cam_cmap)
    # photos display as JPEG (fast, small); the downloads stay lossless PNG
    st.image(render.fit_within(overlay, DISPLAY_LONG_SIDE), output_format="JPEG")
    st.caption(
        f"{name} for “{cam.class_name}” at {cam.layer} · class {cam.class_index} · "
        f"p = {cam.probability:.1%} · logit {cam.score:.2f} · {METHOD_NOTES[cam.method]}"
    )
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
    return overlay


def grid_ui(analysis: hookviz.Analysis, options: DisplayOptions, dark: bool) -> bytes:
    features = analysis.features
    channels, height, width = features.activations.shape
    st.markdown(f"**Feature maps of {features.layer}**")
    weights = analysis.cam.weights
    signs = None
    if options.order in WEIGHT_ORDERINGS and weights is not None:
        order, signs = order_by_weight(
            features.activations, weights, options.order, options.channels
        )
    else:
        order = features.channel_order(options.order, options.channels)
    grid = render.feature_grid(
        features.activations,
        order,
        cmap=options.grid_cmap,
        scale=options.scale,
        columns=min(len(order), 8 if len(order) <= 64 else 16),
        background=DARK_BACKGROUND if dark else (255, 255, 255),
        signs=signs,
    )
    grid_png = render.png_bytes(grid)  # feature maps stay PNG: crisp cells, exact colours
    st.image(grid_png, width="stretch")
    st.caption(
        f"{len(order)} of {channels} channels, {height}×{width} cells each; channel number in "
        "each corner"
    )
    with st.expander("What am I looking at?"):
        st.markdown(
            FEATURE_MAPS_HELP.format(layer=features.layer, shape=f"{channels}×{height}×{width}")
        )
    return grid_png


def channels_ui(image: Image.Image, analysis: hookviz.Analysis, options: DisplayOptions) -> None:
    """The channel weights of the CAM as a chart, and one channel's map over the image."""
    cam, features = analysis.cam, analysis.features
    with st.expander("Channels behind the heatmap"):
        if cam.weights is not None:
            order, values = order_by_weight(features.activations, cam.weights, "weight", 20)
            frame = pd.DataFrame(
                {
                    "channel": [str(c) for c in order],
                    "alpha": values,
                    "sign": ["for the class" if v >= 0 else "against" for v in values],
                }
            )
            chart = (
                alt.Chart(frame, height=alt.Step(14))
                .mark_bar()
                .encode(
                    x=alt.X("alpha:Q", title="channel weight α"),
                    y=alt.Y("channel:N", sort=None),
                    color=alt.Color(
                        "sign:N",
                        scale=alt.Scale(
                            domain=["for the class", "against"], range=["#005AB5", "#DC3220"]
                        ),
                    ),
                    tooltip=["channel", "alpha"],
                )
            )
            st.altair_chart(chart, width="stretch")
            st.caption(
                f"The 20 channels with the largest |α| for “{cam.class_name}”. The heatmap is "
                "the ReLU of the sum of every channel's map times its α."
            )
        else:
            st.caption(f"{cam.method} weighs each location separately: no single α per channel.")
        if not st.checkbox("Overlay one channel on the image", key="channel_overlay_on"):
            return
        channel = st.selectbox(
            "Channel",
            list(range(features.num_channels)),
            index=int(features.channel_order("mean", 1)[0]),
            key=f"channel_overlay::{features.layer}",
        )
        single = hookviz.cam.to_pixel_grid(
            features.activations[channel], (image.height, image.width)
        )
        picture = render.overlay(image, single, alpha=options.alpha, cmap=options.grid_cmap)
        st.image(render.fit_within(picture, 512), output_format="JPEG")
        st.caption(f"Channel {channel} of {features.layer}, stretched over the image.")


def heatmap_ui(analysis: hookviz.Analysis, options: DisplayOptions) -> None:
    cam = analysis.cam
    st.markdown("**Raw heatmap**")
    heat = render.heatmap_image(cam.heatmap, options.cam_cmap)
    st.image(render.fit_within(heat, DISPLAY_LONG_SIDE), output_format="JPEG")
    st.caption(
        f"{cam.cam.shape[0]}×{cam.cam.shape[1]} cells, upsampled bilinearly to "
        f"{cam.heatmap.shape[1]}×{cam.heatmap.shape[0]} px; 0 (dark) to 1 (bright)"
    )


def predictions_ui(loaded: hookviz.LoadedModel, analysis: hookviz.Analysis) -> None:
    st.markdown("**Top-5 predictions**")
    frame = pd.DataFrame(
        {
            "class": [f"{p.name} ({p.index})" for p in analysis.predictions],
            "probability": [p.probability for p in analysis.predictions],
        }
    )
    chart = (
        alt.Chart(frame, height=alt.Step(24))
        .mark_bar()
        .encode(
            x=alt.X("probability:Q", axis=alt.Axis(format="%")),
            y=alt.Y("class:N", sort=None, title=None, axis=alt.Axis(labelLimit=320)),
            tooltip=["class", alt.Tooltip("probability:Q", format=".1%")],
        )
    )
    st.altair_chart(chart, width="stretch")
    st.caption(" · ".join(f"{p.name}: {p.probability:.1%}" for p in analysis.predictions))
    with st.expander("What am I looking at?"):
        st.markdown(PREDICTIONS_HELP.format(classes=loaded.num_classes))


def downloads_ui(overlay: Image.Image, analysis: hookviz.Analysis, grid_png: bytes) -> None:
    st.markdown("**Downloads**")
    st.download_button(
        "Download overlay (PNG)",
        render.png_bytes(overlay),
        "gradcam_overlay.png",
        "image/png",
        key="download_overlay",
    )
    st.download_button(
        "Download heatmap (.npy)",
        render.npy_bytes(analysis.cam.heatmap),
        "gradcam_heatmap.npy",
        "application/octet-stream",
        key="download_heatmap",
        help="float32 array (H, W) in [0, 1] on the original image's pixel grid",
    )
    st.download_button(
        "Download feature maps (PNG)",
        grid_png,
        f"feature_maps_{analysis.features.layer}.png",
        "image/png",
        key="download_grid",
    )


STATS_HELP = """
One forward pass with a forward hook on **every** layer: each hook computes its layer's
statistics on the spot (on the GPU if there is one) and keeps nothing else. A layer whose
fraction of zeros is near 1 has **dead** units (its ReLUs never fire for this image); a mean or
spread that jumps by orders of magnitude marks a layer that **explodes** or **saturates**.
"""

FLOW_HELP = """
The size of the gradient of the class score at each layer's output, from **one** backward pass:
forward hooks capture every layer's output tensor and `torch.autograd.grad` returns the gradient
for all of them at once. A curve falling by orders of magnitude towards the input is a
**vanishing** gradient. Why not module *backward* hooks? They report gradients of a module's
inputs and outputs together, fire in an order that depends on the graph, and break when an
in-place operation follows the module (pytorch/pytorch#61519).
"""

INTERVENE_HELP = """
A forward hook can **return** a new output: here it multiplies the chosen channels of the layer
by the factor (0 switches them off) for one forward pass. The model and its weights are never
changed; the original predictions come from the same image without the hook. The heatmaps are
the Grad-CAM of the explained class at this layer without and with the intervention.
"""


def diagnostics_ui(state: PanelState) -> None:
    choice, model, pretrained = state.choice, state.model, state.pretrained
    target, analysis = state.target, state.analysis
    if not st.toggle(
        "Diagnose the network: statistics, gradient flow, interventions", key="diagnose"
    ):
        return
    stats_tab, flow_tab, intervene_tab = st.tabs(
        ["Activation statistics", "Gradient flow", "Intervene"]
    )
    with stats_tab:
        stats = run_layer_stats(choice.data, model, pretrained)
        frame = pd.DataFrame(
            {
                "depth": range(len(stats)),
                "layer": [s.name for s in stats],
                "type": [s.type_name for s in stats],
                "mean": [s.mean for s in stats],
                "std": [s.std for s in stats],
                "min": [s.min for s in stats],
                "max": [s.max for s in stats],
                "zero fraction": [s.zero_fraction for s in stats],
            }
        )
        left, right = st.columns(2)
        left.altair_chart(_depth_chart(frame, ["mean", "std"], "activation"), width="stretch")
        right.altair_chart(_depth_chart(frame, ["zero fraction"], "fraction"), width="stretch")
        st.dataframe(frame, hide_index=True, height=240)
        current = next((s for s in stats if s.name == state.layer), None)
        if current is not None:
            edges = current.bin_edges
            histogram = pd.DataFrame(
                {
                    "value": (edges[:-1] + edges[1:]) / 2,
                    "count": current.histogram,
                }
            )
            st.altair_chart(
                alt.Chart(histogram, height=160)
                .mark_bar()
                .encode(x=alt.X("value:Q", title=f"activation of {state.layer}"), y="count:Q"),
                width="stretch",
            )
            st.caption(
                f"Histogram of {state.layer}'s output values for this image "
                f"({current.zero_fraction:.0%} exactly zero)."
            )
        st.markdown(STATS_HELP)
    with flow_tab:
        records = run_gradient_flow(choice.data, model, pretrained, target)
        flow = pd.DataFrame(
            {
                "depth": range(len(records)),
                "layer": [r.name for r in records],
                "gradient RMS": [max(r.grad_rms, 1e-30) for r in records],
                "gradient norm": [r.grad_norm for r in records],
            }
        )
        chart = (
            alt.Chart(flow)
            .mark_line(point=True)
            .encode(
                x=alt.X("depth:Q", title="layer (execution order)"),
                y=alt.Y("gradient RMS:Q", scale=alt.Scale(type="log")),
                tooltip=["layer", "gradient RMS", "gradient norm"],
            )
        )
        st.altair_chart(chart, width="stretch")
        st.caption(f"Gradient of the score of “{analysis.cam.class_name}”.")
        st.markdown(FLOW_HELP)
    with intervene_tab:
        intervention_ui(state)


def _depth_chart(frame: pd.DataFrame, columns: list[str], title: str) -> alt.Chart:
    long = frame.melt(id_vars=["depth", "layer"], value_vars=columns, var_name="statistic")
    return (
        alt.Chart(long)
        .mark_line(point=True)
        .encode(
            x=alt.X("depth:Q", title="layer (execution order)"),
            y=alt.Y("value:Q", title=title),
            color="statistic:N",
            tooltip=["layer", "statistic", "value"],
        )
    )


def intervention_ui(state: PanelState) -> None:
    image, choice, model, pretrained = state.image, state.choice, state.model, state.pretrained
    layer, analysis, options = state.layer, state.analysis, state.options
    channels = analysis.features.num_channels
    strongest = analysis.features.channel_order("mean", min(3, channels))
    mode = st.radio(
        "Intervention",
        ["scale chosen channels", "keep only the strongest channels"],
        horizontal=True,
        key="intervene_mode",
    )
    if mode == "scale chosen channels":
        chosen = st.multiselect(
            f"Channels of {layer}",
            list(range(channels)),
            default=strongest,
            key=f"intervene_channels::{layer}",
            help="By default the three with the strongest mean activation.",
        )
        scale = st.slider("Multiply them by", 0.0, 3.0, 0.0, 0.1, key="intervene_scale")
    else:
        keep = st.slider("Channels kept", 1, channels, min(16, channels), key="intervene_keep")
        kept = set(analysis.features.channel_order("mean", keep))
        chosen = [c for c in range(channels) if c not in kept]
        scale = 0.0
    result = run_intervention(
        choice.data, model, pretrained, layer, tuple(chosen), scale, analysis.cam.class_index
    )
    before, after = st.columns(2)
    before.markdown("**Untouched model**")
    before.dataframe(_prediction_frame(result.original), hide_index=True)
    before.image(_small_overlay(image, analysis.cam.heatmap, options), output_format="JPEG")
    after.markdown(f"**{len(chosen)} channel(s) × {scale:g}**")
    after.dataframe(_prediction_frame(result.predictions), hide_index=True)
    after.image(_small_overlay(image, result.cam.heatmap, options), output_format="JPEG")
    if result.cam.blank:
        after.caption("No positive evidence left at this layer.")
    index = analysis.cam.class_index
    st.caption(
        f"Logit of “{analysis.cam.class_name}”: {result.original_scores[index]:.3f} → "
        f"{result.scores[index]:.3f}"
    )
    st.markdown(INTERVENE_HELP)


def _prediction_frame(predictions) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "class": [p.name for p in predictions],
            "probability": [f"{p.probability:.1%}" for p in predictions],
        }
    )


STEPS_HELP = """
The Grad-CAM on screen, tensor by tensor. **A** is what the forward hook copied; **∂y/∂A** is
what `torch.autograd.grad` returned for the class score y (the logit); **α** is each gradient
map's average; the **weighted sum** Σ α·A can be negative; the **ReLU** removes the negative part
(shown separately: evidence against the class); the result is upsampled bilinearly and laid
over the photo. The tiles show the 8 channels with the largest |α|. Just before a global average
pooling, ∂y/∂A is the same in every cell of a channel (the pooling spreads the gradient evenly),
so those gradient tiles are flat: all the spatial detail of Grad-CAM then comes from A.
"""

TRUST_HELP = """
**Deletion:** pixels are removed (set to the dataset mean) in heatmap order, most important
first, and the class probability is followed: it should fall fast. **Insertion:** pixels are
revealed on a blurred copy in the same order: it should rise fast. The dashed curves use a random
order. A heatmap you can trust has a smaller deletion area and a larger insertion area than the
random order (Petsiuk et al. 2018).
"""


def _small_overlay(image: Image.Image, heatmap, options: DisplayOptions):
    return render.fit_within(
        render.overlay(image, heatmap, alpha=options.alpha, cmap=options.cam_cmap), 360
    )


def beyond_ui(state: PanelState) -> None:
    image, choice, model, pretrained = state.image, state.choice, state.model, state.pretrained
    layer, method, analysis, options = state.layer, state.method, state.analysis, state.options
    if not st.toggle(
        "Beyond one heatmap: gallery, evidence against, layer sweep, step by step, trust",
        key="beyond",
    ):
        return
    cam = analysis.cam
    tabs = st.tabs(
        ["Top-5 gallery", "Against / contrast", "Layer sweep", "Step by step", "Trust check"]
    )
    with tabs[0]:
        cams = run_gallery(choice.data, model, pretrained, layer, method)
        for column, item in zip(st.columns(len(cams)), cams, strict=True):
            column.image(_small_overlay(image, item.heatmap, options), output_format="JPEG")
            column.caption(f"{item.class_name} · {item.probability:.1%}")
        st.caption("The CAM of each top-5 class, all from the same forward pass.")
    with tabs[1]:
        others = [p.index for p in analysis.predictions if p.index != cam.class_index]
        second = st.selectbox(
            "Rather than",
            others or [cam.class_index],
            key="contrast_class",
            format_func=lambda i: _class_name(analysis, i),
        )
        against, why = run_against_and_contrast(
            choice.data, model, pretrained, layer, cam.class_index, second
        )
        left, right = st.columns(2)
        left.image(_small_overlay(image, against.heatmap, options), output_format="JPEG")
        left.caption(
            f"Evidence against “{cam.class_name}” (Grad-CAM of the negated score)"
            + (" · none at this layer" if against.blank else "")
        )
        right.image(_small_overlay(image, why.heatmap, options), output_format="JPEG")
        right.caption(
            f"Why “{cam.class_name}” rather than “{_class_name(analysis, second)}”: Grad-CAM "
            "of the difference of their scores"
        )
    with tabs[2]:
        sweep = run_layer_sweep(choice.data, model, pretrained, cam.class_index)
        for column, item in zip(st.columns(len(sweep)), sweep, strict=True):
            column.image(_small_overlay(image, item.heatmap, options), output_format="JPEG")
            column.caption(f"{item.layer} · {item.cam.shape[0]}×{item.cam.shape[1]}")
        st.caption(
            "Grad-CAM of the same class at the end of each stage, from one forward pass and one "
            "`torch.autograd.grad` call for all layers: early layers are sharp but less "
            "class-specific, deep layers coarse but semantic."
        )
    with tabs[3]:
        steps_ui(state)
    with tabs[4]:
        if st.checkbox("Run the trust check (68 forward passes)", key="trust_on"):
            curves = run_trust(choice.data, model, pretrained, layer, cam.class_index, cam.method)
            rows = []
            for kind in ("deletion", "insertion"):
                for order, values in (
                    ("heatmap order", getattr(curves, kind)),
                    ("random order", getattr(curves, f"{kind}_random")),
                ):
                    rows += [
                        {"curve": kind, "order": order, "fraction": f, "probability": float(v)}
                        for f, v in zip(curves.fractions, values, strict=True)
                    ]
            chart = (
                alt.Chart(pd.DataFrame(rows))
                .mark_line(point=True)
                .encode(
                    x=alt.X("fraction:Q", title="share of pixels removed / revealed"),
                    y=alt.Y("probability:Q", title=f"p({cam.class_name})"),
                    color="curve:N",
                    strokeDash="order:N",
                    tooltip=["curve", "order", "fraction", "probability"],
                )
            )
            st.altair_chart(chart, width="stretch")
            st.caption(
                f"Deletion area {curves.deletion_auc:.3f} (random {curves.deletion_random_auc:.3f},"
                f" lower is better) · insertion area {curves.insertion_auc:.3f} (random "
                f"{curves.insertion_random_auc:.3f}, higher is better)"
            )
        st.markdown(TRUST_HELP)


def _class_name(analysis: hookviz.Analysis, index: int) -> str:
    names = {p.index: p.name for p in analysis.predictions}
    return names.get(
        index, analysis.cam.class_name if index == analysis.cam.class_index else str(index)
    )


def steps_ui(state: PanelState) -> None:
    image, choice, model, pretrained = state.image, state.choice, state.model, state.pretrained
    layer, analysis, options = state.layer, state.analysis, state.options
    cam = analysis.cam
    steps = run_steps(choice.data, model, pretrained, layer, cam.class_index)
    top, _ = order_by_weight(analysis.features.activations, steps.weights, "weight", 8)
    channels, height, width = steps.activations.shape
    first, second = st.columns(2)
    first.markdown(f"**1 · A** = output of `{layer}`: {channels}×{height}×{width}")
    first.image(render.feature_grid(steps.activations, top, cmap=options.grid_cmap, columns=8))
    second.markdown(f"**2 · ∂y/∂A** for “{cam.class_name}”: {channels}×{height}×{width}")
    second.image(render.feature_grid(steps.gradients, top, cmap=options.grid_cmap, columns=8))
    third, fourth = st.columns(2)
    third.markdown("**3 · α** = mean of each gradient map (the 8 largest |α|)")
    third.dataframe(
        pd.DataFrame({"channel": top, "α": steps.weights[top]}), hide_index=True, height=220
    )
    bound = float(abs(steps.weighted_sum).max()) or 1.0
    signed = render.colorize((steps.weighted_sum / bound + 1) / 2, "coolwarm")
    fourth.markdown("**4 · Σ α·A** (blue < 0 < red)")
    fourth.image(
        Image.fromarray(signed).resize((240, 240 * height // width), Image.Resampling.NEAREST),
        output_format="PNG",
    )
    fifth, sixth, seventh = st.columns(3)
    fifth.markdown(f"**5 · removed by the ReLU** (max {steps.removed.max():.3g})")
    fifth.image(
        render.heatmap_image(_unit(steps.removed), "gray").resize(
            (160, 160 * height // width), Image.Resampling.NEAREST
        )
    )
    sixth.markdown(f"**6 · ReLU(Σ α·A)**: {height}×{width}")
    sixth.image(
        render.heatmap_image(_unit(steps.cam), options.cam_cmap).resize(
            (160, 160 * height // width), Image.Resampling.NEAREST
        )
    )
    seventh.markdown(f"**7 · upsampled** to {steps.heatmap.shape[1]}×{steps.heatmap.shape[0]}")
    seventh.image(_small_overlay(image, steps.heatmap, options), output_format="JPEG")
    st.markdown(STEPS_HELP)


def _unit(values):
    high = float(values.max())
    return values / high if high > 0 else values


def main() -> None:
    st.set_page_config(page_title="hookviz", page_icon="🔍", layout="wide")
    restore_from_url()
    st.markdown("## hookviz")
    st.caption(
        "Look inside a CNN: a layer's feature maps and a Grad-CAM heatmap, both captured with "
        "PyTorch forward hooks from one forward pass. Controls are in the sidebar."
    )
    choice = image_ui()
    model_name, pretrained = model_ui()
    try:
        loaded = get_model(model_name, pretrained)
    except hookviz.HookvizError as exc:
        st.error(f"Cannot load **{model_name}**: {exc}")
        st.stop()
    device = hookviz.devices.describe_device(loaded.device)
    layer = layer_ui(loaded)

    image = decode_image(choice.data)
    try:
        first = run_analysis(choice.data, model_name, pretrained, layer, None, "gradcam")
        target, method = target_ui(loaded, first.predictions)
        wanted = None if target == AUTO else target
        if method == "scorecam":
            analysis = scorecam_analysis(choice.data, model_name, pretrained, layer, wanted)
        elif method == "gradcam" and target in (AUTO, first.cam.class_index):
            analysis = first
        else:
            analysis = run_analysis(choice.data, model_name, pretrained, layer, wanted, method)
    except hookviz.HookvizError as exc:
        st.error(f"Analysis failed: {exc}")
        st.stop()
    options = display_ui(analysis.features.num_channels, analysis.cam.weights is not None)
    dark = st.context.theme.type == "dark"

    top = st.columns([1, 1, 1.3], gap="medium")
    with top[0]:
        original_ui(image, choice, analysis)
    with top[1]:
        overlay = cam_ui(image, analysis, options)
    with top[2]:
        grid_png = grid_ui(analysis, options, dark)
        channels_ui(image, analysis, options)
    bottom = st.columns([1, 1, 1.3], gap="medium")
    with bottom[0]:
        heatmap_ui(analysis, options)
    with bottom[1]:
        predictions_ui(loaded, analysis)
    view = View(
        model=model_name,
        pretrained=pretrained,
        image=choice.name,
        layer=layer,
        target=None if target == AUTO else target,
        method=method,
        channels=options.channels,
        order=options.order,
        scale=options.scale,
        grid_cmap=options.grid_cmap,
        cam_cmap=options.cam_cmap,
        alpha=options.alpha,
        columns=min(options.channels, 8 if options.channels <= 64 else 16),
    )
    with bottom[2]:
        downloads_ui(overlay, analysis, grid_png)
        with st.expander("Reproduce in Python"):
            st.code(reproduce_snippet(view), language="python")
        digest = hashlib.sha256(choice.data).hexdigest()[:8]
        st.caption(
            f"Last analysis: {analysis.seconds * 1000:.0f} ms on {device} · image {digest} · "
            "the URL holds this view: copy it to share"
        )
    state = PanelState(
        image=image,
        choice=choice,
        model=model_name,
        pretrained=pretrained,
        layer=layer,
        method=method,
        target=None if target == AUTO else target,
        analysis=analysis,
        options=options,
    )
    beyond_ui(state)
    diagnostics_ui(state)
    write_url(view)


def run_page() -> None:
    """The page, behind the one boundary that catches everything.

    Expected problems (bad files, unavailable weights, bad layers) are HookvizErrors shown as
    messages where they happen. Anything else is a bug: its traceback goes to the server log
    with an id, and the page shows only that id, never the traceback. (Streamlit's st.stop and
    reruns are BaseExceptions and pass through.)
    """
    try:
        main()
    except Exception:
        error_id = uuid.uuid4().hex[:8]
        LOG.exception("unexpected error %s", error_id)
        st.error(
            f"Something went wrong on our side (error id **{error_id}**). It has been logged on "
            "the server; try another setting, or reload the page."
        )


run_page()
