"""The Live camera page in a real browser with Chromium's fake camera (a moving test pattern, no
permission prompt): START inside streamlit-webrtc's frame, frames explained and counted on the
page, Pause, and a Snapshot that opens the frame in Explore. The WebRTC connection is made with
no ICE server, as on a class's LAN with no internet. Shared fixtures and helpers:
``browser_page.py``."""

from __future__ import annotations

import re

import pytest

from scripts.appserver import CHROMIUM_FLAGS, chromium_path

from .browser_page import (
    SLOW,
    close_session,
    main_text,
    open_session,
    overflow,
    server_fixture,  # noqa: F401  (a fixture: server)
    shot,
    wait_for_query,
    wait_for_results,
    wait_for_text,
    wait_idle,
)

# Chromium's fake camera and microphone, and no prompt to allow them
FAKE_CAMERA = ["--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream"]
BARS = "[data-testid='stMain'] [data-testid='stProgress']"  # the top-5's bars
FPS = "() => document.querySelector('[data-testid=stMain] [data-testid=stMetricValue]')?.innerText"


@pytest.fixture(scope="module", name="camera_browser")
def camera_browser_fixture():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium_path(), args=CHROMIUM_FLAGS + FAKE_CAMERA
        )
        yield browser
        browser.close()


def _start(page) -> None:
    """Press START inside streamlit-webrtc's frame (it appears a few seconds after the page)
    and wait until the page reports frames explained: the frame rate, measured on the server,
    climbs above 0."""
    wait_for_text(page, "Frames per second")
    camera = page.frame_locator("iframe[title*='webrtc']")
    camera.get_by_role("button", name=re.compile("^start$", re.IGNORECASE)).click(timeout=SLOW)
    page.wait_for_function(f"() => parseFloat(({FPS})()) > 0", timeout=SLOW)


def test_the_camera_is_explained_live_paused_and_opened_in_explore(camera_browser, server):
    page, requests = open_session(camera_browser, server + "/camera", wait=False)
    _start(page)
    wait_for_text(page, "Top-5")
    page.wait_for_function(f"() => document.querySelectorAll({BARS!r}).length === 5", timeout=SLOW)
    bars = page.locator(BARS).all_inner_texts()
    assert [bar.split(". ")[0] for bar in bars] == ["1", "2", "3", "4", "5"]
    shot(page, "60-live-camera")

    page.get_by_role("button", name="Pause").click()
    page.wait_for_function(f"() => ({FPS})() === 'paused'", timeout=SLOW)
    wait_for_text(page, "Paused on this frame")
    frozen = [t for t in main_text(page).splitlines() if t.startswith("1. ")]
    page.get_by_role("button", name="Snapshot: open in Explore").click()
    # Explore, on the snapshot: named in the sidebar and by its digest in the address
    wait_for_query(page, "image=")
    wait_for_results(page)
    wait_for_text(page, "opened from a camera snapshot", where="stSidebar")
    assert "/camera" not in page.url
    wait_idle(page)
    # the top-1 Explore finds is the one the paused frame showed (the same frame, same model)
    top1 = frozen[0].removeprefix("1. ").rsplit(" · ", 1)[0]
    assert top1 in main_text(page)
    shot(page, "61-live-camera-snapshot")
    close_session(page, requests)


def test_the_live_camera_on_a_phone(camera_browser, server):
    page, requests = open_session(
        camera_browser, server + "/camera", width=390, height=844, wait=False
    )
    _start(page)
    assert overflow(page) <= 0  # no sideways scrolling
    video = page.frame_locator("iframe[title*='webrtc']").locator("video").bounding_box()
    assert video["width"] >= 300  # the picture takes the phone's width
    shot(page, "62-live-camera-phone")
    close_session(page, requests)
