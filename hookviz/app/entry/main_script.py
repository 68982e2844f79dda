"""The page's entry script in an installed hookviz (``hookviz app`` runs it with Streamlit);
each run of the page calls ``run_page``."""

from hookviz.app import main

main.run_page()
