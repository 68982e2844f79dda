"""Beyond one heatmap as st.Page runs it, on the scene the shared sidebar resolved."""

from ui.pages import beyond
from ui.sidebar import scene

beyond.page(scene.current())
