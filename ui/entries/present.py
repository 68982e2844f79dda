"""Present as st.Page runs it, on the scene the shared sidebar resolved in this run."""

from ui.pages import present
from ui.sidebar import scene

present.page(scene.current())
