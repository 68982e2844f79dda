"""The Compare page as Streamlit runs it (a file for st.Page): draws ui.compare on the scene
the shared sidebar resolved in this run."""

from ui import compare, sidebar

compare.page(sidebar.current_scene())
