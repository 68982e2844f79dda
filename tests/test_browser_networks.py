"""The network in a real browser: untrained torchvision architectures (random weights, no
download) in every view (Explore, Beyond one heatmap, Diagnose); a network that cannot load
(its weights not on this machine) is reported and keeps the display options for when one
loads; a big network shows what it is doing while it computes. Shared fixtures and helpers:
``browser_page.py``."""

from __future__ import annotations

import pytest

from .browser_page import (
    SPINNER_SPY,
    assert_images_loaded,
    browser_fixture,  # noqa: F401  (a fixture: browser)
    channels_shown,
    choose,
    go_to,
    main_text,
    network,
    open_page_fixture,  # noqa: F401  (a fixture: open_page)
    panel,
    pick,
    press,
    server_fixture,  # noqa: F401  (a fixture: server)
    set_untrained,
    shot,
    slider_value,
    wait_for_query,
    wait_for_text,
    wait_idle,
)


def test_an_untrained_network_in_every_view(open_page):
    """Picked from the sidebar as a user would (untrained weights, then the network: no
    download), the network's default layer is explained on Explore with every picture; with
    Grad-CAM++, the layer sweep and the top-5 gallery of Beyond one heatmap and the three
    panels of Diagnose work too, and nothing fails. Other architectures take the same tour in
    AppTest (test_app.py): the browser's part of it does not depend on the network."""
    model, layer = "resnet18", "layer4"
    page = open_page(height=1400)
    set_untrained(page)
    choose(page, "Network", network(model, untrained=True))
    wait_for_text(page, f"Feature maps of {layer}")
    wait_idle(page)
    assert_images_loaded(page)
    assert "Untrained" in page.locator("[data-testid='stSidebar']").inner_text()
    shot(page, f"05-untrained-{model}")

    choose(page, "CAM method", "Gradient · Grad-CAM++")
    wait_for_text(page, "Grad-CAM++: “")
    wait_idle(page)
    go_to(page, "Beyond one heatmap")
    wait_for_text(page, "all from the same forward pass")  # the top-5 gallery
    wait_idle(page)
    panel(page, "Whole network")
    wait_for_text(page, f"{layer} · ")
    panel(page, "Top-5 gallery")
    wait_for_text(page, "all from the same forward pass")
    go_to(page, "Diagnose the network")
    wait_for_text(page, "Histogram of")
    panel(page, "Gradient flow")
    wait_for_text(page, "Gradient of the score of")
    panel(page, "Intervene")
    wait_for_text(page, "Logit of")
    wait_idle(page)
    assert_images_loaded(page, count=None)
    assert "Something went wrong" not in main_text(page)
    shot(page, f"10-views-untrained-{model}")


def _set_display_options(page) -> None:
    press(page, "Heatmap opacity", "ArrowRight", times=4)
    wait_for_query(page, "alpha=0.7")
    wait_idle(page)
    choose(page, "Heatmap colormap", "viridis")
    wait_for_query(page, "cam_cmap=viridis")
    wait_idle(page)
    press(page, "Channels shown", "ArrowLeft", until=60)
    wait_for_query(page, "channels=60")
    wait_for_text(page, "60 of 1280 channels")
    wait_idle(page)


def test_error_keeps_the_view(open_page):
    page = open_page()
    _set_display_options(page)
    choose(page, "Network", network("resnet18"))
    wait_for_text(page, "Cannot load")
    wait_idle(page)
    assert "resnet18" in main_text(page)
    wait_for_query(page, "model=resnet18")  # the address names the view that failed
    shot(page, "21-error-cannot-load")
    set_untrained(page)
    wait_for_text(page, "Feature maps of layer4")
    wait_idle(page)
    assert "Cannot load" not in main_text(page)
    assert slider_value(page, "Heatmap opacity") == pytest.approx(0.7)
    assert page.get_by_role("combobox", name="Heatmap colormap").input_value() == "viridis"
    assert slider_value(page, "Channels shown") == 60
    assert channels_shown(page) == (60, 512)
    assert_images_loaded(page)
    shot(page, "21-error-recovered")


def test_big_network_shows_a_spinner_while_it_computes(open_page):
    page = open_page()
    set_untrained(page)
    page.evaluate(SPINNER_SPY)
    choose(page, "Network", network("vgg16", untrained=True))
    wait_for_text(page, "Feature maps of features")
    wait_idle(page)
    loading = page.evaluate("[...window.__spinners]")
    pick(page, "Target layer", "features.28 · ")
    wait_for_text(page, "Feature maps of features.28")
    wait_idle(page)
    seen = page.evaluate("[...window.__spinners]")
    assert any("vgg16" in text for text in loading), seen
    assert all(text.strip() for text in seen), seen
    assert_images_loaded(page)
    shot(page, "25-vgg16-features28")
