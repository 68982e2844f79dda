"""A slow method on Explore, driven headless with AppTest (a small random-weight ResNet-18, no
mocks): one estimated over about 2 s says its estimate in the main area and waits for
"Compute", with the sidebar's cost that of the method chosen; a cheap one runs at once, and its
caption gives the run's real time, not that of the cached result shown after it. A method that
is not one of the slow ones but is long on this model and input (Smooth Grad-CAM++, four noisy
forward and backward passes) waits for "Compute" the same way."""

from __future__ import annotations

import json
import re

import pytest
import torch
import torchvision
from safetensors.torch import save_file
from streamlit.testing.v1 import AppTest

from hookviz.app.view import slow_runs

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


@pytest.fixture
def heavy_card(tmp_path, monkeypatch) -> str:
    """A model card of a 10-class ResNet-18 (random weights) fed at 900 pixels: one pass of the
    network takes about 0.7 s on 2 cores, so Grad-CAM (one backward pass) stays under the 2 s
    after which the page asks, and Smooth Grad-CAM++ (eight passes) goes well over it, with a
    margin of more than twice the machine's speed either way."""
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()},
              str(tmp_path / "heavy.safetensors"))  # fmt: skip
    card = {
        "architecture": "resnet18",
        "class_names": [f"thing {i}" for i in range(10)],
        "title": "A heavy ResNet-18",
        "preprocessing": {"size": 900},
    }
    (tmp_path / "heavy.json").write_text(json.dumps(card))
    monkeypatch.setenv("HOOKVIZ_MODELS_DIR", str(tmp_path))
    return "card:heavy"


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


def _sidebar_estimate(at: AppTest, label: str) -> float:
    """The seconds the sidebar's caption gives for the method chosen ("Cost of <label> here:
    ..., about 3.1 s here"; "under 0.01 s here" is 0)."""
    (text,) = [c.value for c in at.sidebar.caption if f"Cost of {label} here:" in c.value]
    found = re.search(r"about ([0-9.]+) s here", text)
    return float(found.group(1)) if found else 0.0


@pytest.mark.slow
def test_a_long_method_that_is_not_a_slow_one_waits_for_compute_too(heavy_card) -> None:
    """Whether a run waits for "Compute" follows the estimate the sidebar gives (they come from
    the same timed passes, and this machine's speed sets them): at 900 pixels on 2 cores
    Smooth Grad-CAM++'s is several seconds and Grad-CAM's about a second."""
    at = _explore(model=heavy_card, layer="layer4", method="smoothgradcam++")
    assert not at.exception, [e.value for e in at.exception]
    estimate = _sidebar_estimate(at, "Smooth Grad-CAM++")
    assert estimate > slow_runs.ASK_OVER_SECONDS, estimate  # (a 2-core machine's figure)
    said = [i.value for i in at.main.info]
    assert any(t.startswith("Smooth Grad-CAM++ runs 4 forward passes and 4 backward") for t in said)
    compute = [b for b in at.button if b.label.startswith("Compute Smooth Grad-CAM++ (about ")]
    assert len(compute) == 1, [b.label for b in at.button]
    assert any(b.label == "Back to Grad-CAM" for b in at.button)
    assert not heat_pictures(at)  # nothing ran yet

    compute[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    overlay = heat_pictures(at)[0]
    assert overlay.captions[1].startswith("Smooth Grad-CAM++ for "), overlay.captions
    # the run's own time, not that of the cached result it is drawn from after the rerun
    (seconds,) = at.session_state[slow_runs.RUN_SECONDS].values()
    said = f"{seconds * 1000:.0f} ms" if seconds < 1 else slow_runs.duration(seconds)
    assert overlay.captions[2].startswith(f"Computed in {said} on "), overlay.captions

    # Grad-CAM on the same pass: asked for only if its own estimate is over the bound
    at.sidebar.selectbox(key="method").set_value("gradcam").run()
    assert not at.exception, [e.value for e in at.exception]
    asks = [b for b in at.button if b.label.startswith("Compute Grad-CAM (about ")]
    estimate = _sidebar_estimate(at, "Grad-CAM")
    assert bool(asks) == (estimate > slow_runs.ASK_OVER_SECONDS), (estimate, asks)
    if not asks:
        assert heat_pictures(at)[0].captions[1].startswith("Grad-CAM for ")


def test_a_long_run_keeps_on_screen_only_a_result_of_the_same_model(monkeypatch) -> None:
    """While a long run waits for "Compute" or runs, Explore keeps the last result on screen,
    drawn with the model now picked (its task names the subject, its layers the grid). After a
    switch from the bundled classifier to a detector whose Grad-CAM is estimated over 2 s, the
    classifier's result was kept and its overlay failed ("'Class' object has no attribute
    'box'"); a result of other weights or another model is not "the previous one" of this run.
    """
    from hookviz.app.caches import analyses
    from hookviz.app.sidebar import scene
    from hookviz.app.view.keys import AnalysisKey, View
    from hookviz.app.view.target import TOP1

    monkeypatch.setattr(analyses, "analysis", lambda key: ("analysis of", key))
    view = View("d1", None, "fasterrcnn_mobilenet_v3_large_fpn", False, "backbone.body.16", TOP1,
                "gradcam")  # fmt: skip
    classifier = AnalysisKey("d1", "efficientnet_lite0", True, "bn2", TOP1, "gradcam")
    assert scene._previous(classifier, view) is None
    untrained = classifier._replace(model=view.model, pretrained=True, layer=view.layer)
    assert scene._previous(untrained, view) is None  # (the same network, its trained weights)
    same_model = view.key._replace(method="hirescam")
    assert scene._previous(same_model, view) == ("analysis of", same_model)
    other_image = view.key._replace(digest="d0")  # (a new photo: the last one's result kept)
    assert scene._previous(other_image, view) == ("analysis of", other_image)
