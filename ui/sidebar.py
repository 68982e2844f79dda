"""The shared sidebar (image, model, layer, class, method) and the scene it resolves: the one
analysis every page shows, computed before any page draws, so a page never shows a new photo
beside an old heatmap.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import streamlit as st
from PIL import Image

import hookviz
from hookviz.core.features import WEIGHT_ORDERINGS

from . import cached, feedback, own_models, state
from .state import AUTO, View
from .texts import METHOD_LABELS

IMAGE_TYPES = ["png", "jpg", "jpeg", "jfif", "webp", "bmp", "gif", "tif", "tiff"]
WEIGHTS = ("pretrained", "untrained")
MAX_UPLOAD_MB = hookviz.images.MAX_BYTES // (1024 * 1024)
# The uploader accepts more than hookviz does, so that a too-large file reaches the page and is
# reported where the user looks (the browser's own refusal is a line under the uploader).
UPLOADER_LIMIT_MB = 4 * MAX_UPLOAD_MB
REPLACEMENT_WAIT_S = 1.0
_UPLOAD = "hookviz.upload"  # (file_id, digest or None, name, error or None) of the last upload
_IMAGE = "hookviz.image"  # (digest, name) of the image shown last
_LAST = "hookviz.last_shown"  # the View.key of the last analysis the page showed
_OPENED = "hookviz.opened"  # (digest, name) of an image opened from a dataset run
# The fragments of Explore's results a class changes (the rest of the page does not depend on
# the class: the original, the top-5, the grid unless ordered by channel weight, the texts).
CLASS_FRAGMENTS = ("overlay", "heatmap", "exports")
CLASS_FRAGMENT = "class"  # the sidebar's class widgets, redrawn with them
# What a layer change reruns on Explore: the pictures first (they compute the layer's forward
# pass, with its indicator where the results are), then the sidebar's layer section and the
# display options (their ranges are the layer's). The original and the top-5 come along (they
# are inside the results), the rest of the sidebar does not.
LAYER_FRAGMENTS = ("results", "layer", "display")


def class_fragments() -> tuple[str, ...]:
    """The fragments a class change reruns on Explore, asked at the moment of the change (they
    depend on the grid's order and on whether the channel weights are open)."""
    scope = list(CLASS_FRAGMENTS)
    if state.wish("order") in WEIGHT_ORDERINGS:  # the grid's order and signs are the class's
        scope.append("grid")
    if st.session_state.get("channels_open"):
        scope.append("weights")
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
    """

    view: View
    loaded: hookviz.LoadedModel
    image: Image.Image
    original_size: tuple[int, int]
    analysis: hookviz.Analysis | None
    previous: hookviz.Analysis | None = None
    previous_key: tuple | None = None

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
        results_fragment: the page draws its results as fragments (Explore: the whole
            results, and inside them what a class changes, ``class_fragments``): a layer or a
            class change then reruns only those, which resolve the new layer and class
            themselves (``with_wished_view``).
    """
    digest, name = _image_section()
    model_name, pretrained = _model_section()
    loaded = _load(model_name, pretrained)
    original = cached.decoded_image(digest)
    input_size = loaded.preprocessing.input_size(original.width, original.height)
    # not with Score-CAM: its run draws a progress bar instead of the results fragments
    fragments = results_fragment and state.wish("method") != "scorecam"
    st.sidebar.header("3 · Layer")
    with st.sidebar:
        layer = _layer_section(
            loaded, model_name, pretrained, input_size, LAYER_FRAGMENTS if fragments else ()
        )
    kept = _forward(digest, model_name, pretrained, layer)
    target = _target_section(
        loaded,
        kept.predictions,
        f"{digest[:10]}:{model_name}:{pretrained}",
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
    )
    return _local.scene


def with_wished_view(scene: Scene) -> Scene | None:
    """The scene for the layer and the class the user chose last: ``scene`` itself on a full
    run (the sidebar resolved them); on a rerun of the results' fragments alone (a layer or a
    class picked in the sidebar), the same image and model at that layer, with that class
    (the forward pass is computed here when the layer is new, with its indicator; an error
    stops the run with its message). None when it needs a Score-CAM run first."""
    layer = wished_layer(scene.loaded)
    if layer == scene.view.layer:
        return with_wished_target(scene)
    state.shown("layer", layer)
    view = dataclasses.replace(scene.view, layer=layer)
    kept = _forward(view.digest, view.model, view.pretrained, layer)
    analysis = _analysis_now(kept, view)
    if analysis is None:
        return None
    _local.scene = dataclasses.replace(
        scene, view=view, analysis=analysis, previous=None, previous_key=None
    )
    return with_wished_target(_local.scene)


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
    kept = _forward(view.digest, view.model, view.pretrained, view.layer)
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
    try:
        with feedback.working("Computing the gradient…"):
            found = memo["analysis", view.key] = cached.analysis(*view.key)
            return found
    except hookviz.HookvizError as exc:
        feedback.error(f"Analysis failed: {exc}")
        state.stop()


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


# ---------------------------------------------------------------- image


def _image_section() -> tuple[str, str | None]:
    st.sidebar.header("1 · Image")
    upload = st.sidebar.file_uploader(
        "Upload an image",
        type=IMAGE_TYPES,
        key="upload",
        max_upload_size=UPLOADER_LIMIT_MB,
        help=f"PNG, JPEG, WebP, BMP, GIF (first frame) or TIFF, up to {MAX_UPLOAD_MB} MB and "
        f"{hookviz.images.MAX_PIXELS // 1_000_000} megapixels. Without one, the sample is used.",
    )
    store = cached.image_store()
    if upload is None:
        # _IMAGE stays: if a new file is refused, the last image that worked comes back.
        if st.session_state.pop(_UPLOAD, None) is not None:
            _wait_for_a_replacement()
        opened = st.session_state.get(_OPENED)
        if opened is not None and store.has(opened[0]):
            st.sidebar.caption(f"**{opened[1]}**, opened from a dataset run.")
            st.sidebar.button(
                "Back to the sample photo",
                key="close_opened",
                on_click=lambda: st.session_state.pop(_OPENED, None),
            )
            return opened
        return _sample(store), None
    seen = st.session_state.get(_UPLOAD)
    if seen is not None and seen[0] == upload.file_id:
        digest = seen[1]
        if digest is None:  # this file was refused: keep saying why until another comes
            feedback.error(seen[3])
            return _fallback(store)
        if not store.has(digest):  # dropped from the store by other sessions' uploads
            store.put(upload.getvalue(), digest)
        return digest, upload.name
    data = upload.getvalue()
    if len(data) > hookviz.images.MAX_BYTES:
        return _refuse(
            upload,
            f"Could not use **{upload.name}**: it is {len(data) / 2**20:.0f} MB and the limit is "
            f"{MAX_UPLOAD_MB} MB. Upload a smaller copy (any photo is analysed at the model's "
            "size anyway).",
            store,
        )
    digest = hashlib.sha256(data).hexdigest()
    store.put(data, digest)
    try:
        with feedback.working(f"Reading {upload.name} ({len(data) / 2**20:.1f} MB)…"):
            cached.decoded_image(digest)
    except hookviz.ImageError as exc:
        return _refuse(upload, f"Could not use **{upload.name}**: {exc}", store)
    st.session_state[_UPLOAD] = (upload.file_id, digest, upload.name, None)
    st.session_state[_IMAGE] = (digest, upload.name)
    st.session_state.pop(_OPENED, None)  # a new upload replaces an image opened from a run
    return digest, upload.name


def open_image(data: bytes, name: str) -> None:
    """Show ``data`` (an image of a dataset run) on the pages until an upload replaces it."""
    digest = cached.image_store().put(data)
    st.session_state[_OPENED] = (digest, name)


def _wait_for_a_replacement() -> None:
    """The uploader was just emptied: the file was removed, or this is the first half of a
    replacement (the browser drops the old file, reruns the page, then sends the new one). Wait
    a moment before drawing the sample: a replacement's run arrives meanwhile and takes over at
    the next page update, so the sample never flashes between two photos."""
    with feedback.working("Waiting for the upload…"):
        time.sleep(REPLACEMENT_WAIT_S)
    st.empty()  # a page update: Streamlit stops this run here if the new file's run is waiting


def _refuse(upload, message: str, store: cached.ImageStore) -> tuple[str, str | None]:
    st.session_state[_UPLOAD] = (upload.file_id, None, upload.name, message)
    feedback.error(message)
    return _fallback(store)


def _fallback(store: cached.ImageStore) -> tuple[str, str | None]:
    """After a refused upload: the last upload that worked (nothing the user did is lost), else
    the sample."""
    last = st.session_state.get(_IMAGE)
    if last is not None and store.has(last[0]):
        feedback.error_hint(f"Still showing **{last[1]}**. Upload another file to try again.")
        return last
    feedback.error_hint("Showing the sample image instead. Upload another file to try again.")
    return _sample(store), None


def _sample(store: cached.ImageStore) -> str:
    data = cached.sample_bytes()
    return store.put(data, _sample_digest(data))


@st.cache_data(max_entries=1, show_spinner=False)
def _sample_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------- model


def page_without_scene() -> None:
    """The sidebar of a page that needs no image or model (Your model)."""
    st.sidebar.caption(
        "Image, model, layer and class are chosen in this sidebar on the other pages; a model "
        "brought here joins their model list."
    )


@dataclass(frozen=True)
class ModelChoices:
    """The models a model box offers (the catalog and this session's uploads) and their
    labels, for one weights choice."""

    names: list[str]
    catalog: dict
    uploads: dict
    untrained: bool

    def label(self, name: str) -> str:
        if name in self.uploads:
            return self.uploads[name].label
        if name not in self.catalog:
            return f"{name} ({'random weights' if self.untrained else 'typed'})"
        info = self.catalog[name]
        if info.source == "card":
            return f"card: {info.status}" if info.ready else f"{name} (cannot load)"
        if info.status == "bundled":
            return f"{name} (offline)"
        # random weights need no file: "download 45 MB" would mislead
        return f"{name} ({'random weights' if self.untrained else info.status})"

    def own_weights(self, name: str) -> bool:
        """Whether ``name`` brings its own weights (an upload, a model card): no weights
        choice."""
        return _own_weights(name, self.catalog)


def model_choices(wished: str, weights: str) -> ModelChoices:
    """What a model box offers when ``wished`` is the wish and ``weights`` the weights wish."""
    catalog = {info.name: info for info in cached.catalog()}
    uploads = {upload.name: upload for upload in own_models.session_models()}
    if own_models.is_upload(wished) and wished not in uploads:
        # a link to a model brought in another session of this server: offer it if it is here
        known = own_models.find(wished)
        if known is not None:
            uploads[wished] = known
    untrained = weights == "untrained" and not _own_weights(wished, catalog)
    names = list(catalog) + list(uploads)
    if wished.startswith("timm:") and wished not in catalog:
        names.append(wished)  # typed by name (or from a link): offered like the listed ones
    return ModelChoices(names, catalog, uploads, untrained)


def _model_section() -> tuple[str, bool]:
    st.sidebar.header("2 · Model")
    choices = model_choices(state.wish("model"), state.wish("weights"))
    names, label, uploads, untrained = (
        choices.names,
        choices.label,
        choices.uploads,
        choices.untrained,
    )

    name = state.widget(
        "model",
        st.sidebar.selectbox,
        state.resolve("model", state.options_valid(names), hookviz.DEFAULT_MODEL),
        "Network",
        names,
        format_func=label,
        # the labels change with the weights: a fresh widget then (a kept one shows old labels)
        key=f"model@{'untrained' if untrained else 'pretrained'}:{len(uploads)}",
        help="Bundled models work offline. torchvision and timm models download their weights "
        "once; untrained ones need no download. Bring your own on the Your model page.",
    )
    # In a form: a bare text box in the sidebar keeps the class box below from opening after
    # a rerun (seen in Chromium with Streamlit 1.67); a form sends only on its button.
    with st.sidebar.form("timm_form", border=False, enter_to_submit=True):
        st.text_input(
            "Or any timm model",
            key="timm_name",
            placeholder="e.g. resnet34d, deit_small_patch16_224",
            help="Any name from timm.list_models() (a pretrained tag such as .a1_in1k "
            "allowed): pretrained weights from the local Hugging Face cache, or random weights.",
        )
        st.form_submit_button("Use this timm model", on_click=_typed_timm, key="timm_use")
    if choices.own_weights(name):
        st.sidebar.caption("Its own trained weights (from the checkpoint).")
        return name, True
    weights = state.widget(
        "weights",
        st.sidebar.radio,
        state.resolve("weights", state.options_valid(WEIGHTS), "pretrained"),
        "Weights",
        WEIGHTS,
        horizontal=True,
        help="Untrained = random weights, the same on every load of an architecture: a sanity "
        "check (a good explanation should change) that needs no download.",
    )
    if weights == "untrained":
        st.sidebar.caption("⚠️ Untrained: random weights, predictions and heatmaps are noise.")
    return name, weights == "pretrained"


def _typed_timm() -> None:
    typed = str(st.session_state.get("timm_name", "")).strip()
    if typed:
        # a new architecture: its own default layer and top-1 class
        state.choose("model", "timm:" + typed.removeprefix("timm:"))
        state.choose("layer", None)
        state.choose("target", AUTO)
        st.session_state["timm_name"] = ""


def _own_weights(name: str, catalog: dict) -> bool:
    """Whether ``name`` brings its own weights (an upload, a model card): no weights choice."""
    return own_models.is_upload(name) or (name in catalog and catalog[name].source == "card")


def _load(name: str, pretrained: bool) -> hookviz.LoadedModel:
    weights = "pretrained" if pretrained else "untrained"
    upload = own_models.find(name) if own_models.is_upload(name) else None
    shown = upload.label if upload is not None else f"{name} ({weights})"
    try:
        with feedback.working(f"Loading {shown}…"):
            return cached.model(name, pretrained)
    except hookviz.HookvizError as exc:
        feedback.error(f"Cannot load **{shown}**: {exc}")
        state.stop()


# ---------------------------------------------------------------- layer


def wished_layer(loaded: hookviz.LoadedModel) -> str:
    """The layer to show: the user's wish when the list offers it (or a name for the same
    tensor), else the model's default."""
    table = hookviz.layer_table(loaded)
    offered = table.hookable if state.wish("all_modules") else table.distinct
    names = {layer.name for layer in offered}
    wished = state.wish("layer")
    if wished is not None and wished not in names:
        wished = table.canonical(wished)  # a name for the same tensor
    return wished if wished in names else table.default


@st.fragment(key="layer")
def _layer_section(
    loaded: hookviz.LoadedModel,
    name: str,
    pretrained: bool,
    input_size: tuple[int, int],
    rerun: tuple[str, ...],
) -> str:
    """The layer box with what it picked. A pick reruns ``rerun`` (the page's pictures, this,
    the display options), or the whole page where the page has no such fragments."""
    table = hookviz.layer_table(loaded)
    every = bool(state.wish("all_modules"))
    layers = {layer.name: layer for layer in (table.hookable if every else table.distinct)}
    names = list(layers)
    shapes = cached.layer_shapes(name, pretrained, *input_size)
    current = state.shown("layer", wished_layer(loaded))

    def label(layer: str) -> str:
        # name and shape only: the sidebar is narrow (the type is in the caption below)
        channels, height, width = shapes.get(layer) or layers[layer].shape
        star = "  ★" if layer == table.default else ""
        blank = "  (no gradient)" if layers[layer].zero_gradient else ""
        return f"{layer} · {channels}×{height}×{width}{star}{blank}"

    height, width = input_size
    chosen = state.widget(
        "layer",
        st.selectbox,
        current,
        "Target layer",
        names,
        format_func=label,
        # the labels carry this image's shapes: a new input size needs a fresh widget
        key=f"layer@{height}x{width}:{every}",
        rerun=rerun or (state.WHOLE_PAGE,),
        help="Modules whose output is a map of the image (a transformer's patch tokens count, "
        "as a grid), in execution order, with their output shape for this image (★ = the "
        "default: the last layer whose grid follows the image and reaches the class score; "
        "'no gradient': the class score does not depend on it). Deep layers: coarse maps of "
        "object parts; early layers: fine maps of edges and colours.",
    )
    st.caption(
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
        # the list and perhaps the layer shown change: the whole page
        rerun=(state.WHOLE_PAGE,),
        help="The short list leaves out Identity modules and containers that only pass on "
        "their last child's output (the same tensor under a second name).",
    )
    if table.excluded:
        with st.expander(f"{len(table.excluded)} modules can't be picked"):
            for layer in table.excluded:
                st.caption(layer.reason)
    return chosen


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
    st.sidebar.header("4 · Target class")
    with st.sidebar:
        target = _class_fragment(loaded, predictions, identity, rerun)
    return None if target == AUTO else int(target)


@st.fragment(key=CLASS_FRAGMENT)
def _class_fragment(
    loaded: hookviz.LoadedModel,
    predictions: tuple[hookviz.Prediction, ...],
    identity: str,
    rerun: Callable[[], tuple[str, ...]] | tuple[str, ...],
) -> int:
    """The class: a box with every class, and this image's top-5 as one-click choices. Both show
    the one wish, so a change in either redraws both (this fragment) with the pictures the class
    changes (``rerun``); without those (another page, a Score-CAM run) the whole page reruns."""
    top = {p.index: p for p in predictions}
    rest = sorted((i for i in range(loaded.num_classes) if i not in top), key=loaded.class_name)
    options = [AUTO, *top, *rest]
    ranks = {index: rank for rank, index in enumerate(top, start=1)}

    def label(index: int) -> str:
        if index == AUTO:
            best = predictions[0]
            return f"Top-1: {best.name} ({best.probability:.1%})"
        if index in top:
            return f"#{ranks[index]} {loaded.class_name(index)} ({top[index].probability:.1%})"
        return loaded.class_name(index)

    def scope() -> tuple[str, ...]:
        pictures = tuple(rerun() if callable(rerun) else rerun)
        return (*pictures, CLASS_FRAGMENT) if pictures else (state.WHOLE_PAGE,)

    target = state.widget(
        "target",
        st.selectbox,
        state.resolve("target", state.options_valid(options), AUTO),
        "Explain the class",
        options,
        format_func=label,
        # labels follow this image's predictions: the browser would keep the old label of an
        # unchanged choice ("Top prediction: <the previous image's class>") under the same key
        key=f"target@{identity}",
        rerun=scope,
        help="By default the top prediction of each image; then the top-5; type to search all "
        "classes.",
    )
    # The top-5 as radio buttons: one click (a box of 1,000 options takes 30-40 ms in the
    # browser just to close and send), and the ranking in view. Top-1 follows each image.
    quick = [AUTO, *list(top)[1:]]
    state.widget(
        "target",
        st.radio,
        target if target in quick else None,  # another class: no button lit
        "This image's top 5",
        quick,
        format_func=label,
        key=f"target_top@{identity}",
        rerun=scope,
        second=True,
        help="One click explains one of the model's five most probable classes for this image.",
    )
    return target


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
