"""What a class server offers is the teacher's choice (issue 45 item 3): ``HOOKVIZ_MODELS``
(``hookviz app --models``, ``deploy/serve.py --models``) lists the only models the page offers;
the model box, a link, the second model of Compare and the model cache all keep to it; the
timm box is gone; the Your model page takes no upload unless ``uploads`` is listed. The real
page (AppTest), real models."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

import hookviz
from deploy import serve
from hookviz.app import launch
from hookviz.app.caches import models
from hookviz.app.view import offered_models
from hookviz.app.view.offered_models import OfferedModels

from .test_app import APP, TIMEOUT, _box, _open_page


def test_the_rules():
    everything = OfferedModels(None)
    assert everything.offers("timm:anything", None) and everything.typing_allowed
    listed = OfferedModels(frozenset({"bundled", "resnet18", "card:birds"}))
    assert listed.offers("efficientnet_lite2", "bundled")
    assert listed.offers("resnet18", "torchvision")
    assert listed.offers("card:birds", "card") and not listed.offers("card:fish", "card")
    assert not listed.offers("vgg11", "torchvision")
    assert not listed.offers("timm:resnet18", None)  # a name is a name: timm's is another
    assert not listed.offers("upload:abc", "upload") and not listed.typing_allowed
    assert OfferedModels(frozenset({"uploads"})).offers("upload:abc", "upload")
    assert models.base_name("embed:resnet18") == "resnet18"
    assert models.base_name("clip:ViT-B-32|a dog|a cat") == "clip:ViT-B-32"
    assert "the bundled models" in listed.described() and "resnet18" in listed.described()


def _page(monkeypatch, listed: str, query: dict | None = None, page: str = "") -> AppTest:
    monkeypatch.setenv(offered_models.MODELS_ENV, listed)
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    for key, value in (query or {}).items():
        at.query_params[key] = value
    at.run()
    if page:
        _open_page(at, page)
    assert not at.exception, at.exception
    return at


@pytest.mark.slow
def test_the_model_box_offers_the_list_only_and_no_timm_box(monkeypatch):
    at = _page(monkeypatch, "bundled,resnet18")
    box = _box(at, "Network")
    assert set(box.options) == {
        f"{name} (offline)" for name in ("efficientnet_lite0", "efficientnet_lite1",
                                          "efficientnet_lite2")
    } | {next(o for o in box.options if o.startswith("resnet18 ("))}  # fmt: skip
    assert not [t for t in at.sidebar.text_input if t.label == "Or any timm model"]
    assert box.value == "efficientnet_lite0" and not at.error


@pytest.mark.slow
@pytest.mark.parametrize("asked", ["timm:resnet34d", "vgg11", "clip:ViT-B-32|a|b"])
def test_a_link_to_a_model_not_listed_shows_a_listed_one_and_says_so(monkeypatch, asked):
    at = _page(monkeypatch, "bundled", {"model": asked})
    assert _box(at, "Network").value == "efficientnet_lite0"
    assert any("does not offer" in i.value for i in at.info), [i.value for i in at.info]


@pytest.mark.slow
def test_a_default_model_not_listed_gives_way_to_the_first_listed(monkeypatch):
    at = _page(monkeypatch, "resnet18")
    assert _box(at, "Network").value == "resnet18"
    assert not any("does not offer" in i.value for i in at.info)  # nobody asked for another


@pytest.mark.slow
def test_a_list_that_offers_nothing_here_says_so(monkeypatch, tmp_path):
    monkeypatch.setenv(hookviz.models.MODELS_DIR_ENV, str(tmp_path))  # (no card in it)
    at = _page(monkeypatch, "cards")
    assert at.error and "offers its model cards" in at.error[0].value


@pytest.mark.slow
def test_the_your_model_page_takes_no_upload_unless_listed(monkeypatch):
    at = _page(monkeypatch, "bundled", page="your-model")
    assert any("takes no model from its visitors" in i.value for i in at.info)
    assert not at.get("file_uploader")
    at = _page(monkeypatch, "bundled,uploads", page="your-model")
    assert len(at.get("file_uploader")) == 2


def test_the_model_cache_refuses_what_the_list_lacks(monkeypatch):
    monkeypatch.setenv(offered_models.MODELS_ENV, "bundled")
    with pytest.raises(hookviz.ModelError, match="offers the bundled models only"):
        models.model("vgg11", False)


def test_the_launchers_pass_the_list_and_offline_to_the_page(tmp_path):
    settings = serve.page_settings("127.0.0.1", None, "bundled, resnet18", offline=True)
    assert settings == {offered_models.MODELS_ENV: "bundled,resnet18", "HOOKVIZ_OFFLINE": "1"}
    assert launch.OFFERED_ENV == serve.OFFERED_ENV == offered_models.MODELS_ENV
    assert launch.OFFLINE_ENV == serve.OFFLINE_ENV == hookviz.models.OFFLINE_ENV
