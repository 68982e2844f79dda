"""The page's caches, one module per thing cached: what is kept, keyed by what, bounded how.

Keys are plain values: the image's content hash (``digest``) instead of its bytes (hashing a
20 MB upload on every call would cost more than most of the work), model and layer names,
class indices, display options. Live objects that must not be copied (models, autograd graphs,
decoded images, results that point at images) use ``st.cache_resource``: shared by every
session, never mutated by the page. Encoded pictures are bytes and use ``st.cache_data``.
Every cache is bounded (``max_entries``; the stores by count and size, ``kept.Kept``).

Here:
    images      the uploads on disk by content hash, the decoded (working-size) and
                display-size images, the sample's bytes.
    models      the catalog, each loaded model, its layers' shapes, its batcher, the store of
                uploaded checkpoints.
    analyses    hooked forward passes, analyses (and the library target of a view's), a
                detector's detections, a segmenter's categories, reference embeddings.
    encoded     pictures as JPEG or PNG bytes, and the pictures' ids.
    runs        dataset runs and their rows' pictures.
    insight     the insight panels' results (gallery, sweeps, diagnostics, interventions,
                trust curves), a channel's filter, the made visualizations.
    kept        ``Kept``, the bounded store the checkpoints and visualizations are kept in.

Elsewhere, next to the only code that uses them (each bounded the same way):
    hookviz.app.browser.cached_payloads  the heatmap's colormap indices and the feature-map grids,
                                as the browser takes them (the browser's wire format).
    hookviz.app.own_models._registry     the uploaded models' registry (names to checkpoints).
    hookviz.app.sidebar.image_input._sample_digest  the sample image's content hash.
    hookviz.app.pages.methods._stores, ._forward_pass  the Methods page's results and its forward
                                passes on the display-size image.
    hookviz.app.pages.explore.found._marked, ._thumbnail, ._reverse_picture  Explore's pictures of
                                what a detector or segmenter found, and an embedder's reverse.

The modules here import ``hookviz.app.view`` and the library, and one another downwards (``images``
and ``models`` first); never the browser, the sidebar or the pages, which draw with them.
"""
