"""Which folders the Dataset run page may open. A run folder is a path on the server, typed in
the page or carried by its address (``?run_dir=``): served to other machines, that would let
anyone read any folder of the server (a teacher's private runs, the images they list) and learn
from the messages which folders exist. So:

- with ``HOOKVIZ_RUNS_DIR`` set (``deploy/serve.py --runs DIR``), only folders under it open,
  named relative to it; an absolute path, a ``..`` way out and a symlink out are refused with
  the same words as a folder that is not there, which name nothing of the server's folders;
- without it, a server that only this machine reaches (loopback) opens any folder, as a tool on
  one's own machine should, and one served to other machines keeps the page off and says why.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from hookviz.app.view.link_notice import escaped

RUNS_DIR_ENV = "HOOKVIZ_RUNS_DIR"
# set by deploy/serve.py for its replicas when the proxy listens beyond loopback: the replicas
# themselves listen on loopback, and could not tell
SERVED_TO_NETWORK_ENV = "HOOKVIZ_SERVED_TO_NETWORK"
LISTED = 30  # run folders named under the box at most
_LIST_DEPTH = 3  # how deep under the runs folder runs are looked for


class RunFolderRefused(Exception):
    """A folder the page may not open; the message is the user's, safe to show anyone."""


@dataclass(frozen=True)
class RunPlaces:
    """Where runs may be opened from: ``root`` (None: anywhere) or nowhere (``off``)."""

    root: Path | None
    off: bool = False

    def locate(self, typed: str) -> Path:
        """The folder ``typed`` names, where the page may open it; else RunFolderRefused."""
        if self.off:
            raise RunFolderRefused(OFF)
        if self.root is None:
            return Path(typed).expanduser()
        named = Path(typed)
        if named.is_absolute() or typed.startswith("~"):
            raise RunFolderRefused(
                f"Name the run by its folder in this server's runs folder (for example "
                f"`{self.example()}`), not by a path of the server."
            )
        root = self.root.resolve()
        found = (root / named).resolve()  # (symlinks followed: one pointing out is out)
        if not found.is_relative_to(root) or not found.is_dir():
            raise RunFolderRefused(
                f"No run folder named {escaped(typed)} in this server's runs folder."
            )
        return found

    def shown(self, text: str) -> str:
        """``text`` with the runs folder's own path taken out (a message of the library names
        the absolute folder it looked in)."""
        if self.root is None:
            return text
        for prefix in {str(self.root.resolve()), str(self.root)}:
            text = text.replace(prefix + os.sep, "").replace(prefix, "the runs folder")
        return text

    def runs(self) -> list[str]:
        """The run folders under the root (those holding a ``manifest.json``), relative to it,
        sorted; at most LISTED."""
        if self.root is None or self.off or not self.root.is_dir():
            return []
        root = self.root.resolve()
        found = []
        for depth in range(1, _LIST_DEPTH + 1):
            pattern = "/".join(["*"] * depth) + "/manifest.json"
            for manifest in sorted(root.glob(pattern)):
                folder = manifest.parent.resolve()
                if folder.is_relative_to(root):
                    found.append(manifest.parent.relative_to(root).as_posix())
                if len(found) >= LISTED:
                    return sorted(found)
        return sorted(found)

    def example(self) -> str:
        listed = self.runs()
        return listed[0] if listed else "photos"


OFF = (
    "The Dataset run page is off on this server. It is served to other machines, and it opens "
    "folders of the server: whoever started it can name the one folder runs are opened from, "
    f"with `{RUNS_DIR_ENV}=/path/to/runs` (or `deploy/serve.py --runs DIR`)."
)


def run_places() -> RunPlaces:
    """This server's: its runs folder, or anywhere on a loopback-only server, or off."""
    root = os.environ.get(RUNS_DIR_ENV, "").strip()
    if root:
        return RunPlaces(Path(root).expanduser())
    return RunPlaces(None, off=served_to_network())


def served_to_network() -> bool:
    """Whether machines other than this one reach the page: Streamlit listens beyond loopback,
    or a proxy in front does (``SERVED_TO_NETWORK_ENV``)."""
    if os.environ.get(SERVED_TO_NETWORK_ENV, "").strip() not in ("", "0"):
        return True
    address = (st.get_option("server.address") or "").strip()
    return not is_loopback(address)


def is_loopback(address: str) -> bool:
    """Whether a server listening on ``address`` is reached from this machine only (no address:
    every interface)."""
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


def files_stamp(folder: str, *names: str) -> str:
    """A cache key that changes whenever one of ``folder``'s files ``names`` (paths within
    it) changes, appears or goes."""
    root = Path(folder).expanduser()
    watched = [root / name for name in names]
    return " ".join(str(p.stat().st_mtime_ns) if p.exists() else "-" for p in watched)
