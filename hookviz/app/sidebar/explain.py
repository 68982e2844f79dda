"""The sidebar's "Explain" section for models that are not classifiers: a detector's boxes, a
segmenter's categories (or a rectangle of one), an embedder's reference image. A classifier's
is the class box and top-5 (``classes``). Each choice is a ``ViewTarget``
(``hookviz.app.view.target``) and so is in the address."""

from __future__ import annotations

import streamlit as st

import hookviz
from hookviz.app import feedback
from hookviz.app.caches import analyses, encoded, images
from hookviz.app.sidebar import pick_on_image
from hookviz.app.sidebar.image_input import IMAGE_TYPES
from hookviz.app.view import state
from hookviz.app.view.keys import SeenKey
from hookviz.app.view.literal import literal
from hookviz.app.view.target import TOP1, ViewTarget, box_targets, same_box
from hookviz.core.targets import has_area

# The boxes listed: those the detector scores at least this (its usual threshold for a
# picture), or where none does (untrained weights score near chance), the most confident few.
MIN_SCORE = 0.5
LISTED_BOXES = 20
FALLBACK_BOXES = 10
_REFERENCE = "hookviz.reference"  # (file id, digest, name) of the reference image uploaded


def explain_section(loaded: hookviz.LoadedModel, seen: SeenKey) -> ViewTarget:
    """What to explain in the image, by the model's task (not a classifier's)."""
    if loaded.task == "detection":
        return _boxes(loaded, seen)
    if loaded.task == "segmentation":
        return _regions(loaded, seen)
    return _reference()


def listed_detections(seen: SeenKey) -> tuple[list[hookviz.Detection], bool]:
    """The boxes the page lists, most confident first, and whether any reached ``MIN_SCORE``."""
    found = [d for d in analyses.detections(seen) if has_area(d.box)]  # (no box of no area)
    confident = [d for d in found if d.score >= MIN_SCORE][:LISTED_BOXES]
    return (confident, True) if confident else (found[:FALLBACK_BOXES], False)


def box_label(detection: hookviz.Detection, rank: int) -> str:
    x0, y0, x1, y1 = (round(v) for v in detection.box)
    return f"#{rank} {detection.name} ({detection.score:.0%}) · ({x0}, {y0})–({x1}, {y1})"


def _boxes(loaded: hookviz.LoadedModel, seen: SeenKey) -> ViewTarget:
    st.sidebar.header("4 · Explain an object")
    listed, confident = listed_detections(seen)
    if not listed:
        st.sidebar.info("The detector found nothing in this image: there is no box to explain.")
        state.stop()
    targets = box_targets(listed)
    labels = {
        target: box_label(detection, rank)
        for rank, (target, detection) in enumerate(zip(targets, listed, strict=True), start=1)
    }
    labels[TOP1] = "Most confident: " + labels[TOP1]
    wished = state.wish("target")
    if wished not in labels and wished.kind == "box":
        # a box from a link, or below the list's cut: offered when the detector found it
        match = _found_box(wished, analyses.detections(seen))
        if match is not None:
            labels[wished] = box_label(match[1], match[0])
        else:
            st.sidebar.warning(
                f"The link's box {_rectangle_text(wished)} is not one the detector finds in "
                "this image: the most confident one is explained instead."
            )
    target = _target_box(
        labels,
        seen,
        "Explain the box",
        "Each box the detector found, most confident first; the overlay shows the CAM of the "
        "one picked, over the whole image.",
    )
    # (the box cuts a long label with "…": the class name and corners are what a lesson reads)
    st.sidebar.caption(f"Explaining **{literal(labels[target].removeprefix('Most confident: '))}**")
    pick_on_image.click_a_box(
        encoded.display_jpeg(seen.digest),
        images.image_size(seen.digest),
        listed,
        targets,
        target,
        key=f"pick_box@{seen.digest[:10]}:{seen.model}:{seen.pretrained}:{target!r}",
    )
    if not confident:
        st.sidebar.caption(
            f"No box scores {MIN_SCORE:.0%} or more (untrained weights score near chance): the "
            f"{len(listed)} most confident."
        )
    return target


def _target_box(labels: dict[ViewTarget, str], seen: SeenKey, title: str, help: str) -> ViewTarget:
    """The sidebar's list of what can be explained (``labels``: each target's text), its
    choice kept per image and model."""
    options = list(labels)
    return state.widget(
        "target",
        st.sidebar.selectbox,
        state.resolve("target", state.options_valid(options)),
        title,
        options,
        format_func=labels.__getitem__,
        key=f"target@{seen.digest[:10]}:{seen.model}:{seen.pretrained}",
        help=help,
    )


