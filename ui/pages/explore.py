"""The explore page as Streamlit runs it (a file for st.Page): draws ui.explore on the scene the
shared sidebar resolved in this run."""

from ui import explore, sidebar

explore.page(sidebar.current_scene())
