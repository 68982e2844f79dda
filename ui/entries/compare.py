"""The Compare page as Streamlit runs it (a file for st.Page): draws ui.compare on the scene
the shared sidebar resolved in this run."""

from ui.pages import compare
from ui.sidebar import scene

compare.page(scene.current())
