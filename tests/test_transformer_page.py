"""Vision transformers in the page (AppTest, real models with random weights): their patch
tokens are offered as maps, a layer the class score does not depend on says so instead of
showing a blank heatmap, and any timm model can be typed by name."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from .test_app import APP, TIMEOUT, _box, _open_page


def _run(params: dict[str, str]) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    for key, value in params.items():
        at.query_params[key] = value
    return at.run()


def _captions(at: AppTest) -> str:
    return "\n".join(caption.value for caption in at.caption)


@pytest.mark.slow
def test_torchvision_vit_is_analysed_on_its_patch_grid():
    at = _run({"model": "vit_b_16", "weights": "untrained"})
    assert not at.exception and not at.error
    layer = _box(at, "Target layer")
    assert layer.value == "encoder.layers.encoder_layer_11.ln_1"  # the last block's first norm
    text = _captions(at)
    assert "fixed 224×224 px input" in text  # a fixed-size model says how it was fed
    assert "768×14×14" in text and "patch tokens" in text
    assert not at.warning  # the default layer has a gradient: no blank-map warning


def test_a_layer_without_gradient_says_why():
    at = _run(
        {"model": "timm:vit_tiny_patch16_224", "weights": "untrained", "layer": "blocks.11.norm2"}
    )
    assert not at.exception and not at.error
    warnings = "\n".join(warning.value for warning in at.warning)
    assert "class token" in warnings and "blocks.11.norm1" in warnings
    assert "(no gradient)" in _box(at, "Target layer").format_func("blocks.11.norm2")


def _type_timm(at: AppTest, name: str) -> AppTest:
    at.text_input(key="timm_name").set_value(name)
    return at.button(key="timm_use").click().run()


@pytest.mark.slow
def test_any_timm_model_by_name_and_a_wrong_name_recovers():
    at = _run({})
    _type_timm(at, "no_such_net_xyz")
    assert not at.exception
    assert at.error and "timm has no model" in at.error[0].value
    _type_timm(at, "deit_tiny_distilled_patch16_224")
    # offline, with no Hugging Face cache: trained weights cannot be had, and the page says so
    assert not at.exception
    assert at.error and "Hugging Face cache" in at.error[0].value
    weights = next(radio for radio in at.sidebar.radio if radio.label == "Weights")
    weights.set_value("untrained").run()
    assert not at.exception and not at.error
    assert _box(at, "Network").value == "timm:deit_tiny_distilled_patch16_224"
    # a DeiT takes the photo at its aspect ratio: 224 on the short side, the patch grid follows
    assert "224×256 px" in _captions(at) or "256×224 px" in _captions(at)


def test_beyond_at_a_layer_without_gradient_says_why_where_the_pictures_are():
    """A ViT layer after its last attention: the gallery shows no darkened pictures but the
    reason (only the class token reaches the head) with a button to the default layer, which
    brings the pictures; Step by step does not blame a global average pooling."""
    at = _run(
        {"model": "timm:vit_tiny_patch16_224", "weights": "untrained", "layer": "blocks.11.norm2"}
    )
    _open_page(at, "beyond")
    assert not at.exception and not at.error
    main = [w.value for w in at.main.warning]
    assert any("class token" in w and "the five heatmaps would be blank" in w for w in main), main
    assert not at.main.get("imgs") and not at.main.get("image")  # no blank pictures
    at.segmented_control(key="beyond_panel").set_value("steps").run()
    assert not at.exception
    text = (
        "\n".join(m.value for m in at.main.markdown)
        + "\n".join(c.value for c in at.main.caption)
        + "\n".join(i.value for i in at.main.info)
    )
    assert "global average pooling" not in text and "positive in every cell" not in text
    assert "every α is 0" in text
    at.segmented_control(key="beyond_panel").set_value("gallery").run()
    at.button(key="no_gradient@blocks.11.norm2").click().run()
    assert not at.exception and not at.main.warning
    assert _box(at, "Target layer").value == "blocks.11.norm1"
    assert at.main.get("imgs") or at.main.get("image")  # the gallery's five pictures
