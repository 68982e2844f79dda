"""The folder of the entry script ``hookviz app`` gives Streamlit (Streamlit puts a script's own
folder first on ``sys.path``: this one holds nothing else to shadow)."""
