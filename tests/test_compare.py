"""Comparing two models on one image: ``hookviz.compare`` checked against each model's own
Grad-CAM (the independent oracle: two single-model analyses, subtracted and correlated with
numpy), and the "Compare" page driven with AppTest. Real models only: the bundled offline
EfficientNet-Lites, an untrained ResNet-18 and a 3-class checkpoint built from random weights."""

from __future__ import annotations

import re

import numpy as np
import pytest
import safetensors.torch
from streamlit.testing.v1 import AppTest

import hookviz
from hookviz import render
from hookviz.app.view import state
from hookviz.app.view.target import TOP1, ViewTarget
from hookviz.insight.compare import class_named, heatmap_correlation, heatmap_difference

from .test_app import APP, TIMEOUT, _box, _open_page, _texts
from .test_checkpoints import _build

NAMES = ["cat", "dog", "parrot"]
UNIFORM = 652  # "military uniform": the sample's top-1 for both Lites


@pytest.fixture(scope="module")
def lite1() -> hookviz.LoadedModel:
    """The bundled, pretrained EfficientNet-Lite1 (another ImageNet model, offline)."""
    return hookviz.load_model("efficientnet_lite1", device="cpu")


@pytest.fixture(scope="module")
def pets_bytes() -> bytes:
    """A 3-class resnet18 state dict from random weights, as safetensors bytes."""
    return safetensors.torch.save(_build("resnet18", len(NAMES), seed=5).state_dict())


@pytest.fixture(scope="module")
def pets(pets_bytes) -> hookviz.LoadedModel:
    return hookviz.load_model(
        "resnet18", checkpoint=pets_bytes, class_names=list(NAMES), device="cpu"
    )


def _oracle(first, second, image, *, first_layer=None, second_layer=None, target=None):
    """Each model's own Grad-CAM of the same class name, computed separately."""
    a = hookviz.grad_cam(first, image, layer=first_layer, target=target)
    index = [name.lower() for name in second.categories].index(a.class_name.lower())
    b = hookviz.grad_cam(second, image, layer=second_layer, target=index)
    return a, b


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(a.astype(np.float64).ravel(), b.astype(np.float64).ravel())[0, 1])


# ---------------------------------------------------------------- the library


@pytest.mark.slow
def test_two_imagenet_models_match_the_class_by_name(lite0, lite1, sample):
    result = hookviz.compare(lite0, lite1, sample)
    top1 = hookviz.predict(lite0, sample)[0]
    assert result.matched is True
    assert result.shared_class == top1.name
    assert result.first.cam.class_name == result.second.cam.class_name == top1.name
    assert result.second.cam.class_index == class_named(lite1, top1.name)
    height, width = sample.height, sample.width
    assert result.difference.shape == (height, width)
    assert result.difference.dtype == np.float32
    assert result.difference.min() >= -1.0 and result.difference.max() <= 1.0

    a, b = _oracle(lite0, lite1, sample)
    assert result.first.cam.layer == a.layer and result.second.cam.layer == b.layer
    np.testing.assert_allclose(result.first.cam.heatmap, a.heatmap, atol=1e-6)
    np.testing.assert_allclose(result.second.cam.heatmap, b.heatmap, atol=1e-6)
    np.testing.assert_allclose(result.difference, a.heatmap - b.heatmap, atol=1e-6)
    assert result.correlation == pytest.approx(_pearson(a.heatmap, b.heatmap), abs=1e-6)
    assert -1.0 <= result.correlation <= 1.0
    # two different networks: not the same map, but the same photo's person
    assert np.abs(result.difference).max() > 0.01
    assert result.correlation > 0.0


@pytest.mark.slow
def test_models_with_other_preprocessing_share_the_image_grid(lite0, resnet18, sample):
    """An untrained ResNet-18 (other input size, other normalisation, ImageNet names): the
    difference is still on the photo's own pixel grid."""
    result = hookviz.compare(lite0, resnet18, sample)
    assert result.matched and result.shared_class == result.first.cam.class_name
    assert result.difference.shape == (sample.height, sample.width)
    a, b = _oracle(lite0, resnet18, sample)
    np.testing.assert_allclose(result.difference, np.clip(a.heatmap - b.heatmap, -1, 1), atol=1e-6)
    assert result.correlation == pytest.approx(_pearson(a.heatmap, b.heatmap), abs=1e-6)


def test_a_model_compared_with_itself_agrees_everywhere(lite0, sample):
    result = hookviz.compare(lite0, lite0, sample)
    assert result.matched and result.shared_class == result.first.cam.class_name
    assert result.difference.shape == (sample.height, sample.width)
    np.testing.assert_array_equal(result.difference, np.zeros_like(result.difference))
    assert result.correlation == pytest.approx(1.0, abs=1e-6)


