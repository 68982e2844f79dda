"""The diagnose page as Streamlit runs it (a file for st.Page): draws ui.diagnose on the scene the
shared sidebar resolved in this run."""

from ui import diagnose, sidebar

diagnose.page(sidebar.current_scene())
