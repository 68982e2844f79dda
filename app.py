"""hookviz, the Streamlit page: UI only (widgets, layout, caching wrappers, error display).

All tensor work happens in the ``hookviz`` library; this file never imports torch.
Run with:  streamlit run app.py
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import altair as alt
import pandas as pd
import streamlit as st
from PIL import Image

import hookviz
from hookviz import render

IMAGE_TYPES = ["png", "jpg", "jpeg", "jfif", "webp", "bmp", "gif", "tif", "tiff"]
WEIGHTS = ("pretrained", "untrained")
DISPLAY_LONG_SIDE = 1024  # images are shown (not analysed) at most this large
MAX_GRID_CHANNELS = 256


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


@st.cache_data(max_entries=12, show_spinner="Running the hooked forward and backward pass…")
def run_analysis(
    data: bytes, model: str, pretrained: bool, layer: str, target: int | None
) -> hookviz.Analysis:
    """Predictions, feature maps and Grad-CAM from one forward pass, cached per input."""
    return hookviz.analyze(get_model(model, pretrained), decode_image(data), layer, target)


@st.cache_data(max_entries=1)
def sample_bytes() -> bytes:
    return hookviz.sample_image_path().read_bytes()


# ---------------------------------------------------------------- sidebar sections


@dataclass(frozen=True)
class ImageChoice:
    data: bytes
    label: str


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
    return ImageChoice(sample_bytes(), "sample: Grace Hopper (matplotlib)")


def model_ui() -> tuple[str, bool]:
    st.sidebar.header("2 · Model")
    catalog = {info.name: info for info in hookviz.model_catalog()}
    names = list(catalog)

    def label(name: str) -> str:
        info = catalog[name]
        status = {"bundled": "offline"}.get(info.status, info.status)
        return f"{name} ({status})"

    name = st.sidebar.selectbox(
        "Network",
        names,
        index=names.index(hookviz.DEFAULT_MODEL),
        format_func=label,
        key="model",
        help="Bundled models work offline. torchvision models download their weights once.",
    )
    weights = st.sidebar.radio(
        "Weights",
        WEIGHTS,
        horizontal=True,
        key="weights",
        help="Untrained = random weights: a sanity check (a good explanation should change) and "
        "usable for every architecture without downloads.",
    )
    return name, weights == "pretrained"


def layer_ui(loaded: hookviz.LoadedModel) -> str:
    st.sidebar.header("3 · Layer")
    table = hookviz.layer_table(loaded)
    layers = {layer.name: layer for layer in table.hookable}
    names = list(layers)
    name = st.sidebar.selectbox(
        "Target layer",
        names,
        index=names.index(table.default),
        format_func=lambda n: layers[n].describe(),
        key=f"layer::{loaded.name}::{loaded.pretrained}",
        help="Every module with a 4-D output, in execution order. Deep layers: coarse maps of "
        "object parts; early layers: fine maps of edges and colours.",
    )
    if table.excluded:
        with st.sidebar.expander(f"{len(table.excluded)} layers can't be picked"):
            for layer in table.excluded:
                st.caption(layer.reason)
    return name


def target_ui(loaded: hookviz.LoadedModel, predictions, key: str) -> int:
    st.sidebar.header("4 · Target class")
    top = {p.index: p for p in predictions}
    rest = sorted((i for i in range(loaded.num_classes) if i not in top), key=loaded.class_name)

    def label(index: int) -> str:
        if index in top:
            rank = list(top).index(index) + 1
            return f"#{rank} {loaded.class_name(index)} ({top[index].probability:.1%})"
        return loaded.class_name(index)

    return st.sidebar.selectbox(
        "Explain the class",
        list(top) + rest,
        index=0,
        format_func=label,
        key=key,
        help="The top-5 predictions come first; type to search all classes.",
    )


@dataclass(frozen=True)
class DisplayOptions:
    channels: int
    order: str
    scale: str
    grid_cmap: str
    cam_cmap: str
    alpha: float


def display_ui(num_channels: int) -> DisplayOptions:
    st.sidebar.header("Display")
    most = min(num_channels, MAX_GRID_CHANNELS)
    channels = (
        st.sidebar.slider(
            "Channels shown",
            1,
            most,
            min(64, most),
            key="channels",
            help=f"This layer has {num_channels} channels; up to {most} can be shown.",
        )
        if most > 1
        else 1
    )
    order = st.sidebar.radio(
        "Channel order",
        hookviz.features.ORDERINGS,
        horizontal=True,
        key="order",
        format_func={"mean": "mean activation", "max": "max activation", "index": "index"}.get,
    )
    scale = st.sidebar.radio(
        "Colour scale",
        render.SCALES,
        horizontal=True,
        key="scale",
        format_func={"channel": "per channel", "shared": "shared"}.get,
        help="Per channel shows each map's pattern; shared shows which channels are strong.",
    )
    grid_cmap = st.sidebar.selectbox("Feature-map colormap", render.COLORMAPS, key="grid_cmap")
    cam_cmap = st.sidebar.selectbox(
        "Heatmap colormap",
        render.COLORMAPS,
        index=render.COLORMAPS.index("inferno"),
        key="cam_cmap",
    )
    alpha = st.sidebar.slider("Heatmap opacity", 0.0, 1.0, 0.5, 0.05, key="alpha")
    return DisplayOptions(channels, order, scale, grid_cmap, cam_cmap, alpha)


# ---------------------------------------------------------------- main area


def cam_ui(image, analysis: hookviz.Analysis, options: DisplayOptions) -> None:
    cam = analysis.cam
    st.subheader(f"Grad-CAM for “{cam.class_name}” at {cam.layer}")
    st.caption(
        "Grad-CAM weighs each channel of the layer by the average gradient of the class score "
        "flowing into it, sums the weighted maps, keeps the positive part and stretches it over "
        "the image. Bright = evidence for the class."
    )
    overlay = render.overlay(image, cam.heatmap, alpha=options.alpha, cmap=options.cam_cmap)
    heat = render.heatmap_image(cam.heatmap, options.cam_cmap)
    left, middle, right = st.columns(3)
    left.image(render.fit_within(image, DISPLAY_LONG_SIDE), caption="Original", output_format="PNG")
    middle.image(
        render.fit_within(overlay, DISPLAY_LONG_SIDE),
        output_format="PNG",
        caption=f"Overlay · class {cam.class_index} · p = {cam.probability:.1%}",
    )
    right.image(
        render.fit_within(heat, DISPLAY_LONG_SIDE),
        output_format="PNG",
        caption=f"Heatmap · {cam.cam.shape[0]}×{cam.cam.shape[1]} cells upsampled",
    )
    if cam.blank:
        st.warning(
            "The heatmap is empty: no channel of this layer gives positive evidence for this "
            "class. Try a deeper layer or another class."
        )
    download_left, download_right = st.columns(2)
    download_left.download_button(
        "Download overlay (PNG)",
        render.png_bytes(overlay),
        "gradcam_overlay.png",
        "image/png",
        key="download_overlay",
    )
    download_right.download_button(
        "Download heatmap (.npy)",
        render.npy_bytes(cam.heatmap),
        "gradcam_heatmap.npy",
        "application/octet-stream",
        key="download_heatmap",
    )


def predictions_ui(analysis: hookviz.Analysis) -> None:
    st.subheader("Top-5 predictions")
    frame = pd.DataFrame(
        {
            "class": [f"{p.name} ({p.index})" for p in analysis.predictions],
            "probability": [p.probability for p in analysis.predictions],
        }
    )
    chart = (
        alt.Chart(frame, height=alt.Step(26))
        .mark_bar()
        .encode(
            x=alt.X("probability:Q", axis=alt.Axis(format="%")),
            y=alt.Y("class:N", sort=None, title=None, axis=alt.Axis(labelLimit=320)),
            tooltip=["class", alt.Tooltip("probability:Q", format=".1%")],
        )
    )
    st.altair_chart(chart, width="stretch")
    st.caption(" · ".join(f"{p.name}: {p.probability:.1%}" for p in analysis.predictions))


def grid_ui(analysis: hookviz.Analysis, options: DisplayOptions) -> None:
    features = analysis.features
    channels, height, width = features.activations.shape
    st.subheader(f"Feature maps of {features.layer}")
    st.caption(
        f"A forward hook on {features.layer} copied its output: {channels} channels of "
        f"{height}×{width} cells. Each tile is one channel (number in the corner): where in the "
        "image that channel's pattern fires."
    )
    order = features.channel_order(options.order, options.channels)
    grid = render.feature_grid(
        features.activations,
        order,
        cmap=options.grid_cmap,
        scale=options.scale,
        columns=min(len(order), 8 if len(order) <= 64 else 16),
    )
    st.image(grid, output_format="PNG", width="stretch")
    st.download_button(
        "Download feature maps (PNG)",
        render.png_bytes(grid),
        f"feature_maps_{features.layer}.png",
        "image/png",
        key="download_grid",
    )


def main() -> None:
    st.set_page_config(page_title="hookviz", page_icon="🔍", layout="wide")
    st.title("hookviz")
    st.caption(
        "Look inside a CNN: a layer's feature maps and a Grad-CAM heatmap, both captured with "
        "PyTorch forward hooks from one forward pass."
    )
    choice = image_ui()
    model_name, pretrained = model_ui()
    try:
        loaded = get_model(model_name, pretrained)
    except hookviz.HookvizError as exc:
        st.error(f"Cannot load **{model_name}**: {exc}")
        st.stop()
    st.sidebar.caption(f"Running on {hookviz.devices.describe_device(loaded.device)}")
    layer = layer_ui(loaded)

    digest = hashlib.sha256(choice.data).hexdigest()[:16]
    image = decode_image(choice.data)
    try:
        first = run_analysis(choice.data, model_name, pretrained, layer, None)
        target = target_ui(
            loaded, first.predictions, f"target::{digest}::{model_name}::{pretrained}"
        )
        analysis = (
            first
            if target == first.cam.class_index
            else run_analysis(choice.data, model_name, pretrained, layer, target)
        )
    except hookviz.HookvizError as exc:
        st.error(f"Analysis failed: {exc}")
        st.stop()
    options = display_ui(analysis.features.num_channels)

    st.caption(
        f"Image: {choice.label} · {image.width}×{image.height} px · model input "
        f"{analysis.features.input_size[1]}×{analysis.features.input_size[0]} px (whole "
        "image, no crop)"
    )
    cam_ui(image, analysis, options)
    predictions_column, grid_column = st.columns([1, 2], gap="large")
    with predictions_column:
        predictions_ui(analysis)
    with grid_column:
        grid_ui(analysis, options)


main()
