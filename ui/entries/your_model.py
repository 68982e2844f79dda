"""The "Your model" page as Streamlit runs it (a file for st.Page): it needs no scene."""

from ui.pages import your_model

your_model.page()
