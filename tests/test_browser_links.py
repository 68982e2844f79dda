"""Shared links in a real browser: an address opens the view it names (model, weights, layer,
class, colormap), on the page and panel it names (with its toggles); moving between the pages
keeps the view, and an upload. Shared fixtures and helpers: ``browser_page.py``."""

from __future__ import annotations

from .browser_page import (
    assert_images_loaded,
    browser_fixture,  # noqa: F401  (a fixture: browser)
    encoded,
    go_to,
    main_text,
    open_page_fixture,  # noqa: F401  (a fixture: open_page)
    server_fixture,  # noqa: F401  (a fixture: server)
    shot,
    upload,
    wait_for_text,
    wait_idle,
)

LINK = (
    "/beyond?model=resnet18&weights=untrained&layer=layer3&target=1&cam_cmap=viridis"
    "&beyond_panel=trust&trust=1"
)


def test_a_shared_link_restores_the_view_the_page_and_its_panel(open_page):
    page = open_page(LINK, wait=False)
    wait_for_text(page, "Beyond one heatmap")
    wait_for_text(page, "Deletion area")  # the trust panel, its check run
    wait_idle(page)
    assert page.evaluate("location.pathname") == "/beyond", page.url
    shot(page, "26-shared-link-trust")
    go_to(page, "Diagnose the network")
    wait_for_text(page, "Histogram of layer3")
    wait_idle(page)
    assert "layer=layer3" in page.url and "/diagnose" in page.url, page.url
    go_to(page, "Explore")
    wait_for_text(page, "Feature maps of layer3")  # resnet18's layer: the model was restored
    wait_idle(page)
    assert "Grad-CAM: “goldfish”" in main_text(page)
    assert "layer=layer3" in page.url and "target=1" in page.url

    upload(page, "mine.png", encoded((320, 240), "PNG"), "image/png")
    wait_for_text(page, "mine.png · 320×240 px")
    wait_idle(page)
    go_to(page, "Beyond one heatmap")
    wait_for_text(page, "Deletion area")
    wait_idle(page)
    go_to(page, "Explore")
    wait_for_text(page, "Feature maps of layer3")
    wait_idle(page)
    assert "mine.png · 320×240 px" in main_text(page)
    assert_images_loaded(page)
    shot(page, "26-upload-kept-across-pages")
