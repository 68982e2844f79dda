"""A slow method on Explore, driven headless with AppTest (a small random-weight ResNet-18, no
mocks): one estimated over about 2 s says its estimate in the main area and waits for
"Compute", with the sidebar's cost that of the method chosen; a cheap one runs at once, and its
caption gives the run's real time, not that of the cached result shown after it."""

from __future__ import annotations

import json

import pytest
import torch
import torchvision
from safetensors.torch import save_file
from streamlit.testing.v1 import AppTest

from ui.pages.explore import slow_runs

from .heat_pictures import heat_pictures
from .test_app import APP, TIMEOUT
from .test_methods_page import small_card  # noqa: F401 (a fixture)


@pytest.fixture
def tiny_card(tmp_path, monkeypatch) -> str:
    """A model card of a 10-class ResNet-18 (random weights) fed at 32 pixels: a Score-CAM of
    its 64-channel ``layer1`` costs a fraction of a second, whatever else the machine runs."""
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()},
              str(tmp_path / "tiny.safetensors"))  # fmt: skip
    card = {
        "architecture": "resnet18",
        "class_names": [f"thing {i}" for i in range(10)],
        "title": "A tiny ResNet-18",
        "preprocessing": {"size": 32},
    }
    (tmp_path / "tiny.json").write_text(json.dumps(card))
    monkeypatch.setenv("HOOKVIZ_MODELS_DIR", str(tmp_path))
    return "card:tiny"


def _explore(**params: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    for key, value in params.items():
        at.query_params[key] = value
    return at.run()


def test_a_long_method_says_its_estimate_and_waits_for_compute(small_card) -> None:  # noqa: F811
    at = _explore(model=small_card, layer="layer4", method="sscam")
    assert not at.exception, [e.value for e in at.exception]
    said = [i.value for i in at.main.info]
    assert any(text.startswith("SS-CAM runs ") and "forward passes" in text for text in said)
    compute = [b for b in at.button if b.label.startswith("Compute SS-CAM (about ")]
    assert len(compute) == 1, [b.label for b in at.button]
    assert any(b.label == "Back to Grad-CAM" for b in at.button)
    assert not heat_pictures(at)  # nothing ran: no SS-CAM result, no progress
    assert not at.get("progress")
    sidebar = [c.value for c in at.sidebar.caption]
    assert any("Cost of SS-CAM here:" in text and "forward passes" in text for text in sidebar)
    assert not any("under 0.01 s" in text for text in sidebar), sidebar


def test_a_cheap_slow_method_runs_at_once_and_gives_its_real_time(tiny_card) -> None:
    at = _explore(model=tiny_card, layer="layer1", method="scorecam")
    assert not at.exception, [e.value for e in at.exception]
    assert not [b for b in at.button if b.label.startswith("Compute Score-CAM")]
    overlay = heat_pictures(at)[0]
    assert overlay.captions[1].startswith("Score-CAM for ")
    assert " at layer1 · " in overlay.captions[1]
    real = at.session_state[slow_runs.RUN_SECONDS]
    (seconds,) = real.values()
    # the run's own time, not the cached result's near-zero one it is shown from
    said = f"{seconds * 1000:.0f} ms" if seconds < 1 else slow_runs.duration(seconds)
    assert overlay.captions[2].startswith(f"Computed in {said} on "), overlay.captions
