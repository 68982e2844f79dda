"""The view's vocabulary (``hookviz/app/view``): a target round-trips through the address and
becomes the library's, keys name what they hold, and the page's display defaults are the
library's."""

from __future__ import annotations

import numpy as np
import pytest

import hookviz
from hookviz import render, targets
from hookviz.app.view.fields import FIELDS
from hookviz.app.view.keys import AnalysisKey, SeenKey, View
from hookviz.app.view.target import (
    TOP1,
    ViewTarget,
    box_targets,
    library_target,
    same_box,
    snippet_code,
    within,
)
from hookviz.snippet import View as SnippetView


@pytest.mark.parametrize(
    "target",
    [
        TOP1,
        ViewTarget.of_class(0),
        ViewTarget.of_class(834),
        ViewTarget.of_box(3, (10.04, 20.5, 300.26, 401.0)),
        ViewTarget.of_region(15),
        ViewTarget.of_region(7, (0, 0, 64.5, 32)),
        ViewTarget.similar_to("ab12" * 16),
    ],
)
def test_a_target_round_trips_through_the_address(target: ViewTarget) -> None:
    field = FIELDS["target"]
    assert field.parse(field.text(target)) == target


def test_a_class_is_written_in_the_address_as_its_index() -> None:
    # (links shared before targets had kinds name a class by its index)
    assert FIELDS["target"].text(ViewTarget.of_class(834)) == "834"
    assert FIELDS["target"].parse("834") == ViewTarget.of_class(834)


@pytest.mark.parametrize(
    "text",
    ["-1", "x", "1.5", "", "box:3", "box:3:1,2,3", "box:3:5,5,1,1", "region:x", "similar:"],
)
def test_an_address_that_names_no_target_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        FIELDS["target"].parse(text)


def test_targets_say_what_the_library_takes() -> None:
    assert TOP1.is_top1 and TOP1.class_index is None
    assert ViewTarget.of_class(3).class_index == 3 and not ViewTarget.of_class(3).is_top1
    assert within(TOP1, 10) and within(ViewTarget.of_class(9), 10)
    assert not within(ViewTarget.of_class(10), 10)
    with pytest.raises(ValueError, match="index >= 0"):
        ViewTarget("class", None)
    with pytest.raises(ValueError, match="unknown target kind"):
        ViewTarget("boxes", 1)
    box = ViewTarget.of_box(3, (1.04, 2, 30, 40.06))
    assert box.box == (1.0, 2.0, 30.0, 40.1) and box.class_index is None  # a tenth of a pixel
    # each task explains its own kinds of target, within its categories
    assert within(box, 91, "detection") and not within(box, 91, "classification")
    assert not within(ViewTarget.of_box(91, (0, 0, 1, 1)), 91, "detection")
    assert within(ViewTarget.of_region(2), 21, "segmentation") and within(TOP1, 21, "segmentation")
    assert not within(ViewTarget.of_class(2), 21, "segmentation")
    assert within(ViewTarget.similar_to("ab"), 0, "embedding") and not within(TOP1, 0, "embedding")


def test_keys_name_what_they_hold() -> None:
    view = View("abc", None, "efficientnet_lite0", True, "bn2", ViewTarget.of_class(1), "gradcam")
    key = view.key
    assert isinstance(key, AnalysisKey)
    assert key.seen == SeenKey("abc", "efficientnet_lite0", True, "bn2")
    other = key.for_target(TOP1)
    assert other.seen == key.seen and other.target == TOP1 and other.method == "gradcam"
    assert hash(key) != hash(other)


def test_the_display_defaults_are_the_librarys() -> None:
    snippet = SnippetView(model="m", pretrained=True, image=None, layer="l", target=None)
    for field, default in (
        ("channels", render.DEFAULT_CHANNELS),
        ("order", render.DEFAULT_ORDER),
        ("scale", render.DEFAULT_SCALE),
        ("grid_cmap", render.DEFAULT_GRID_CMAP),
        ("cam_cmap", render.DEFAULT_CAM_CMAP),
        ("alpha", render.DEFAULT_ALPHA),
    ):
        assert FIELDS[field].default == default == getattr(snippet, field), field


def test_a_view_target_becomes_the_librarys_asking_only_what_it_needs() -> None:
    asked: list[str] = []

    def image_size() -> tuple[int, int]:
        asked.append("size")
        return (4, 3)

    def embedding_of(digest: str) -> np.ndarray:
        asked.append(digest)
        return np.ones(5, dtype=np.float32)

    assert library_target(TOP1, image_size, embedding_of) is None
    assert library_target(ViewTarget.of_class(7), image_size, embedding_of) == 7
    box = library_target(ViewTarget.of_box(3, (1.04, 2, 30, 40.06)), image_size, embedding_of)
    assert box == targets.Box((1.0, 2.0, 30.0, 40.1), 3)
    region = library_target(ViewTarget.of_region(2), image_size, embedding_of)
    assert region.category == 2 and region.mask is None
    assert asked == []  # (neither the image nor a reference is needed for these)
    inside = library_target(ViewTarget.of_region(2, (1, 1, 3, 2)), image_size, embedding_of)
    assert inside.mask.shape == (3, 4) and inside.mask[1, 1:3].all() and inside.mask.sum() == 2
    similar = library_target(ViewTarget.similar_to("ab"), image_size, embedding_of)
    assert isinstance(similar, targets.Similarity) and similar.reference.shape == (5,)
    assert asked == ["size", "ab"]


def test_boxes_match_to_a_tenth_of_a_pixel_and_the_first_listed_is_the_top1() -> None:
    assert same_box((10, 20, 30, 40), (10.1, 19.95, 30, 40))
    assert not same_box((10, 20, 30, 40), (10.2, 20, 30, 40))
    listed = [
        hookviz.Detection((5.04, 6, 50, 60), 1, "bicycle", 0.9),
        hookviz.Detection((0, 0, 9.96, 9), 4, "airplane", 0.8),
    ]
    assert box_targets(listed) == [TOP1, ViewTarget.of_box(4, (0, 0, 10.0, 9))]
    assert box_targets([]) == []


def test_the_snippet_writes_the_target_the_page_analyses() -> None:
    names = {"Box": targets.Box, "Region": targets.Region}
    for target in (ViewTarget.of_box(3, (1.04, 2, 30, 40.06)), ViewTarget.of_region(2)):
        written = eval(snippet_code(target), names)  # (the expression, as Python runs it)
        analysed = library_target(target, lambda: (4, 3), lambda digest: None)
        assert repr(written) == repr(analysed)  # (a Region has no ==: its mask is an array)
    assert snippet_code(ViewTarget.of_region(2, (1, 1, 3, 2))) == "Region(2, mask=mask)"
    assert snippet_code(ViewTarget.similar_to("ab")) == "Similarity(reference)"
    assert snippet_code(TOP1) is None and snippet_code(ViewTarget.of_class(5)) is None
