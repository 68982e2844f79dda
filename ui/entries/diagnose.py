"""The diagnose page as Streamlit runs it (a file for st.Page): draws ui.diagnose on the scene the
shared sidebar resolved in this run."""

from ui.pages import diagnose
from ui.sidebar import scene

diagnose.page(scene.current())
