"""Many sessions at once in a real browser: four sessions against one server, each with its
own upload and layer, their runs overlapping on the server, each sees only its own results.
Shared fixtures and helpers: ``browser_page.py``."""

from __future__ import annotations

import time

import numpy as np

import hookviz

from .browser_page import (
    TIMINGS,
    browser_fixture,  # noqa: F401  (a fixture: browser)
    choose,
    close_session,
    encoded,
    layer_label,
    main_text,
    open_session,
    server_fixture,  # noqa: F401  (a fixture: server)
    upload,
    wait_for_text,
    wait_idle,
)


def test_many_sessions_at_once_each_see_their_own_results(browser, server):
    """Four browser sessions against one server, each with its own image and layer, their
    requests overlapping on the server: every session must see only its own results."""
    sizes = [(200 + 17 * i, 150 + 11 * i) for i in range(4)]
    layers = ["blocks.2", "blocks.3", "blocks.4", "blocks.5"]
    sessions = [open_session(browser, server) for _ in sizes]
    started = time.perf_counter()
    for index, ((page, _), size) in enumerate(zip(sessions, sizes, strict=True)):
        upload(page, f"session{index}.png", encoded(size, "PNG"), "image/png")
    for (page, _), (width, height) in zip(sessions, sizes, strict=True):
        wait_for_text(page, f"{width}×{height} px")
        wait_idle(page)
    for (page, _), layer, (width, height) in zip(sessions, layers, sizes, strict=True):
        size = hookviz.load_model("efficientnet_lite0", device="cpu").preprocessing.input_size(
            width, height
        )
        choose(page, "Target layer", layer_label(layer, size=size))
    mismatches = 0
    for (page, _), layer, (width, height) in zip(sessions, layers, sizes, strict=True):
        wait_for_text(page, f"Feature maps of {layer}")
        wait_idle(page)
        text = main_text(page)
        others = [f"{w}×{h} px" for w, h in sizes if (w, h) != (width, height)]
        mismatches += f"{width}×{height} px" not in text or any(o in text for o in others)
        with page.expect_download() as download:
            page.get_by_role("button", name="Download heatmap (.npy)").click()
        mismatches += np.load(download.value.path()).shape != (height, width)
    elapsed = time.perf_counter() - started
    TIMINGS["4 concurrent sessions: upload + layer change each, all done"] = round(elapsed, 3)
    for page, requests in sessions:
        close_session(page, requests)
    assert mismatches == 0
