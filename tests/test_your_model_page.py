"""The "Your model" page, driven with AppTest: the real app, real checkpoints written from random
weights, the real loader. A model brought there must work on the other pages, a bad file must
give a message in the page and leave the session working."""

from __future__ import annotations

import json
import re

import pytest
import safetensors.torch
import torch
import torchvision
from streamlit.testing.v1 import AppTest

from .test_app import APP, TIMEOUT, _box, _open_page, _snippet
from .test_app import _texts as _app_texts
from .test_checkpoints import _build

NAMES = ["cat", "dog", "parrot"]


@pytest.fixture(scope="module")
def pets() -> bytes:
    """A 3-class resnet18 as safetensors bytes, with random BatchNorm statistics."""
    return safetensors.torch.save(_build("resnet18", len(NAMES), seed=3).state_dict())


def _page(monkeypatch=None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    return _open_page(at, "your_model")


def _bring(at: AppTest, architecture: str, checkpoint: tuple, names: tuple | None = None):
    at.selectbox(key="own_architecture").set_value(architecture)
    at.file_uploader(key="own_checkpoint").set_value(checkpoint)
    if names is not None:
        at.file_uploader(key="own_names").set_value(names)
    at.run()
    at.button(key="own_load").click().run()
    return at


def _shown(markdown: str) -> str:
    """A message as the page shows it: the escapes of the user's file names and the
    library's text (``hookviz.app.view.literal``) read as the marks they stand for."""
    return re.sub(r"\\([^\w\s]|_)", r"\1", markdown)


def _texts(at: AppTest) -> str:
    """The page's texts (``test_app._texts``) and its success messages."""
    return "\n".join([_app_texts(at), *(str(e.value) for e in at.success)])


def test_page_works_without_a_scene_and_waits_for_a_checkpoint():
    """The page draws no image or model section (it must work while the sidebar's model
    cannot load), and its Load button stays off until an architecture and a file are given."""
    at = _page()
    assert not at.exception
    assert at.button(key="own_load").disabled
    labels = [box.label for box in at.sidebar.selectbox]
    assert "Network" not in labels  # no shared sidebar here
    at.selectbox(key="own_architecture").set_value("resnet18").run()
    assert at.button(key="own_load").disabled  # still no file


@pytest.mark.slow
def test_brought_model_is_used_on_explore_with_its_class_names(pets):
    at = _bring(
        _page(),
        "resnet18",
        ("pets.safetensors", pets, "application/octet-stream"),
        ("pets.txt", "\n".join(NAMES).encode(), "text/plain"),
    )
    assert not at.exception
    assert not at.error, [e.value for e in at.error]
    success = at.success[0].value
    assert "3 classes" in success and "cat" in success
    _open_page(at, "explore")
    assert not at.exception and not at.error
    network = _box(at, "Network")
    assert network.value.startswith("upload:")
    assert "your model: pets.safetensors (resnet18)" in network.options
    # the class box offers the model's own classes, and the heatmap explains one of them
    target = _box(at, "Explain the class")
    offered = list(target.options)  # AppTest gives the labels
    assert any(name in label for label in offered for name in NAMES)
    assert any(f"“{name}”" in _texts(at) for name in NAMES)
    # no weights choice: the model brings its own
    assert not [radio for radio in at.sidebar.radio if radio.label == "Weights"]
    # the script names the files the user brought, not the page's internal name
    code = _snippet(at)
    assert "checkpoint='pets.safetensors'" in code and "class_names='pets.txt'" in code
    assert "upload:" not in code


def test_bad_checkpoint_gives_a_message_and_the_session_keeps_working(pets):
    at = _bring(_page(), "resnet18", ("notes.pt", b"definitely not weights" * 8, "text/plain"))
    assert not at.exception
    assert at.error and "could not be read" in at.error[0].value
    # the same session: the right file now loads
    at.file_uploader(key="own_checkpoint").set_value(
        ("pets.safetensors", pets, "application/octet-stream")
    )
    at.run()
    at.button(key="own_load").click().run()
    assert not at.error and "3 classes" in at.success[0].value
    # and the other pages still work with the default model untouched before the switch
    _open_page(at, "explore")
    assert not at.exception and not at.error


def test_wrong_architecture_is_reported_with_the_key_table(pets):
    at = _bring(_page(), "mobilenet_v3_small", ("pets.safetensors", pets, "application/x"))
    assert not at.exception
    message = _shown(at.error[0].value)
    assert "missing" in message and "unexpected" in message
    assert "mobilenet_v3_small" in message
    # a table, not a run-on paragraph: the counts above it, a row per key shown
    table = at.table[0].value
    assert list(table.columns) == ["kind", "key", "in the checkpoint", "in the architecture"]
    assert set(table["kind"]) <= {"missing", "unexpected", "mismatched"}
    missing = table[table["kind"] == "missing"]
    listed = missing[~missing["key"].str.startswith("… and")]
    assert len(listed) >= 1 and (listed["in the checkpoint"] == "absent").all()
    assert (listed["in the architecture"] != "absent").all()  # its shape, side by side
    count = int(message.split(" missing")[0].rsplit("(", 1)[1])
    assert len(listed) == min(count, 8)
    if count > 8:
        assert f"… and {count - 8} more" in set(missing["key"])
    _open_page(at, "explore")  # the sidebar's model was not changed by the failure
    assert _box(at, "Network").value == "efficientnet_lite0"
    assert not at.error


def test_pickled_module_is_refused_in_the_page(tmp_path):
    model = torchvision.models.resnet18(num_classes=2)
    path = tmp_path / "whole.pt"
    torch.save(model, path)
    at = _bring(_page(), "resnet18", ("whole.pt", path.read_bytes(), "application/x"))
    assert not at.exception
    message = _shown(at.error[0].value)
    assert "state_dict()" in message and "safetensors" in message


def test_model_cards_are_listed_and_offered(tmp_path, monkeypatch, pets):
    (tmp_path / "pets.safetensors").write_bytes(pets)
    card = {"architecture": "resnet18", "class_names": NAMES, "title": "Pets of the class"}
    (tmp_path / "pets.json").write_text(json.dumps(card))
    (tmp_path / "broken.json").write_text("{ not json")
    monkeypatch.setenv("HOOKVIZ_MODELS_DIR", str(tmp_path))
    at = _page()
    text = _texts(at)
    assert "card:pets" in text and "Pets of the class" in text
    assert "card:broken" in text and "JSON" in text  # listed with its problem, not hidden
    _open_page(at, "explore")
    network = _box(at, "Network")
    assert "card: Pets of the class" in network.options
    network.set_value("card:pets").run()
    assert not at.exception and not at.error
    assert any(f"“{name}”" in _texts(at) for name in NAMES)


def test_the_form_is_as_it_was_after_another_page(pets):
    """The page's sidebar shows no model, so the message says where the model now is; after
    another page the architecture is still chosen and the page says what the file chooser
    held (a browser cannot refill it)."""
    at = _bring(_page(), "resnet18", ("pets.safetensors", pets, "application/x"))
    said = at.success[0].value
    assert "now the model in the sidebar" not in said and "other pages now open with it" in said
    _open_page(at, "explore")
    assert _box(at, "Network").value.startswith("upload:")
    _open_page(at, "your_model")
    assert not at.exception
    assert at.selectbox(key="own_architecture").value == "resnet18"
    last = [_shown(c.value) for c in at.caption if c.value.startswith("Last here:")]
    assert last and "pets.safetensors" in last[0] and "loaded" in last[0], last


@pytest.mark.slow
def test_a_session_brings_a_bounded_number_of_models(pets, monkeypatch):
    """The server keeps a few checkpoints for everyone: one session may bring only so many
    (HOOKVIZ_SESSION_MODELS), and is told so; what it brought stays usable."""
    monkeypatch.setenv("HOOKVIZ_SESSION_MODELS", "1")
    at = _bring(_page(), "resnet18", ("pets.safetensors", pets, "application/octet-stream"))
    assert not at.error and at.success
    other = safetensors.torch.save(_build("resnet18", 4, seed=5).state_dict())
    at = _bring(at, "resnet18", ("more.safetensors", other, "application/octet-stream"))
    assert at.error and "the most one session may bring" in at.error[0].value
    assert "more.safetensors" not in _texts(at).split("Brought in this session")[-1]
    _open_page(at, "explore")
    assert not at.exception and _box(at, "Network").value.startswith("upload:")