def test_an_explicit_first_target_is_followed_by_name(lite0, lite1, sample):
    second_best = hookviz.predict(lite0, sample)[1]  # "suit"
    result = hookviz.compare(lite0, lite1, sample, first_target=second_best.index)
    assert result.first.cam.class_index == second_best.index
    assert result.matched is True
    assert result.shared_class == second_best.name
    assert result.second.cam.class_name == second_best.name
    assert result.second.cam.class_index == class_named(lite1, second_best.name)
    a, b = _oracle(lite0, lite1, sample, target=second_best.index)
    np.testing.assert_allclose(result.difference, a.heatmap - b.heatmap, atol=1e-6)
    assert result.correlation == pytest.approx(_pearson(a.heatmap, b.heatmap), abs=1e-6)


def test_an_explicit_second_target_of_the_same_name_is_not_called_matched(lite0, lite1, sample):
    result = hookviz.compare(lite0, lite1, sample, second_target=UNIFORM)
    assert result.matched is False  # given, not matched
    assert result.shared_class == "military uniform"
    assert result.difference is not None and result.correlation is not None


@pytest.mark.slow
def test_the_name_is_matched_at_another_index_ignoring_case(lite0, pets_bytes, sample):
    """A fine-tuned model with the class under another index (and other spelling): matched by
    its name, never by its index."""
    names = ["cat", "  Military Uniform", "dog"]
    tuned = hookviz.load_model("resnet18", checkpoint=pets_bytes, class_names=names, device="cpu")
    result = hookviz.compare(lite0, tuned, sample)
    assert result.matched is True
    assert result.second.cam.class_index == 1
    assert result.shared_class == "military uniform"  # the first model's spelling
    a = hookviz.grad_cam(lite0, sample)
    b = hookviz.grad_cam(tuned, sample, target=1)
    np.testing.assert_allclose(result.difference, a.heatmap - b.heatmap, atol=1e-6)
    assert result.correlation == pytest.approx(_pearson(a.heatmap, b.heatmap), abs=1e-6)


@pytest.mark.slow
def test_a_second_model_without_the_class_explains_its_own(lite0, pets, sample):
    assert list(pets.categories) == NAMES
    result = hookviz.compare(lite0, pets, sample)
    assert result.first.cam.class_name == "military uniform"
    assert result.matched is False
    assert result.shared_class is None
    assert result.difference is None
    assert result.correlation is None
    top1 = hookviz.predict(pets, sample)[0]
    assert result.second.cam.class_index == top1.index
    assert result.second.cam.class_name == top1.name
    assert result.second.cam.class_name in NAMES
    np.testing.assert_allclose(
        result.second.cam.heatmap, hookviz.grad_cam(pets, sample).heatmap, atol=1e-6
    )

    chosen = hookviz.compare(lite0, pets, sample, second_target=1)
    assert chosen.second.cam.class_index == 1
    assert chosen.second.cam.class_name == "dog"
    assert chosen.matched is False and chosen.shared_class is None
    assert chosen.difference is None and chosen.correlation is None


@pytest.mark.slow
def test_each_layer_is_honoured(lite0, lite1, sample):
    result = hookviz.compare(lite0, lite1, sample, first_layer="blocks.4", second_layer="blocks.5")
    assert result.first.cam.layer == "blocks.4"
    assert result.second.cam.layer == "blocks.5"
    assert result.first.features.layer == "blocks.4"
    assert result.second.features.layer == "blocks.5"
    a, b = _oracle(lite0, lite1, sample, first_layer="blocks.4", second_layer="blocks.5")
    np.testing.assert_allclose(result.difference, a.heatmap - b.heatmap, atol=1e-6)
    assert result.correlation == pytest.approx(_pearson(a.heatmap, b.heatmap), abs=1e-6)


def test_eigencam_has_no_shared_class(lite0, lite1, sample):
    result = hookviz.compare(lite0, lite1, sample, method="eigencam")
    assert result.first.cam.method == result.second.cam.method == "eigencam"
    assert result.shared_class is None
    assert result.matched is False
    assert result.difference is None and result.correlation is None


def test_heatmap_helpers():
    flat = np.full((8, 6), 0.5, np.float32)
    pattern = np.random.default_rng(0).random((8, 6)).astype(np.float32)
    assert heatmap_correlation(flat, pattern) == 0.0
    assert heatmap_correlation(pattern, flat) == 0.0
    assert heatmap_correlation(flat, flat) == 0.0
    assert heatmap_correlation(pattern, pattern) == pytest.approx(1.0, abs=1e-9)
    assert heatmap_correlation(pattern, 1 - pattern) == pytest.approx(-1.0, abs=1e-9)
    other = np.random.default_rng(1).random((8, 6)).astype(np.float32)
    assert heatmap_correlation(pattern, other) == pytest.approx(_pearson(pattern, other))
    difference = heatmap_difference(pattern, other)
    assert difference.dtype == np.float32
    np.testing.assert_allclose(difference, pattern - other, atol=1e-7)
    with pytest.raises(ValueError, match="different sizes"):
        heatmap_difference(pattern, np.zeros((6, 8), np.float32))


