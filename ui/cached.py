"""Every cache of the page, in one place: what is kept, keyed by what, bounded how.

Keys are plain values: the image's content hash (``digest``) instead of its bytes (hashing a
20 MB upload on every call would cost more than most of the work), model and layer names,
class indices, display options. Live objects that must not be copied (models, autograd graphs,
decoded images, results that point at images) use ``st.cache_resource``: shared by every
session, never mutated by the page. Encoded pictures are bytes and use ``st.cache_data``.
Every cache is bounded (``max_entries``; the stores by count and size, ``Kept``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import numpy as np
import streamlit as st
from PIL import Image

import hookviz
from hookviz import render, targets
from ui import memory_budget, own_models, upload_folder
from ui.browser import payloads
from ui.upload_folder import UploadFolder
from ui.view.keys import AnalysisKey, SeenKey
from ui.view.target import BOX_KIND, CLASS_KIND, REGION_KIND, TOP1_KIND

EMBEDDER = "embed:"  # a model name so prefixed: that classifier as an embedder (head removed)
# A zero-shot model's labels travel in its name (so in every key and the address):
# "clip:ViT-B-32|a dog|a cat" is that CLIP scoring those labels.
LABELS = "|"
DISPLAY_LONG_SIDE = 1024  # pictures are shown (not analysed) at most this large
# A photo is analysed at most this large (short side at least WORKING_SHORT_SIDE where it has
# it): nearly twice what the largest classifier is fed (518 px), more than a detector's 800.
WORKING_SHORT_SIDE = 960
WORKING_LONG_SIDE = 2048


class Kept:
    """Values by key, least recently used dropped first, bounded by count and (for bytes) total
    size: the uploaded checkpoints, the made visualizations. A session that loses its
    checkpoint to eviction registers it again on its next run: its uploader still holds the
    file."""

    def __init__(self, entries: int, total: float = float("inf")) -> None:
        self._lock = threading.Lock()
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        self._entries, self._total = entries, total

    def put(self, value: Any, key: Hashable | None = None) -> Hashable:
        """Keep ``value`` under ``key`` (default: the SHA-256 of its bytes); returns the key."""
        key = key or hashlib.sha256(value).hexdigest()
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._entries or (
                self._total != float("inf")  # (sized only when bounded by size: bytes)
                and len(self._items) > 1
                and sum(map(len, self._items.values())) > self._total
            ):
                self._items.popitem(last=False)
        return key

    def has(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._items

    def get(self, key: Hashable, *default: Any) -> Any:
        """The value under ``key``; ``default`` where there is none, if given, else KeyError."""
        with self._lock:
            if default and key not in self._items:
                return default[0]
            self._items.move_to_end(key)
            return self._items[key]


def image_store() -> UploadFolder:
    """The images by content hash, on disk (``ui.upload_folder``: shared by the replicas that
    see the same folder); the folder is read from the environment on each call."""
    return _image_store(str(upload_folder.default_folder()), upload_folder.default_limit())


@st.cache_resource(max_entries=2, show_spinner=False)
def _image_store(folder: str, limit_bytes: int) -> UploadFolder:
    return UploadFolder(Path(folder), limit_bytes)


@st.cache_resource(max_entries=8, show_spinner=False)
def decoded_image(digest: str) -> Image.Image:
    """The image the page analyses (raises hookviz.ImageError for a bad file): RGB, at most
    ``WORKING_LONG_SIDE`` on its long side. A larger photo is decoded at a reduced scale (a
    JPEG by libjpeg's DCT scaling, never fully in memory) and then stands for its file
    (``info["full_size"]``): results and coordinates are on the file's pixel grid, as the
    library gives them for the full decode. A 30-megapixel photo so costs about 5 MB here
    instead of 90 MB; the full resolution is decoded only for a download (``full_image``)."""
    memory_budget.check("a new photo")
    image = hookviz.load_image(image_store().get(digest), shrink_to=WORKING_SHORT_SIDE)
    full = image.info.get("full_size", image.size)
    if max(image.size) > WORKING_LONG_SIDE:  # (not a JPEG, or a very elongated one)
        image = render.fit_within(image, WORKING_LONG_SIDE)
    if tuple(image.size) != tuple(full):
        image.info["full_size"] = tuple(full)
    return image


def full_image(digest: str) -> Image.Image:
    """The image at its file's full resolution, for a download only (not kept)."""
    return hookviz.load_image(image_store().get(digest))


def image_size(digest: str) -> tuple[int, int]:
    """The (width, height) of the image's file, upright."""
    image = decoded_image(digest)
    return tuple(image.info.get("full_size", image.size))


@st.cache_resource(max_entries=16, show_spinner=False)
def display_image(digest: str) -> Image.Image:
    """The image at display size: every picture on the page is drawn on this grid. It is a
    picture of its own (no ``full_size``): what is computed on it is on its grid."""
    picture = render.fit_within(decoded_image(digest), DISPLAY_LONG_SIDE)
    if "full_size" in picture.info:
        picture = picture.copy()
        picture.info.pop("full_size")
    return picture


@st.cache_data(max_entries=16, show_spinner=False)
def display_jpeg(digest: str) -> bytes:
    """The display-size image as JPEG."""
    return render.jpeg_bytes(display_image(digest))


@st.cache_data(max_entries=1, show_spinner=False)
def sample_bytes() -> bytes:
    return hookviz.sample_image_path().read_bytes()


def catalog() -> list[hookviz.ModelInfo]:
    """The models and whether each can load now (the hub caches and the model-cards folder can
    change: re-checked every 10 seconds, not on every rerun; at once for another folder)."""
    return _catalog(os.environ.get(hookviz.models.MODELS_DIR_ENV, ""))


@st.cache_data(ttl=10, max_entries=2, show_spinner=False)
def _catalog(models_dir: str) -> list[hookviz.ModelInfo]:
    return hookviz.model_catalog()


@st.cache_resource(max_entries=1, show_spinner=False)
def checkpoint_store() -> Kept:
    """Uploaded checkpoints and class-name files by digest (a ViT-B is 330 MB: a few only)."""
    return Kept(entries=8, total=1200 * 2**20)


@st.cache_resource(max_entries=4, show_spinner=False)
def model(name: str, pretrained: bool) -> hookviz.LoadedModel:
    """One shared, frozen model per (name, weights), traced once here. An uploaded model
    (``upload:...``) is built from the checkpoint store."""
    memory_budget.check("another model")
    if LABELS in name:
        base, *labels = name.split(LABELS)
        labelled = hookviz.zero_shot(model(base, pretrained), labels)
        hookviz.layer_table(labelled)
        return labelled
    if own_models.is_upload(name):
        loaded = own_models.load(name, checkpoint_store())
    elif name.startswith(EMBEDDER):  # a classifier without its head (model_picker.EMBEDDER)
        base = name.removeprefix(EMBEDDER)
        loaded = hookviz.load_model(base, pretrained=pretrained, task="embedding")
    else:
        loaded = hookviz.load_model(name, pretrained=pretrained)
    if loaded.task != "zero-shot":  # (without its labels it scores nothing: traced with them)
        hookviz.layer_table(loaded)
    return loaded


@st.cache_resource(max_entries=16, show_spinner=False)
def layer_shapes(name: str, pretrained: bool, height: int, width: int) -> dict:
    """Each layer's (C, h, w) at this input size (the picker shows the image's own shapes)."""
    return hookviz.core.layers.layer_shapes(model(name, pretrained), height, width)


# A live resource tied to a model (it holds an autograd graph), bounded: each keeps the graph
# from the layer to the scores for fast class switches (tens to a few hundred MB on the CPU).
@st.cache_resource(max_entries=4, show_spinner=False)
def forward_pass(digest: str, name: str, pretrained: bool, layer: str) -> hookviz.ForwardPass:
    """One hooked forward per (image, model, layer); every class is then a backward pass. On a
    GPU, the forward passes other sessions ask for at the same moment run with it as one batch
    (``batcher``), each with its top-1 class's gradient."""
    memory_budget.check("a new analysis")
    return batcher(name, pretrained).forward_pass(decoded_image(digest), layer)


@st.cache_resource(max_entries=4, show_spinner=False)
def batcher(name: str, pretrained: bool) -> hookviz.Batcher:
    """The model's ``Batcher``: requests within ``HOOKVIZ_BATCH_MS`` milliseconds of each other
    (default 5 on a GPU, 0, each alone, on the CPU, where a batch saves nothing) share a batch
    of at most ``HOOKVIZ_BATCH_SIZE`` (default 8)."""
    loaded = model(name, pretrained)
    default_ms = 5.0 if loaded.device.type == "cuda" else 0.0
    window_ms = float(os.environ.get("HOOKVIZ_BATCH_MS", "") or default_ms)
    size = int(os.environ.get("HOOKVIZ_BATCH_SIZE", "") or 8)
    return hookviz.Batcher(loaded, window_s=window_ms / 1000, max_batch=size)


# (bounds: a forward pass's top-5 are computed ahead, ``top_classes``: five per layer seen)
@st.cache_resource(max_entries=64, show_spinner=False)
def analysis(key: AnalysisKey) -> hookviz.Analysis:
    """Predictions, feature maps and a CAM; a seen view costs nothing, a new class on a kept
    forward pass a backward pass only."""
    return forward_pass(*key.seen).analysis(library_target(key), key.method)


def library_target(key: AnalysisKey) -> object:
    """The library's target for the view's (``hookviz.targets``): None for the model's own
    choice, a class index, a ``Box``, a ``Region`` (a rectangle as its mask) or a
    ``Similarity`` to the reference image's embedding."""
    target, digest = key.target, key.digest
    if target.kind == TOP1_KIND:
        return None
    if target.kind == CLASS_KIND:
        return target.index
    if target.kind == BOX_KIND:
        return targets.Box(target.box, target.index)
    if target.kind == REGION_KIND:
        mask = None if target.box is None else _rectangle(target.box, digest)
        return targets.Region(target.index, mask)
    return targets.Similarity(reference_embedding(key.model, key.pretrained, target.reference))


@st.cache_resource(max_entries=8, show_spinner=False)
def reference_embedding(name: str, pretrained: bool, digest: str) -> object:
    """An image's embedding by the model (a reference is embedded once, not at every run)."""
    return hookviz.embed(model(name, pretrained), decoded_image(digest))


def _rectangle(box: tuple[float, float, float, float], digest: str) -> np.ndarray:
    """A region's rectangle as a mask at the image's size (the library takes masks)."""
    width, height = image_size(digest)
    x0, y0, x1, y1 = (max(0, round(value)) for value in box)
    mask = np.zeros((height, width), dtype=bool)
    mask[y0:y1, x0:x1] = True
    return mask


# ---------------------------------------------------------------- what the model found


@st.cache_resource(max_entries=8, show_spinner=False)
def detections(seen: SeenKey) -> tuple[hookviz.Detection, ...]:
    """A detector's detections in the kept forward pass, most confident first, in the image's
    pixels (all of them: the page picks which to list)."""
    return tuple(hookviz.core.tasks.detections(forward_pass(*seen).context, 0.0))


@st.cache_resource(max_entries=8, show_spinner=False)
def segmentation(seen: SeenKey) -> hookviz.Segmentation:
    """A segmenter's categories per pixel in the kept forward pass, on the display-size
    image's grid (what the page draws them on; at a 24-megapixel photo's own size the mask
    alone would be 190 MB)."""
    context = forward_pass(*seen).context
    picture = display_image(seen.digest)
    shown = dataclasses.replace(context, image_size=(picture.height, picture.width))
    return hookviz.core.tasks.segmentation(shown)


# ---------------------------------------------------------------- pictures (encoded bytes)


# The inputs of the pictures the browser colours itself (``ui.browser``), encoded once
# (``payloads``): the image as a lossless PNG, the heatmap as colormap indices, the grid as its
# series. Resources: never mutated by the page (no copy per run).
@st.cache_resource(max_entries=16, show_spinner=False)
def display_png(digest: str) -> bytes:
    """The display-size image as a PNG (lossless: the browser blends these pixels)."""
    return render.png_bytes(display_image(digest))


@st.cache_resource(max_entries=64, show_spinner=False)
def heat_indices(key: AnalysisKey) -> tuple[bytes, int, int]:
    """The heatmap of analysis ``key`` on the display-size image's grid, as the browser takes
    it (``payloads.heat_indices``), with the grid's width and height."""
    picture = display_image(key.digest)
    packed = payloads.heat_indices(analysis(key).cam, picture.width, picture.height)
    return packed, picture.width, picture.height


@st.cache_resource(max_entries=16, show_spinner=False)
def grid_series(
    seen: SeenKey,
    orders: tuple[tuple[str, tuple[int, ...], tuple[float, ...] | None], ...],
    background: tuple[int, int, int],
    _key: AnalysisKey,
) -> dict:
    """The feature-map grids of every channel order and count, as the browser takes them
    (``payloads.grid_series``). Cached by ``seen``, what the feature maps depend on, not by the
    class: a class change keeps the grid (the orders' channels and signs name what it does
    change). ``_key``: the analysis shown, whose feature maps these are (not part of the
    key)."""
    return payloads.grid_series(analysis(_key).features, orders, background)


def picture_id(key: tuple) -> str:  # (any tuple of plain values and targets)
    """A short name for an analysis's pictures (the browser's cache key)."""
    return hashlib.sha1(repr(key).encode()).hexdigest()[:16]


@st.cache_data(max_entries=16, show_spinner=False)
def channel_overlay_jpeg(key: AnalysisKey, channel: int, alpha: float, cmap: str) -> bytes:
    """One channel's map stretched over the display-size image."""
    picture = display_image(key.digest)
    features = analysis(key).features
    single = hookviz.core.cam.to_pixel_grid(
        features.activations[channel], (picture.height, picture.width)
    )
    picture = render.overlay(picture, single, alpha=alpha, cmap=cmap)
    return render.jpeg_bytes(render.fit_within(picture, 512))


def small_overlay(digest: str, cam: hookviz.GradCAM, alpha: float, cmap: str) -> bytes:
    """A CAM over a 360-pixel copy of the image (the panels' side-by-side pictures)."""
    picture = render.fit_within(display_image(digest), 360)
    heat = cam.heatmap_at((picture.height, picture.width))
    return render.jpeg_bytes(render.overlay(picture, heat, alpha=alpha, cmap=cmap))


# ---------------------------------------------------------------- dataset runs


@st.cache_resource(max_entries=4, show_spinner=False)
def dataset_run(folder: str, stamp: float) -> hookviz.Run:
    """A run folder, reopened whenever ``stamp`` (its files' modification time) changes."""
    return hookviz.open_run(Path(folder).expanduser())


@st.cache_data(max_entries=256, show_spinner=False)
def run_picture(path: str) -> bytes | None:
    """A 240-pixel copy of a run's image, or None when the file is gone or unreadable."""
    try:
        image = hookviz.load_image(path)
    except (hookviz.ImageError, OSError):
        return None
    return render.jpeg_bytes(render.fit_within(image, 240))


@st.cache_data(max_entries=256, show_spinner=False)
def run_overlay(folder: str, stamp: float, row: int, alpha: float, cmap: str) -> bytes | None:
    """Row ``row``'s CAM over a 240-pixel copy of its image: the overlay the run wrote where it
    wrote one (``--overlays``), else drawn here from its image; None when neither is there."""
    run = dataset_run(folder, stamp)
    written = run.overlay_path(row)
    if written is not None:
        return run_picture(str(written))
    found = run.input_path(row)
    if found is None:
        return None
    try:
        image = hookviz.load_image(found)
    except (hookviz.ImageError, OSError):
        return None
    picture = render.fit_within(image, 240)
    heat = run.heatmap_at(row, (picture.height, picture.width))
    return render.jpeg_bytes(render.overlay(picture, heat, alpha=alpha, cmap=cmap))


# ---------------------------------------------------------------- insight panels


@st.cache_resource(max_entries=8, show_spinner=False)
def gallery(digest: str, name: str, pretrained: bool, layer: str, method: str) -> list:
    return hookviz.gallery(forward_pass(digest, name, pretrained, layer), method)


@st.cache_resource(max_entries=8, show_spinner=False)
def against_and_contrast(
    digest: str, name: str, pretrained: bool, layer: str, first: int, second: int
) -> tuple[hookviz.GradCAM, hookviz.GradCAM]:
    kept = forward_pass(digest, name, pretrained, layer)
    return hookviz.evidence_against(kept, first), hookviz.contrast(kept, first, second)


@st.cache_resource(max_entries=8, show_spinner=False)
def rollout(digest: str, name: str, pretrained: bool, fusion: str, discard: float):
    return hookviz.attention_rollout(
        model(name, pretrained), decoded_image(digest), head_fusion=fusion, discard_ratio=discard
    )


@st.cache_resource(max_entries=8, show_spinner=False)
def layer_sweep(digest: str, name: str, pretrained: bool, target: int) -> list:
    return hookviz.layer_sweep(model(name, pretrained), decoded_image(digest), target=target)


@st.cache_resource(max_entries=8, show_spinner=False)
def steps(digest: str, name: str, pretrained: bool, layer: str, target: int):
    return hookviz.grad_cam_steps(forward_pass(digest, name, pretrained, layer), target)


@st.cache_resource(max_entries=8, show_spinner=False)
def teaching_layer(digest: str, name: str, pretrained: bool, target: int, before: str):
    loaded = model(name, pretrained)
    return hookviz.teaching_layer(loaded, decoded_image(digest), target, before=before)


@st.cache_resource(max_entries=8, show_spinner=False)
def trust(digest: str, name: str, pretrained: bool, layer: str, target: int, method: str):
    loaded = model(name, pretrained)
    kept = forward_pass(digest, name, pretrained, layer)
    # the curves work on the model's input grid: the heatmap there, not at the photo's size
    heatmap = kept.grad_cam(target, method).heatmap_at(kept.features.input_size)
    return hookviz.trust_curves(loaded, decoded_image(digest), heatmap, target)


@st.cache_resource(max_entries=8, show_spinner=False)
def layer_stats(digest: str, name: str, pretrained: bool) -> list[hookviz.LayerStats]:
    return hookviz.layer_stats(model(name, pretrained), decoded_image(digest))


@st.cache_resource(max_entries=8, show_spinner=False)
def gradient_flow(digest: str, name: str, pretrained: bool, target: int) -> list:
    return hookviz.gradient_flow(model(name, pretrained), decoded_image(digest), target)


@st.cache_resource(max_entries=16, show_spinner=False)
def intervention(
    digest: str,
    name: str,
    pretrained: bool,
    layer: str,
    channels: tuple[int, ...],
    scale: float,
    target: int,
) -> hookviz.Intervention:
    loaded = model(name, pretrained)
    return hookviz.intervene(
        loaded, decoded_image(digest), layer, channels, scale, cam_layer=layer, target=target
    )


# ---------------------------------------------------------------- what a channel looks for


@st.cache_resource(show_spinner=False)
def visualizations() -> Kept:
    """Made visualizations, shared by every session (a few hundred KB each): a lookup that
    never computes (the page shows a visualization only once it was asked for and made)."""
    return Kept(entries=48)


@st.cache_data(max_entries=32, show_spinner=False)
def seconds_per_step(
    name: str, pretrained: bool, layer: str | None, target: int | None, count: int
) -> float:
    """One optimisation step's time for a visualization (of channel 0 of ``layer``, or of
    class ``target`` when there is no layer), from three steps timed here."""
    channel = None if target is not None else 0
    loaded = model(name, pretrained)
    return hookviz.visualization_seconds(loaded, layer, channel, target, 1, count=count) / 2


@st.cache_resource(max_entries=16, show_spinner=False)
def channel_filter(
    digest: str,
    name: str,
    pretrained: bool,
    layer: str,
    channel: int,
    position: tuple[int, int] | None,
) -> hookviz.ChannelFilter:
    """The convolution behind a channel, on the image, at a position of its map."""
    return hookviz.channel_filter(
        model(name, pretrained), layer, channel, decoded_image(digest), position
    )
