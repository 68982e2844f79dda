"""An input file that holds a dataset run at its row until the test lets it go.

A test that stops a run mid-way (Ctrl-C, ``kill -9``) must know that the run is still going when
the signal arrives, however fast the machine or however busy its cores. While held, the file is a
named pipe (FIFO) that nobody writes: the process that reaches its row blocks in ``open()``, so
the run cannot finish, and every chunk before that row can still be written. The test waits for
the chunks it wants on disk, sends its signal, and puts the real picture back for the resumed
and reference runs (same path, same bytes, so the runs compare file for file).

A folder lists regular files only (``expand_inputs``), so a held file is named by a list file,
``listing``, which the run takes as one of its inputs.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

from PIL import Image


def held_input(root: Path, image: Image.Image) -> tuple[Path, Path]:
    """Save ``image`` as ``root/held/last.png`` and a list file naming it; (picture, listing).

    Pass ``listing`` after the other inputs, so the held picture is the run's last row."""
    picture = root / "held" / "last.png"
    picture.parent.mkdir(parents=True)
    image.save(picture)
    listing = root / "held.txt"
    listing.write_text(f"{picture}\n", encoding="utf-8")
    return picture, listing


@contextlib.contextmanager
def held(picture: Path) -> Iterator[None]:
    """While the block runs, ``picture`` is a pipe that a run blocks on; afterwards it is the
    same picture again. A process still waiting on the pipe at the end is let go (it reads an
    empty file, an error row), so no process is left hanging whatever the test did."""
    data = picture.read_bytes()
    picture.unlink()
    os.mkfifo(picture)
    try:
        yield
    finally:
        let_go(picture)
        picture.unlink()
        picture.write_bytes(data)


def let_go(picture: Path) -> None:
    """Let a process waiting in ``open()`` on the held ``picture`` go on (it reads an empty
    file); nothing if none waits. The pipe stays held for any later reader."""
    try:
        # opening the write end succeeds only while a reader waits; closing it gives EOF
        os.close(os.open(picture, os.O_WRONLY | os.O_NONBLOCK))
    except OSError as exc:
        if exc.errno != errno.ENXIO:  # ENXIO: no reader, nothing to let go
            raise


def ctrl_c_as_in_a_terminal() -> None:
    """A ``preexec_fn``: the child starts with Ctrl-C (SIGINT) at its default, as a command
    typed in a terminal does. A shell runs its background jobs (``cmd &``, a CI script started
    that way) with SIGINT ignored, their children inherit that, and Python then installs no
    KeyboardInterrupt for it: the signal would be lost and the run would end normally."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupted(process: subprocess.Popen, picture: Path, timeout: float = 120) -> str:
    """Ctrl-C (SIGINT) to ``process`` (started with ``preexec_fn=ctrl_c_as_in_a_terminal``),
    held at ``picture``; its standard error once it ended.

    A signal to a process goes to any one of its threads. When it lands on one of torch's
    worker threads while the main thread waits in ``open()`` on the held pipe, that ``open()``
    is not interrupted: Python runs the Ctrl-C only when the read returns, as it would for a
    file on a stalled network share. (Seen twice in loaded CI runs: the run still waiting 120 s
    after the signal, then killed.) So after ``GRACE_S`` without an exit the held read is let
    go, and the Ctrl-C must still stop the run there."""
    process.send_signal(signal.SIGINT)
    try:
        return process.communicate(timeout=GRACE_S)[1]
    except subprocess.TimeoutExpired:
        let_go(picture)
        return process.communicate(timeout=timeout)[1]


# How long a Ctrl-C'd run may take to stop before its held read is let go.
GRACE_S = 20