def test_class_named_ignores_case_and_spaces(lite0, pets):
    assert class_named(lite0, "  Military Uniform ") == UNIFORM
    assert class_named(lite0, "no such class") is None
    assert class_named(pets, "DOG") == 1
    assert class_named(pets, "military uniform") is None


# ---------------------------------------------------------------- the page


def _app(params: dict[str, str] | None = None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    for key, value in (params or {}).items():
        at.query_params[key] = value
    return at.run()


def _compare(params: dict[str, str] | None = None) -> AppTest:
    return _open_page(_app(params), "compare")


def _assert_fine(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def _side_captions(at: AppTest) -> list[str]:
    """The two sides' "METHOD at LAYER · “class” · p = ..." captions, left first."""
    return [c.value for c in at.caption if re.match(r"^\S.* at \S+ · ", c.value)]


def _page_r(at: AppTest) -> float:
    text = next(m.value for m in at.markdown if "r = " in m.value)
    return float(re.search(r"r = (-?\d+\.\d+)", text).group(1))


def test_compare_page_defaults_to_another_model_and_shows_where_they_differ(lite0, lite1, sample):
    at = _compare()
    _assert_fine(at)
    assert _box(at, "Network").value == "efficientnet_lite0"
    second = _box(at, "Second model")
    assert second.value != "efficientnet_lite0"
    assert second.value == "efficientnet_lite1"  # the first other model that loads offline
    text = _texts(at)
    assert "Compare two models" in text
    assert "Both explain “military uniform” (matched by name)." in text
    assert "Where they differ" in text
    left, right = _side_captions(at)
    assert " at bn2 · “military uniform” · " in left
    assert " at bn2 · “military uniform” · " in right
    assert len(at.get("progress")) == 10  # each side's top-5
    # the page's r: Pearson of the two heatmaps on the drawn picture's grid
    # (the sizes of hookviz.app.caches.images)
    picture = render.fit_within(render.fit_within(sample, 1024), 360)
    size = (picture.height, picture.width)
    a = hookviz.grad_cam(lite0, sample).heatmap_at(size)
    b = hookviz.grad_cam(lite1, sample).heatmap_at(size)
    assert _page_r(at) == pytest.approx(_pearson(a, b), abs=0.006)


def test_the_second_model_defaults_to_another_than_the_sidebars():
    at = _compare({"model": "efficientnet_lite1"})
    _assert_fine(at)
    assert _box(at, "Network").value == "efficientnet_lite1"
    assert _box(at, "Second model").value == "efficientnet_lite0"
    assert "r = " in _texts(at)


def test_the_sidebars_class_is_followed_by_name_on_the_page():
    at = _compare({"target": "834"})  # "suit", the sample's #2 on lite0
    _assert_fine(at)
    assert "Both explain “suit” (matched by name)." in _texts(at)
    left, right = _side_captions(at)
    assert "“suit”" in left and "“suit”" in right
    assert "r = " in _texts(at)


def test_a_matched_class_the_second_model_does_not_see_is_said_so():
    """The sidebar's class, matched by name, given about 0% by the second model (an untrained
    one here): the page says so and offers the model's own classes, which then explain its
    top-1 (and come back matched when asked)."""
    at = _compare({"compare_weights": "untrained"})
    _assert_fine(at)
    _, right = _side_captions(at)
    p = float(re.search(r"p = ([\d.]+)%", right).group(1)) / 100
    notes = [i.value for i in at.info if "does not see this class" in i.value]
    assert (p < 0.01) == bool(notes), (p, notes)
    assert p < 0.01  # (random weights over 1000 classes: about 0.1% each)
    at.button(key="compare_own_classes").click().run()
    _assert_fine(at)
    assert at.toggle(key="compare_match").value is False
    assert _box(at, "Its class").value == TOP1
    assert not [i for i in at.info if "does not see this class" in i.value]
    assert at.query_params["compare_match"] == "0"
    at.toggle(key="compare_match").set_value(True).run()
    assert "Both explain “military uniform” (matched by name)." in _texts(at)


def test_eigencam_on_the_page_compares_no_class():
    at = _compare({"method": "eigencam"})
    _assert_fine(at)
    text = _texts(at)
    assert "Both explain" not in text
    assert not [m for m in at.markdown if m.value.endswith("· matched by name")]
    assert any("Eigen-CAM has no class" in i.value for i in at.info)
    assert "r = " not in text
    left, right = _side_captions(at)
    assert "no class" in left and "no class" in right


def test_second_model_and_layer_from_the_url():
    at = _compare({"compare_model": "efficientnet_lite1", "compare_layer": "blocks.5"})
    _assert_fine(at)
    assert _box(at, "Second model").value == "efficientnet_lite1"
    assert _box(at, "Its layer").value == "blocks.5"
    left, right = _side_captions(at)
    assert " at bn2 · " in left
    assert " at blocks.5 · “military uniform” · " in right
    assert "r = " in _texts(at)
    assert at.query_params["compare_model"] == "efficientnet_lite1"
    assert at.query_params["compare_layer"] == "blocks.5"


@pytest.mark.slow
def test_second_model_and_layer_from_the_widgets():
    at = _compare()
    _box(at, "Second model").set_value("efficientnet_lite2").run()
    _assert_fine(at)
    assert _box(at, "Second model").value == "efficientnet_lite2"
    _box(at, "Its layer").set_value("blocks.4").run()
    _assert_fine(at)
    assert _box(at, "Its layer").value == "blocks.4"
    _, right = _side_captions(at)
    assert " at blocks.4 · " in right
    assert "Where they differ" in _texts(at)


def test_untrained_weights_for_the_second_model():
    at = _compare()
    _box(at, "Its weights").set_value("untrained").run()
    _assert_fine(at)
    assert _box(at, "Its weights").value == "untrained"
    assert _box(at, "Second model").value == "efficientnet_lite1"
    # random weights keep ImageNet's names: the class is still matched, the map still drawn
    assert "Both explain “military uniform” (matched by name)." in _texts(at)
    assert "r = " in _texts(at)
    assert len(_side_captions(at)) == 2


@pytest.mark.slow
def test_a_brought_3_class_model_as_the_second(pets_bytes):
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()
    _open_page(at, "your_model")
    at.selectbox(key="own_architecture").set_value("resnet18")
    at.file_uploader(key="own_checkpoint").set_value(
        ("pets.safetensors", pets_bytes, "application/octet-stream")
    )
    at.file_uploader(key="own_names").set_value(
        ("pets.txt", "\n".join(NAMES).encode(), "text/plain")
    )
    at.run()
    at.button(key="own_load").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    brought = at.session_state[state.WISH_KEY]["model"]  # the Load button made it the model
    assert brought.startswith("upload:")
    _open_page(at, "compare")
    _assert_fine(at)
    # the sidebar back to the ImageNet model, the brought one on the right
    _box(at, "Network").set_value("efficientnet_lite0").run()
    _assert_fine(at)
    second = _box(at, "Second model")
    assert "your model: pets.safetensors (resnet18)" in second.options
    second.set_value(brought).run()
    _assert_fine(at)
    assert _box(at, "Second model").value == brought
    text = _texts(at)
    assert "The second model has no class called “military uniform”" in text
    assert not [r for r in at.radio if r.label == "Its weights"]  # it brings its own
    its_class = _box(at, "Its class")
    assert its_class.value == TOP1
    assert any(name in label for label in its_class.options for name in NAMES)
    _, right = _side_captions(at)
    assert any(f"“{name}”" in right for name in NAMES)
    assert "r = " not in text
    assert any("different classes" in i.value for i in at.info)
    # its own class picked: the right side explains it
    its_class.set_value(ViewTarget.of_class(1)).run()
    _assert_fine(at)
    _, right = _side_captions(at)
    assert "“dog”" in right
    assert "r = " not in _texts(at)


def test_a_second_model_that_cannot_load_offline_is_reported():
    at = _compare({"compare_model": "resnet18", "compare_weights": "pretrained"})
    assert not at.exception, [e.value for e in at.exception]
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "Cannot load the second model" in errors[0], errors
    assert "Something went wrong" not in errors[0]
    assert "resnet18" in errors[0].lower()
    assert "Where they differ" not in _texts(at)
    assert at.query_params["compare_model"] == "resnet18"  # the address names what failed
    # untrained needs no download: the same model then works
    _box(at, "Its weights").set_value("untrained").run()
    _assert_fine(at)
    assert "Where they differ" in _texts(at)
    # and back to the failing one, then to another page: the rest of the app still works
    _box(at, "Its weights").set_value("pretrained").run()
    assert at.error and not at.exception
    _open_page(at, "explore")
    _assert_fine(at)
    assert _box(at, "Network").value == "efficientnet_lite0"
    assert "Grad-CAM for “military uniform” at bn2" in _texts(at)
