"""The page's entry script in a clone: ``streamlit run app.py`` (each run of the page calls
``run_page``; the page is the package ``hookviz.app``)."""

from hookviz.app import main

main.run_page()
