"""Diagnose as st.Page runs it, on the scene the shared sidebar resolved in this run."""

from ui.pages import diagnose
from ui.sidebar import scene

diagnose.page(scene.current())
