"""The page's state, driven headless with AppTest (the real app, the real bundled model): each
test is a defect a new user hit, in the sequence they hit it.

Display options rerun only the fragments they feed; after such a change AppTest holds just
those fragments' elements, so tests run the whole page once more (``_display_change``) to see
everything, as a browser merges the fragments into its page.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from PIL import Image
from streamlit.testing.v1 import AppTest

import hookviz
from hookviz.app.view import state
from hookviz.app.view.target import TOP1, ViewTarget

from .test_app import (
    APP,
    TIMEOUT,
    _assert_results,
    _box,
    _display_change,
    _open_page,
    _pick_class,
    _pick_layer,
    _snippet,
    _texts,
)


def _run(params: dict[str, str] | None = None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    for key, value in (params or {}).items():
        at.query_params[key] = value
    return at.run()


def _png(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def _upload(at: AppTest, name: str, data: bytes, mime: str = "image/png") -> AppTest:
    return at.file_uploader(key="upload").set_value((name, data, mime)).run()


def _caption(at: AppTest, start: str) -> str:
    return next(c.value for c in at.caption if c.value.startswith(start))


def _url(at: AppTest) -> dict[str, str]:
    return {key: at.query_params[key] for key in at.query_params}


# ---------------------------------------------------------------- 1, 2: display state


def test_a_layer_change_keeps_the_channels_shown_and_a_small_layer_clamps_them():
    at = _run()
    assert "64 of 1280 channels" in _texts(at)
    _pick_layer(at, "blocks.3")  # 80 channels
    assert at.slider(key="channels").value == 64
    assert "64 of 80 channels" in _texts(at)
    assert _url(at).get("channels") is None  # the default, not "1"
    _pick_layer(at, "conv_stem")  # 32 channels: clamped
    assert at.slider(key="channels").value == 32
    assert "32 of 32 channels" in _texts(at)
    _pick_layer(at, "bn2")  # the wish comes back
    assert at.slider(key="channels").value == 64
    assert "64 of 1280 channels" in _texts(at)


def test_an_error_keeps_every_display_option_and_recovering_applies_them():
    at = _run()
    at.slider(key="channels").set_value(32)
    at.selectbox(key="cam_cmap").set_value("viridis")
    at.slider(key="alpha").set_value(0.7)
    _display_change(at)
    _box(at, "Network").set_value("resnet18").run()  # pretrained weights not cached
    assert any("Cannot load" in e.value for e in at.error)
    assert _url(at)["model"] == "resnet18"  # the address names the view that failed
    at.radio(key="weights").set_value("untrained").run()
    _assert_results(at)
    assert not at.error
    assert at.slider(key="channels").value == 32
    assert at.selectbox(key="cam_cmap").value == "viridis"
    assert at.slider(key="alpha").value == 0.7
    assert "32 of 512 channels" in _texts(at)
    assert _url(at) | {"channels": "32", "cam_cmap": "viridis", "alpha": "0.7"} == _url(at)


# ---------------------------------------------------------------- 3, 4: labels and order


@pytest.mark.slow
def test_the_class_box_follows_each_image_and_each_weights():
    at = _run()
    loaded = hookviz.load_model("efficientnet_lite0", device="cpu")
    crop = hookviz.sample_image().crop((100, 100, 412, 500))
    _upload(at, "crop.png", _png(crop))
    top = hookviz.predict(loaded, crop)
    box = _box(at, "Explain the class")
    labels = dict(zip(box.options, range(len(box.options)), strict=False))
    assert f"Top-1: {top[0].name} ({top[0].probability:.1%})" in labels
    assert box.value == TOP1
    assert f"Grad-CAM: “{top[0].name}”" in _texts(at)
    at.radio(key="weights").set_value("untrained").run()
    untrained = hookviz.load_model("efficientnet_lite0", pretrained=False, device="cpu")
    second = hookviz.predict(untrained, crop)[1]
    options = _box(at, "Explain the class").options
    assert [o for o in options if o.startswith("#2 ")] == [
        f"#2 {second.name} ({second.probability:.1%})"
    ]


def test_the_top5_follows_the_new_image_in_its_order():
    loaded = hookviz.load_model("efficientnet_lite0", device="cpu")
    sample = hookviz.sample_image()
    crop = sample.crop((100, 100, 412, 500))
    before = [p.name for p in hookviz.predict(loaded, sample)]
    after = hookviz.predict(loaded, crop)
    # precondition: a class both images share moves to another rank (what the chart got wrong)
    assert any(p.name in before and before.index(p.name) != i for i, p in enumerate(after))
    at = _run()
    _upload(at, "crop.png", _png(crop))
    bars = [element.proto.text for element in at.get("progress")]
    assert bars == [
        f"{rank}. {p.name} ({p.index}) · {p.probability:.1%}"
        for rank, p in enumerate(after, start=1)
    ]
    values = [element.proto.value for element in at.get("progress")]  # percent
    assert values == sorted(values, reverse=True) and values[0] > 0


# ---------------------------------------------------------------- 5: the snippet


@pytest.mark.parametrize("order", ["weight", "weight_x_mean"])
@pytest.mark.slow
def test_the_snippet_works_for_channel_orders_by_cam_weight(order, tmp_path, monkeypatch):
    at = _run()
    _display_change(at.radio(key="order").set_value(order))
    snippet = _snippet(at)
    assert f"{order!r}" in snippet and "order_by_weight" in snippet
    monkeypatch.chdir(tmp_path)
    exec(compile(snippet, "<snippet>", "exec"), {"__name__": "__snippet__"})
    assert Image.open(tmp_path / "feature_maps.png").format == "PNG"


# ---------------------------------------------------------------- 6, 11, 12: images


@pytest.mark.slow
def test_pictures_are_sent_at_display_size_for_a_large_photo():
    big = hookviz.sample_image().resize((3000, 3516))  # 10.5 MP
    at = _run()
    _upload(at, "big.png", _png(big))
    _assert_results(at)
    assert "3000×3516 px" in _texts(at)
    for element in at.get("image"):
        for picture in element.proto.imgs:
            assert picture.url  # media, served at display size (checked in the browser test)
    # what the page keeps for the downloads is the analysis at full size, built only on click
    loaded = hookviz.load_model("efficientnet_lite0", device="cpu")
    cam = hookviz.ForwardPass(loaded, big, "bn2").grad_cam()
    assert "heatmap" not in cam.__dict__  # nothing full-size computed until asked for
    assert cam.heatmap.shape == (3516, 3000)


def test_a_too_large_upload_is_reported_in_the_main_area_and_the_image_stays():
    at = _run()
    _upload(at, "first.png", _png(Image.new("RGB", (300, 200), (10, 120, 200))))
    assert "300×200 px" in _texts(at)
    huge = b"\x89PNG\r\n\x1a\n" + bytes(55 * 1024 * 1024)
    _upload(at, "huge.png", huge)
    errors = " ".join(e.value for e in at.error)
    assert "huge.png" in errors and "the limit is 50 MB" in errors
    _assert_results(at)
    assert "first.png · 300×200 px" in _texts(at)  # the previous image is still shown
    at.run()  # the message stays while the file sits in the uploader
    assert any("the limit is 50 MB" in e.value for e in at.error)


@pytest.mark.parametrize(
    ("size", "fed", "cost"),
    [((4000, 600), "1493×224", "6.7×"), ((600, 4000), "224×1493", "6.7×")],
)
@pytest.mark.slow
def test_long_images_keep_a_native_short_side_and_say_what_it_costs(size, fed, cost):
    pixels = np.zeros((size[1], size[0], 3), np.uint8)
    pixels[..., 0] = np.linspace(0, 255, size[0], dtype=np.uint8)[None, :]
    pixels[: size[1] // 2, : size[0] // 3] = (20, 200, 40)
    at = _run()
    _upload(at, "long.png", _png(Image.fromarray(pixels)))
    _assert_results(at)
    caption = _caption(at, "long.png")
    assert f"fed to the model whole at {fed} px" in caption and cost in caption
    # the layer picker shows this image's shapes, not the square native ones
    width, height = hookviz.load_model("efficientnet_lite0", device="cpu").preprocessing.input_size(
        *size
    )[::-1]
    grid = hookviz.core.layers.layer_shapes(
        hookviz.load_model("efficientnet_lite0", device="cpu"), height, width
    )["bn2"]
    assert any(
        f"bn2 · {grid[0]}×{grid[1]}×{grid[2]}" in o for o in _box(at, "Target layer").options
    )


# ---------------------------------------------------------------- 9: links


@pytest.mark.slow
def test_a_link_restores_the_page_its_panel_and_its_toggles():
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    for key, value in {"layer": "blocks.4", "beyond_panel": "trust", "trust": "1"}.items():
        at.query_params[key] = value
    at.run()
    _open_page(at, "beyond")
    assert "Deletion area" in _texts(at)
    assert _url(at)["beyond_panel"] == "trust" and _url(at)["trust"] == "1"
    _open_page(at, "diagnose")
    assert _url(at)["layer"] == "blocks.4"
    assert any(c.value.startswith("Histogram of blocks.4") for c in at.caption)
    _open_page(at, "explore")
    assert "Feature maps of blocks.4" in _texts(at)


@pytest.mark.slow
def test_moving_between_pages_keeps_the_upload_and_the_view():
    at = _run()
    _upload(at, "mine.png", _png(Image.new("RGB", (320, 240), (200, 40, 40))))
    _pick_layer(at, "blocks.5")
    _open_page(at, "diagnose")
    assert any(c.value.startswith("Histogram of blocks.5") for c in at.caption)
    _open_page(at, "explore")
    assert "mine.png · 320×240 px" in _texts(at)
    assert "Feature maps of blocks.5" in _texts(at)


def test_a_query_string_behind_the_view_is_not_taken_for_a_back_step():
    """A run's query string is the browser's copy of what the page wrote, and can lag behind
    it; only the browser's Back or Forward (which Streamlit marks, and the browser test
    test_browser_links drives) makes the address the view. Any other run keeps the view and
    writes it back, as does a page switch (Streamlit drops the query on a page change)."""
    at = _run()
    _pick_class(at, 834)
    after_834 = _url(at)
    _pick_class(at, 465)
    for name in list(at.query_params):  # an older address, not from Back or Forward
        del at.query_params[name]
    for name, value in after_834.items():
        at.query_params[name] = value
    at.run()
    assert _box(at, "Explain the class").value == ViewTarget.of_class(465)
    assert _url(at)["target"] == "465"  # written back
    for name in list(at.query_params):  # a page switch: no query at all
        del at.query_params[name]
    at.run()
    assert _box(at, "Explain the class").value == ViewTarget.of_class(465)
    assert _url(at)["target"] == "465"


# ---------------------------------------------------------------- 13 and friction


@pytest.mark.slow
def test_the_trust_legend_tells_heatmap_order_from_random_order():
    at = _run({"beyond_panel": "trust", "trust": "1"})
    _open_page(at, "beyond")
    charts = at.get("vega_lite_chart")
    spec = json.loads(charts[0].proto.spec)
    color, dash = spec["encoding"]["color"], spec["encoding"]["strokeDash"]
    names = color["scale"]["domain"]
    assert names == dash["scale"]["domain"]
    assert len(set(names)) == 4 and {n.split(", ")[1] for n in names} == {
        "heatmap order",
        "random order",
    }
    # each name has its own colour-and-dash pair, and both channels share one legend
    pairs = set(zip(color["scale"]["range"], map(tuple, dash["scale"]["range"]), strict=True))
    assert len(pairs) == 4
    assert color.get("legend") == dash.get("legend")


def test_the_layer_list_offers_distinct_tensors_with_a_switch_for_every_module():
    loaded = hookviz.load_model("efficientnet_lite0", device="cpu")
    table = hookviz.layer_table(loaded)
    at = _run()
    assert len(_box(at, "Target layer").options) == len(table.distinct)
    _box(
        at, f"Show every module ({len(table.hookable)} instead of {len(table.distinct)})"
    ).set_value(True).run()
    assert len(_box(at, "Target layer").options) == len(table.hookable)
    # a link naming a second name of a tensor lands on its distinct name
    alias = next(layer for layer in table.layers if layer.same_as and layer.hookable)
    linked = _run({"layer": alias.name})
    assert _box(linked, "Target layer").value == alias.same_as


def test_the_teachers_default_view_explains_its_empty_pictures_and_points_elsewhere():
    at = _run({"beyond_panel": "steps"})
    _open_page(at, "beyond")
    text = _texts(at)
    assert "Flat tiles" in text and "global average pooling" in text
    assert "Nothing: Σ α·A is positive in every cell" in text
    button = next(b for b in at.button if b.label.startswith("Go to "))
    layer = button.label.removeprefix("Go to ")
    button.click().run()
    assert _box(at, "Target layer").value == layer
    assert "Flat tiles" not in _texts(at)
    at.segmented_control(key="beyond_panel").set_value("against").run()
    assert "Evidence against" in _texts(at)
    assert "Blank:" not in _texts(at)  # at the suggested layer, evidence against shows


@pytest.mark.slow
def test_unavailable_weights_read_as_words_and_the_histogram_is_on_a_log_scale():
    at = _run({"model": "resnet18"})
    message = " ".join(e.value for e in at.error)
    assert "Cannot load" in message and "<urlopen" not in message and "untrained" in message
    at = _run()
    _open_page(at, "diagnose")
    specs = [json.loads(c.proto.spec) for c in at.get("vega_lite_chart")]
    # (the charts over the layers are layered: the lines and the sidebar layer's rule)
    plain = [s for s in specs if "encoding" in s]
    histogram = next(s for s in plain if s["encoding"]["x"].get("title", "").startswith("activ"))
    assert histogram["encoding"]["y"]["scale"]["type"] == "log"


def test_a_change_that_cut_a_full_run_short_reruns_the_whole_page() -> None:
    """A display or class change normally reruns only the fragments it feeds. One that came
    while a full run was drawing the page (a slider step just after a new layer) cuts that run
    short: the elements it had not replaced yet (the last layer's slider) would stay beside
    the fragments' new ones, so the whole page reruns instead."""
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    _box(at, "Heatmap opacity").set_value(0.6).run()
    assert not at.get("image"), "a display change reran the whole page"
    at.run()
    # as after a full run preempted by the next change (it never reached its end)
    at.session_state[state.COMPLETE_KEY] = False
    _box(at, "Heatmap opacity").set_value(0.7).run()
    assert not at.exception, [e.value for e in at.exception]
    assert len(at.get("image")) == 1, "the page was not redrawn whole"
    assert "Explain the class" in [w.label for w in at.sidebar.selectbox]
    assert at.query_params.get("alpha") == "0.7"
    # that run reached its end: the next change reruns its fragments alone again
    _box(at, "Heatmap opacity").set_value(0.65).run()
    assert not at.get("image")
