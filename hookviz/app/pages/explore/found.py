"""Explore for a model that is not a classifier: what it found, drawn over the image (a
detector's boxes, a segmenter's outlined regions), listed in place of the top-5, and every box's
or category's CAM side by side; for an embedder, the reverse comparison. The class views stay
with the classifiers (``page``)."""

from __future__ import annotations

import dataclasses

import streamlit as st

import hookviz
from hookviz import BASELINES, METHODS, SLOW_METHODS, marks, render
from hookviz.app import feedback
from hookviz.app.caches import analyses, encoded, images, models
from hookviz.app.method_texts import METHOD_LABELS
from hookviz.app.pages.explore import display
from hookviz.app.sidebar import explain
from hookviz.app.sidebar.scene import Scene
from hookviz.app.view import state
from hookviz.app.view.keys import AnalysisKey
from hookviz.app.view.literal import literal
from hookviz.app.view.target import TOP1, ViewTarget, box_targets, same_box

SIDE_BY_SIDE = 6  # boxes or categories whose CAMs are drawn side by side
_THUMB = 360  # long side of each side-by-side picture
# the methods side by side can afford: not the slow ones (a forward pass per channel or
# sample for each); CAM and Finer-CAM explain a classifier's class only
_SIDE_METHODS = (
    *(m for m in METHODS if m not in (*SLOW_METHODS, "cam", "finercam")),
    *BASELINES,
)


def marked_original(scene: Scene) -> bytes:
    """The display-size image with the boxes or regions found on it (the one explained
    highlighted), as JPEG."""
    key = scene.view.key
    return _marked(key, _highlight(scene))


@st.cache_data(max_entries=32, show_spinner=False)
def _marked(key: AnalysisKey, highlight: object) -> bytes:
    loaded = models.model(key.model, key.pretrained)
    image = images.display_image(key.digest)
    size = images.image_size(key.digest)
    if loaded.task == "detection":
        listed, _ = explain.listed_detections(key.seen)
        picture = marks.draw_boxes(image, listed, size, highlight)
    else:
        segmentation = analyses.segmentation(key.seen)
        categories = [present.index for present in segmentation.categories]
        picture = marks.draw_regions(image, segmentation.mask, categories, highlight)
        if key.target.box is not None:  # a rectangle region: its outline
            rectangle = _rectangle_as_box(key.target, loaded)
            picture = marks.draw_boxes(picture, [rectangle], size, 0)
    return render.jpeg_bytes(picture)


def _rectangle_as_box(target: ViewTarget, loaded: hookviz.LoadedModel) -> hookviz.Detection:
    name = loaded.class_name(target.index)
    return hookviz.Detection(target.box, target.index, f"{name} (rectangle)", float("nan"))


def _highlight(scene: Scene) -> int | None:
    """The position of the explained box in the list drawn, or the explained category."""
    cam = scene.analysis.cam if scene.analysis is not None else None
    if cam is None:
        return None
    if scene.loaded.task == "detection":
        listed, _ = explain.listed_detections(scene.view.key.seen)
        for position, found in enumerate(listed):
            if found.label == cam.class_index and same_box(found.box, cam.target.box):
                return position
        return None
    return cam.class_index


def original_caption(scene: Scene) -> str:
    if scene.loaded.task == "detection":
        listed, confident = explain.listed_detections(scene.view.key.seen)
        which = (
            f"the {len(listed)} boxes scored {explain.MIN_SCORE:.0%} or more"
            if confident
            else f"the {len(listed)} most confident boxes (none scores {explain.MIN_SCORE:.0%})"
        )
        return f"{which}; the one explained is highlighted"
    present = analyses.segmentation(scene.view.key.seen).categories
    if len(present) == 1:
        # (no boundary inside the image: the outline is the image's border, the tint all of it)
        return f"“{present[0].name}” covers the whole image: its outline is the image's border"
    return "each category's pixels outlined; the one explained tinted"


def summary(scene: Scene, analysis: hookviz.Analysis) -> None:
    """What the model found, in place of a classifier's top-5."""
    loaded, seen = scene.loaded, scene.view.key.seen
    if loaded.task == "detection":
        st.markdown("**Detections**")
        listed, _ = explain.listed_detections(seen)
        for rank, found in enumerate(listed[:8], start=1):
            st.progress(found.score, text=explain.box_label(found, rank))
        if len(listed) > 8:
            st.caption(f"… and {len(listed) - 8} more in the sidebar's list.")
    elif loaded.task == "segmentation":
        st.markdown("**Categories present**")
        for present in analyses.segmentation(seen).categories[:8]:
            share = f"{literal(present.name)} · {present.share:.1%} of the pixels"
            st.progress(present.share, text=share)
    else:
        st.markdown("**Similarity**")
        reference = scene.view.target.reference
        st.image(encoded.display_jpeg(reference), caption=explain.reference_name() or "reference")
        st.metric("Cosine similarity of the embeddings", f"{analysis.cam.score:.3f}")


