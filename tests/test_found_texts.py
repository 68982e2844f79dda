"""What a detector's and a segmenter's results say and draw: no box named after an unused COCO
slot, a box's score called a box score, a regular side-by-side grid, a category named in full
and outlined even where it covers the whole image. The library with the conftest's untrained
models; the page with AppTest (the real app, real random-weight torchvision models)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from streamlit.testing.v1 import AppTest

import hookviz
from hookviz import marks
from hookviz.app.view.literal import literal
from hookviz.core.outputs import detections_of

from .test_targets_page import _at, _clean

DETECTOR = "fasterrcnn_mobilenet_v3_large_320_fpn"
SEGMENTER = "lraspp_mobilenet_v3_large"


def test_an_untrained_detector_names_its_boxes_of_unused_slots_as_such(detector) -> None:
    image = hookviz.sample_image()
    batch, _ = hookviz.core.inputs.prepare_input(detector, image)
    with torch.no_grad():
        raw = detections_of(detector.model(batch))[0]
    unused = [int(label) for label in raw["labels"] if detector.categories[int(label)] == "N/A"]
    assert unused  # (the case: untrained weights give boxes of COCO's unused slots)

    found = hookviz.detect(detector, image, 0.0)
    assert len(found) == len(raw["labels"])  # kept: often every box is of an unused slot
    assert all(d.name != "N/A" for d in found)
    assert {d.name for d in found if d.label in unused} == {f"unused class {i}" for i in unused}


def test_a_region_covering_the_whole_image_is_outlined_at_the_border() -> None:
    image = Image.new("RGB", (40, 30), (128, 128, 128))
    mask = np.zeros((30, 40), dtype=np.int64)
    drawn = np.asarray(marks.draw_regions(image, mask, [0], highlight=None))
    assert (drawn[0] != 128).any() and (drawn[:, 0] != 128).any()  # the border is drawn
    assert (drawn[10:20, 10:30] == 128).all()  # the inside is not


def _everything(at: AppTest) -> str:
    texts = [e.value for kind in ("markdown", "caption", "info") for e in getattr(at, kind)]
    texts += [str(option) for box in at.selectbox for option in box.options]
    texts += [str(bar.proto.text) for bar in at.get("progress")]
    return "\n".join(texts)


def _overlay_data(at: AppTest) -> str:
    """The data the overlay's browser component is sent (its captions among them)."""
    found = []

    def walk(node) -> None:
        for child in getattr(node, "children", {}).values():
            proto = getattr(child, "proto", None)
            if proto is not None and "picture_overlay" in getattr(proto, "id", ""):
                found.append(proto.bytes.decode("utf-8", "replace"))
            walk(child)

    walk(at._tree)
    assert found, "no overlay drawn"
    return "\n".join(found)


@pytest.mark.slow
def test_a_detectors_page_says_box_score_names_no_unused_slot_and_keeps_the_grid_regular() -> None:
    at = _at(model=DETECTOR, weights="untrained")
    _clean(at)
    texts = _everything(at)
    assert "N/A" not in texts
    assert "box score" in texts
    # the overlay's caption describes the box's score, never a class score
    overlay = _overlay_data(at)
    assert "Grad-CAM for the box" in overlay and "box score" in overlay
    assert "class score" not in overlay and "N/A" not in overlay
    # the box picked is named in full under the box that cuts long labels
    box = next(b for b in at.selectbox if b.label == "Explain the box")
    picked = box.options[box.index].removeprefix("Most confident: ")
    assert [c.value for c in at.sidebar.caption if c.value.startswith("Explaining ")] == [
        f"Explaining **{literal(picked)}**"
    ]
    # and so does the sidebar's note under the method box
    sidebar = [c.value for c in at.sidebar.caption]
    assert any(c.startswith("Channel weight = average gradient of the box score") for c in sidebar)
    assert not any("class score" in c for c in sidebar), sidebar
    # every side-by-side cell has a button: the explained box's is there, disabled
    cells = [b for b in at.button if b.key and b.key.startswith("side_")]
    assert len(cells) == 6
    assert [b.disabled for b in cells].count(True) == 1


@pytest.mark.slow
def test_a_segmenters_category_is_named_in_full_and_its_region_is_said() -> None:
    at = _at(model=SEGMENTER, weights="untrained")
    _clean(at)
    box = next(b for b in at.selectbox if b.label == "Explain the category")
    name = box.options[box.index].removeprefix("Largest: ").split(" (")[0]
    full = [c.value for c in at.sidebar.caption if "Explaining" in c.value]
    assert len(full) == 1 and name in full[0]
