"""A page that releases its upload's bytes from Streamlit's memory (``hookviz.app.upload_release``)
and says what Streamlit's upload manager then holds for it, for tests/test_app.py."""

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from hookviz.app.upload_release import release

upload = st.file_uploader("A file", key="file")
if upload is not None:
    before = len(upload.getvalue())
    released = release(upload)
    context = get_script_run_ctx()
    held = context.uploaded_file_mgr.get_files(context.session_id, [upload.file_id])
    st.text(f"before={before} released={released} held={[len(f.data) for f in held]}")
