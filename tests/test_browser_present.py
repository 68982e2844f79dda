"""The Present page in a real browser, as a teacher uses it on a projector: the arrow keys step
through the network's stages and the image's top-5 (each step redraws the big picture and
names itself in the address), the picture fills most of the window's height, and the page
works on a phone. Shared fixtures and helpers: ``browser_page.py``."""

from __future__ import annotations

import pytest

from .browser_page import (
    SLOW,
    browser_fixture,  # noqa: F401  (a fixture: browser)
    open_page_fixture,  # noqa: F401  (a fixture: open_page)
    overflow,
    server_fixture,  # noqa: F401  (a fixture: server)
    shot,
    wait_for_query,
    wait_for_results,
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


# (width, height): a classroom projector, a full-HD one (the browser's own full screen, F11, is
# the same page in such a window) and a phone
PROJECTOR, FULL_HD, PHONE = (1280, 720), (1920, 1080), (390, 844)
LARGE_CAPTION_PX = 1.2 * 16  # 1.2rem: the caption read from the back of a room


def _open_present(open_page, size: tuple[int, int]):
    page = open_page("/present", width=size[0], height=size[1], wait=False)
    wait_for_text(page, "Keys:")
    wait_idle(page)
    page.wait_for_function("() => document.querySelector('canvas.hv-main')?.dataset.drawn")
    # every element drawn (a button whose code still loads is a small placeholder)
    page.wait_for_function(
        "() => !document.querySelector(\"[data-testid='stMain'] [data-testid='stSkeleton']\")",
        timeout=SLOW,
    )
    page.get_by_role("button", name="Leave Present").wait_for(timeout=SLOW)
    return page


def _inside_the_window(page, box: dict) -> bool:
    width, height = page.viewport_size["width"], page.viewport_size["height"]
    return (
        box["x"] >= 0
        and box["y"] >= 0
        and box["x"] + box["width"] <= width + 0.5
        and box["y"] + box["height"] <= height + 0.5
    )


@pytest.mark.parametrize(
    "size", [PROJECTOR, FULL_HD, PHONE], ids=["1280x720", "1920x1080", "phone"]
)
def test_present_is_one_picture_as_large_as_the_screen_allows(open_page, size):
    page = _open_present(open_page, size)
    shot(page, f"33-present-{size[0]}x{size[1]}")
    height = page.viewport_size["height"]
    picture = page.locator("canvas.hv-main").bounding_box()
    assert _inside_the_window(page, picture), (picture, size)  # whole, without scrolling
    if size == PHONE:
        main = page.locator("[data-testid='stMain'] [data-testid='stMainBlockContainer']")
        assert picture["width"] >= 0.9 * main.bounding_box()["width"]  # as wide as the page
    else:
        assert picture["height"] >= 0.55 * height, (picture, size)
    # the picture alone: no app title or its caption (they are the other pages')
    main_text = page.locator("[data-testid='stMain']").inner_text()
    assert "Look inside a CNN" not in main_text
    assert page.locator("[data-testid='stMain'] h2").filter(has_text="hookviz").count() == 0
    # the captions in large type
    caption_px = page.evaluate(
        "() => parseFloat(getComputedStyle(document.querySelector("
        "'[data-testid=hvPicture] .hv-caption')).fontSize)"
    )
    assert caption_px >= LARGE_CAPTION_PX
    # a way out, small: it does not push the picture off the screen
    leave = page.get_by_role("button", name="Leave Present")
    assert leave.is_visible()
    # the full-screen button sits in the picture's corner, never over its title (a tap on a
    # phone leaves it shown)
    page.locator("canvas.hv-main").hover()
    corner = page.get_by_test_id("hvFullscreen").bounding_box()
    title = page.get_by_test_id("hvTitle").bounding_box()
    assert corner["y"] >= title["y"] + title["height"], (corner, title)
    for start, size in (("x", "width"), ("y", "height")):
        assert picture[start] <= corner[start], (corner, picture)
        assert corner[start] + corner[size] <= picture[start] + picture[size], (corner, picture)


def test_esc_and_the_small_button_leave_present_for_explore(open_page):
    page = _open_present(open_page, PROJECTOR)
    page.get_by_text("Keys:").click()  # (the keys go to the page, not to a text box)
    page.keyboard.press("Escape")
    page.wait_for_function("() => !location.pathname.endsWith('/present')", timeout=SLOW)
    wait_for_results(page)
    # the app's title is back on the other pages
    assert page.locator("[data-testid='stMain'] h2").filter(has_text="hookviz").count() == 1
    page = _open_present(open_page, FULL_HD)
    page.get_by_role("button", name="Leave Present").click()
    page.wait_for_function("() => !location.pathname.endsWith('/present')", timeout=SLOW)
    wait_for_results(page)


@pytest.mark.parametrize("picture", ["heatmap", "grid"])
def test_the_other_pictures_fit_the_projector_too(open_page, picture):
    page = open_page(
        f"/present?present_picture={picture}", width=PROJECTOR[0], height=PROJECTOR[1], wait=False
    )
    wait_for_text(page, "Keys:")
    wait_idle(page)
    # (the heatmap alone once waited forever: its indices came only with the overlay)
    page.wait_for_function("() => document.querySelector('canvas.hv-main')?.dataset.drawn")
    shot(page, f"34-present-{picture}-1280x720")
    box = page.locator("canvas.hv-main").bounding_box()
    assert _inside_the_window(page, box), box
    assert box["height"] >= 0.55 * PROJECTOR[1], box


def test_esc_in_an_open_select_box_only_closes_it(open_page):
    page = _open_present(open_page, FULL_HD)
    page.get_by_role("combobox", name="Target layer").click()
    page.get_by_role("option").first.wait_for()
    page.keyboard.press("Escape")
    page.get_by_role("option").first.wait_for(state="detached")
    wait_idle(page)
    assert page.evaluate("() => location.pathname").endswith("/present")
