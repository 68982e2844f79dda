"""``hookviz.show``: the notebook widget's Python side, without a notebook (anywidget's traits
work outside a kernel). What it shows is checked against the library's own calls (the same
heatmap as ``hookviz.grad_cam``), what it sends the browser is read back with the wire
format's reader, and its static picture is decoded as a rendered notebook would show it.
The browser side runs in ``test_browser_notebook.py``."""

from __future__ import annotations

import io
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

import hookviz
from hookviz import render
from hookviz.app.browser import bundle, wire
from hookviz.images import fit_within

pytest.importorskip("anywidget")

from hookviz.notebook import widget as notebook_widget


def tiny_net(classes: int = 10, seed: int = 0) -> nn.Module:
    """A small CNN of random weights: two conv layers, a pool and a linear head."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, 16, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, classes),
    )


def photo(height: int = 48, width: int = 64, seed: int = 0) -> Image.Image:
    values = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return Image.fromarray(values)


@pytest.fixture(scope="module")
def shown():
    """A widget of the tiny net, and its LoadedModel."""
    widget = hookviz.show(tiny_net(), photo())
    return widget


def heat_of(widget) -> dict:
    return wire.unpack(widget._heat)


def same_map(widget, layer=None, target=None, method="gradcam") -> None:
    """The widget's result is the library's for the same layer, class and method."""
    expected = hookviz.grad_cam(
        widget.loaded, widget.image, layer=layer or widget.layer, target=target, method=method
    )
    assert isinstance(widget.result, hookviz.GradCAM)
    assert np.allclose(widget.result.heatmap, expected.heatmap, atol=1e-6)
    assert np.allclose(widget.result.cam, expected.cam, atol=1e-6)
    assert widget.result.class_index == expected.class_index


def test_a_plain_module_is_wrapped_and_shows_the_grad_cam_of_its_top_class(shown):
    widget = shown
    assert isinstance(widget, notebook_widget.Widget)
    import anywidget

    assert isinstance(widget, anywidget.AnyWidget)
    # wrapped as wrap_model wraps it: as many classes as its output, named "class i"
    assert widget.loaded.num_classes == 10
    assert widget.layer == hookviz.default_layer(widget.loaded)
    assert widget.layers == [layer.name for layer in hookviz.list_layers(widget.loaded)]
    top = hookviz.predict(widget.loaded, widget.image)
    assert widget.target == top[0].index
    assert [c["index"] for c in widget.classes] == [p.index for p in top]
    same_map(widget, target=None)  # the default target is the top-1: the same map
    same_map(widget, target=widget.target)


def test_layer_target_and_method_set_from_python_update_the_result_and_what_is_sent(shown):
    widget = shown
    first_layer, first_target = widget.layer, widget.target
    grid_before = widget._grid
    other = next(name for name in widget.layers if name != first_layer)
    widget.layer = other
    assert widget.result.layer == other
    same_map(widget, layer=other, target=first_target)
    sent = heat_of(widget)
    assert (sent["layer"], sent["target"], sent["method"]) == (other, first_target, "gradcam")
    # a new layer sends its feature maps; the heatmap is the result's, at display size
    assert widget._grid != grid_before
    assert wire.unpack(widget._grid)["layer"] == other
    indices = wire.unpacked_rows(sent["packed"], sent["width"], sent["height"])
    expected = render.colormap_indices(widget.result.heatmap_at((sent["height"], sent["width"])))
    np.testing.assert_array_equal(indices, expected)

    grid_now = widget._grid
    widget.target = 7
    assert widget.result.class_index == 7
    same_map(widget, layer=other, target=7)
    assert heat_of(widget)["target"] == 7
    assert widget._grid == grid_now  # the same layer: its feature maps are not sent again

    widget.method = "Grad-CAM++"  # named as check_method names it
    assert widget.method == "gradcam++"
    same_map(widget, layer=other, target=7, method="gradcam++")

    widget.method = "saliency"  # a pixel attribution
    assert isinstance(widget.result, hookviz.Attribution)
    expected = hookviz.attribute(widget.loaded, widget.image, "saliency", 7)
    np.testing.assert_allclose(widget.result.map, expected.map, atol=1e-6)
    assert heat_of(widget)["kind"] == "attribution"
    widget.method = "gradcam"
    widget.layer, widget.target = first_layer, first_target


def test_one_forward_pass_serves_every_class_and_method_of_a_layer(shown, monkeypatch):
    from hookviz.notebook import session as session_module

    widget = shown
    widget.layer = widget.layers[0]
    built = []
    original = session_module.ForwardPass

    def counted(*args, **kwargs):
        built.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(session_module, "ForwardPass", counted)
    widget.target = 1
    widget.target = 2
    widget.method = "xgradcam"
    widget.method = "gradcam"
    assert built == []
    widget.layer = widget.layers[2]
    assert len(built) == 1


@pytest.mark.parametrize(
    ("name", "value", "error", "says"),
    [
        ("layer", "3x", hookviz.LayerError, "did you mean '3'"),
        ("layer", 5, TypeError, "layer's name"),
        ("target", 10, hookviz.TargetError, "out of range"),
        ("target", -1, hookviz.TargetError, "out of range"),
        ("target", "cat", hookviz.TargetError, "class index"),
        ("method", "gradcam+++", hookviz.MethodError, "saliency"),
        ("opacity", 1.5, hookviz.HookvizError, "[0, 1]"),
        ("colormap", "rainbow", hookviz.HookvizError, "viridis"),
        ("grid_colormap", "rainbow", hookviz.HookvizError, "viridis"),
        ("order", "weight", hookviz.HookvizError, "mean"),
        ("scale", "log", hookviz.HookvizError, "shared"),
        ("channels", 0, hookviz.HookvizError, "at least 1"),
    ],
)
def test_a_bad_value_raises_a_clear_error_and_changes_nothing(shown, name, value, error, says):
    widget = shown
    before = {key: getattr(widget, key) for key in ("layer", "target", "method", name)}
    result, heat = widget.result, widget._heat
    with pytest.raises(error) as raised:
        setattr(widget, name, value)
    assert says in str(raised.value)
    assert {key: getattr(widget, key) for key in before} == before
    assert widget.result is result and widget._heat == heat


def test_show_refuses_bad_arguments_before_it_builds_a_widget():
    net, picture = tiny_net(), photo()
    with pytest.raises(hookviz.LayerError, match="did you mean"):
        hookviz.show(net, picture, layer="3x")
    with pytest.raises(hookviz.TargetError, match="out of range"):
        hookviz.show(net, picture, target=10)
    with pytest.raises(hookviz.MethodError, match="choose a CAM method"):
        hookviz.show(net, picture, method="nope")
    with pytest.raises(hookviz.ModelError, match=r"nn\.Module"):
        hookviz.show("resnet18", picture)
    with pytest.raises(hookviz.ImageError):
        hookviz.show(net, np.zeros((4, 4, 4, 4)))
    loaded = hookviz.wrap_model(net, num_classes=10)
    with pytest.raises(hookviz.ModelError, match="categories"):
        hookviz.show(loaded, picture, categories=[str(i) for i in range(10)])


def test_a_pick_in_the_browser_that_fails_is_said_in_the_widget_and_keeps_the_pictures(shown):
    widget = shown
    before = (widget.layer, widget.target, widget.method, widget.result, widget._heat)
    replies = widget._replies
    widget._on_message(widget, {"pick": "layer", "value": "3x"}, [])
    assert "did you mean" in widget.error
    assert widget._replies == replies + 1
    assert (widget.layer, widget.target, widget.method, widget.result, widget._heat) == before
    widget._on_message(widget, {"pick": "target", "value": 99}, [])
    assert "out of range" in widget.error
    # a good pick computes, clears the message and answers
    widget._on_message(widget, {"pick": "target", "value": 4}, [])
    assert (widget.target, widget.result.class_index, widget.error) == (4, 4, "")
    assert widget._replies == replies + 3
    widget._on_message(widget, {"unknown": 1}, [])  # not a pick: ignored
    assert widget._replies == replies + 3


def test_categories_name_a_plain_modules_classes_and_arrays_are_images():
    names = [f"kind {i}" for i in range(10)]
    values = np.random.default_rng(1).random((40, 50, 3)).astype(np.float32)  # floats in [0, 1]
    widget = hookviz.show(tiny_net(), values, categories=names, target=3)
    assert widget.loaded.categories == tuple(names)
    assert widget.result.class_name == "kind 3"
    assert widget.image.size == (50, 40)
    chw = hookviz.show(tiny_net(), (values * 255).astype(np.uint8).transpose(2, 0, 1))
    assert chw.image.size == (50, 40)


def test_a_module_without_class_scores_is_refused():
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())  # (N, 4, h, w): not class scores
    with pytest.raises(hookviz.ModelError, match="class scores"):
        hookviz.show(net, photo())


def test_the_widgets_script_bundles_the_pages_painting_code():
    script = notebook_widget.script()
    assert script is notebook_widget.Widget._esm or script == notebook_widget.Widget._esm
    order = bundle.module_order(bundle.JS, notebook_widget.ENTRY)
    assert order[-1] == "notebook.js"
    assert {"paint.js", "store.js", "unpack.js"} <= set(order)
    assert "picture.js" not in order and "dom.js" not in order  # nothing of Streamlit's page
    assert "export default {" in script and "\nimport " not in script
    assert "function paintGrid" in script  # the page's own painting code


def test_the_static_picture_is_the_overlay_and_the_grid_as_the_options_say(shown):
    widget = shown
    data, _ = widget._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in data
    assert data["text/plain"].startswith("hookviz.show: gradcam of")
    picture = np.asarray(Image.open(io.BytesIO(data["image/png"])).convert("RGB"))
    base = fit_within(widget._session.display_picture(), notebook_widget.STILL_LONG_SIDE)
    heat = widget.result.heatmap_at((base.height, base.width))
    overlay = np.asarray(render.overlay(base, heat, alpha=widget.opacity, cmap=widget.colormap))
    np.testing.assert_array_equal(picture[:, : base.width], overlay)
    assert picture.shape[1] > base.width  # the grid beside it
    widget.opacity = 0.9
    widget.colormap = "viridis"
    again = np.asarray(Image.open(io.BytesIO(widget._repr_png_())).convert("RGB"))
    overlay = np.asarray(render.overlay(base, heat, alpha=0.9, cmap="viridis"))
    np.testing.assert_array_equal(again[:, : base.width], overlay)
    widget.opacity, widget.colormap = render.DEFAULT_ALPHA, render.DEFAULT_CAM_CMAP


def test_the_payloads_are_what_the_browser_code_reads(shown):
    widget = shown
    picture = wire.unpack(widget._picture)
    assert set(picture["tables"]) == set(render.COLORMAPS)
    assert all(len(table) == 768 for table in picture["tables"].values())
    image = Image.open(io.BytesIO(picture["png"]))
    assert image.size == (picture["width"], picture["height"]) == widget.image.size
    grid = wire.unpack(widget._grid)
    features = hookviz.feature_maps(widget.loaded, widget.image, widget.layer)
    assert grid["channels"] == features.num_channels
    assert set(grid["grid"]["orders"]) == {"mean", "max", "index"}
    assert grid["grid"]["orders"]["mean"]["channels"] == features.channel_order("mean")


@pytest.mark.slow
def test_the_bundled_model_shows_the_same_grad_cam_as_the_library(lite0, sample):
    widget = hookviz.show(lite0, sample)
    assert widget.layer == hookviz.default_layer(lite0)
    same_map(widget, target=None)
    widget.layer = "blocks.4"
    widget.target = widget.classes[1]["index"]
    same_map(widget, layer="blocks.4", target=widget.classes[1]["index"])
    assert wire.unpack(widget._grid)["channels"] == 112


@pytest.mark.slow
def test_import_hookviz_imports_no_widget_library():
    code = (
        "import sys, hookviz; hookviz.grad_cam; hookviz.show; "
        "print('anywidget' in sys.modules, 'ipywidgets' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "False False"
