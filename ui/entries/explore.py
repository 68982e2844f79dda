"""Explore as st.Page runs it, on the scene the shared sidebar resolved in this run."""

from ui.pages.explore import page as explore
from ui.sidebar import scene

explore.page(scene.current())
