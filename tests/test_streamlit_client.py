"""The browser-less Streamlit client (``bench/streamlit_client.py``) against the real app: a
link's view, an upload, and two sessions at once, each seeing only its own photo. Real server
(``streamlit run app.py``), real websocket protocol, no mocks."""

from __future__ import annotations

import io
import re
import time

import numpy as np
import pytest
from PIL import Image

from bench.streamlit_client import SUCCESS, Session
from scripts.appserver import free_port, running_app

pytestmark = pytest.mark.slow
WAIT = 120.0


@pytest.fixture(scope="module", name="server")
def server_fixture():
    with running_app(free_port(), timeout=120) as url:
        yield url


def _photo(width: int, height: int, seed: int = 0) -> bytes:
    """A PNG of ``width`` × ``height``: a colour gradient with noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    pixels = np.stack([x * 255 // width, y * 255 // height, (x + y) % 256], axis=-1)
    pixels = np.clip(pixels + rng.integers(-20, 21, pixels.shape), 0, 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "PNG")
    return out.getvalue()


def test_a_link_opens_its_view(server):
    """A query string (layer, class, method) runs the page as a link would: the sidebar and
    the texts show that view, on the sample photo."""
    with Session(server) as session:
        session.open({"layer": "blocks.4", "target": "207", "method": "gradcam++"})
        assert session.wait_finished(WAIT) == SUCCESS
        assert session.session_id
        assert session.widget_value("Explain the class") == "golden retriever"
        assert session.widget_value("Target layer").startswith("blocks.4")
        main = session.text("main")
        assert "512×600 px" in main  # the sample photo's caption
        assert "**Grad-CAM++.**" in main
        assert "`blocks.4`" in main
        assert "1 · Image" in session.texts("sidebar")
        assert session.images() and all(url.startswith("/media/") for url in session.images())
        assert session.query_params()["layer"] == "blocks.4"
        assert session.query_params()["target"] == "207"
        assert session.errors() == []
        assert "picture_overlay" in session.components()


def test_an_upload_shows_its_photo_and_a_broken_file_its_error(server):
    """An upload into "Upload an image" reruns the page on that photo (the sample's caption
    gone with the rest of the previous run); a file that is no image shows an error."""
    with Session(server) as session:
        session.open()
        session.wait_finished(WAIT)
        session.upload("photo.png", _photo(333, 251), "image/png")
        assert session.wait_finished(WAIT) == SUCCESS
        main = session.text("main")
        assert "photo.png · 333×251 px" in main
        assert "512×600 px" not in main
        assert session.errors() == []
        session.upload("broken.png", b"not an image at all", "image/png")
        assert session.wait_finished(WAIT) == SUCCESS
        assert any("broken.png" in error for error in session.errors())


def test_two_sessions_at_once_each_see_their_own_photo(server):
    """Two sessions upload at the same moment (their runs overlap on the server): each page
    shows its own photo's size and not the other's."""
    sizes = [(301, 227), (355, 263)]
    sessions = [Session(server) for _ in sizes]
    try:
        for session in sessions:
            session.open({"layer": "blocks.5"})
        for session in sessions:
            session.wait_finished(WAIT)
        for index, (session, (width, height)) in enumerate(zip(sessions, sizes, strict=True)):
            session.upload(f"s{index}.png", _photo(width, height, index), "image/png")
        for session in sessions:
            assert session.wait_finished(WAIT) == SUCCESS
        for session, own, other in zip(sessions, sizes, sizes[::-1], strict=True):
            main = session.text("main")
            assert f"{own[0]}×{own[1]} px" in main
            assert f"{other[0]}×{other[1]} px" not in main
    finally:
        for session in sessions:
            session.close()


QUEUE_LINE = re.compile(r"(\d+) are ahead of yours|yours is next")
QUEUE_LAYERS = ["layer1", "layer1.1", "layer2", "layer2.1", "layer3", "layer3.1", "layer4", "conv1"]


def _ended(session: Session) -> bool:
    try:
        session.wait_finished(0.001)
    except TimeoutError:
        return False
    return True


def _queue_lines(session: Session) -> list[int]:
    """The analyses ahead that the page's queue line names now (1 for "yours is next")."""
    found = []
    for text in session.texts("main"):
        for match in QUEUE_LINE.finditer(text):
            found.append(int(match[1]) if match[1] else 1)
    return found


def test_a_waiting_session_is_told_how_many_are_ahead_counting_down(server):
    """Eight sessions open a ResNet-50 at eight layers at once: their forward passes wait for
    the one model in arrival order, and a waiting page says how many are ahead of it, a count
    that falls as the others finish; once its turn has come the line is gone."""
    sessions = [Session(server) for _ in QUEUE_LAYERS]
    seen: list[list[int]] = [[] for _ in sessions]
    try:
        for session, layer in zip(sessions, QUEUE_LAYERS, strict=True):
            session.open({"model": "resnet50", "weights": "untrained", "layer": layer})
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline and not all(map(_ended, sessions)):
            for index, session in enumerate(sessions):
                for ahead in _queue_lines(session):
                    if not seen[index] or seen[index][-1] != ahead:
                        seen[index].append(ahead)
            time.sleep(0.02)
        for session, layer in zip(sessions, QUEUE_LAYERS, strict=True):
            assert session.wait_finished(WAIT) == SUCCESS
            assert session.errors() == [], session.errors()
            assert _queue_lines(session) == []  # (the line is gone with the wait)
            assert f"`{layer}`" in session.text("main")  # its own view
    finally:
        for session in sessions:
            session.close()
    told = [counts for counts in seen if counts]
    assert told, "no waiting page said how many were ahead"
    # every count a page showed only ever fell, and some page saw it fall
    assert all(counts == sorted(counts, reverse=True) for counts in told), seen
    assert any(len(counts) > 1 for counts in told), seen
