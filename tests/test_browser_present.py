"""The Present page in a real browser, as a teacher uses it on a projector: the arrow keys step
through the network's stages and the image's top-5 (each step redraws the big picture and
names itself in the address), the picture fills most of the window's height, and the page
works on a phone. Shared fixtures and helpers: ``browser_page.py``."""

from __future__ import annotations

from .browser_page import (
    SLOW,
    browser_fixture,  # noqa: F401  (a fixture: browser)
    open_page_fixture,  # noqa: F401  (a fixture: open_page)
    overflow,
    server_fixture,  # noqa: F401  (a fixture: server)
    shot,
    wait_for_query,
    wait_for_text,
    wait_idle,
)

TITLE = "() => document.querySelector('[data-testid=hvTitle]')?.textContent"


def test_the_arrow_keys_walk_the_room_through_the_network(open_page):
    page = open_page("/present", wait=False)
    wait_for_text(page, "Keys:")
    wait_idle(page)
    assert page.evaluate(TITLE) == "Grad-CAM: “military uniform”"
    canvas = page.locator("canvas.hv-main").bounding_box()
    assert canvas["height"] >= 0.55 * page.viewport_size["height"]  # large, for the room
    earlier = page.get_by_test_id("stBaseButton-secondary").filter(has_text="Earlier:")
    stage = earlier.inner_text().split("Earlier: ")[1].split()[0]
    page.get_by_text("Keys:").click()  # (the keys go to the page, not to a text box)
    page.keyboard.press("ArrowLeft")
    wait_for_query(page, f"layer={stage}")
    wait_idle(page)
    # the browser draws the stage's picture and captions once its payload is in: wait for them
    page.wait_for_function(
        "(s) => document.querySelectorAll('[data-testid=hvCaption]')[1]?.textContent"
        ".includes('at ' + s)",
        arg=stage,
    )
    page.keyboard.press("ArrowDown")
    wait_for_query(page, "target=")
    wait_idle(page)
    # the title is redrawn a moment after the address records the class: wait for the #2's
    page.wait_for_function(f"() => ({TITLE})() !== 'Grad-CAM: “military uniform”'", timeout=SLOW)
    page.keyboard.press("ArrowUp")
    page.wait_for_function("() => !location.search.includes('target=')", timeout=SLOW)
    wait_idle(page)
    page.wait_for_function(f"() => ({TITLE})() === 'Grad-CAM: “military uniform”'", timeout=SLOW)
    shot(page, "31-present")


def test_the_present_page_on_a_phone(open_page):
    page = open_page("/present", width=390, height=844, wait=False)
    wait_for_text(page, "Keys:")
    wait_idle(page)
    assert overflow(page) <= 0  # no sideways scrolling
    assert page.locator("canvas.hv-main").bounding_box()["width"] >= 300
    shot(page, "32-present-phone")
