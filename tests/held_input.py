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
        try:
            # opening the write end succeeds only while a reader waits; closing it gives EOF
            os.close(os.open(picture, os.O_WRONLY | os.O_NONBLOCK))
        except OSError as exc:
            if exc.errno != errno.ENXIO:  # ENXIO: no reader, nothing to let go
                raise
        picture.unlink()
        picture.write_bytes(data)
