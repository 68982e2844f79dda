"""What users type stays data on the page (issue 45 item 4): class names from a user's file and
an upload's file name, written to be read as markdown (emphasis, a link, raw HTML, LaTeX), are
shown as the text they are on every page: escaped in every markdown the page writes (captions,
alerts, headings, a radio's options). A real server (``streamlit run app.py``) and a real
session of it; the names come from a model card naming a function of the server owner's own
code, as a class's server would have it."""

from __future__ import annotations

import io
import json
import os
import textwrap
from collections.abc import Iterator

import numpy as np
import pytest
from PIL import Image

from bench.streamlit_client import SUCCESS, Session
from hookviz.app.pages import addresses
from scripts.appserver import free_port, running_app

pytestmark = pytest.mark.slow
WAIT = 180.0
# each would render as something else if written into markdown as it is
HOSTILE = [
    "**bold** _it_",
    "<img src=x onerror=alert(1)>",
    "[click](javascript:alert(1))",
]
PAGES = [
    addresses.EXPLORE, addresses.BEYOND, addresses.METHODS, addresses.CHANNEL,
    addresses.DIAGNOSE, addresses.COMPARE, addresses.PRESENT,
]  # fmt: skip
NET = """
import torch
from torch import nn


def build():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 3),
    )
"""


@pytest.fixture(scope="module", name="server")
def server_fixture(tmp_path_factory) -> Iterator[str]:
    cards = tmp_path_factory.mktemp("cards")
    (cards / "hostilenets").mkdir()
    (cards / "hostilenets" / "__init__.py").write_text("")
    (cards / "hostilenets" / "net.py").write_text(textwrap.dedent(NET))
    card = {"function": "hostilenets.net:build", "class_names": HOSTILE, "title": "Hostile"}
    (cards / "hostile.json").write_text(json.dumps(card))
    before = os.environ.get("HOOKVIZ_MODELS_DIR")
    os.environ["HOOKVIZ_MODELS_DIR"] = str(cards)
    try:
        with running_app(free_port(), timeout=120) as url:
            yield url
    finally:
        if before is None:
            os.environ.pop("HOOKVIZ_MODELS_DIR", None)
        else:
            os.environ["HOOKVIZ_MODELS_DIR"] = before


def _markdown(session: Session) -> list[str]:
    """Every text the page wrote to be rendered as markdown: markdown and captions, headings,
    alerts, and the options and labels of its radios, checkboxes and buttons."""
    out = []
    for _, kind, proto in session.elements():
        if kind in ("markdown", "heading", "alert"):
            out.append(proto.body)
        elif kind == "progress":
            out.append(proto.text)
        elif kind == "radio":
            out += [proto.label, *proto.options]
        elif kind in ("checkbox", "button", "toggle"):
            out.append(proto.label)
    return out


def _unescaped(texts: list[str]) -> list[tuple[str, str]]:
    return [(name, text) for text in texts for name in HOSTILE if name in text]


def test_class_names_from_a_users_file_are_shown_as_text_on_every_page(server):
    with Session(server, timeout=60) as session:
        for page in PAGES:
            session.open({"model": "card:hostile", "weights": "pretrained"}, page=page)
            assert session.wait_finished(WAIT) == SUCCESS, page
            assert not [e for e in session.errors() if "Traceback" in e], page
            texts = _markdown(session)
            assert any("img src" in text for text in texts), (page, texts)  # (it is shown)
            assert not _unescaped(texts), (page, _unescaped(texts))


def test_an_uploads_file_name_is_shown_as_text(server):
    pixels = np.random.default_rng(0).integers(0, 255, (64, 80, 3), dtype=np.uint8)
    png = io.BytesIO()
    Image.fromarray(pixels).save(png, "PNG")
    name = "<img src=x onerror=alert(1)> **bold** [a](javascript:x).png"
    with Session(server, timeout=60) as session:
        session.open()
        assert session.wait_finished(WAIT) == SUCCESS
        session.upload(name, png.getvalue(), "image/png")
        assert session.wait_finished(WAIT) == SUCCESS
        texts = _markdown(session)
        assert any("img src" in text for text in texts), texts
        raw = ["<img src=x onerror=alert(1)>", "**bold**", "[a](javascript:x)"]
        assert not [text for text in texts for part in raw if part in text], texts
        # a name that is not an image is refused by name, escaped too
        session.upload("<b>x</b>.png", b"not an image", "image/png")
        session.wait_finished(WAIT)
        refused = [body for kind, body in session.alerts() if r"\<b\>x\</b\>" in body]
        assert refused and not [body for body in refused if "<b>x</b>" in body], refused
