"""The uploaded images, kept on disk by content hash, in a folder every server process can share.

An upload is stored once under its SHA-256 (``digest``); the address names it by that digest,
never by the image itself. Whoever holds the address and reaches a server that sees the folder
gets the same image back: a reloaded page, a student whose replica died and who lands on
another one, a link sent to a neighbour. Knowing a digest takes having the image.

The folder is ``HOOKVIZ_SHARED_DIR`` when set (replicas, or machines sharing a network file
system or a mounted bucket), else one under the system's temporary folder. Writes are atomic
(a temporary file renamed into place), so a replica never reads half an image, and two replicas
storing the same upload write the same bytes. The folder is bounded: beyond ``limit_bytes`` the
images used longest ago are removed (a later link to one falls back to the sample, saying so).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
import threading
import time
from pathlib import Path

SHARED_DIR_ENV = "HOOKVIZ_SHARED_DIR"
LIMIT_ENV = "HOOKVIZ_SHARED_DIR_MB"
DEFAULT_LIMIT_MB = 2048
# how often (seconds) reading an image refreshes its time of use: eviction needs only a rough order
_TOUCH_EVERY_S = 60.0
_DIGEST = re.compile(r"[0-9a-f]{64}")
_NAME_SUFFIX = ".name"


def is_digest(text: object) -> bool:
    """Whether ``text`` is a content hash as the folder names images (64 lowercase hex)."""
    return isinstance(text, str) and _DIGEST.fullmatch(text) is not None


def default_folder() -> Path:
    """``HOOKVIZ_SHARED_DIR``, else a folder of this user's under the system temp folder."""
    configured = os.environ.get(SHARED_DIR_ENV)
    if configured:
        return Path(configured)
    user = os.getuid() if hasattr(os, "getuid") else os.getlogin()
    return Path(tempfile.gettempdir()) / f"hookviz-uploads-{user}"


def default_limit() -> int:
    """The folder's size limit in bytes (``HOOKVIZ_SHARED_DIR_MB``, default 2048 MB)."""
    text = os.environ.get(LIMIT_ENV, "")
    megabytes = float(text) if text.strip() else DEFAULT_LIMIT_MB
    return int(megabytes * 2**20)


class UploadFolder:
    """Images by content hash in ``folder``, with the name each was uploaded under."""

    def __init__(self, folder: Path, limit_bytes: int) -> None:
        self.folder = folder
        self.limit_bytes = limit_bytes
        self._lock = threading.Lock()  # one pruning at a time in this process

    def put(self, data: bytes, name: str = "", digest: str | None = None) -> str:
        """Keep ``data`` (and the file name it came as); returns its digest."""
        digest = digest or hashlib.sha256(data).hexdigest()
        path = self._path(digest)
        if path.exists():
            self._touch(path)
        else:
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)  # (uploads are private)
            path.parent.mkdir(exist_ok=True, mode=0o700)
            _write_atomically(path, data)
            self._prune(keep=path)
        if name:
            _write_atomically(path.with_name(digest + _NAME_SUFFIX), name.encode("utf-8"))
        return digest

    def has(self, digest: str) -> bool:
        return is_digest(digest) and self._path(digest).is_file()

    def get(self, digest: str) -> bytes:
        """The image's bytes (KeyError when the folder does not hold it)."""
        if not is_digest(digest):
            raise KeyError(digest)
        path = self._path(digest)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise KeyError(digest) from None
        if time.time() - path.stat().st_mtime > _TOUCH_EVERY_S:
            self._touch(path)
        return data

    def name(self, digest: str) -> str | None:
        """The file name the image was uploaded under, where one was given."""
        if not is_digest(digest):
            return None
        try:
            return self._path(digest).with_name(digest + _NAME_SUFFIX).read_text("utf-8")
        except (FileNotFoundError, UnicodeDecodeError):
            return None

    def _path(self, digest: str) -> Path:
        # two levels of 256 folders at most: a class's uploads never make one huge directory
        return self.folder / digest[:2] / digest

    @staticmethod
    def _touch(path: Path) -> None:
        with contextlib.suppress(FileNotFoundError):  # (another replica's pruning removed it)
            os.utime(path)

    def _prune(self, keep: Path) -> None:
        """Remove the images used longest ago while the folder holds more than its limit."""
        with self._lock:
            images = []
            for path in self.folder.glob("??/*"):
                if path.suffix == _NAME_SUFFIX or not is_digest(path.name):
                    continue
                try:
                    stat = path.stat()
                except FileNotFoundError:
                    continue
                images.append((stat.st_mtime, stat.st_size, path))
            total = sum(size for _, size, _ in images)
            for _, size, path in sorted(images):
                if total <= self.limit_bytes:
                    break
                if path == keep:
                    continue
                for gone in (path, path.with_name(path.name + _NAME_SUFFIX)):
                    gone.unlink(missing_ok=True)
                total -= size


def _write_atomically(path: Path, data: bytes) -> None:
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".incoming-")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
