"""The Live camera's frame callback (``hookviz.app.live_explainer``) with real video frames and the
real bundled model: the newest of the queued frames is explained and the rest dropped, a paused
stream repeats its frozen overlay, and the frame rate counts the frames done in its window.
Then the sidebar's "Take a photo", headless (AppTest): taken as an upload. (The page itself,
its stream, Pause and Snapshot, need a browser: streamlit-webrtc does not run under AppTest;
``test_browser_live_camera`` drives them with Chromium's fake camera.)
"""

from __future__ import annotations

import asyncio
import hashlib
import io
from pathlib import Path

import av
import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

import hookviz
from hookviz.app.live_explainer import RATE_WINDOW_S, FrameRate, LiveExplainer, LiveSettings


class ManualClock:
    """A clock the test moves by hand (the rate is a count over a window of time)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module", name="frames")
def frames_fixture() -> list[av.VideoFrame]:
    """Three 640x480 camera frames as a browser sends them (YUV 4:2:0): the sample photo, its
    mirror image, and a flat grey frame."""
    photo = np.asarray(hookviz.sample_image().convert("RGB").resize((640, 480)))
    pictures = [photo, photo[:, ::-1].copy(), np.full_like(photo, 128)]
    return [
        av.VideoFrame.from_ndarray(picture, format="rgb24").reformat(format="yuv420p")
        for picture in pictures
    ]


def _explainer(lite0: hookviz.LoadedModel, clock: ManualClock | None = None) -> LiveExplainer:
    rate = FrameRate(window=2.0, clock=clock) if clock is not None else None
    return LiveExplainer(LiveSettings(lite0, hookviz.default_layer(lite0)), rate)


@pytest.mark.slow
def test_the_newest_frame_is_explained_and_the_older_ones_dropped(lite0, frames):
    explainer = _explainer(lite0)
    out = asyncio.run(explainer.explain_newest(frames[:2]))
    assert explainer.dropped == 1
    latest = explainer.latest()
    # the newest (the mirrored photo) was explained, not the first
    assert np.array_equal(latest.frame, frames[1].to_ndarray(format="rgb24"))
    assert latest.predictions[0].name == "military uniform"
    assert len(latest.predictions) == 5
    assert latest.explained == latest.predictions[0].name
    # explained at the model's size (short side 224), and that is what goes back to the browser
    assert latest.overlay.size == (299, 224)
    assert len(out) == 1 and (out[0].width, out[0].height) == (299, 224)
    assert np.array_equal(out[0].to_ndarray(format="rgb24"), np.asarray(latest.overlay))


@pytest.mark.slow
def test_a_paused_stream_repeats_its_frozen_overlay(lite0, frames):
    explainer = _explainer(lite0)
    asyncio.run(explainer.explain_newest(frames[:1]))
    frozen = explainer.latest()
    explainer.paused = True
    out = asyncio.run(explainer.explain_newest(frames[2:]))  # (the grey frame)
    assert explainer.latest() is frozen
    assert np.array_equal(out[0].to_ndarray(format="rgb24"), np.asarray(frozen.overlay))
    assert explainer.frames_per_second() == 0.0
    explainer.paused = False
    asyncio.run(explainer.explain_newest(frames[2:]))
    assert explainer.latest() is not frozen
    assert np.array_equal(explainer.latest().frame, frames[2].to_ndarray(format="rgb24"))


@pytest.mark.slow
def test_a_change_of_layer_applies_from_the_next_frame(lite0, frames):
    explainer = _explainer(lite0)
    asyncio.run(explainer.explain_newest(frames[:1]))
    assert explainer.latest().layer == hookviz.default_layer(lite0)
    explainer.settings = LiveSettings(lite0, "blocks.4", "gradcam++")
    asyncio.run(explainer.explain_newest(frames[:1]))
    assert (explainer.latest().layer, explainer.latest().method) == ("blocks.4", "gradcam++")


@pytest.mark.slow
def test_the_frame_rate_counts_the_frames_explained_in_its_window(lite0, frames):
    clock = ManualClock()
    explainer = _explainer(lite0, clock)
    assert explainer.frames_per_second() == 0.0
    for _ in range(4):  # four frames explained within one second
        asyncio.run(explainer.explain_newest(frames[:1]))
        clock.now += 0.25
    assert explainer.frames_per_second() == pytest.approx(4 / 2.0)
    clock.now += 1.5  # the first two have left the 2-second window
    assert explainer.frames_per_second() == pytest.approx(2 / 2.0)
    clock.now += 5.0  # the stream stopped
    assert explainer.frames_per_second() == 0.0


def test_the_frame_rate_over_a_window():
    clock = ManualClock()
    rate = FrameRate(window=1.0, clock=clock)
    for _ in range(10):
        rate.tick()
        clock.now += 0.1
    assert rate.rate() == pytest.approx(10.0)
    clock.now += 0.45
    assert rate.rate() == pytest.approx(5.0)


# ---------------------------------------------------------------- the page (AppTest)

APP = str(Path(__file__).resolve().parent.parent / "app.py")
TIMEOUT = 180  # the first run imports torch and loads a model


def _jpeg(size: tuple[int, int]) -> bytes:
    photo = hookviz.sample_image().convert("RGB").resize(size)
    buffer = io.BytesIO()
    photo.save(buffer, format="JPEG")
    return buffer.getvalue()


def _texts(at: AppTest) -> str:
    return " ".join(e.value for e in [*at.markdown, *at.caption] if isinstance(e.value, str))


@pytest.mark.slow
def test_a_photo_from_the_camera_is_taken_as_an_upload():
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    at.toggle(key="take_photo").set_value(True).run()
    photo = _jpeg((320, 240))
    at.camera_input(key="photo").set_value(("image.jpg", photo, "image/jpeg")).run()
    assert not at.exception and not at.error
    assert "320×240 px" in _texts(at)
    # the address names it by its digest, as it names an upload
    assert at.query_params["image"] == hashlib.sha256(photo).hexdigest()
    # and a photo that is not an image is refused as a bad upload is, the last image kept
    at.camera_input(key="photo").set_value(("image.jpg", b"not a jpeg", "image/jpeg")).run()
    assert any("image.jpg" in e.value and "not a readable image" in e.value for e in at.error)
    assert "320×240 px" in _texts(at)


def test_the_guide_states_the_rate_window_and_the_model_size():
    guide = (Path(__file__).resolve().parent.parent / "docs/guide/live-camera.md").read_text()
    guide = " ".join(guide.split())  # (one line: the sentences wrap)
    assert RATE_WINDOW_S == 2.0 and "in the last two seconds" in guide
    # (the bundled model's own size, which the test above sees a frame explained at)
    assert "224 pixels on its short side for the bundled model" in guide


@pytest.mark.slow
def test_a_layer_that_cannot_be_explained_is_said_and_the_stream_goes_on(lite0, frames):
    explainer = LiveExplainer(LiveSettings(lite0, "no.such.layer"))
    out = asyncio.run(explainer.explain_newest(frames[:1]))
    assert out == [frames[0]]  # the camera's own frame goes back
    assert "no.such.layer" in explainer.problem() and explainer.latest() is None
    explainer.settings = LiveSettings(lite0, hookviz.default_layer(lite0))
    asyncio.run(explainer.explain_newest(frames[:1]))
    assert explainer.problem() is None and explainer.latest() is not None


@pytest.mark.slow
def test_the_overlay_takes_the_display_options_opacity_and_colormap(lite0, frames):
    layer = hookviz.default_layer(lite0)
    unseen = LiveExplainer(LiveSettings(lite0, layer, alpha=0.0))
    unseen.explain(frames[0].to_ndarray(format="rgb24"))
    alone = LiveExplainer(LiveSettings(lite0, layer, alpha=1.0, cmap="viridis"))
    alone.explain(frames[0].to_ndarray(format="rgb24"))
    # opacity 0: the frame itself at the model's size; opacity 1: the heatmap in viridis
    picture = np.asarray(unseen.latest().overlay)
    assert picture.shape == (224, 299, 3)
    assert np.abs(picture.astype(int) - np.asarray(alone.latest().overlay)).mean() > 20
    colours = {tuple(c) for c in np.asarray(alone.latest().overlay).reshape(-1, 3)[::97]}
    viridis = hookviz.render.colormap_table("viridis")
    assert all(np.abs(viridis.astype(int) - c).sum(axis=1).min() <= 3 for c in colours)
