"""The beyond page as Streamlit runs it (a file for st.Page): draws ui.beyond on the scene the
shared sidebar resolved in this run."""

from ui.pages import beyond
from ui.sidebar import scene

beyond.page(scene.current())
