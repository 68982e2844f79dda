"""The top-5 classes' pictures sent ahead (``hookviz/app/pages/explore/top_classes.py``): what the
browser shows the moment the top-5 radio names a class must be what the server's run for that
class then sends:
the same picture id, the same heatmap indices, the same title, alt text and captions. (The
browser side, drawn before the server answers and pixel for pixel, is in
``test_browser_classes.py``.)"""

from __future__ import annotations

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

import hookviz
from hookviz.app.browser import wire
from hookviz.app.pages.explore import top_classes

from .test_app import APP, TIMEOUT, _box, _pick_class, _run

RADIO = "This image's top 5"


def _elements(at: AppTest) -> list[dict]:
    return [
        wire.unpack(element.proto.bytes)
        for element in at.get("bidi_component")
        if element.proto.component_name == "hookviz_picture"
    ]


def _sent_ahead(at: AppTest) -> dict | None:
    """The hidden element of the top-5's pictures: its records by radio option, each with the
    heatmap's indices unpacked."""
    for data in _elements(at):
        if "classes" in data:
            records = data["classes"]["options"]
            for record in records.values():
                heat = data["heats"][record["id"]]
                rows = wire.unpacked_rows(heat["packed"], heat["width"], -1)
                record["indices"] = rows
            return {"context": data["classes"]["context"], "options": records}
    return None


def _picture(at: AppTest, role: str) -> dict:
    (data,) = [d for d in _elements(at) if d.get("role") == role]
    heats = {i: h for d in _elements(at) for i, h in d.get("heats", {}).items()}
    if data["id"] in heats:
        heat = heats[data["id"]]
        data["indices"] = wire.unpacked_rows(heat["packed"], heat["width"], -1)
    return data


def test_each_class_sent_ahead_is_what_the_server_then_shows() -> None:
    at = _run()
    ahead = _sent_ahead(at)
    assert ahead is not None and sorted(ahead["options"]) == ["0", "1", "2", "3", "4"]
    lite0 = hookviz.load_model("efficientnet_lite0", device="cpu")
    kept = hookviz.ForwardPass(lite0, hookviz.sample_image())
    targets = top_classes.radio_targets(kept.predictions)
    assert len(_box(at, RADIO).options) == len(targets) == 5
    overlay = _picture(at, "overlay")
    follow = overlay["follow"]["classes"]
    assert follow["option"] == "0" and follow["context"] == ahead["context"]
    assert _picture(at, "heatmap")["follow"]["classes"] == follow
    # each option, chosen: the server's overlay and heatmap are the record sent ahead
    for option in ("3", "1", "4", "2", "0"):
        target = targets[int(option)]
        at = _pick_class(at, target, via=RADIO)
        record = ahead["options"][option]
        overlay = _picture(at, "overlay")
        heatmap = _picture(at, "heatmap")
        assert overlay["id"] == heatmap["id"] == record["id"], option
        assert np.array_equal(overlay["indices"], record["indices"]), option
        assert (overlay["title"], overlay["alt"], overlay["captions"]) == (
            record["title"],
            record["alt"],
            record["captions"],
        ), option
        assert overlay["follow"]["classes"]["option"] == option
        assert record["ready"] is True
        # the title names the class (the top-1 by its predicted name)
        name = kept.predictions[0].name if target.is_top1 else lite0.class_name(target.index)
        assert name in overlay["title"], (overlay["title"], name)
        assert record["option"] == option
        # the element sent ahead is the same whatever the class: a class change leaves it
        assert _sent_ahead(at)["options"].keys() == ahead["options"].keys()
        assert _sent_ahead(at)["context"] == ahead["context"]


def test_a_class_outside_the_top_five_names_no_option() -> None:
    at = _run()
    at = _pick_class(at, 1)  # goldfish: not among the sample's top-5
    follow = _picture(at, "overlay")["follow"]["classes"]
    assert follow["option"] is None and follow["ready"] is True
    assert "goldfish" in _picture(at, "overlay")["title"]
    assert sorted(_sent_ahead(at)["options"]) == ["0", "1", "2", "3", "4"]


@pytest.mark.parametrize("method", ["eigencam", "scorecam"])
@pytest.mark.slow
def test_methods_without_a_cheap_class_send_nothing_ahead(method) -> None:
    """Eigen-CAM has no class; Score-CAM costs a forward pass per channel: a click on the
    top-5 waits for the server. (At a layer of 16 channels, so that Score-CAM's passes are
    few: the default layer has 1,280.)"""
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params["layer"] = "blocks.0"
    at.run()
    _box(at, "CAM method").set_value(method).run(timeout=600)
    assert not at.exception, [e.value for e in at.exception]
    assert _sent_ahead(at) is None
    for role in ("overlay", "heatmap"):
        assert _picture(at, role)["follow"]["classes"] is None


def test_nothing_is_sent_ahead_where_the_backward_passes_cost_too_much(monkeypatch) -> None:
    # (the cost is the backward pass of the class shown, measured when it was computed: any
    # budget below it leaves the top-5 to the server)
    monkeypatch.setattr(top_classes, "BUDGET_SECONDS", 0.0)
    at = _run()
    ahead = _sent_ahead(at)
    assert ahead is not None and ahead["options"] == {}
