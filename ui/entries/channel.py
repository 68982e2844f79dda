"""The "What a channel looks for" page as Streamlit runs it (a file for st.Page): draws
ui.channel on the scene the shared sidebar resolved in this run."""

from ui.pages.channel import page as channel
from ui.sidebar import scene

channel.page(scene.current())
