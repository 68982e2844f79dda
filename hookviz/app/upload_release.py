"""Dropping an upload's bytes from Streamlit's memory once hookviz has what it needs.

Streamlit keeps every file a session's uploader holds in the server's memory, for as long as
it sits in the uploader (and ``server.disconnectedSessionTTL`` after the tab closes). For a
class of thirty with phone photos that is most of the server's memory, and a refused 150 MB
file would stay too. Once the page has stored a photo in the upload folder (or refused it),
its bytes are emptied from that copy: the uploader still shows the file and the page still
gets its name and id on every run, which is all it reads after the first.

This reaches into Streamlit's server side (``MemoryUploadedFileManager.file_storage`` and its
lock, ``UploadedFileRec``), listed here as the one place that does; ``tests/test_app.py``
checks it on the pinned Streamlit. Where an upgrade changes them, nothing is dropped: the page
works as before, with more memory per session.
"""

from __future__ import annotations

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx
from streamlit.runtime.uploaded_file_manager import UploadedFileRec


def release(upload: st.runtime.uploaded_file_manager.UploadedFile) -> bool:
    """Empty ``upload``'s bytes in Streamlit's memory; whether it did."""
    context = get_script_run_ctx()
    manager = getattr(context, "uploaded_file_mgr", None)
    storage = getattr(manager, "file_storage", None)
    lock = getattr(manager, "_lock", None)
    if context is None or not isinstance(storage, dict) or lock is None:
        return False
    with lock:
        files = storage.get(context.session_id)
        kept = None if files is None else files.get(upload.file_id)
        if not isinstance(kept, UploadedFileRec) or not kept.data:
            return False
        files[upload.file_id] = kept._replace(data=b"")
        if isinstance(getattr(manager, "_total_bytes", None), int):
            manager._total_bytes -= len(kept.data)  # (its upload statistics stay right)
    return True
