"""The server's memory budget: new work is refused with a clear message before the process
grows past it, rather than the system killing the server (and every session) for lack of
memory.

The budget is ``HOOKVIZ_MEMORY_BUDGET_MB`` when set, else 80% of what this process may use (its
container's limit where one is set, else the machine's memory). What is checked is the
process's resident memory now, before work that needs new memory: decoding a photo, loading a
model, a new forward pass. A cached result needs none and is always served.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import os
import threading
import time
from pathlib import Path

import hookviz

BUDGET_ENV = "HOOKVIZ_MEMORY_BUDGET_MB"
DEFAULT_SHARE = 0.8
# How often freed memory is handed back to the system (seconds).
TRIM_EVERY_S = 10.0


class ServerBusy(hookviz.HookvizError):
    """The server is at its memory budget: new work waits until memory is freed."""


def resident_bytes() -> int | None:
    """This process's resident memory now (None where the system does not say)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


def budget_bytes() -> int | None:
    """The budget in bytes (None: no limit known)."""
    text = os.environ.get(BUDGET_ENV, "").strip()
    if text:
        return int(float(text) * 2**20)
    available = _memory_limit()
    return None if available is None else int(available * DEFAULT_SHARE)


def check(work: str) -> None:
    """Raise ``ServerBusy`` if the process is at its budget (after a full garbage collection:
    freed objects may not have been collected yet). ``work``: what would be refused, in words
    ("a new photo", "this analysis")."""
    budget, used = budget_bytes(), resident_bytes()
    if budget is None or used is None or used < budget:
        return
    gc.collect()
    trim()
    used = resident_bytes() or used
    if used < budget:
        return
    raise ServerBusy(
        f"The server is busy: it is using all the memory it may ({used / 2**30:.1f} of "
        f"{budget / 2**30:.1f} GB), so it cannot take {work} right now. Everything you chose "
        "is kept: try again in a minute, when other sessions have finished or closed."
    )


@functools.cache
def _memory_limit() -> int | None:
    """The container's memory limit (cgroup v2 or v1) where set, else the machine's memory."""
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(limit_file).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**60:  # (v1's "no limit" is a huge number)
            return int(text)
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def trim() -> bool:
    """Hand the memory this process has freed back to the system (glibc's ``malloc_trim``):
    the allocator otherwise keeps what a class's analyses needed at their peak after those
    sessions end. Whether it could (only with glibc)."""
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


def start_trimming() -> None:
    """Trim every ``TRIM_EVERY_S`` seconds in a background thread (once per process)."""
    _trimmer()


@functools.cache
def _trimmer() -> threading.Thread | None:
    if _libc() is None:
        return None

    def loop() -> None:
        while True:
            time.sleep(TRIM_EVERY_S)
            trim()

    thread = threading.Thread(target=loop, name="hookviz-trim", daemon=True)
    thread.start()
    return thread


@functools.cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None
