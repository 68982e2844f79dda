"""Explore with models that are not classifiers, driven headless with AppTest (the real app
script, real random-weight torchvision models, no mocks): a detector's boxes, a segmenter's
categories and rectangles, a classifier as an embedder against a reference image; each choice in
the address and in a snippet that runs; the class pages saying plainly they do not apply."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image
from streamlit.testing.v1 import AppTest

import hookviz
from hookviz.app.view.target import TOP1
from hookviz.targets import Box, Region, Similarity

from .test_app import APP, TIMEOUT, _box, _open_page, _snippet

DETECTOR = "fasterrcnn_mobilenet_v3_large_320_fpn"
SEGMENTER = "lraspp_mobilenet_v3_large"


def _at(**params: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    for key, value in params.items():
        at.query_params[key] = value
    return at.run()


def _clean(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def _texts(at: AppTest) -> str:
    return "\n".join(
        [m.value for m in at.markdown] + [c.value for c in at.caption] + [i.value for i in at.info]
    )


def _run_snippet(snippet: str, tmp_path, monkeypatch) -> dict:
    monkeypatch.chdir(tmp_path)
    scope = {"__name__": "__snippet__"}
    exec(compile(snippet, "<snippet>", "exec"), scope)
    return scope


@pytest.mark.slow
def test_a_detectors_boxes_are_picked_from_the_list_and_the_link_and_snippet_follow(
    tmp_path, monkeypatch
) -> None:
    at = _at(model=DETECTOR, weights="untrained")
    _clean(at)
    found = hookviz.detect(hookviz.load_model(DETECTOR, False), hookviz.sample_image(), 0.0)
    boxes = _box(at, "Explain the box")
    assert boxes.options[0].startswith("Most confident: #1")
    assert "**Detections**" in _texts(at) and "**Every box's CAM, side by side**" in _texts(at)
    assert len(boxes.options) == 10  # nothing scores 50% untrained: the ten most confident

    boxes.select_index(3).run()
    _clean(at)
    picked = found[3]
    kind, label, box = at.query_params["target"].split(":")
    assert kind == "box" and int(label) == picked.label
    assert [float(v) for v in box.split(",")] == pytest.approx(picked.box, abs=0.06)
    assert "the box" in _texts(at)

    snippet = _snippet(at)
    assert "from hookviz.targets import Box" in snippet and "target=Box((" in snippet
    scope = _run_snippet(snippet, tmp_path, monkeypatch)
    expected = hookviz.grad_cam(
        scope["loaded"], scope["image"], "backbone.body.16", Box(picked.box, picked.label)
    )
    np.testing.assert_allclose(scope["analysis"].cam.cam, expected.cam, atol=1e-5)

    # a side-by-side picture's button explains that box
    buttons = [b for b in at.button if b.label == "Explain this"]
    assert len(buttons) == 5  # six side by side, one of them the box explained
    buttons[1].click().run()  # (#1, #2, #3, #5, #6: the one explained has none)
    _clean(at)
    assert at.query_params["target"].startswith(f"box:{found[1].label}:")
    assert _box(at, "Explain the box").index == 1
    next(b for b in at.button if b.label == "Explain this").click().run()  # the most confident
    assert "target" not in at.query_params and _box(at, "Explain the box").value == TOP1


@pytest.mark.slow
def test_a_box_from_a_link_that_the_detector_does_not_find_is_said_and_replaced() -> None:
    at = _at(model=DETECTOR, weights="untrained", target="box:1:0,0,3,3")
    _clean(at)
    assert any("not one the detector finds" in w.value for w in at.sidebar.warning)
    assert _box(at, "Explain the box").value == TOP1


@pytest.mark.slow
def test_a_segmenters_category_and_rectangle_are_explained(tmp_path, monkeypatch) -> None:
    at = _at(model=SEGMENTER, weights="untrained")
    _clean(at)
    loaded = hookviz.load_model(SEGMENTER, False)
    present = hookviz.segment(loaded, hookviz.sample_image()).categories
    categories = _box(at, "Explain the category")
    assert len(categories.options) == len(present)
    assert "**Categories present**" in _texts(at)

    # a rectangle of a category, from the form
    at.selectbox(key="region_category").set_value(15)
    at.number_input(key="region_x0").set_value(100.0)
    at.number_input(key="region_y0").set_value(50.0)
    at.number_input(key="region_x1").set_value(300.0)
    at.number_input(key="region_y1").set_value(250.0)
    next(b for b in at.button if b.label == "Explain this rectangle").click().run()
    _clean(at)
    assert at.query_params["target"] == "region:15:100,50,300,250"
    snippet = _snippet(at)
    assert "mask[50:250, 100:300] = True" in snippet and "Region(15, mask=mask)" in snippet
    scope = _run_snippet(snippet, tmp_path, monkeypatch)
    mask = np.zeros((600, 512), dtype=bool)
    mask[50:250, 100:300] = True
    expected = hookviz.grad_cam(loaded, hookviz.sample_image(), "backbone.16", Region(15, mask))
    np.testing.assert_allclose(scope["analysis"].cam.cam, expected.cam, atol=1e-5)

    # a rectangle with its corners the wrong way round is refused, the view kept
    at.number_input(key="region_x1").set_value(50.0)
    next(b for b in at.button if b.label == "Explain this rectangle").click().run()
    assert any("right > left" in e.value for e in at.error)
    assert at.query_params["target"] == "region:15:100,50,300,250"


def _png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.mark.slow
def test_a_classifier_as_an_embedder_compares_the_photo_with_a_reference() -> None:
    at = _at()
    toggle = _box(at, "Compare two images (as an embedder)")
    toggle.set_value(True).run()
    _clean(at)
    assert at.query_params["model"] == "embed:efficientnet_lite0"
    assert any("upload a reference image" in i.value for i in at.info)

    reference = hookviz.sample_image().rotate(25).crop((60, 60, 420, 520))
    at.file_uploader(key="reference_upload").set_value(("ref.png", _png(reference), "image/png"))
    at.run()
    _clean(at)
    assert at.query_params["target"].startswith("similar:")
    loaded = hookviz.load_model("efficientnet_lite0", task="embedding")
    photo = hookviz.embed(loaded, hookviz.sample_image())
    expected = torch.nn.functional.cosine_similarity(photo, hookviz.embed(loaded, reference), 0)
    assert float(at.metric[0].value) == pytest.approx(float(expected), abs=1e-3)
    assert "**The reverse: what in the reference is like the photo**" in _texts(at)
    snippet = _snippet(at)
    assert 'task="embedding"' in snippet and "reference = hookviz.load_image('ref.png')" in snippet
    assert "target=Similarity(reference)" in snippet
    cam = hookviz.grad_cam(loaded, hookviz.sample_image(), target=Similarity(reference))
    assert f"{cam.score:.3f}" == at.metric[0].value

    # back to the classifier: the class box again
    _box(at, "Compare two images (as an embedder)").set_value(False).run()
    _clean(at)
    assert at.query_params.get("model") in (None, "efficientnet_lite0")
    assert _box(at, "Explain the class")


@pytest.mark.parametrize("page", ["beyond", "compare", "present"])
def test_the_class_pages_say_they_do_not_apply_to_a_detector(page: str) -> None:
    at = _at(model=DETECTOR, weights="untrained")
    _open_page(at, page)
    _clean(at)
    assert any("explains a classifier's classes" in i.value for i in at.info)
    assert any("a detector" in i.value and "Explore" in i.value for i in at.info)


def test_clip_scores_the_labels_typed_and_explains_each(tiny_clip) -> None:
    at = _at(model=tiny_clip, weights="untrained")
    _clean(at)
    assert any("Type two labels or more" in i.value for i in at.sidebar.info)
    at.sidebar.text_area[0].set_value("a dog\na cat\na red car").run()
    _clean(at)
    assert at.query_params["model"] == "clip:hookviz-page-ViT|a dog|a cat|a red car"
    loaded = hookviz.zero_shot(
        hookviz.load_model("clip:hookviz-page-ViT", False), ["a dog", "a cat", "a red car"]
    )
    expected = hookviz.predict(loaded, hookviz.sample_image(), k=3)
    classes = _box(at, "Explain the class")
    assert classes.options[0] == f"Top-1: {expected[0].name} ({expected[0].probability:.1%})"
    third = classes.options[3]  # "#3 <label> (p)"
    classes.select_index(3).run()  # a label, explained as a class
    _clean(at)
    label = third.split(" (")[0].split(" ", 1)[1]
    assert at.query_params["target"] == str(["a dog", "a cat", "a red car"].index(label))
    snippet = _snippet(at)
    assert "hookviz.zero_shot(hookviz.load_model('clip:hookviz-page-ViT'" in snippet
    assert "['a dog', 'a cat', 'a red car']" in snippet


@pytest.mark.slow
def test_a_detector_and_an_embedder_run_on_the_dataset_page(tmp_path) -> None:
    from hookviz.dataset import run_cam

    from .test_dataset_run import _folder

    images = _folder(tmp_path / "data", count=3)
    detector = hookviz.load_model(DETECTOR, False, device="cpu")
    run_cam(detector, [images], tmp_path / "det", weights="untrained", min_score=0.0, max_boxes=2)
    reference = tmp_path / "reference.png"
    hookviz.sample_image().save(reference)
    embedder = hookviz.load_model("resnet18", False, device="cpu", task="embedding")
    run_cam(
        embedder,
        [images],
        tmp_path / "emb",
        weights="untrained",
        reference=reference,
        layer="layer3",
    )

    at = _at()
    _open_page(at, "dataset")
    at.text_input(key="run_dir").set_value(str(tmp_path / "det")).run()
    _clean(at)
    table = hookviz.open_run(tmp_path / "det").table
    assert f"{len(table)} of {len(table)} rows" in [c.value for c in at.caption]
    ok = table.index[table.status == "ok"]
    first = table.iloc[int(ok[0])]
    assert any(f"{first['name']} ({first['score']:.0%})" in c.value for c in at.caption)
    at.button(key=f"open_row_{int(ok[0])}").click().run()
    _clean(at)
    assert at.query_params["model"] == DETECTOR
    assert at.query_params["target"].startswith(f"box:{int(first['label'])}:")
    assert "the box" in _texts(at)

    _open_page(at, "dataset")
    at.text_input(key="run_dir").set_value(str(tmp_path / "emb")).run()
    _clean(at)
    row = int(hookviz.open_run(tmp_path / "emb").table.index[0])
    at.button(key=f"open_row_{row}").click().run()
    _clean(at)
    assert at.query_params["model"] == "embed:resnet18"
    assert at.query_params["target"].startswith("similar:")
    expected = hookviz.open_run(tmp_path / "emb").table.iloc[row]["similarity"]
    assert float(at.metric[0].value) == pytest.approx(float(expected), abs=1e-3)


@pytest.fixture
def tiny_clip(tmp_path) -> str:
    """A tiny random-weight CLIP architecture added to open_clip's registry (no download)."""
    open_clip = pytest.importorskip("open_clip")
    import json

    config = {
        "embed_dim": 32,
        "vision_cfg": {"image_size": 64, "layers": 2, "width": 64, "patch_size": 16},
        "text_cfg": {
            "context_length": 77,
            "vocab_size": 49408,
            "width": 32,
            "heads": 2,
            "layers": 2,
        },
    }
    (tmp_path / "hookviz-page-ViT.json").write_text(json.dumps(config))
    open_clip.add_model_config(tmp_path)
    return "clip:hookviz-page-ViT"


