"""The first page in a real browser: what a visitor sees first (the sample photo's overlay,
feature maps and top-5), what shows that the app is working from a cold start, and the layout
(side by side in a wide window in both themes; a narrow window that never scrolls sideways).
Shared fixtures and helpers: ``browser_page.py``."""

from __future__ import annotations

import time

import pytest

import hookviz
from scripts import page_pictures
from scripts.appserver import free_port, running_app

from .browser_page import (
    COLD_START_SPY,
    TIMINGS,
    assert_images_loaded,
    browser_fixture,  # noqa: F401  (a fixture: browser)
    choose,
    close_session,
    layer_label,
    main_text,
    navigate,
    open_page_fixture,  # noqa: F401  (a fixture: open_page)
    open_session,
    overflow,
    page_fixture,  # noqa: F401  (a fixture: page)
    server_fixture,  # noqa: F401  (a fixture: server)
    shot,
    show_sidebar,
    sidebar_visible,
    wait_for_results,
    wait_for_text,
    wait_idle,
)


def test_first_page_shows_sample_grid_overlay_and_predictions(page):
    assert_images_loaded(page)
    text = main_text(page)
    assert "Grad-CAM: “military uniform”" in text
    assert "Feature maps of bn2" in text
    assert "512×600 px" in text
    assert "Top-5 predictions" in text
    assert page.locator("[data-testid='stProgress']").count() == 5  # the top-5 as bars
    device = hookviz.core.devices.describe_device(hookviz.default_device())
    assert f"ms on {device}" in text
    shot(page, "01-default")


def test_a_cold_start_shows_that_it_is_working_then_paints_the_first_page(browser):
    """From `streamlit run` to the default page fully drawn, with nothing loaded beforehand
    (a new server process: torch import, model load, layer trace, first analysis): something
    says the app is working before the results come (``COLD_START_SPY``), then every picture
    is drawn; the time to that first paint is recorded."""
    started = time.perf_counter()
    with running_app(free_port(), timeout=120) as url:
        page, requests = open_session(browser, url, init_script=COLD_START_SPY, wait=False)
        wait_for_results(page)
        assert_images_loaded(page)
        TIMINGS["first paint (cold start: streamlit run -> default page drawn)"] = round(
            time.perf_counter() - started, 3
        )
        seen = page.evaluate("window.__hookviz")
        shot(page, "25-cold-start-done")
        close_session(page, requests)
    assert seen["samples"] > 0, "the page was never sampled"
    assert seen["working"] is not None, f"no working indicator before the results: {seen}"
    assert seen["working"]["results"] is False, seen
    assert seen["results"] is not None and seen["working"]["sample"] < seen["results"], seen


@pytest.mark.parametrize(("name", "dark"), [("laptop-light", False), ("laptop-dark", True)])
def test_a_wide_window_in_either_theme_shows_the_pictures_side_by_side(browser, server, name, dark):
    width, height = 1366, 768
    page, requests = open_session(browser, server, width=width, height=height, dark=dark)
    assert_images_loaded(page)
    sideways = overflow(page)
    assert sideways <= 0, f"the page scrolls sideways by {sideways}px at {width}px"
    # original, overlay and grid sit side by side in the first screenful
    boxes = [  # original, overlay, grid (picture 2 is the overlay's colour bar)
        page.locator(page_pictures.PICTURES).nth(i).bounding_box() for i in (0, 1, 3)
    ]
    assert boxes[0]["x"] < boxes[1]["x"] < boxes[2]["x"]
    assert all(box["y"] < height for box in boxes)
    shot(page, f"06-{name}")
    close_session(page, requests)


def test_narrow_window_never_scrolls_sideways(open_page):
    """At 420 px: the first page is drawn whole, and neither it nor a layer change nor another
    page and back makes the main area scroll sideways (the sidebar is closed over the page
    for each measure)."""
    page = open_page(width=420, height=900)
    assert_images_loaded(page)
    shot(page, "06-narrow-light")
    sideways = {"opened": overflow(page)}
    show_sidebar(page, True)
    choose(page, "Target layer", layer_label("blocks.4"))
    wait_for_text(page, "Feature maps of blocks.4")
    wait_idle(page)
    show_sidebar(page, False)
    sideways["layer changed"] = overflow(page)
    shot(page, "29-narrow-layer")
    navigate(page, "Beyond one heatmap")
    wait_for_text(page, "all from the same forward pass")
    wait_idle(page)
    show_sidebar(page, False)
    sideways["beyond"] = overflow(page)
    shot(page, "29-narrow-beyond")
    navigate(page, "Explore")
    wait_for_text(page, "Feature maps of blocks.4")
    wait_idle(page)
    show_sidebar(page, False)
    sideways["back to explore"] = overflow(page)
    assert_images_loaded(page)
    shot(page, "29-narrow-explore")
    assert all(value <= 0 for value in sideways.values()), sideways


CLOSED = """() => {
  const box = document.querySelector("[data-testid='stSidebar']").getBoundingClientRect();
  return box.x + box.width <= 0;
}"""


def test_on_a_phone_a_choice_in_the_sidebar_closes_it(open_page):
    """The sidebar slides over most of a phone's page: a choice made in it (here the weights'
    radio, then a layer from the select box) closes it, and the page it changed shows; the
    choice took effect."""
    page = open_page(width=390, height=844)
    show_sidebar(page, True)
    page.get_by_text("untrained", exact=True).click()
    page.wait_for_function(CLOSED, timeout=10_000)
    wait_for_text(page, "Untrained: random weights", where="stSidebar")
    wait_idle(page)
    assert "weights=untrained" in page.url
    show_sidebar(page, True)
    choose(page, "Target layer", layer_label("blocks.4"))
    wait_for_text(page, "Feature maps of blocks.4")
    wait_idle(page)
    assert not sidebar_visible(page)
    shot(page, "33-phone-after-a-choice")


def test_on_a_phone_a_page_picked_in_the_sidebar_closes_it(open_page):
    """On a phone the top navigation moves into the sidebar: a page picked there closes the
    sidebar, so the page shows (it stayed open over the new page, which the user had to find
    the close button to see)."""
    page = open_page(width=390, height=844)
    navigate(page, "Beyond one heatmap")
    page.wait_for_function(CLOSED, timeout=10_000)
    wait_for_text(page, "all from the same forward pass")
    wait_idle(page)
    assert not sidebar_visible(page)
