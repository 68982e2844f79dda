"""The "reproduce in Python" snippet really runs and recreates the view it describes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from PIL import Image

import hookviz
from hookviz import render
from hookviz.snippet import View, reproduce_snippet


def _run(snippet: str, folder, monkeypatch) -> None:
    monkeypatch.chdir(folder)
    exec(compile(snippet, "<snippet>", "exec"), {"__name__": "__snippet__"})


def test_snippet_for_the_sample_recreates_the_pictures(tmp_path, monkeypatch, lite0, sample):
    view = View(
        model="efficientnet_lite0",
        pretrained=True,
        image=None,
        layer="blocks.4",
        target=834,
        channels=12,
        order="max",
        scale="shared",
        grid_cmap="magma",
        cam_cmap="turbo",
        alpha=0.3,
        columns=4,
    )
    _run(reproduce_snippet(view), tmp_path, monkeypatch)

    analysis = hookviz.analyze(lite0, sample, "blocks.4", 834)
    channels = analysis.features.channel_order("max", 12)
    grid = render.feature_grid(
        analysis.features.activations, channels, cmap="magma", scale="shared", columns=4
    )
    overlay = render.overlay(sample, analysis.cam.heatmap, alpha=0.3, cmap="turbo")
    assert np.array_equal(np.asarray(Image.open(tmp_path / "feature_maps.png")), grid)
    assert np.array_equal(np.asarray(Image.open(tmp_path / "gradcam_overlay.png")), overlay)


def test_snippet_for_an_upload_and_untrained_weights(tmp_path, monkeypatch):
    Image.new("RGB", (90, 60), (200, 30, 30)).save(tmp_path / "my photo.png")
    view = View(
        model="resnet18", pretrained=False, image="my photo.png", layer="layer2", target=None
    )
    snippet = reproduce_snippet(view)
    assert "pretrained=False" in snippet and "'my photo.png'" in snippet
    _run(snippet, tmp_path, monkeypatch)
    assert Image.open(tmp_path / "gradcam_overlay.png").size == (90, 60)
    assert Image.open(tmp_path / "feature_maps.png").format == "PNG"


@pytest.mark.parametrize("target", [None, 0, 999])
def test_snippet_is_valid_python_for_any_target(target):
    view = View(model="efficientnet_lite0", pretrained=True, image=None, layer="bn2", target=target)
    compile(reproduce_snippet(view), "<snippet>", "exec")


@pytest.mark.parametrize("order", ["weight", "weight_x_mean"])
def test_snippet_orders_channels_by_cam_weight(tmp_path, monkeypatch, lite0, sample, order):
    """The page's "CAM weight α" orders once crashed the snippet (``ordering 'weight' is not
    one of ...``); it now recreates that grid, + / − marks included."""
    from hookviz.core.features import order_by_weight

    view = View(
        model="efficientnet_lite0",
        pretrained=True,
        image=None,
        layer="blocks.5",
        target=None,
        channels=10,
        order=order,
        columns=5,
    )
    _run(reproduce_snippet(view), tmp_path, monkeypatch)
    analysis = hookviz.analyze(lite0, sample, "blocks.5")
    channels, signs = order_by_weight(
        analysis.features.activations, analysis.cam.weights, order, 10
    )
    grid = render.feature_grid(analysis.features.activations, channels, columns=5, signs=signs)
    assert np.array_equal(np.asarray(Image.open(tmp_path / "feature_maps.png")), grid)


def test_snippet_with_untrained_weights_gives_the_pictures_of_any_other_load(tmp_path, monkeypatch):
    """Random weights are seeded per architecture, so the snippet's own load, a load here and
    the page's load all give the same pictures (they differed on every load before)."""
    Image.new("RGB", (120, 80), (30, 160, 90)).save(tmp_path / "photo.png")
    view = View(model="resnet18", pretrained=False, image="photo.png", layer="layer3", target=7)
    _run(reproduce_snippet(view), tmp_path, monkeypatch)
    import torch

    torch.manual_seed(12345)  # whatever the global random state, the weights are the same
    loaded = hookviz.load_model("resnet18", pretrained=False)
    image = hookviz.load_image(tmp_path / "photo.png")
    analysis = hookviz.analyze(loaded, image, "layer3", 7)
    overlay = render.overlay(image, analysis.cam.heatmap, alpha=0.5, cmap="inferno")
    assert np.array_equal(np.asarray(Image.open(tmp_path / "gradcam_overlay.png")), overlay)


# what a user may type into a file name, a label or an address, aimed at a copied snippet
HOSTILE = [
    '"); import os; os.system("x") #',
    "'''; __import__('os').system('x'); '''",
    'a\nimport os\nos.system("x")',
    "\\\"); exec('x') #",
    "{view.model}",
]


@pytest.mark.parametrize("payload", HOSTILE)
def test_what_users_type_stays_a_string_in_the_snippet(payload):
    """Every string of the view is a string literal in the script (read back by Python's own
    parser), and the script calls and imports nothing but what it always does."""
    import ast

    view = View(
        model=payload,
        pretrained=False,
        image=payload,
        layer=payload,
        target=None,
        method=payload,
        order=payload,
        scale=payload,
        grid_cmap=payload,
        cam_cmap=payload,
        checkpoint=payload,
        class_names=payload,
        reference=payload,
        labels=(payload, "a cat"),
    )
    tree = ast.parse(reproduce_snippet(view))
    strings = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)]
    assert strings.count(payload) >= 10
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }
    assert imported <= {"hookviz", "render", "order_by_weight", "np", "numpy"}, imported
    called = {ast.unparse(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    assert not {name for name in called if "system" in name or "exec" in name or "eval" in name}


def test_numbers_that_are_not_numbers_never_reach_the_snippet():
    view = View(model="resnet18", pretrained=False, image=None, layer="layer4", target=None)
    for field in ("channels", "columns", "alpha", "target"):
        hostile = dataclasses.replace(view, **{field: "1); import os; os.system('x'"})
        with pytest.raises(ValueError):
            reproduce_snippet(hostile)
