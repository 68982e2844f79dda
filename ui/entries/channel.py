"""What a channel looks for, as st.Page runs it, on the scene the sidebar resolved."""

from ui.pages.channel import page as channel
from ui.sidebar import scene

channel.page(scene.current())
