"""Compare as st.Page runs it, on the scene the shared sidebar resolved in this run."""

from ui.pages import compare
from ui.sidebar import scene

compare.page(scene.current())
