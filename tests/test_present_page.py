"""The Present page (AppTest, the real app and bundled model): steps through the network's
stages and the image's top-5 that are ordinary choices of layer and class (the sidebar and the
address follow them), and each of its pictures. The keys and the picture's size on screen are
checked in the browser (test_browser_present.py)."""

from __future__ import annotations

import hookviz
from hookviz.app.pages.present import walk
from hookviz.app.view.literal import literal
from hookviz.app.view.target import TOP1, ViewTarget

from .test_app import _box, _open_page, _run


def test_the_steps_go_through_the_stages_and_the_top5(lite0, sample):
    at = _open_page(_run(), "present")
    assert not at.exception and not at.error
    order = [info.name for info in hookviz.layer_table(lite0).layers]
    layers = walk(lite0, "bn2")
    assert len(layers) >= 4 and layers[-1] == "bn2"
    assert layers == sorted(layers, key=order.index)  # in the order the network runs them
    assert at.button(key="present_later").disabled  # bn2 is the last stage
    assert at.button(key="present_earlier").label == f"Earlier: {layers[-2]}"
    at.button(key="present_earlier").click().run()
    assert _box(at, "Target layer").value == layers[-2]
    assert at.query_params["layer"] == layers[-2]
    assert not at.button(key="present_later").disabled

    top = hookviz.predict(lite0, sample)
    assert at.button(key="present_down").label == f"Class: {literal(top[1].name)}"
    at.button(key="present_down").click().run()  # the #2
    assert _box(at, "Explain the class").value == ViewTarget.of_class(top[1].index)
    at.button(key="present_up").click().run()  # back to the top-1
    assert _box(at, "Explain the class").value == TOP1
    assert at.button(key="present_up").label == f"Class: {literal(top[4].name)}"  # round to the #5
    at.button(key="present_up").click().run()
    assert _box(at, "Explain the class").value == ViewTarget.of_class(top[4].index)


def test_each_picture_of_the_page(lite0):
    at = _open_page(_run(), "present")
    for picture in ("heatmap", "grid", "overlay"):
        at.segmented_control(key="present_picture").set_value(picture).run()
        assert not at.exception and not at.error, picture
    at.segmented_control(key="present_picture").set_value("grid").run()
    assert at.query_params["present_picture"] == "grid"  # a link opens the same picture
