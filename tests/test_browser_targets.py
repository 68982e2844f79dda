"""Explore beyond one class in a real browser: a detector's boxes drawn and listed, one picked
from the sidebar (the overlay's title and the address follow, the same link opens it again), a
box picked from the side-by-side pictures or by clicking it on the sidebar's picture, a
segmenter's rectangle dragged on that picture, and a classifier turned embedder compared with an
uploaded reference image, at a desktop and a phone's width. Shared fixtures and helpers:
``browser_page.py``."""

from __future__ import annotations

import hookviz
from hookviz.app.browser.streamlit_dom import key_class
from hookviz.app.pages.explore.found import SIDE_BY_SIDE

from .browser_page import (
    SLOW,
    assert_images_loaded,
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
SEGMENTER = "/?model=lraspp_mobilenet_v3_large&weights=untrained"
SAMPLE_SIZE = hookviz.sample_image().size
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

    # a side-by-side picture's button explains its box: the most confident's (the first).
    # The browser draws the page a moment after its run ends, and a click while the pictures
    # above the button are still being laid out lands on another one: all are waited for.
    buttons = min(SIDE_BY_SIDE, len(listed))  # (the box explained's disabled)
    again.wait_for_function(
        "([side, n]) => document.querySelectorAll(`[class*=${side}] button`).length === n",
        arg=[key_class("side_"), buttons],
        timeout=SLOW,
    )
    assert_images_loaded(again, None)
    again.locator(f".{key_class('side_0')}").get_by_role("button", name="Explain this").click()
    again.wait_for_function("() => !location.search.includes('target=')", timeout=SLOW)
    # the address can change a moment before the overlay's caption is redrawn: wait for it
    again.wait_for_function(
        "(old) => !document.querySelector('[data-testid=stMain]').innerText.includes(old)",
        arg=f"box ({x0}, {y0})",
        timeout=SLOW,
    )
    wait_idle(again)


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
    # the metric is drawn in the same run, but the browser may draw it a moment later
    wait_for_text(page, "Cosine similarity of the embeddings")
    wait_idle(page)
    assert overflow(page) <= 0  # no sideways scrolling
    shot(page, "41-embedder-phone")


def _picture(page, name: str):
    """The bounding box (x, y, width, height) of the picture in the sidebar's chart ``name``."""
    chart = page.locator(f"[data-testid='stSidebar'] [aria-label='{name}']")
    chart.scroll_into_view_if_needed()
    return chart.locator("image").bounding_box()


def _on_picture(frame, x: float, y: float) -> tuple[float, float]:
    """The page's point over the image's pixel (x, y)."""
    width, height = SAMPLE_SIZE
    return frame["x"] + x / width * frame["width"], frame["y"] + y / height * frame["height"]


def _corners(text: str) -> tuple[float, ...]:
    """(x0, y0, x1, y1) from a text holding "(x0, y0)–(x1, y1)"."""
    inner = text.split("(", 1)[1].split(")", 2)
    return tuple(float(v) for v in (inner[0] + ", " + inner[1].split("(")[1]).split(", "))


def test_a_box_clicked_on_the_picture_is_explained(open_page):
    page = open_page(DETECTOR, wait=False)
    wait_for_text(page, "Every box's CAM, side by side")
    wait_idle(page)
    x0, y0, x1, y1 = _corners(options(page, "Explain the box")[3].split("·")[-1])
    frame = _picture(page, "Click a box on the picture to explain it")
    point = ((x0 + x1) / 2, (y0 + y1) / 2)  # the fourth box's centre
    page.mouse.click(*_on_picture(frame, *point))
    wait_for_query(page, "target=box")
    wait_idle(page)
    # the box chosen (the address names it) holds the point clicked (a smaller box there is on
    # top), and it is the one explained
    chosen = page.evaluate("new URLSearchParams(location.search).get('target')")
    bx0, by0, bx1, by1 = (float(v) for v in chosen.split(":")[2].split(","))
    assert bx0 <= point[0] <= bx1 and by0 <= point[1] <= by1, (point, chosen)
    assert f"box ({round(bx0)}, {round(by0)})–({round(bx1)}, {round(by1)})" in main_text(page)
    shot(page, "42-box-clicked")


def test_a_rectangle_dragged_on_the_picture_is_the_region_explained(open_page):
    page = open_page(SEGMENTER, wait=False)
    wait_for_text(page, "Every category's CAM, side by side")
    wait_idle(page)
    frame = _picture(page, "Drag a rectangle on the picture to explain it")
    width, height = SAMPLE_SIZE
    page.mouse.move(*_on_picture(frame, width * 0.25, height * 0.2))
    page.mouse.down()
    page.mouse.move(*_on_picture(frame, width * 0.5, height * 0.4), steps=8)
    page.mouse.move(*_on_picture(frame, width * 0.75, height * 0.6), steps=8)
    page.mouse.up()
    wait_for_query(page, "target=region")
    wait_idle(page)
    rectangle = page.evaluate("new URLSearchParams(location.search).get('target')")
    got = [float(v) for v in rectangle.split(":")[2].split(",")]
    wanted = (0.25 * width, 0.2 * height, 0.75 * width, 0.6 * height)
    tolerance = width / frame["width"] * 2  # two screen pixels, in the image's pixels
    assert all(abs(a - b) <= tolerance for a, b in zip(got, wanted, strict=True)), (got, frame)
    assert "over the rectangle" in main_text(page)
    shot(page, "43-rectangle-dragged")
