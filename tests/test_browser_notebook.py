"""``hookviz.show`` in a real notebook: JupyterLab on a loopback port, a notebook that shows a
tiny random-weight CNN, driven in Chromium. The widget's pictures are drawn by the page's code
(``notebook.js`` bundling ``paint.js``); a layer and a class picked in the browser come back
from the kernel as new pictures, and the opacity slider redraws in the browser alone.

Each canvas counts its draws (``data-drawn``, paint.js) and each picture says what it shows
(``data-*``): the test waits for these, never for time. JupyterLab is kept off the network
(no news, no update check, a read-only extension manager), and every request Chromium makes
must go to this machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from scripts.appserver import CHROMIUM_FLAGS, chromium_path, free_port

from .browser_page import assert_only_local, sync_playwright

pytest.importorskip("anywidget")
pytest.importorskip("jupyterlab")

ROOT = Path(__file__).resolve().parent.parent
WAIT = 120_000  # ms: the kernel's first cell imports torch on a loaded 2-core machine

# The notebook's one cell: a tiny CNN of random weights, on a random picture.
CELL = """\
import numpy as np, torch
from torch import nn
import hookviz
torch.manual_seed(0)
net = nn.Sequential(
    nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
    nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10),
)
picture = np.random.default_rng(0).integers(0, 256, (96, 128, 3), dtype=np.uint8)
w = hookviz.show(net, picture)
w
"""


def notebook(cell: str) -> dict:
    return {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": None,
                "metadata": {},
                "outputs": [],
                "source": cell.splitlines(keepends=True),
            }
        ],
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


@contextlib.contextmanager
def jupyter_lab(root: Path) -> Iterator[str]:
    """JupyterLab serving ``root`` on a free loopback port, with a token, kept off the network;
    yields the URL of ``test.ipynb`` in it."""
    port, token = free_port(), secrets.token_hex(16)
    command = [
        sys.executable, "-m", "jupyter", "lab", "--no-browser",
        "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
        "--allow-root",  # (CI runs as root)
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.extension_manager=readonly",
        f"--LabApp.user_settings_dir={root / '.settings'}",
        f"--LabApp.workspaces_dir={root / '.workspaces'}",
        "--LabApp.expose_app_in_browser=True",
    ]  # fmt: skip
    environment = {
        **os.environ,
        "JUPYTER_RUNTIME_DIR": str(root / ".runtime"),
        "JUPYTER_CONFIG_DIR": str(root / ".config"),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "HOOKVIZ_OFFLINE": "1",
    }
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            command, cwd=root, env=environment, stdout=log, stderr=subprocess.STDOUT
        )
        base = f"http://127.0.0.1:{port}"
        try:
            if not _answers(f"{base}/api/status?token={token}", process, 90.0):
                log.seek(0)
                raise RuntimeError(f"jupyter lab did not start:\n{log.read().decode()}")
            yield f"{base}/lab/tree/test.ipynb?token={token}"
        finally:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _answers(url: str, process: subprocess.Popen, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while process.poll() is None and time.monotonic() < deadline:
        with (
            contextlib.suppress(OSError),
            urllib.request.urlopen(url, timeout=2) as reply,
        ):
            if reply.status == 200:
                return True
        time.sleep(0.1)
    return False


def drawn(page, selector: str) -> int:
    return int(page.locator(selector).get_attribute("data-drawn") or 0)


def wait_drawn(page, selector: str, more_than: int) -> None:
    page.wait_for_function(
        "([s, n]) => Number(document.querySelector(s)?.dataset.drawn || 0) > n",
        arg=[selector, more_than],
        timeout=WAIT,
    )


def pixels(page, selector: str) -> str:
    return page.locator(selector).evaluate("(canvas) => canvas.toDataURL()")


OVERLAY = ".hv-overlay canvas.hv-main"
GRID = ".hv-grid canvas.hv-main"


def test_the_widget_draws_and_follows_picks_and_display_changes():
    with tempfile.TemporaryDirectory(prefix="hookviz-lab-") as folder:
        root = Path(folder)
        (root / "test.ipynb").write_text(json.dumps(notebook(CELL)))
        with jupyter_lab(root) as url, sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=chromium_path(), args=CHROMIUM_FLAGS
            )
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                requests: list[str] = []
                page.on("request", lambda request: requests.append(request.url))
                page.goto(url)
                # the kernel is up once the notebook says so; then the cell runs
                page.wait_for_function(
                    "() => window.jupyterapp?.shell?.currentWidget?.sessionContext?.session"
                    "?.kernel?.status === 'idle'",
                    timeout=WAIT,
                )
                page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
                _drive(page)
            finally:
                browser.close()
            assert_only_local(requests)


def _drive(page) -> None:
    widget = page.locator("[data-testid=hvNotebook]")
    widget.wait_for(timeout=WAIT)
    wait_drawn(page, OVERLAY, 0)
    wait_drawn(page, GRID, 0)
    assert widget.get_attribute("data-method") == "gradcam"
    first_layer = widget.get_attribute("data-layer")
    overlay_before, grid_before = pixels(page, OVERLAY), pixels(page, GRID)

    # a layer picked in the browser: the kernel computes it, both pictures change
    layers = page.locator("select.hv-layer option").all_inner_texts()
    other = next(name for name in layers if name != first_layer and name in ("0", "1", "2"))
    count = drawn(page, GRID)
    page.locator("select.hv-layer").select_option(other)
    page.wait_for_function(
        "(layer) => document.querySelector('[data-testid=hvNotebook]').dataset.layer === layer"
        " && !document.querySelector('[data-testid=hvNotebook]').dataset.busy",
        arg=other,
        timeout=WAIT,
    )
    wait_drawn(page, GRID, count)
    page.wait_for_function(
        "(layer) => document.querySelector('.hv-overlay .hv-title').textContent"
        ".endsWith(` at ${layer}`)",
        arg=other,
        timeout=WAIT,
    )
    assert pixels(page, GRID) != grid_before
    assert pixels(page, OVERLAY) != overlay_before

    # a class button: the overlay changes, the grid (same layer) is not drawn again
    buttons = page.locator(".hv-classes button")
    assert buttons.count() == 5
    assert buttons.nth(0).get_attribute("aria-pressed") == "true"
    overlay_count, grid_count = drawn(page, OVERLAY), drawn(page, GRID)
    overlay_before = pixels(page, OVERLAY)
    second = buttons.nth(1).inner_text().split(" · ")[0]
    buttons.nth(1).click()
    page.wait_for_function(
        "() => document.querySelectorAll('.hv-classes button')[1]"
        ".getAttribute('aria-pressed') === 'true'",
        timeout=WAIT,
    )
    wait_drawn(page, OVERLAY, overlay_count)
    title = page.locator(".hv-overlay .hv-title").inner_text()
    assert f"· {second} at {other}" in title, title
    assert pixels(page, OVERLAY) != overlay_before
    assert drawn(page, GRID) == grid_count

    # the opacity slider: redrawn in the browser, with no message to the kernel in between
    overlay_count = drawn(page, OVERLAY)
    overlay_before = pixels(page, OVERLAY)
    sent = page.evaluate(
        """() => new Promise((resolve) => {
            const slider = document.querySelector('.hv-opacity');
            const canvas = document.querySelector('.hv-overlay canvas.hv-main');
            canvas.addEventListener('hookviz:drawn', () => resolve(true), { once: true });
            slider.value = '0.9';
            slider.dispatchEvent(new Event('input', { bubbles: true }));
        })"""
    )
    assert sent
    assert drawn(page, OVERLAY) == overlay_count + 1
    assert page.locator(".hv-overlay").get_attribute("data-alpha") == "0.9"
    assert pixels(page, OVERLAY) != overlay_before

    # a pick that fails: said in the widget, the pictures kept
    overlay_before = pixels(page, OVERLAY)
    page.locator("select.hv-method").select_option("legrad")
    page.wait_for_function(
        "() => document.querySelector('.hv-error').textContent.length > 0",
        timeout=WAIT,
    )
    assert widget.get_attribute("data-method") == "gradcam"
    assert page.locator("select.hv-method").input_value() == "gradcam"
    assert pixels(page, OVERLAY) == overlay_before
