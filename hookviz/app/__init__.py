"""The Streamlit page of hookviz. It calls the ``hookviz`` library and never imports torch.

Folders:
    view/       the view: what the user chose, kept across reruns and in the address
                (``state``), its fields and defaults, its named values and keys, its target,
                the names of the fragments a change reruns.
    sidebar/    the shared sidebar: one module per widget group (image, model, layer, classes,
                method), and ``scene``, which puts their choices together into the scene every
                page draws from.
    pages/      each page's code (Explore's in a folder with its display options, downloads,
                channel overlay and top-5 sent ahead). ``main.py`` lists them for the top
                navigation (``PAGES``: url path, title, icon, the function that draws it) and
                runs each page; ``entry/`` is the script ``hookviz app`` hands Streamlit, and
                ``launch.py`` that command.
    browser/    the pictures the browser draws itself: the JavaScript (``js/``, one module per
                mechanism), its Python side, the wire format, the Streamlit DOM it relies on.
    caches/     the caches, one module per thing cached (images, models, analyses, encoded
                pictures, dataset runs, insight panels), bounded, keyed by named values;
                ``feedback``, ``texts``, ``charts``, ``panels``, ``own_models``: shared by
                the pages.

Words used throughout:
    wish        what the user last chose for a field, kept even while its widget is not drawn.
    shown       the value the page shows for a field in this run (what the address names).
    scene       what the sidebar resolved for this run: the view, the model, the image and the
                analysis of the current choices.
    target      what is explained: the top-1 prediction or a class (``view.target``).
    seen        a forward pass's key: image, model, weights, layer (what feature maps depend on).
    fragment    a part of the page a change reruns alone (``view.fragments``).
    sent ahead  pictures the server sends before they are asked for (another layer's, the top-5
                classes'), which the browser shows the moment a widget names them.
"""
