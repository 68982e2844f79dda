"""The Streamlit page of hookviz: one module per page (``explore``, ``beyond``, ``diagnose``),
the shared sidebar, the one owner of the view's state (``state``), every cache (``cached``),
charts, words and the working indicator. It calls the ``hookviz`` library and never imports
torch."""
