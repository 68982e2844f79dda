"""The "Dataset run" page as Streamlit runs it (a file for st.Page): it needs no scene."""

from ui.pages.dataset import page as dataset

dataset.page()