def subject(cam: hookviz.GradCAM, loaded: hookviz.LoadedModel) -> tuple[str, str]:
    """What a non-class CAM is of: a short subject and a caption's details."""
    if loaded.task == "detection":
        x0, y0, x1, y1 = (round(v) for v in cam.target.box)
        return (
            f"the box “{cam.class_name}”",
            f"box ({x0}, {y0})–({x1}, {y1}) · box score {cam.probability:.1%} (the "
            f"detector's) · score explained (IoU + box score) {cam.score:.2f}",
        )
    if loaded.task == "segmentation":
        where = "its predicted pixels" if cam.target.mask is None else "the rectangle"
        return (
            f"the region “{cam.class_name}”",
            f"category {cam.class_index} over {where} · mean probability there "
            f"{cam.probability:.1%} · summed score {cam.score:.1f}",
        )
    return "the likeness to the reference", f"cosine similarity {cam.score:.3f}"


def side_by_side(scene: Scene) -> None:
    """Every listed box's (or category's) CAM at this layer, next to each other."""
    loaded, view = scene.loaded, scene.view
    kind = "box" if loaded.task == "detection" else "category"
    st.markdown(f"**Every {kind}'s CAM, side by side**")
    if view.method not in _SIDE_METHODS:
        st.caption(
            "Side by side is drawn for the methods that take a moment each, not "
            f"{METHOD_LABELS.get(view.method, view.method)}."
        )
        return
    targets = _side_targets(scene)
    columns = st.columns(min(3, len(targets)) or 1)
    options = display.display_options(scene.analysis)
    for position, (target, label) in enumerate(targets):
        key = dataclasses.replace(view, target=target).key
        try:
            picture = _thumbnail(key, options["alpha"], options["cam_cmap"])
        except hookviz.HookvizError as exc:
            columns[position % len(columns)].caption(f"{label}: {exc}")
            continue
        with columns[position % len(columns)]:
            st.image(picture, caption=label)
            explained = target == view.target
            # (the explained one's button is there too, disabled: every cell the same height)
            st.button(
                "Explained above" if explained else "Explain this",
                key=f"side_{position}",
                on_click=state.choose,
                args=("target", target),
                disabled=explained,
            )


def _side_targets(scene: Scene) -> list[tuple[ViewTarget, str]]:
    seen = scene.view.key.seen
    if scene.loaded.task == "detection":
        listed, _ = explain.listed_detections(seen)
        shown = listed[:SIDE_BY_SIDE]
        return [
            (target, explain.box_label(found, rank))
            for rank, (target, found) in enumerate(zip(box_targets(shown), shown, strict=True), 1)
        ]
    present = analyses.segmentation(seen).categories
    default = hookviz.targets.default_target(analyses.forward_pass(*seen).context)
    return [
        (TOP1 if item.index == default.category else ViewTarget.of_region(item.index),
         f"{item.name} ({item.share:.0%})")
        for item in present[:SIDE_BY_SIDE]
    ]  # fmt: skip


@st.cache_data(max_entries=96, show_spinner=False)
def _thumbnail(key: AnalysisKey, alpha: float, cmap: str) -> bytes:
    cam = analyses.analysis(key).cam
    picture = render.fit_within(images.display_image(key.digest), _THUMB)
    heat = cam.heatmap_at((picture.height, picture.width))
    drawn = render.overlay(picture, heat, alpha=alpha, cmap=cmap)
    if isinstance(cam.target, hookviz.targets.Box):
        size = images.image_size(key.digest)
        found = hookviz.Detection(cam.target.box, cam.class_index, cam.class_name, cam.probability)
        drawn = marks.draw_boxes(drawn, [found], size, 0)
    return render.jpeg_bytes(drawn)


def reverse(scene: Scene) -> None:
    """An embedder's comparison the other way round: what in the reference is like the photo."""
    view = scene.view
    st.markdown("**The reverse: what in the reference is like the photo**")
    try:
        picture = _reverse_picture(view.key, display.display_options(scene.analysis)["cam_cmap"])
    except hookviz.HookvizError as exc:
        feedback.error(f"The reverse comparison failed: {exc}")
        return
    st.image(
        picture,
        caption=f"Grad-CAM on the reference at {view.layer}, of its embedding's "
        "cosine similarity to the photo's",
    )


@st.cache_data(max_entries=16, show_spinner=False)
def _reverse_picture(key: AnalysisKey, cmap: str) -> bytes:
    loaded = models.model(key.model, key.pretrained)
    photo = analyses.reference_embedding(key.model, key.pretrained, key.digest)
    reference = images.decoded_image(key.target.reference)
    cam = hookviz.grad_cam(
        loaded, reference, key.layer, hookviz.targets.Similarity(photo), method=key.method
    )
    picture = render.fit_within(images.display_image(key.target.reference), _THUMB * 2)
    heat = cam.heatmap_at((picture.height, picture.width))
    return render.jpeg_bytes(render.overlay(picture, heat, alpha=0.5, cmap=cmap))
