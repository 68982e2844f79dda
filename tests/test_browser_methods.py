"""The CAM methods and the other views in a real browser: a method change (and the method
carried to Diagnose, with its three panels); Beyond one heatmap's panels (layer sweep, step by
step, trust check); Score-CAM, which takes long, keeps the previous result on screen and is
cancelled by its button or by any control change. (Untrained architectures in every view:
``test_browser_networks.py``.) Shared fixtures and helpers: ``browser_page.py``."""

from __future__ import annotations

import time

from .browser_page import (
    SLOW,
    TIMINGS,
    assert_images_loaded,
    browser_fixture,  # noqa: F401  (a fixture: browser)
    choose,
    close_session,
    go_to,
    main_text,
    open_session,
    panel,
    scroll_to,
    server_fixture,  # noqa: F401  (a fixture: server)
    shot,
    timed_change,
    wait_for_text,
    wait_idle,
)


def test_cam_methods_and_diagnostics_in_the_browser(browser, server):
    page, requests = open_session(browser, server + "/?method=gradcam%2B%2B&layer=blocks.5")
    wait_for_text(page, "Grad-CAM++: “military uniform”")
    assert_images_loaded(page)
    timed_change(
        page, "method -> overlay", lambda: choose(page, "CAM method", "Gradient · Layer-CAM"), 1
    )
    wait_for_text(page, "Layer-CAM: “military uniform”")
    go_to(page, "Diagnose the network")
    wait_for_text(page, "Histogram of blocks.5")
    wait_idle(page)
    assert "/diagnose" in page.url and "method=layercam" in page.url
    # the statistics panel's three charts (mean/std, zero fraction, histogram)
    page.wait_for_function(
        "() => document.querySelectorAll(\"[data-testid='stVegaLiteChart']\").length >= 3",
        timeout=SLOW,
    )
    panel(page, "Gradient flow")
    wait_for_text(page, "Gradient of the score of “military uniform”")
    panel(page, "Intervene")
    wait_for_text(page, "Logit of “military uniform”")
    wait_idle(page)
    assert "diagnose_panel=intervene" in page.url
    shot(page, "07-methods-and-diagnostics")
    close_session(page, requests)


def test_beyond_one_heatmap_in_the_browser(browser, server):
    page, requests = open_session(browser, server, height=1400)
    go_to(page, "Beyond one heatmap")
    wait_for_text(page, "all from the same forward pass")
    wait_idle(page)
    panel(page, "Whole network")
    wait_for_text(page, "blocks.2 · ")
    panel(page, "Step by step")
    wait_for_text(page, "removed by the ReLU")
    wait_idle(page)
    assert_images_loaded(page, count=None)  # the visible panel's pictures
    scroll_to(page, "removed by the ReLU")
    shot(page, "08-step-by-step")
    panel(page, "Trust check")
    page.get_by_text("Run the trust check", exact=False).click()
    wait_for_text(page, "Deletion area")
    wait_idle(page)
    scroll_to(page, "Deletion area")
    shot(page, "09-trust-check")
    close_session(page, requests)


def test_scorecam_keeps_the_previous_result_and_can_be_cancelled(browser, server):
    """Score-CAM on an untrained VGG-11 layer with 512 channels takes about a minute here: the
    page says so and waits for "Compute", keeps the previous (Grad-CAM) result on screen marked
    as the previous one, and its Cancel button brings the Grad-CAM view back at once."""
    page, requests = open_session(
        browser, server + "/?model=vgg11&weights=untrained&layer=features.17", wait=False
    )
    wait_for_text(page, "Grad-CAM: “")
    wait_idle(page)
    choose(page, "CAM method", "Forward passes · Score-CAM")
    wait_for_text(page, "Score-CAM runs 512 forward passes")
    # estimated at about a minute: it waits for the user, its estimate on the button
    compute = page.get_by_role("button", name="Compute Score-CAM (about")
    compute.wait_for(timeout=SLOW)
    assert "Previous result" in main_text(page)
    compute.click()
    page.get_by_text("Score-CAM:", exact=False).first.wait_for(timeout=SLOW)  # progress bar
    # the previous result stays, marked as such, with its pictures
    assert "Previous result" in main_text(page)
    assert "Grad-CAM: “" in main_text(page)
    assert_images_loaded(page)
    shot(page, "11-scorecam-running")
    started = time.perf_counter()
    page.get_by_role("button", name="Cancel Score-CAM").click()
    page.wait_for_function(
        "() => !document.body.innerText.includes('Score-CAM runs 512')", timeout=SLOW
    )
    wait_for_text(page, "Grad-CAM: “")
    wait_idle(page)
    TIMINGS["Score-CAM cancelled by its Cancel button"] = round(time.perf_counter() - started, 3)
    assert "Previous result" not in main_text(page)
    assert page.get_by_role("combobox", name="CAM method").input_value() == "Gradient · Grad-CAM"
    assert "method=" not in page.url
    close_session(page, requests)


def test_scorecam_is_cancelled_by_any_control_change(browser, server):
    page, requests = open_session(
        browser,
        server + "/?model=vgg11&weights=untrained&layer=features.17&method=scorecam",
        wait=False,
    )
    wait_for_text(page, "Score-CAM runs 512 forward passes")
    page.get_by_role("button", name="Compute Score-CAM (about").click()
    page.get_by_text("Score-CAM:", exact=False).first.wait_for(timeout=SLOW)  # progress bar
    started = time.perf_counter()
    choose(page, "CAM method", "Gradient · Grad-CAM")
    wait_for_text(page, "Grad-CAM: “")
    wait_idle(page)
    TIMINGS["Score-CAM cancelled by a method change"] = round(time.perf_counter() - started, 3)
    assert "Score-CAM runs 512" not in main_text(page)
    close_session(page, requests)
