"""The Present page as Streamlit runs it (a file for st.Page): draws ui.pages.present on the
scene the shared sidebar resolved in this run."""

from ui.pages import present
from ui.sidebar import scene

present.page(scene.current())
