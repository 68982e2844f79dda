"""The view: what the user chose (model, weights, layer, target, method, display options, each
page's panel), kept across reruns and in the address (``state``), with its fields and defaults
(``fields``), its named values and cache keys (``keys``), what it explains (``target``) and the
names of the fragments a change reruns (``fragments``)."""
