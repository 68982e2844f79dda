"""The "What a channel looks for" page, driven headless with AppTest on the real app, the real
bundled model and real dataset runs written to temporary folders."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import hookviz
from hookviz.app.pages.channel.page import REQUEST_KEY, Made, _ceiling
from hookviz.app.view.keys import CHANNELS_OPEN
from hookviz.dataset import run_features

from .test_app import _box, _open_page, _run

LAYER = "blocks.5"


@pytest.fixture()
def page():
    at = _run()
    _box(at, "Target layer").set_value(LAYER)
    at.run()
    return _open_page(at, "channel")


def _channel_box(at):
    return next(n for n in at.number_input if n.label.startswith("Channel of"))


def _captions(at) -> list[str]:
    return [c.value for c in at.caption]


@pytest.mark.slow
def test_the_page_opens_at_the_strongest_channel_with_estimates(page, lite0, sample):
    assert not page.exception and not page.error
    strongest = hookviz.feature_maps(lite0, sample, LAYER).channel_order("mean", 1)[0]
    box = _channel_box(page)
    assert box.value == strongest and box.label == f"Channel of {LAYER} (0 to 191)"
    makes = [b.label for b in page.button if b.label.startswith("Make it")]
    assert len(makes) == 2 and all("128 steps, about" in label for label in makes)
    assert page.query_params["vis_channel"] == str(strongest)  # a link names what is shown


@pytest.mark.slow
def test_making_a_visualization_shows_it_and_keeps_it(page, lite0):
    page.selectbox(key="vis_steps").set_value(32).run()
    channel = _channel_box(page).value
    page.button(key="make@channel").click().run()
    assert not page.exception, page.exception
    reached = next(c for c in _captions(page) if c.startswith("Mean activation on it:"))
    value = float(reached.split(":")[1].split(";")[0])
    on_image = float(reached.split("on this image ")[1].split(" ")[0])
    assert value > on_image  # the picture excites the channel more than the photo does
    assert "make@channel" not in [b.key for b in page.button]
    # the same picture as the library makes (deterministic for its seed)
    again = hookviz.visualize(lite0, LAYER, channel, steps=32, seed=0)
    assert abs(again.activation - value) < 0.01
    # another channel: a button again; back: the kept picture, no work
    _channel_box(page).set_value(channel + 1 if channel < 191 else 0).run()
    assert "make@channel" in [b.key for b in page.button]
    _channel_box(page).set_value(channel).run()
    assert "make@channel" not in [b.key for b in page.button]
    assert any(c.startswith("Mean activation on it:") for c in _captions(page))


def test_a_run_stopped_by_a_control_change_is_not_restarted(page):
    """Any control change stops a running visualization (Streamlit interrupts the script at
    the next progress update): the request was used up when it started, so the next run offers
    the button again and says the last one was cancelled."""
    page.selectbox(key="vis_steps").set_value(64).run()
    view = page.session_state
    channel = _channel_box(page).value
    key = Made("channel", "efficientnet_lite0", True, LAYER, channel, 64, 0, 1)
    view["hookviz.vis_running"] = key  # what an interrupted run leaves behind
    page.run()
    assert "make@channel" in [b.key for b in page.button]
    assert "The last one was cancelled before it finished." in _captions(page)
    page.run()  # said once
    assert "The last one was cancelled before it finished." not in _captions(page)


@pytest.mark.slow
def test_the_class_visualization_is_for_the_explained_class(page, lite0):
    page.selectbox(key="vis_steps").set_value(32).run()
    heading = next(m.value for m in page.markdown if m.value.startswith("**What the model"))
    assert "military uniform" in heading and "652" in heading
    page.button(key="make@class").click().run()
    reached = next(c for c in _captions(page) if c.startswith("Class score on it:"))
    score = float(reached.split(":")[1].split(";")[0])
    assert score > float(reached.split("on this image ")[1].split(" ")[0])


@pytest.mark.slow
def test_several_class_pictures_are_kept_per_layer(page):
    """Several pictures of a class are pushed apart at the sidebar's layer: made at one layer,
    they are not shown for another (one picture does not depend on the layer: it is kept)."""
    page.selectbox(key="vis_steps").set_value(32).run()
    page.selectbox(key="vis_count").set_value(2).run()
    page.button(key="make@class").click().run()
    assert not page.exception, page.exception
    assert "make@class" not in [b.key for b in page.button]
    _box(page, "Target layer").set_value("blocks.4").run()
    assert "make@class" in [b.key for b in page.button]
    _box(page, "Target layer").set_value(LAYER).run()
    assert "make@class" not in [b.key for b in page.button]


def test_the_filter_arithmetic_follows_the_picked_position(page, lite0, sample):
    equation = next(m.value for m in page.markdown if m.value.startswith("Σ patch"))
    assert "≠" not in equation and " = " in equation
    channel = _channel_box(page).value
    _box(page, "Row on the map").set_value(0).run()
    _box(page, "Column on the map").set_value(1).run()
    equation = next(m.value for m in page.markdown if m.value.startswith("Σ patch"))
    expected = hookviz.channel_filter(lite0, LAYER, channel, sample, (0, 1))
    assert f"**{expected.at.value:.4f}**" in equation and "(0, 1)" in equation
    assert page.query_params["vis_y"] == "0" and page.query_params["vis_x"] == "1"


def test_explore_links_to_a_channel(lite0):
    at = _run()
    _box(at, "Target layer").set_value(LAYER)
    at.run()
    at.session_state[CHANNELS_OPEN] = True  # the lazy "Channels behind the heatmap" expander
    at.run()
    at.checkbox(key="channel_overlay_on").check().run()
    at.selectbox(key=f"channel_overlay@{LAYER}").set_value(17).run()
    at.button(key="to_channel_page").click().run()
    assert not at.exception
    assert _channel_box(at).value == 17
    assert any(m.value == "### What a channel looks for" for m in at.markdown)


@pytest.mark.slow
def test_an_open_dataset_run_shows_the_images_that_excite_the_channel(tmp_path, lite0, sample):
    images = tmp_path / "images"
    images.mkdir()
    rng = np.random.default_rng(0)
    for index in range(4):
        pixels = np.asarray(sample.resize((120, 90)), np.int16)
        noisy = np.clip(pixels + rng.integers(-60, 61, pixels.shape), 0, 255).astype(np.uint8)
        Image.fromarray(noisy).save(images / f"{index}.png")
    run_features(lite0, [images], tmp_path / "run", layer=LAYER, top_k=3)
    run = hookviz.open_run(tmp_path / "run")
    at = _run()
    _box(at, "Target layer").set_value(LAYER)
    at.run()
    at = _open_page(at, "dataset")
    at.text_input(key="run_dir").set_value(str(tmp_path / "run")).run()
    at = _open_page(at, "channel")
    _channel_box(at).set_value(5).run()
    files = run.table["path"]
    expected = [f"{Path(files[row]).name} · {value:.2f}" for row, value in run.top_examples(5)]
    heading = "**The images of this run that excite channel 5 most**"
    shown = [m.value for m in at.markdown if m.value.startswith(heading)]
    assert shown, _captions(at)
    pictures = [image for image in at.get("image") if len(image.proto.imgs) == 3]
    assert [i.caption for i in pictures[0].proto.imgs] == expected
    # Explore's single-channel view shows them beside the channel's map too
    at = _open_page(at, "explore")
    at.session_state[CHANNELS_OPEN] = True
    at.run()
    at.checkbox(key="channel_overlay_on").check().run()
    at.selectbox(key=f"channel_overlay@{LAYER}").set_value(5).run()
    assert not at.exception
    pictures = [image for image in at.get("image") if len(image.proto.imgs) == 3]
    assert [i.caption for i in pictures[0].proto.imgs] == expected
    # another layer than the run's: said, not shown
    _box(at, "Target layer").set_value("blocks.4")
    at.run()
    assert any("pick that model and layer" in c for c in _captions(at))


def test_a_request_for_a_view_since_left_is_dropped(page):
    """Make it, then a change before it starts (a click and a change in one go): the request
    names a view the page no longer shows; it is dropped and both buttons are offered."""
    page.session_state[REQUEST_KEY] = Made(
        "channel", "efficientnet_lite0", True, LAYER, 0, 999, 0, 1
    )
    page.run()
    makes = [b for b in page.button if b.key in ("make@channel", "make@class")]
    assert len(makes) == 2 and not any(b.disabled for b in makes)
    assert all(b.label.startswith("Make it (128 steps, about") for b in makes)
    assert REQUEST_KEY not in page.session_state


def test_a_relu6_layer_is_known_to_stop_at_6(lite0):
    """The channel page says why a picture's activation stays at 6.00 where the layer is a
    ReLU6 or the same tensor as one (``bn2`` is ``bn2.act``'s output), and only there."""
    assert _ceiling(lite0, "bn2") == 6.0 and _ceiling(lite0, "bn2.act") == 6.0
    assert _ceiling(lite0, "blocks.5") is None  # a block's output: no activation at its end
    assert _ceiling(lite0, None) is None  # a class: its score has no ceiling
