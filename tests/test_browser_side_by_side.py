"""Methods side by side in a real browser: every fast method's picture drawn, the slow methods
started and cancelled (the page stays usable, nothing half-done is shown as done), then scoring
started and cancelled (what was scored is kept), at a desktop and a phone's width with no
sideways scrolling. Shared fixtures and helpers: ``browser_page.py``."""

from __future__ import annotations

import re

from hookviz.app.method_texts import method_label
from hookviz.app.pages import methods

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
    # named as the sidebar names them, the CAM methods' shared forward pass apart
    for name in ("Grad-CAM", "Saliency", "Guided backprop", "Edge map"):
        assert f"{name} · " in text, name
    assert "Shared forward pass at layer4: " in text
    assert re.search(r"About [\d.]+ (s|min) in all here", text)
    assert_images_loaded(page, count=None)
    shot(page, "44-methods-side-by-side")

    # the slow methods start, show their progress, and Cancel stops them
    page.get_by_role("button", name="Compute the slow methods").click()
    page.get_by_text("Score-CAM: ").first.wait_for(timeout=SLOW)
    page.get_by_role("button", name="Cancel").click()
    wait_for_text(page, "Compute the slow methods")
    wait_idle(page)
    assert "RISE ·" not in main_text(page)  # the last slow method never finished

    # scoring starts on request and can be cancelled too: the methods scored so far are kept
    # (every method scored, then ROAD, is AppTest's: test_methods_page.py)
    drawn = [m for group in methods.groups().values() for m in group if m != "legrad"]
    page.get_by_role("button", name="Score every method").click()
    page.get_by_text(f"{method_label(drawn[2])}: 0 of 1").first.wait_for(timeout=SLOW)  # two scored
    shot(page, "44-methods-scoring")
    page.get_by_role("button", name="Cancel").click()
    page.get_by_role("button", name="Score every method").wait_for(timeout=SLOW)
    wait_idle(page)
    left = re.search(r"(\d+) of (\d+) methods are not scored yet", main_text(page))
    assert left and 0 < int(left[1]) <= len(drawn) - 2 and int(left[2]) == len(drawn), left
    assert page.locator("[data-testid='stDataFrame']").count() == 1
    shot(page, "44-methods-scoring-cancelled")


def test_the_page_fits_a_phone(open_page):
    page = open_page(LINK, width=390, height=844, wait=False)
    wait_for_text(page, "Compute the slow methods")
    wait_idle(page)
    assert overflow(page) <= 0
    # (LeGrad reads a ViT's attention: on this CNN its place says why instead)
    drawn = [m for group in methods.groups().values() for m in group if m != "legrad"]
    assert all(f"{method_label(name)} · " in main_text(page) for name in drawn)
    assert "LeGrad: " in main_text(page)
    shot(page, "45-methods-phone")
