"""The view: what the user chose, kept across reruns and in the address (the ``ui`` docstring
maps its modules)."""
