"""The Explore page's exports: the three downloads, built when clicked with the options of that
moment, and the "Reproduce in Python" script (drawn in a fragment of the page's)."""

from __future__ import annotations

import streamlit as st

import hookviz
from hookviz import render
from hookviz.app import feedback, own_models
from hookviz.app.caches import images, models
from hookviz.app.pages.explore.display import display_options, grid_channels, resolve_display
from hookviz.app.sidebar import explain
from hookviz.app.sidebar.scene import Scene
from hookviz.app.view import state
from hookviz.app.view.keys import SNIPPET_OPEN
from hookviz.app.view.target import REGION_KIND, SIMILAR_KIND, snippet_code
from hookviz.snippet import View as SnippetView
from hookviz.snippet import reproduce_snippet


@st.fragment(key="downloads")
@feedback.guarded
def downloads(scene: Scene) -> None:
    """The three downloads, each built when clicked (on a separate thread, no Streamlit calls
    inside) from what the page shows at that moment: the analysis on screen
    (``state.on_screen``) and the display options (``state.wishes``). So neither a display
    change nor a class change redraws them (a new deferred download is a new element to the
    browser), and the full-resolution overlay and heatmap are only computed for a download."""
    wishes, shown, digest = state.wishes(), state.on_screen(), scene.view.digest
    drawn = shown.get("analysis")  # (None where the panel that draws the CAM failed)
    layer = drawn.features.layer if drawn is not None else scene.view.layer

    def analysis() -> hookviz.Analysis:
        now = shown.get("analysis")
        if now is None:
            raise hookviz.HookvizError("No analysis is on screen: the panel above failed.")
        return now

    def overlay_png() -> bytes:
        now = analysis()
        options = resolve_display(wishes, now)
        full = images.full_image(digest)
        picture = render.overlay(
            full,
            now.cam.heatmap_at((full.height, full.width)),
            alpha=options["alpha"],
            cmap=options["cam_cmap"],
        )
        return render.png_bytes(picture)

    def heatmap_npy() -> bytes:
        cam = analysis().cam
        return render.npy_bytes(cam.heatmap_at(cam.size))  # (not kept with the analysis)

    def grid_png() -> bytes:
        now = analysis()
        options = resolve_display(wishes, now)
        order, signs = grid_channels(now, options)
        grid = render.laid_out_grid(
            now.features.activations,
            order,
            cmap=options["grid_cmap"],
            scale=options["scale"],
            signs=signs,
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
        f"feature_maps_{layer}.png",
        "image/png",
        key="download_grid",
        on_click="ignore",
        help="The grid shown, with the channels, order, scale and colormap chosen.",
    )


def snippet(scene: Scene, analysis: hookviz.Analysis) -> None:
    """The script that recreates this view, written only while its expander is open."""
    box = st.expander("Reproduce in Python", key=SNIPPET_OPEN, on_change="rerun")
    if not box.open:
        return
    options = display_options(analysis)
    view = scene.view
    upload = own_models.find(view.model)
    fields = _target_code(scene)
    model = view.model.removeprefix(models.EMBEDDER)
    snippet_view = SnippetView(
        model=upload.architecture if upload is not None else fields.pop("model", model),
        pretrained=view.pretrained,
        checkpoint=upload.file_name if upload is not None else None,
        class_names=upload.names_file if upload is not None else None,
        image=view.image_name,
        layer=analysis.cam.layer,
        target=view.target.class_index,  # (the library's: a class index, or None for the top-1)
        **fields,
        method=analysis.cam.method,
        channels=options["channels"],
        order=options["order"],
        scale=options["scale"],
        grid_cmap=options["grid_cmap"],
        cam_cmap=options["cam_cmap"],
        alpha=options["alpha"],
        columns=render.grid_columns(options["channels"], *analysis.features.activations.shape[1:]),
    )
    box.code(reproduce_snippet(snippet_view), language="python")


def _target_code(scene: Scene) -> dict:
    """The snippet's fields for a target that is not a class (``hookviz.snippet.View``)."""
    loaded, target = scene.loaded, scene.view.target
    fields: dict = {"task": loaded.task}
    if models.LABELS in scene.view.model:  # a zero-shot model: its name, then its labels
        base, *labels = scene.view.model.split(models.LABELS)
        fields.update(model=base, labels=tuple(labels))
    code = snippet_code(target)
    if code is not None:
        fields["target_code"] = code
    if target.kind == REGION_KIND:  # the snippet sets up its rectangle's mask
        fields["rectangle"] = target.box
    elif target.kind == SIMILAR_KIND:  # and the reference image it loads
        fields["reference"] = explain.reference_name() or "reference.jpg"
    return fields
