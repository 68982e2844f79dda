"""Start the app on a free loopback port, open it in headless Chromium, save a screenshot.

Usage:  python scripts/screenshot.py [OUTPUT.png] [--width 1440] [--height 1150]
Needs Playwright for Python and a Chromium binary (Debian's `chromium` at /usr/bin/chromium;
override with HOOKVIZ_CHROMIUM). Regenerates the README's screenshot (assets/screenshot.png).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from appserver import CHROMIUM_FLAGS, ROOT, chromium_path, free_port, running_app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", nargs="?", default=str(ROOT / "assets" / "screenshot.png"))
    parser.add_argument("--width", type=int, default=1440)
    parser.add_argument("--height", type=int, default=1150)
    args = parser.parse_args()

    from playwright.sync_api import sync_playwright

    with running_app(free_port()) as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS)
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
