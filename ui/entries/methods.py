"""Methods side by side as st.Page runs it, on the scene the shared sidebar resolved in this
run."""

from ui.pages import methods
from ui.sidebar import scene

methods.page(scene.current())
