"""What every source that downloads weights shares: whether a download may be tried, and a
failed download in words."""

from __future__ import annotations

import os
import socket
import time
import urllib.error

# Set to "1" to forbid weight downloads (tests, air-gapped servers): uncached weights then fail
# at once with a clear message instead of waiting on the network.
OFFLINE_ENV = "HOOKVIZ_OFFLINE"


def downloads_allowed(download: bool | None) -> bool:
    """``download`` as given, or by default: yes unless ``HOOKVIZ_OFFLINE`` is ``"1"``."""
    if download is None:
        return os.environ.get(OFFLINE_ENV) != "1"
    return download


# How long a failed download makes the catalog say that uncached weights cannot load now.
UNREACHABLE_SECONDS = 600.0
_unreachable_since: list[float] = []  # (the time of the last download that failed, if any)


def note_unreachable() -> None:
    """Remember that a download just failed for want of a network."""
    _unreachable_since[:] = [time.monotonic()]


def download_label(size_mb: float | None) -> str:
    """The catalog's word for weights that are not cached: what loading them needs now."""
    size = f" {size_mb:.0f} MB" if size_mb else ""
    if not downloads_allowed(None):
        return "not cached, downloads off"
    if _unreachable_since and time.monotonic() - _unreachable_since[0] < UNREACHABLE_SECONDS:
        return f"cannot load now: no network ({size.strip() or 'a'} download)"
    return f"download{size}"


def network_reason(exc: BaseException) -> str:
    """A failed download in words (urllib's own text is ``<urlopen error [Errno -3] ...>``);
    remembered, so the catalog says what cannot load now (``download_label``)."""
    note_unreachable()
    reason = getattr(exc, "reason", exc)  # URLError wraps the socket error
    if isinstance(reason, socket.gaierror):
        return "no network: the download server's name could not be looked up"
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return "the download timed out"
    if isinstance(reason, ConnectionRefusedError):
        return "the download server refused the connection"
    if isinstance(reason, OSError) and reason.strerror:
        return f"the connection failed: {reason.strerror.lower()}"
    if isinstance(exc, urllib.error.HTTPError):
        return f"the download server answered {exc.code} {exc.reason}"
    return f"the connection failed: {reason}"