def test_clip_starts_with_default_labels_and_says_in_the_main_area_where_to_type(
    tiny_clip,
) -> None:
    """No labels typed: the main area is not blank; it says where the labels are typed (the
    sidebar, closed on a phone), and CLIP scores a default set until the user types theirs."""
    from hookviz.app.sidebar.model_picker import DEFAULT_LABELS

    at = _at(model=tiny_clip, weights="untrained")
    _clean(at)
    notice = next(i.value for i in at.main.info if "Labels, one per line" in i.value)
    assert "sidebar" in notice and "phone" in notice, notice
    assert at.query_params["model"] == "|".join([tiny_clip, *DEFAULT_LABELS])
    classes = _box(at, "Explain the class")
    assert len(classes.options) == len(DEFAULT_LABELS) + 1  # the top-1, then each label
    assert at.main.get("imgs") or at.main.get("image")  # the results: pictures
    for page in ("compare", "beyond", "methods"):
        _open_page(at, page)
        _clean(at)
        assert any("Labels, one per line" in i.value for i in at.main.info), page
        assert at.main.get("imgs") or at.main.get("image"), page  # its pictures, drawn
    _open_page(at, "explore")
    _box(at, "Explain the class").select_index(2).run()  # a default label, kept across pages
    picked = at.query_params["target"]
    for page in ("beyond", "explore"):
        _open_page(at, page)
        assert at.query_params.get("target") == picked, page
    at.sidebar.text_area[0].set_value("a dog\na cat").run()  # the user's labels replace them
    _clean(at)
    assert at.query_params["model"] == f"{tiny_clip}|a dog|a cat"
    assert not any("Labels, one per line" in i.value for i in at.main.info)
    at.sidebar.text_area[0].set_value("a dog").run()  # one label: what to do, in the main area
    _clean(at)
    notice = next(i.value for i in at.main.info if "two labels or more" in i.value)
    assert "sidebar" in notice and "phone" in notice, notice