def _found_box(wished: ViewTarget, found: tuple[hookviz.Detection, ...]):
    """The rank and detection whose box is ``wished``'s (to a tenth of a pixel), or None."""
    for rank, detection in enumerate(found, start=1):
        if detection.label == wished.index and same_box(detection.box, wished.box):
            return rank, detection
    return None


def _regions(loaded: hookviz.LoadedModel, seen: SeenKey) -> ViewTarget:
    st.sidebar.header("4 · Explain a region")
    present = analyses.segmentation(seen).categories
    largest = next((p for p in present if not _background(p.name)), present[0])
    labels = {TOP1: f"Largest: {largest.name} ({largest.share:.0%} of the image)"}
    for category in present:
        if category.index != largest.index:
            labels[ViewTarget.of_region(category.index)] = f"{category.name} ({category.share:.0%})"
    wished = state.wish("target")
    if wished.kind == "region" and wished.box is not None and wished.index < loaded.num_classes:
        labels[wished] = f"{loaded.class_name(wished.index)} inside {_rectangle_text(wished)}"
    target = _target_box(
        labels,
        seen,
        "Explain the category",
        "The categories the model sees in the image, largest first: the CAM of a category's "
        "score summed over its pixels.",
    )
    # (the box cuts a long name with "…", and a name is what a lesson points at)
    st.sidebar.caption(f"Explaining **{literal(labels[target].removeprefix('Largest: '))}**")
    size = images.image_size(seen.digest)
    category = target.index if target.index is not None else largest.index
    pick_on_image.drag_a_rectangle(
        encoded.display_jpeg(seen.digest),
        size,
        lambda box: ViewTarget.of_region(category, box),
        key=f"pick_rectangle@{seen.digest[:10]}:{seen.model}:{seen.pretrained}:{target!r}",
    )
    _rectangle_form(loaded, target, largest.index, size)
    return target


def _rectangle_form(
    loaded: hookviz.LoadedModel, target: ViewTarget, largest: int, size: tuple[int, int]
) -> None:
    """A category's score summed over a rectangle of the image instead of its pixels."""
    with (
        st.sidebar.expander("Or a rectangle of the image", expanded=target.box is not None),
        st.form("region_form", border=False),
    ):
        names = list(range(loaded.num_classes))
        category = st.selectbox(
            "Category",
            names,
            index=target.index if target.index is not None else largest,
            format_func=loaded.class_name,
            key="region_category",
        )
        box = target.box or (0.0, 0.0, float(size[0]), float(size[1]))  # the whole image
        columns = st.columns(2)
        x0 = columns[0].number_input("left (x0)", 0.0, value=box[0], key="region_x0")
        y0 = columns[1].number_input("top (y0)", 0.0, value=box[1], key="region_y0")
        x1 = columns[0].number_input("right (x1)", 1.0, value=box[2], key="region_x1")
        y1 = columns[1].number_input("bottom (y1)", 1.0, value=box[3], key="region_y1")
        if st.form_submit_button("Explain this rectangle"):
            if x1 <= x0 or y1 <= y0:
                feedback.error("The rectangle needs right > left and bottom > top.")
            else:
                state.choose("target", ViewTarget.of_region(int(category), (x0, y0, x1, y1)))
                st.rerun()


def _rectangle_text(target: ViewTarget) -> str:
    x0, y0, x1, y1 = (round(v) for v in target.box)
    return f"({x0}, {y0})–({x1}, {y1})"


def _background(name: str) -> bool:
    return name.strip("_").lower() in ("background", "bg")


def _reference() -> ViewTarget:
    """A second image the photo is compared with: its embedding's similarity is explained."""
    st.sidebar.header("4 · Compare with an image")
    upload = st.sidebar.file_uploader(
        "Reference image",
        type=IMAGE_TYPES,
        key="reference_upload",
        help="The CAM shows what in the photo makes its embedding like this image's (cosine "
        "similarity), and the page shows the reverse.",
    )
    wished = state.wish("target")
    store = images.image_store()
    if upload is not None:
        data = upload.getvalue()
        digest = store.put(data, upload.name)
        try:
            images.decoded_image(digest)
        except hookviz.ImageError as exc:
            feedback.error(f"Could not use **{literal(upload.name)}** as the reference: {exc}")
            state.stop()
        st.session_state[_REFERENCE] = (upload.file_id, digest, upload.name)
        return state.shown("target", ViewTarget.similar_to(digest))
    if wished.kind == "similar" and store.has(wished.reference):
        return state.shown("target", wished)
    if wished.kind == "similar":
        st.sidebar.warning(
            "The link names a reference image this server no longer has: upload it again."
        )
    st.sidebar.caption("An embedder compares two images: upload the reference image.")
    return TOP1


def reference_name() -> str | None:
    """The reference image's file name, when it was uploaded in this session."""
    kept = st.session_state.get(_REFERENCE)
    return kept[2] if kept else None
