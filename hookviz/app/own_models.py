"""The models users bring: an architecture, an uploaded checkpoint and maybe class names, under
one name (``upload:`` and a content hash) that every page, cache and link uses like any other
model name.

The bytes live in the page's checkpoint store (``hookviz.app.caches.models.checkpoint_store``); this
registry only says what each name is made of. It is shared by the server's sessions (the same
file uploaded twice is one model, loaded once) but each session lists only the models it brought.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass
from typing import Protocol

import streamlit as st

import hookviz

PREFIX = "upload:"
_SESSION = "hookviz.own_models"  # this session's upload names, in the order brought


class Store(Protocol):
    def put(self, data: bytes, digest: str | None = None) -> str: ...
    def has(self, digest: str) -> bool: ...
    def get(self, digest: str) -> bytes: ...


@dataclass(frozen=True)
class Upload:
    """What an ``upload:`` name is made of.

    Attributes:
        name: the model name (``upload:`` + 16 hex digits of the content hash).
        architecture: the architecture it was loaded as.
        file_name: the checkpoint's file name, for labels.
        checkpoint: the checkpoint's digest in the store.
        names: the class-names file's digest, or None.
        names_file: its file name, or None.
    """

    name: str
    architecture: str
    file_name: str
    checkpoint: str
    names: str | None = None
    names_file: str | None = None

    @property
    def label(self) -> str:
        return f"your model: {self.file_name} ({self.architecture})"


@st.cache_resource(max_entries=1, show_spinner=False)
def _registry() -> dict[str, Upload]:
    return {}


def is_upload(name: str) -> bool:
    return name.startswith(PREFIX)


def register(
    architecture: str,
    checkpoint: bytes,
    file_name: str,
    names: bytes | None,
    names_file: str | None,
    store: Store,
) -> Upload:
    """Keep the files and name the model (not yet loaded: ``load`` does that)."""
    checkpoint_digest = store.put(checkpoint)
    names_digest = store.put(names) if names is not None else None
    identity = f"{architecture}|{checkpoint_digest}|{names_digest}".encode()
    name = PREFIX + hashlib.sha256(identity).hexdigest()[:16]
    upload = Upload(name, architecture, file_name, checkpoint_digest, names_digest, names_file)
    _registry()[name] = upload
    return upload


def remember(name: str) -> None:
    """List ``name`` among this session's models (most recent last)."""
    mine = [other for other in st.session_state.get(_SESSION, []) if other != name]
    st.session_state[_SESSION] = [*mine, name]


def session_models() -> list[Upload]:
    """This session's models still known to the server."""
    registry = _registry()
    return [registry[name] for name in st.session_state.get(_SESSION, []) if name in registry]


def find(name: str) -> Upload | None:
    """What ``name`` is made of; None for a name that is no upload known here."""
    return _registry().get(name)


def load(name: str, store: Store) -> hookviz.LoadedModel:
    """Build the model behind ``name`` from the stored files.

    Raises:
        hookviz.ModelError: the files are no longer here (a link from another server run, or
            evicted), or the checkpoint does not load (the library's message).
    """
    upload = _registry().get(name)
    gone = upload is None or not store.has(upload.checkpoint)
    if upload is not None and upload.names is not None and not store.has(upload.names):
        gone = True
    if gone:
        raise hookviz.ModelError(
            "this uploaded model is no longer on the server (uploaded in an earlier run of "
            "the server, or dropped to make room): upload it again on the Your model page"
        )
    names = store.get(upload.names) if upload.names is not None else None
    checkpoint = io.BytesIO(store.get(upload.checkpoint))
    checkpoint.name = upload.file_name  # named in what the loader says it read
    return hookviz.load_model(upload.architecture, checkpoint=checkpoint, class_names=names)
