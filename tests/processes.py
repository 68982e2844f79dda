"""Waiting on the real processes a test starts: for an event they cause (a chunk on disk, their
end), never for a fixed time."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

# Long enough for a loaded 2-core machine; a wait ends as soon as its event happens.
PATIENCE = 240.0


def wait_for_chunks(
    cams: Path, count: int, *processes: subprocess.Popen, timeout: float = PATIENCE
) -> bool:
    """Wait until ``cams`` holds ``count`` done chunks (``*.npz``); False if a process ended
    first (it will write no more) or ``timeout`` seconds passed."""
    deadline = time.monotonic() + timeout
    while len(list(cams.glob("*.npz"))) < count:
        if any(p.poll() is not None for p in processes) or time.monotonic() > deadline:
            return len(list(cams.glob("*.npz"))) >= count
        time.sleep(0.02)
    return True


def wait_gone(pids: list[int], timeout: float = PATIENCE) -> bool:
    """Wait until none of ``pids`` runs (gone, or a zombie that can write nothing more); False
    after ``timeout`` seconds. A signalled process may still finish the system call it is in."""
    deadline = time.monotonic() + timeout
    while any(_running(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def stop(process: subprocess.Popen) -> None:
    """Kill ``process`` if it still runs (a test that failed half-way leaves nothing behind)."""
    if process.poll() is None:
        process.kill()
        process.wait()


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")
