"""Methods side by side in a real browser: every fast method's picture drawn, the slow methods
started and cancelled (the page stays usable, nothing half-done is shown as done), then scored
on request, at a desktop and a phone's width with no sideways scrolling. Shared fixtures and
helpers: ``browser_page.py``."""

from __future__ import annotations

from ui.pages import methods

from .browser_page import (
    SLOW,
    assert_images_loaded,
    browser_fixture,  # noqa: F401  (a fixture: browser)
    main_text,
    open_page_fixture,  # noqa: F401  (a fixture: open_page)
    overflow,
    server_fixture,  # noqa: F401  (a fixture: server)
    shot,
    wait_for_text,
    wait_idle,
)

LINK = "/methods?model=resnet18&weights=untrained&layer=layer4"


def test_every_method_side_by_side_then_the_slow_ones_cancelled_and_the_scores(open_page):
    page = open_page(LINK, wait=False)
    wait_for_text(page, "Compute the slow methods")
    wait_idle(page)
    text = main_text(page)
    for name in ("gradcam", "saliency", "guided_backprop", "edges"):
        assert f"{name} · " in text, name
    assert_images_loaded(page, count=None)
    shot(page, "44-methods-side-by-side")

    # the slow methods start, show their progress, and Cancel stops them
    page.get_by_role("button", name="Compute the slow methods").click()
    page.get_by_text("scorecam: ").first.wait_for(timeout=SLOW)
    page.get_by_role("button", name="Cancel").click()
    wait_for_text(page, "Compute the slow methods")
    wait_idle(page)
    assert "rise ·" not in main_text(page)  # the last slow method never finished

    page.get_by_role("button", name="Score every method").click()
    page.get_by_role("button", name="Score every method").wait_for(state="detached",
                                                                   timeout=SLOW)  # fmt: skip
    wait_idle(page)
    assert "not scored yet" not in main_text(page)  # ROAD, slower, is offered next
    page.get_by_role("button", name="Add ROAD (slower)").wait_for()
    assert page.locator("[data-testid='stDataFrame']").count() == 1
    shot(page, "44-methods-scored")


def test_the_page_fits_a_phone(open_page):
    page = open_page(LINK, width=390, height=844, wait=False)
    wait_for_text(page, "Compute the slow methods")
    wait_idle(page)
    assert overflow(page) <= 0
    # (LeGrad reads a ViT's attention: on this CNN its place says why instead)
    assert all(f"{name} · " in main_text(page) for group in methods.groups().values()
               for name in group if name != "legrad")  # fmt: skip
    assert "legrad: " in main_text(page)
    shot(page, "45-methods-phone")
