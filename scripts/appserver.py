"""Run the real app for a browser: `streamlit run app.py` on a free loopback port, and the
Chromium flags that keep a headless browser on this machine. Shared by the browser tests and
scripts/screenshot.py."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
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
def running_app(port: int, timeout: float = 60.0, script: Path | None = None) -> Iterator[str]:
    """Run ``streamlit run app.py`` (or ``script``) bound to 127.0.0.1 until the block ends;
    yield its URL."""
    with running_app_process(port, timeout, script) as (url, _):
        yield url


@contextlib.contextmanager
def running_app_process(
    port: int, timeout: float = 60.0, script: Path | None = None
) -> Iterator[tuple[str, subprocess.Popen]]:
    """``running_app``, yielding its URL and the server's process (to read its memory)."""
    command = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(script or ROOT / "app.py"),
        "--server.headless",
        "true",
        "--server.address",
        "127.0.0.1",
        "--server.port",
        str(port),
        "--browser.gatherUsageStats",
        "false",
    ]
    # The server's output goes to a file, not a pipe: nobody reads a pipe while the tests run,
    # and once its buffer (64 KiB) filled, the server would block on its next log line.
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            if not wait_healthy(url, process, timeout):
                log.seek(0)
                output = log.read().decode(errors="replace")
                raise RuntimeError(f"streamlit did not become healthy:\n{output}")
            yield url, process
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


def wait_healthy(url: str, process: subprocess.Popen, timeout: float) -> bool:
    """Poll the app at ``url`` until ``/_stcore/health`` answers; False if ``process`` exits or
    ``timeout`` seconds pass first."""
    deadline = time.monotonic() + timeout
    while True:
        with (
            contextlib.suppress(OSError),
            urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as reply,
        ):
            if reply.status == 200:
                return True
        if process.poll() is not None or time.monotonic() > deadline:
            return False
        # (often: a cold start is timed from here, and a poll's wait is not the app's)
        time.sleep(0.02)


def chromium_path() -> str:
    """The Chromium binary to drive: $HOOKVIZ_CHROMIUM, else Debian's /usr/bin/chromium."""
    return os.environ.get("HOOKVIZ_CHROMIUM", "/usr/bin/chromium")
