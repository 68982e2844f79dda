"""The Streamlit page, driven headless with streamlit.testing's AppTest: the real app script,
the real bundled model, no mocks."""

from __future__ import annotations

import hashlib
import io
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from streamlit.testing.v1 import AppTest
from streamlit.util import calc_hash

import hookviz
from hookviz.app.view.keys import CHANNELS_OPEN, SNIPPET_OPEN
from hookviz.app.view.target import TOP1, ViewTarget
from hookviz.core.features import WEIGHT_ORDERINGS, order_by_weight

from .heat_pictures import heat_pictures

APP = str(Path(__file__).resolve().parent.parent / "app.py")
TIMEOUT = 180  # the first run imports torch and loads a model


def _run() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    return at


def _encoded(size: tuple[int, int], colour: tuple[int, int, int], fmt: str) -> bytes:
    pixels = np.zeros((size[1], size[0], 3), np.uint8)
    pixels[:] = colour
    pixels[: size[1] // 2, : size[0] // 3] = (255, 255, 255)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=fmt)
    return buffer.getvalue()


def _box(at: AppTest, label: str):
    """The widget labelled ``label`` (the layer and class boxes have keys that change with the
    image and model, so tests find them as a user does: by their label)."""
    for kind in ("selectbox", "slider", "radio", "toggle", "checkbox", "multiselect"):
        for widget in getattr(at, kind):
            if widget.label == label:
                return widget
    raise AssertionError(f"no widget labelled {label!r}")


def _open_page(at: AppTest, name: str) -> AppTest:
    """Go to another page of the app, keeping the session (as the top navigation does). The
    pages are callables (``app.PAGES``), which ``AppTest.switch_page`` cannot name (it takes page
    files): the run asks for the page by its script hash, Streamlit's hash of its url path, as a
    click in the navigation does."""
    at._page_hash = calc_hash(name.replace("_", "-"))
    return at.run()


def _display_change(at: AppTest) -> AppTest:
    """Apply changed display options: they rerun only the fragments they feed (AppTest then
    holds just those fragments' elements), so run the whole page once more to see all of it,
    as a browser merges the fragments into the page it has."""
    at.run()
    return at.run()


def _pick_layer(at: AppTest, layer: str) -> AppTest:
    """Pick a layer in the sidebar: the whole page reruns (the sidebar and the results)."""
    _box(at, "Target layer").set_value(layer).run()
    assert not at.exception, [e.value for e in at.exception]
    if at.get("image"):  # a page that draws the original: Explore
        labels = [w.label for w in at.sidebar.selectbox]
        assert "Network" in labels and "Explain the class" in labels, labels
        assert f"Feature maps of {layer}" in _texts(at)
    return at


def _pick_class(at: AppTest, target: int | ViewTarget, via: str = "Explain the class") -> AppTest:
    """Pick a class in the sidebar (in the class box, or ``via="This image's top 5"``). On
    Explore that reruns only the fragments the class changes (the overlay and the raw heatmap;
    the grid only when ordered by channel weight, the snippet only while open; not the
    downloads, which read the class on screen when clicked) and the other class widget, and
    AppTest then holds only their elements: check them, then run the whole page once more to
    see all of it (a browser merges the fragments into the page it has). A class given as an
    index is that class (-1: the top-1)."""
    if not isinstance(target, ViewTarget):
        target = TOP1 if target == -1 else ViewTarget.of_class(target)
    _box(at, via).set_value(target).run()
    assert not at.exception, [e.value for e in at.exception]
    # the other class widget is redrawn to show the new class (the one used already shows it)
    other = "This image's top 5" if via == "Explain the class" else "Explain the class"
    drawn = [w.label for w in (*at.sidebar.selectbox, *at.sidebar.radio)]
    assert drawn == [other], "the page was rerun or the class widgets were not: " + str(drawn)
    if other == "Explain the class":
        assert _box(at, other).value == target
    else:  # the top-5 lights none for another class
        shortcut = _box(at, other)
        offered = shortcut.format_func(target) in shortcut.options
        assert shortcut.value == (target if offered else None)
    assert not at.get("image") and not at.get("progress"), "the original or top-5 was redrawn"
    pictures = [p for p in heat_pictures(at) if p.series is None]
    assert [p.image is not None for p in pictures] == [True, False]  # the overlay, the heatmap
    assert pictures[0].base is None, "the image was sent again"
    assert not at.get("download_button"), "the downloads were redrawn"
    # an open snippet is redrawn with the new class; a closed one is the same for every class
    code = [c.value for c in at.get("code")]
    if at.session_state.get(SNIPPET_OPEN):
        assert len(code) == 1 and f"target={target.class_index})" in code[0]
    else:
        assert not code and not at.get("expander"), "the closed snippet was redrawn"
    # the fragments keep the address (the top-1, the default, is left out of it)
    assert at.query_params.get("target") == (None if target.is_top1 else str(target.index))
    return at.run()


def _snippet(at: AppTest) -> str:
    """The "Reproduce in Python" code (written only while its expander is open: open it)."""
    if not at.get("code"):
        at.session_state[SNIPPET_OPEN] = True
        at.run()
    return at.get("code")[0].value


def _open_channels_panel(at: AppTest) -> AppTest:
    """Open the lazy "Channels behind the heatmap" expander."""
    at.session_state[CHANNELS_OPEN] = True
    return at.run()


def _texts(at: AppTest) -> str:
    """The page's texts, the browser-drawn pictures' titles and captions among them."""
    parts = [e.value for e in (*at.caption, *at.subheader, *at.markdown, *at.error, *at.info)]
    parts += [picture.said() for picture in heat_pictures(at)]
    return "\n".join(str(p) for p in parts)


def _assert_results(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert len(at.get("image")) == 1  # the original
    # the overlay (with its colour bar), the feature-map grid and the heatmap, coloured in the
    # browser (only the overlay blends over the image)
    assert [p.image is not None for p in heat_pictures(at)] == [True, False, False]
    assert len(at.get("progress")) == 5  # the top-5 as bars
    labels = [b.proto.label for b in at.get("download_button")]
    assert labels == [
        "Download overlay (PNG)",
        "Download heatmap (.npy)",
        "Download feature maps (PNG)",
    ]


@pytest.fixture
def app() -> AppTest:
    return _run()


def test_default_page_renders_everything(app):
    _assert_results(app)
    text = _texts(app)
    assert "military uniform" in text
    assert "512×600 px" in text
    assert _box(app, "Network").value == "efficientnet_lite0"
    assert _box(app, "Target layer").value == "bn2"
    assert _box(app, "Explain the class").value == TOP1  # follows each image's top-1
    assert "Grad-CAM for “military uniform” at bn2" in text
    snippet = _snippet(app)
    assert "hookviz.load_model('efficientnet_lite0')" in snippet
    assert not app.error


@pytest.mark.parametrize(("fmt", "mime"), [("PNG", "image/png"), ("JPEG", "image/jpeg")])
def test_upload_replaces_the_image(app, fmt, mime):
    data = _encoded((320, 200), (30, 60, 200), fmt)
    app.file_uploader(key="upload").set_value((f"photo.{fmt.lower()}", data, mime)).run()
    _assert_results(app)
    assert "320×200 px" in _texts(app)
    assert "photo." in _texts(app)


def test_bad_upload_shows_a_message_and_the_page_keeps_working(app):
    app.file_uploader(key="upload").set_value(("notes.png", b"just some text", "image/png"))
    app.run()
    assert not app.exception
    assert any("notes.png" in e.value and "not a readable image" in e.value for e in app.error)
    _assert_results(app)  # the sample is shown meanwhile
    # the next good upload works
    good = _encoded((150, 300), (200, 20, 20), "PNG")
    app.file_uploader(key="upload").set_value(("good.png", good, "image/png")).run()
    _assert_results(app)
    assert not app.error
    assert "150×300 px" in _texts(app)


def test_change_layer_class_and_display_options(app):
    _pick_layer(app, "blocks.3")
    _assert_results(app)
    assert "Feature maps of blocks.3" in _texts(app)

    _pick_class(app, 834)  # "#2 suit" from the top-5
    assert "Grad-CAM for “suit” at blocks.3" in _texts(app)
    _pick_class(app, 1)  # outside the top-5, found by typing
    assert "Grad-CAM for “goldfish” at blocks.3" in _texts(app)
    assert "target=1)" in _snippet(app)
    # one click on the top-5 radio: the box follows it, and back
    _pick_class(app, 465, via="This image's top 5")  # "#3 bulletproof vest"
    assert "Grad-CAM for “bulletproof vest” at blocks.3" in _texts(app)
    assert app.query_params.get("target") == "465"
    _pick_class(app, -1, via="This image's top 5")  # Top-1 again
    assert "Grad-CAM for “military uniform” at blocks.3" in _texts(app)
    assert "target" not in app.query_params

    app.selectbox(key="cam_cmap").set_value("viridis")
    app.slider(key="alpha").set_value(0.8)
    app.slider(key="channels").set_value(16)
    app.radio(key="order").set_value("index")
    _display_change(app)
    _assert_results(app)
    # each of the four arrived: in the pictures the browser draws, and in the address
    overlay, grid, heatmap = heat_pictures(app)
    assert (overlay.alpha, overlay.cmap, heatmap.cmap) == (0.8, "viridis", "viridis")
    assert (grid.channels, grid.order) == (16, "index")
    chosen = {"cam_cmap": "viridis", "alpha": "0.8", "channels": "16", "order": "index"}
    assert {name: app.query_params.get(name) for name in chosen} == chosen


def test_change_model_to_an_untrained_torchvision_network(app):
    _box(app, "Network").set_value("resnet18")
    app.radio(key="weights").set_value("untrained").run()
    _assert_results(app)
    assert _box(app, "Target layer").value == "layer4"  # the new model's default layer
    assert "Feature maps of layer4" in _texts(app)


def test_unavailable_weights_explain_what_to_do_and_recover(app):
    # conftest points TORCH_HOME at an empty folder and switches downloads off
    _box(app, "Network").set_value("resnet18").run()
    assert not app.exception
    assert any("Cannot load" in e.value and "untrained" in e.value for e in app.error)
    app.radio(key="weights").set_value("untrained").run()
    _assert_results(app)
    assert not app.error


def test_a_shared_url_restores_the_view():
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    params = {
        "model": "resnet18",
        "weights": "untrained",
        "layer": "layer3",
        "target": "1",
        "channels": "16",
        "order": "index",
        "cam_cmap": "viridis",
        "alpha": "0.8",
    }
    for key, value in params.items():
        at.query_params[key] = value
    at.run()
    _assert_results(at)
    assert _box(at, "Network").value == "resnet18"
    assert at.radio(key="weights").value == "untrained"
    assert _box(at, "Target layer").value == "layer3"
    assert _box(at, "Explain the class").value == ViewTarget.of_class(1)
    assert at.slider(key="channels").value == 16
    assert at.radio(key="order").value == "index"
    assert at.slider(key="alpha").value == 0.8
    assert "Grad-CAM for “goldfish” at layer3" in _texts(at)


def test_a_broken_url_falls_back_to_defaults():
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    for key, value in {
        "model": "nope",
        "layer": "layer99",
        "target": "banana",
        "channels": "-3",
        "alpha": "7",
    }.items():
        at.query_params[key] = value
    at.run()
    _assert_results(at)
    assert _box(at, "Network").value == "efficientnet_lite0"
    assert _box(at, "Target layer").value == "bn2"
    assert _box(at, "Explain the class").value == TOP1
    assert at.slider(key="alpha").value == 0.5
    # the model the link named is said, with what is shown instead, until the user picks one
    said = [i.value for i in at.info if "**nope**" in i.value]
    assert len(said) == 1 and "does not offer" in said[0] and "efficientnet_lite0" in said[0]
    _box(at, "Network").set_value("resnet18")
    at.radio(key="weights").set_value("untrained").run()
    _assert_results(at)
    assert not [i.value for i in at.info if "nope" in i.value]


@pytest.mark.slow
def test_models_load_and_trace_once_per_server(monkeypatch):
    """Changing options, the class and the layer never reloads or re-traces the model."""
    import streamlit as st

    import hookviz
    import hookviz.core.layers

    calls = {"load": 0, "trace": 0}
    real_load, real_trace = hookviz.load_model, hookviz.core.layers._trace

    def counting_load(*args, **kwargs):
        calls["load"] += 1
        return real_load(*args, **kwargs)

    def counting_trace(*args, **kwargs):
        calls["trace"] += 1
        return real_trace(*args, **kwargs)

    monkeypatch.setattr(hookviz, "load_model", counting_load)
    monkeypatch.setattr(hookviz.core.layers, "_trace", counting_trace)
    st.cache_resource.clear()
    st.cache_data.clear()
    at = _run()
    _assert_results(at)
    _display_change(at.selectbox(key="cam_cmap").set_value("turbo"))
    _pick_class(at, 834)
    _pick_layer(at, "blocks.2")
    _pick_layer(at, "bn2")
    second = _run()  # another browser session shares the cached model
    _assert_results(second)
    assert calls == {"load": 1, "trace": 1}


@pytest.mark.parametrize("method", [*hookviz.METHODS, *hookviz.BASELINES])
@pytest.mark.slow
def test_every_cam_method_in_the_page(method):
    from hookviz.app.method_texts import METHOD_LABELS
    from hookviz.core.methods import CLASSLESS

    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    params = {
        "model": "mobilenet_v3_small",
        "weights": "untrained",
        "layer": "features.3",
        "method": method,
        "target": "5",
    }
    if method in ("cam", "shapleycam"):
        # CAM: a linear head on the global average pool of the layer; Shapley-CAM: a second
        # derivative (MobileNet-V3's hard sigmoid has none)
        params.update(model="resnet18", layer="layer4")
    for key, value in params.items():
        at.query_params[key] = value
    at.run()
    # a method estimated over two seconds waits for "Compute" (its estimate said first): press it
    shown_as = METHOD_LABELS[method].split(" (")[0]
    compute = [b for b in at.button if b.label.startswith(f"Compute {shown_as} (")]
    if compute:
        compute[0].click().run()
    if method == "legrad":  # torchvision's ViTs only: a CNN is refused, saying why
        assert any("vision transformer" in e.value for e in at.error), [e.value for e in at.error]
        return
    _assert_results(at)
    assert at.selectbox(key="method").value == method
    label = METHOD_LABELS[method].split(" (")[0]
    if method in CLASSLESS:
        # no class: the caption must not name one (it said "Eigen-CAM for 'bell cote' · class
        # 442" before)
        captions = heat_pictures(at)[0].captions  # the overlay's
        caption = next(c for c in captions if c.startswith(f"{label} at"))
        assert "no class" in caption and "“" not in caption and "class 5" not in caption
    else:
        assert f"{label} for “" in _texts(at)
    snippet = _snippet(at)
    assert (f"method={method!r}" in snippet) == (method != "gradcam")


@pytest.mark.parametrize(
    ("model", "layer"), [("vgg11", "features"), ("mobilenet_v3_large", "features")]
)
@pytest.mark.slow
def test_untrained_architectures_in_every_view(model, layer):
    """A plain stack of convolutions and an inverted-residual network with hard-swish, untrained,
    explained with Grad-CAM++ on Explore, Beyond one heatmap (top-5 gallery, layer sweep) and
    Diagnose (its three panels). The browser walks the same tour once, on ResNet-18
    (test_browser_networks.py): what it adds there (pictures decoded, the sidebar picked by
    hand) does not depend on the architecture."""
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    for key, value in {"model": model, "weights": "untrained", "method": "gradcam++"}.items():
        at.query_params[key] = value
    at.run()
    _assert_results(at)
    assert _box(at, "Target layer").value == layer  # the network's default layer
    assert f"Feature maps of {layer}" in _texts(at) and "Grad-CAM++ for “" in _texts(at)
    _open_page(at, "beyond")
    assert not at.exception, [e.value for e in at.exception]
    assert "all from the same forward pass" in _texts(at)  # the top-5 gallery
    at.segmented_control(key="beyond_panel").set_value("sweep").run()
    assert not at.exception, [e.value for e in at.exception]
    assert f"{layer} · " in _texts(at)
    _open_page(at, "diagnose")
    assert any(c.value.startswith("Histogram of ") for c in at.caption)
    at.segmented_control(key="diagnose_panel").set_value("flow").run()
    assert "Gradient of the score of “" in _texts(at)
    at.segmented_control(key="diagnose_panel").set_value("intervene").run()
    assert any(c.value.startswith("Logit of “") for c in at.caption)
    assert not at.exception and not at.error, [e.value for e in (*at.exception, *at.error)]


def test_cam_where_it_does_not_apply_says_why():
    """MobileNet-V3's head is two linear layers: CAM is refused with the reason, not a
    traceback."""
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    params = {"model": "mobilenet_v3_small", "weights": "untrained", "layer": "features.12",
              "method": "cam"}  # fmt: skip
    for key, value in params.items():
        at.query_params[key] = value
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    errors = [e.value for e in at.error]
    assert any("CAM (Zhou et al. 2016) needs a linear head" in e for e in errors), errors


@pytest.mark.slow
def test_diagnostics_panels(app):
    _open_page(app, "diagnose")
    assert not app.exception, [e.value for e in app.exception]
    stats = app.dataframe[0].value
    assert list(stats["layer"])[-2:] == ["bn2", "global_pool.pool"]
    assert ((stats["zero fraction"] >= 0) & (stats["zero fraction"] <= 1)).all()
    assert any(c.value.startswith("Histogram of bn2") for c in app.caption)
    app.segmented_control(key="diagnose_panel").set_value("flow").run()
    assert "Gradient of the score of “military uniform”" in _texts(app)
    app.segmented_control(key="diagnose_panel").set_value("intervene").run()
    assert not app.exception
    assert any("Logit of “military uniform”" in c.value for c in app.caption)
    app.slider(key="intervene_scale").set_value(2.0).run()
    assert not app.exception
    app.radio(key="intervene_mode").set_value("keep").run()
    assert not app.exception
    assert any("1264 channel(s) × 0" in m.value for m in app.markdown)  # 1280 - 16 kept
    assert len(app.get("image")) == 2  # the Grad-CAM before and after


@pytest.mark.slow
def test_grid_ordered_by_cam_weights_and_single_channel_overlay(app):
    # between the orders by activation and by channel number the browser switches itself:
    # the server only records it
    app.radio(key="order").set_value("max").run()
    assert app.query_params.get("order") == "max"
    assert not heat_pictures(app), "an order change to max activation redrew a picture"
    app.run()
    # an order by the class's channel weights is computed on the server: the grid is redrawn
    app.radio(key="order").set_value("weight_x_mean").run()
    (grid,) = heat_pictures(app)
    assert grid.order == "weight_x_mean" and set(grid.orders) == {
        "mean",
        "max",
        "index",
        "weight_x_mean",
    }
    app.run()
    _assert_results(app)
    _open_channels_panel(app)
    assert "The 20 channels with the largest |α|" in _texts(app)
    _display_change(app.checkbox(key="channel_overlay_on").check())
    _display_change(app.selectbox(key="channel_overlay@bn2").set_value(7))
    assert not app.exception
    assert "Channel 7 of bn2, stretched over the image." in _texts(app)
    assert len(app.get("image")) == 2  # the original and the single channel
    # A class change reruns the grid too (its order and signs are the class's weights) and the
    # open weight chart, not the rest.
    import hookviz
    from hookviz import render

    loaded = hookviz.load_model("efficientnet_lite0", device="cpu")
    sample = hookviz.sample_image()
    second = hookviz.predict(loaded, sample)[1]
    _box(app, "Explain the class").set_value(ViewTarget.of_class(second.index)).run()
    assert not app.exception, [e.value for e in app.exception]
    assert f"largest |α| for “{second.name}”" in _texts(app)
    (grid,) = [p for p in heat_pictures(app) if p.series is not None]
    analysis = hookviz.ForwardPass(loaded, sample, "bn2").analysis(second.index)
    activations = analysis.features.activations
    order, signs = order_by_weight(activations, analysis.cam.weights, "weight_x_mean", 64)
    expected = render.laid_out_grid(activations, order, signs=signs)
    assert np.array_equal(grid.drawn(cmap="viridis", channels=64), expected)


@pytest.mark.slow
def test_beyond_one_heatmap_panels(app):
    _open_page(app, "beyond")
    assert not app.exception, [e.value for e in app.exception]
    assert "all from the same forward pass" in _texts(app)
    panels = app.segmented_control(key="beyond_panel")
    panels.set_value("against").run()
    text = _texts(app)
    assert "Evidence against “military uniform”" in text
    assert "Why “military uniform” rather than “suit”" in text
    panels.set_value("sweep").run()
    text = _texts(app)
    for stage in ("blocks.1", "blocks.2", "blocks.4", "bn2"):
        assert f"{stage} · " in text
    panels.set_value("steps").run()
    assert "**4 · Σ α·A** (blue < 0 < red)" in _texts(app)
    panels.set_value("trust").run()
    app.button(key="trust_run").click().run()  # a button: it runs the check once
    assert not app.exception, [e.value for e in app.exception]
    assert "Deletion area" in _texts(app) and not [b for b in app.button if b.key == "trust_run"]
    # one sentence says whether the map beat random, as the areas say
    pairs = re.findall(r"area ([\d.]+) \(random ([\d.]+)", _texts(app))  # deletion, insertion
    areas = [float(x) for pair in pairs for x in pair]
    deletion, insertion = areas[0] < areas[1], areas[2] > areas[3]
    verdict = next(m.value for m in app.markdown if m.value.startswith("**The heatmap"))
    expected = {(True, True): "on both", (False, False): "did not beat"}.get(
        (deletion, insertion), "deletion only" if deletion else "insertion only"
    )
    assert expected in verdict, (areas, verdict)
    panels.set_value("against").run()
    _box(app, "Rather than").set_value(465).run()
    assert "rather than “bulletproof vest”" in _texts(app)


def test_the_whole_network_panel_gives_each_stages_field_and_opens_it_in_explore(app):
    _open_page(app, "beyond")
    app.segmented_control(key="beyond_panel").set_value("sweep").run()
    assert not app.exception, [e.value for e in app.exception]
    found = hookviz.overview(hookviz.load_model(hookviz.DEFAULT_MODEL), hookviz.sample_image())
    text = _texts(app)
    for stage in found:
        height, width = stage.cam.cam.shape
        assert f"{stage.layer} · {height}×{width}" in text
        strongest = ", ".join(map(str, stage.channels))
        assert f"{stage.shape[0]} channels; strongest {strongest} · " in text
    assert f"sees 19×19 of the {found.input_size[0]}×{found.input_size[1]} input" in text
    assert "sees the whole input" in text  # the last stages
    # every layer on demand: the library's rows, in the address too
    app.toggle(key="overview_all").set_value(True).run()
    assert not app.exception, [e.value for e in app.exception]
    assert app.query_params.get("overview_all") == "1"
    every = hookviz.overview(
        hookviz.load_model(hookviz.DEFAULT_MODEL), hookviz.sample_image(), layers="all"
    )
    assert len(every) > len(found)
    keys = [b.key for b in app.button if b.key.startswith("overview_explore@")]
    assert keys == [f"overview_explore@{stage.layer}" for stage in every]
    app.toggle(key="overview_all").set_value(False).run()
    next(b for b in app.button if b.key == "overview_explore@blocks.2").click().run()
    assert not app.exception, [e.value for e in app.exception]
    assert app.query_params.get("layer") == "blocks.2"
    assert "Raw heatmap" in _texts(app)  # on Explore, at that stage


def test_the_whole_network_steps_on_present(app):
    _open_page(app, "beyond")
    app.segmented_control(key="beyond_panel").set_value("sweep").run()
    app.button(key="overview_present").click().run()
    assert not app.exception, [e.value for e in app.exception]
    assert any(b.key == "present_leave" for b in app.button)  # on Present, its steps above


def _concept_rows(at: AppTest) -> list[str]:
    """The concepts' lines, each after its colour's inline picture."""
    return [m.value.split(") ", 1)[1] for m in at.markdown if "**Concept " in m.value]


def test_the_concepts_panel_names_the_heads_concepts_and_follows_k_and_the_layer(app):
    _open_page(app, "beyond")
    app.segmented_control(key="beyond_panel").set_value("concepts").run()
    assert not app.exception, [e.value for e in app.exception]
    found = hookviz.concepts(
        hookviz.load_model(hookviz.DEFAULT_MODEL), hookviz.sample_image(), layer="bn2", k=5
    )
    rows = _concept_rows(app)
    # the library's concepts at the default layer, each named by its classes through the head
    assert rows == [
        f"**Concept {j + 1}**: "
        + ", ".join(
            f"{name} {share:.0%}"
            for name, share in zip(found.labels[j], found.label_probabilities[j], strict=True)
        )
        for j in range(5)
    ]
    assert "hookviz.concepts(loaded, image, layer='bn2', k=5)" in _texts(app)
    app.slider(key="concepts_k").set_value(3).run()
    assert len(_concept_rows(app)) == 3
    # an earlier layer: the head does not read it, so the concepts are not named by classes
    _box(app, "Target layer").set_value("blocks.5").run()
    assert not app.exception, [e.value for e in app.exception]
    rows = _concept_rows(app)
    assert len(rows) == 3 and all("of the layer's" in row for row in rows), rows
    assert "Not named by classes: it has no linear layer" in _texts(app)
    assert app.query_params["concepts_k"] == "3"


def test_the_relevance_panel_ranks_the_layers_channels_and_opens_one_on_the_channel_page(app):
    _open_page(app, "beyond")
    app.segmented_control(key="beyond_panel").set_value("relevance").run()
    assert not app.exception, [e.value for e in app.exception]
    loaded, image = hookviz.load_model(hookviz.DEFAULT_MODEL), hookviz.sample_image()
    whole = hookviz.relevance(loaded, image, layer="bn2")  # (the default composite)
    top = [channel for channel, _ in whole.top_channels(6)]
    captions = [c.value for c in app.caption if re.match(r"Channel \d+:", c.value)]
    reached = float(whole.layer_relevance.sum())
    # the library's six most relevant channels of the layer, most first, with their shares
    assert captions == [
        f"Channel {c}: {float(whole.layer_relevance[c]) / reached:.0%} of the layer's relevance"
        for c in top
    ]
    text = _texts(app)
    assert f"(score {whole.score:.2f})" in text
    assert "composite='epsilon_plus_flat') gives the same in Python" in text
    # another composite: another ranking, and the address keeps it
    app.selectbox(key="relevance_rule").set_value("epsilon").run()
    assert not app.exception, [e.value for e in app.exception]
    assert app.query_params["relevance_rule"] == "epsilon"
    plain = hookviz.relevance(loaded, image, layer="bn2", composite="epsilon")
    first = plain.top_channels(1)[0][0]
    assert next(c.value for c in app.caption if re.match(r"Channel \d+:", c.value)).startswith(
        f"Channel {first}:"
    )
    next(b for b in app.button if b.key == f"relevance_channel@{first}").click().run()
    assert not app.exception, [e.value for e in app.exception]
    assert app.query_params.get("vis_channel") == str(first)


@pytest.mark.slow
def test_the_browser_coloured_pictures_are_hookviz_render_s_exactly(app):
    """The overlay and heatmap are drawn in the browser from what the page sends: the
    display-size image, the heatmap's colormap indices and the colormap tables. Drawn as the
    browser does (``tests/heat_pictures.py``), they must be ``hookviz.render``'s overlay and
    heatmap exactly, for any opacity and colormap the widgets can take."""
    import hookviz
    from hookviz import render

    overlay, grid, heatmap = heat_pictures(app)
    assert (overlay.alpha, overlay.cmap, grid.cmap) == (0.5, "inferno", "viridis")
    sample = hookviz.sample_image()
    display = render.fit_within(sample, 1024)
    loaded = hookviz.load_model("efficientnet_lite0", device="cpu")
    heat = (
        hookviz.ForwardPass(loaded, sample, "bn2")
        .grad_cam()
        .heatmap_at((display.height, display.width))
    )
    assert overlay.base.shape == (display.height, display.width, 3)
    for alpha, cmap in ((0.5, "inferno"), (0.05, "viridis"), (0.85, "jet"), (1.0, "gray")):
        expected = np.asarray(render.overlay(display, heat, alpha=alpha, cmap=cmap))
        assert np.array_equal(overlay.drawn(alpha, cmap), expected), (alpha, cmap)
        assert np.array_equal(heatmap.drawn(cmap=cmap), render.colorize(heat, cmap)), cmap
    analysis = hookviz.ForwardPass(loaded, sample, "bn2").analysis()
    activations = analysis.features.activations
    channels = analysis.features.channel_order("mean", 64)
    for cmap in render.COLORMAPS:  # the default grid: 64 channels by mean, each on its scale
        expected = render.laid_out_grid(activations, channels, cmap=cmap)
        assert np.array_equal(grid.drawn(cmap=cmap), expected), cmap
    _, height, width = activations.shape
    assert grid.text() == (
        f"64 of 1280 channels, {height}×{width} cells each; channel number in each corner"
    )
    # ... and every other number the slider can ask for (up to 256), drawn from the same data
    assert grid.series.count == 256
    for n in (1, 2, 8, 9, 63, 65, 100, 256):
        for scale in render.SCALES:  # ... on either colour scale
            expected = render.laid_out_grid(
                activations, analysis.features.channel_order("mean", n), cmap="jet", scale=scale
            )
            assert np.array_equal(grid.drawn(cmap="jet", channels=n, scale=scale), expected)
    assert grid.text(9).startswith("9 of 1280 channels")
    # ... and in every other channel order the class does not change (the order radio's
    # options, in the radio's order, for the browser to map its index)
    assert grid.order == "mean" and grid.orderings == ("mean", "max", "index", *WEIGHT_ORDERINGS)
    assert set(grid.orders) == {"mean", "max", "index"}
    for order in ("max", "index"):
        for n, scale in ((1, "channel"), (64, "shared"), (256, "channel")):
            expected = render.laid_out_grid(
                activations, analysis.features.channel_order(order, n), cmap="magma", scale=scale
            )
            drawn = grid.drawn(cmap="magma", channels=n, scale=scale, order=order)
            assert np.array_equal(drawn, expected), (order, n, scale)
    # A change of either option reruns no picture (the browser follows the widget) but does
    # record it: the address names it at once, and the pictures' data carry it from then on.
    app.slider(key="alpha").set_value(0.8).run()
    assert app.query_params.get("alpha") == "0.8"
    app.run()  # AppTest holds only the rerun fragments' elements: see the whole page again
    app.selectbox(key="cam_cmap").set_value("magma").run()
    assert app.query_params.get("cam_cmap") == "magma"
    app.run()
    app.run()
    app.selectbox(key="grid_cmap").set_value("cividis").run()
    assert app.query_params.get("grid_cmap") == "cividis"
    app.run()
    app.slider(key="channels").set_value(9).run()
    assert app.query_params.get("channels") == "9"
    assert not heat_pictures(app), "a channel count change redrew a picture on the server"
    app.run()
    app.radio(key="scale").set_value("shared").run()
    assert app.query_params.get("scale") == "shared"
    assert not heat_pictures(app), "a colour scale change redrew a picture on the server"
    app.run()
    overlay, grid, heatmap = heat_pictures(app)
    assert (overlay.alpha, overlay.cmap, heatmap.cmap) == (0.8, "magma", "magma")
    assert (grid.cmap, grid.channels, grid.scale) == ("cividis", 9, "shared")
    assert grid.text().startswith("9 of 1280 channels")


def test_the_address_follows_a_class_change_back_to_the_top_prediction(app):
    """A class change reruns only the fragments it changes: going back to the class of the last
    full run (the top prediction) must take the class out of the address again (it kept the
    class shown in between)."""
    box = _box(app, "Explain the class")
    box.set_value(ViewTarget.of_class(834)).run()
    assert app.query_params.get("target") == "834"
    box.set_value(TOP1).run()
    assert not app.exception, [e.value for e in app.exception]
    assert "target" not in app.query_params
    app.run()
    assert "target" not in app.query_params
    assert "Grad-CAM: “military uniform”" in _texts(app)


@pytest.mark.slow
def test_a_link_made_on_an_upload_names_it_by_its_digest_and_opens_it():
    """The address names an upload by its content hash, never by its bytes or file name; a
    session opening the link on a server that keeps the folder sees the same photo and view,
    with the file's name, until it goes back to the sample."""
    maker = AppTest.from_file(APP, default_timeout=TIMEOUT)
    maker.run()
    photo = _encoded((320, 200), (30, 60, 200), "PNG")
    maker.file_uploader(key="upload").set_value(("holiday.png", photo, "image/png")).run()
    _pick_class(maker, 834)
    link = {name: maker.query_params[name] for name in maker.query_params}
    assert link["image"] == hashlib.sha256(photo).hexdigest() and link["target"] == "834"

    opened = AppTest.from_file(APP, default_timeout=TIMEOUT)
    for name, value in link.items():
        opened.query_params[name] = value
    opened.run()
    assert not opened.exception and not opened.info, [i.value for i in opened.info]
    texts = _texts(opened)
    assert "320×200 px" in texts and "Grad-CAM for “suit”" in texts
    assert "**holiday.png**, the photo this address names." in [c.value for c in opened.caption]
    opened.button(key="close_linked").click().run()
    assert "image" not in opened.query_params and "320×200 px" not in _texts(opened)


def test_a_link_to_a_photo_the_server_does_not_keep_shows_the_sample_and_says_so():
    unknown = hashlib.sha256(b"a photo uploaded elsewhere").hexdigest()
    for named, said in ((unknown, "does not keep"), ("holiday.png", "made on **holiday.png**")):
        opened = AppTest.from_file(APP, default_timeout=TIMEOUT)
        opened.query_params["image"] = named
        opened.query_params["target"] = "834"
        opened.run()
        notice = " ".join(i.value for i in opened.info)
        assert said in notice and "sample photo" in notice, notice
        assert "Grad-CAM for “suit”" in _texts(opened)  # the link's class, on the sample
        opened.run()  # still said on the next run
        assert opened.info
        photo = _encoded((320, 200), (30, 60, 200), "PNG")
        opened.file_uploader(key="upload").set_value(("holiday.png", photo, "image/png")).run()
        assert not opened.info and "320×200 px" in _texts(opened)


@pytest.mark.slow
def test_a_big_photo_is_analysed_from_a_small_decode_and_reported_at_its_own_size():
    """A 24-megapixel JPEG: the page says its own size, and what the page keeps of it is a
    reduced decode standing for the file (the full resolution only for a download)."""
    from hookviz.app.caches import images

    app = AppTest.from_file(APP, default_timeout=TIMEOUT)
    app.run()
    photo = _encoded((6000, 4000), (90, 140, 40), "JPEG")
    app.file_uploader(key="upload").set_value(("field.jpg", photo, "image/jpeg")).run()
    assert not app.exception, [e.value for e in app.exception]
    assert "6000×4000 px" in _texts(app)
    kept = images.decoded_image(hashlib.sha256(photo).hexdigest())
    assert kept.size == (1500, 1000) and kept.info["full_size"] == (6000, 4000)


def test_at_its_memory_budget_the_server_says_it_is_busy_and_keeps_the_upload(monkeypatch):
    """Past the memory budget a new photo is not decoded: the page says the server is busy,
    keeps showing what it showed, and takes the photo once memory allows (nothing re-done)."""
    app = AppTest.from_file(APP, default_timeout=TIMEOUT)
    app.run()
    assert not app.exception, [e.value for e in app.exception]
    monkeypatch.setenv("HOOKVIZ_MEMORY_BUDGET_MB", "1")
    photo = _encoded((333, 222), (200, 60, 30), "PNG")
    app.file_uploader(key="upload").set_value(("busy.png", photo, "image/png")).run()
    assert not app.exception, [e.value for e in app.exception]
    said = " ".join(e.value for e in app.error)
    assert "The server is busy" in said and "try again" in said, said
    assert "333×222 px" not in _texts(app)
    monkeypatch.delenv("HOOKVIZ_MEMORY_BUDGET_MB")
    app.run()
    assert not app.exception and not app.error, [e.value for e in app.error]
    assert "333×222 px" in _texts(app)


def test_an_uploads_bytes_are_released_from_streamlits_memory_and_the_file_stays_listed():
    """The contract ``hookviz/app/upload_release.py`` relies on in Streamlit's upload manager:
    after the release, the session's file is still listed (the uploader keeps showing it) with no
    bytes."""
    app = AppTest.from_file(str(Path(APP).parent / "tests/apps/released_upload.py"))
    app.run()
    app.file_uploader(key="file").set_value(("photo.png", b"x" * 5000, "image/png")).run()
    assert not app.exception, [e.value for e in app.exception]
    assert [t.value for t in app.text] == ["before=5000 released=True held=[0]"]
