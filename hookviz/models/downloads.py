"""What every source that downloads weights shares: whether a download may be tried, and a
failed download in words."""

from __future__ import annotations

import os
import socket
import urllib.error

# Set to "1" to forbid weight downloads (tests, air-gapped servers): uncached weights then fail
# at once with a clear message instead of waiting on the network.
OFFLINE_ENV = "HOOKVIZ_OFFLINE"


def downloads_allowed(download: bool | None) -> bool:
    """``download`` as given, or by default: yes unless ``HOOKVIZ_OFFLINE`` is ``"1"``."""
    if download is None:
        return os.environ.get(OFFLINE_ENV) != "1"
    return download


def network_reason(exc: BaseException) -> str:
    """A failed download in words (urllib's own text is ``<urlopen error [Errno -3] ...>``)."""
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
