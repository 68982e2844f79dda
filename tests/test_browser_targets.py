"""Explore beyond one class in a real browser: a detector's boxes drawn and listed, one picked
from the sidebar (the overlay's title and the address follow, the same link opens it again), a
box picked from the side-by-side pictures, and a classifier turned embedder compared with an
uploaded reference image, at a desktop and a phone's width. Shared fixtures and helpers:
``browser_page.py``."""

from __future__ import annotations

import hookviz

from .browser_page import (
    browser_fixture,  # noqa: F401  (a fixture: browser)
    main_text,
    open_page_fixture,  # noqa: F401  (a fixture: open_page)
    options,
    overflow,
    png,
    server_fixture,  # noqa: F401  (a fixture: server)
    shot,
    wait_for_query,
    wait_for_text,
    wait_idle,
)

DETECTOR = "/?model=fasterrcnn_mobilenet_v3_large_320_fpn&weights=untrained"
TITLE = "() => document.querySelector('[data-testid=hvTitle]')?.textContent"


def test_a_detectors_box_is_picked_in_the_sidebar_and_the_link_opens_it(open_page, server):
    page = open_page(DETECTOR, wait=False)
    wait_for_text(page, "Every box's CAM, side by side")
    wait_idle(page)
    assert page.evaluate(TITLE).startswith("Grad-CAM: the box")
    listed = options(page, "Explain the box")
    assert listed[0].startswith("Most confident: #1") and len(listed) == 10
    assert "Detections" in main_text(page)
    shot(page, "40-detector")

    third = listed[2]
    box = page.get_by_role("combobox", name="Explain the box")
    box.click()
    page.get_by_role("option", name=third, exact=True).click()
    wait_for_query(page, "target=box")
    wait_idle(page)
    link = page.url
    x0, y0 = third.split("· (")[1].split(")")[0].split(", ")
    assert f"box ({x0}, {y0})" in main_text(page)

    # the link opens the same box in a new session
    again = open_page(link.removeprefix(server), wait=False)
    wait_for_text(again, "Every box's CAM, side by side")
    wait_idle(again)
    assert f"box ({x0}, {y0})" in main_text(again)

    # a side-by-side picture's button explains its box
    again.get_by_role("button", name="Explain this").first.click()
    again.wait_for_function("() => !location.search.includes('target=')")
    wait_idle(again)
    assert f"box ({x0}, {y0})" not in main_text(again)


def test_an_embedder_compares_with_a_reference_on_a_phone(open_page):
    page = open_page("/?model=embed:efficientnet_lite0", width=390, height=844, wait=False)
    wait_for_text(page, "upload a reference image")
    wait_idle(page)
    reference = hookviz.sample_image().rotate(30).crop((40, 40, 470, 560))
    page.locator("[data-testid='stSidebar'] input[type=file]").nth(1).set_input_files(
        files=[{"name": "ref.png", "mimeType": "image/png", "buffer": png(reference)}]
    )
    wait_for_query(page, "target=similar")
    wait_for_text(page, "The reverse: what in the reference is like the photo")
    wait_idle(page)
    assert "Cosine similarity of the embeddings" in main_text(page)
    assert overflow(page) <= 0  # no sideways scrolling
    shot(page, "41-embedder-phone")
