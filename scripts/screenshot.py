"""Start the app on a free loopback port, open it in headless Chromium, save a screenshot.

Usage:  python scripts/screenshot.py [OUTPUT.png] [--width 1440] [--height 1400]
Needs Playwright for Python and a Chromium binary (Debian's `chromium` at /usr/bin/chromium;
override with HOOKVIZ_CHROMIUM). Used to regenerate the README's screenshot (assets/screenshot.png).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    # keep Chromium from reaching any host but this machine
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def running_app(port: int, timeout: float = 60.0) -> Iterator[str]:
    """Run ``streamlit run app.py`` bound to 127.0.0.1 until the block ends; yield its URL."""
    command = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(ROOT / "app.py"),
        "--server.headless",
        "true",
        "--server.address",
        "127.0.0.1",
        "--server.port",
        str(port),
        "--browser.gatherUsageStats",
        "false",
    ]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as reply,
            ):
                if reply.status == 200:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                output = process.stdout.read().decode(errors="replace") if process.stdout else ""
                raise RuntimeError(f"streamlit did not become healthy:\n{output}")
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", nargs="?", default=str(ROOT / "assets" / "screenshot.png"))
    parser.add_argument("--width", type=int, default=1440)
    parser.add_argument("--height", type=int, default=1800)
    args = parser.parse_args()

    from playwright.sync_api import sync_playwright

    chromium = os.environ.get("HOOKVIZ_CHROMIUM", "/usr/bin/chromium")
    with running_app(free_port()) as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": args.width, "height": args.height})
        page.goto(url)
        # the last thing the page draws is the feature-map grid's download button
        page.get_by_role("button", name="Download feature maps (PNG)").wait_for(timeout=120_000)
        page.wait_for_timeout(1500)  # let images finish decoding
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=args.output, full_page=True)
        browser.close()
    print(args.output)


if __name__ == "__main__":
    main()
