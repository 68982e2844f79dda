"""The explore page as Streamlit runs it (a file for st.Page): draws ui.explore on the scene the
shared sidebar resolved in this run."""

from ui.pages.explore import page as explore
from ui.sidebar import scene

explore.page(scene.current())
