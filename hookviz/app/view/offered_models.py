"""Which models a server offers: the teacher's choice (``HOOKVIZ_MODELS``, set by
``hookviz app --models`` and ``deploy/serve.py --models``). Without it, every model the page
knows, and any timm or CLIP architecture typed by name. With it, only what it lists:

- ``bundled``: the bundled models (offline, trained);
- ``cards``: the model cards of the server's models folder;
- ``uploads``: models brought on the Your model page (a checkpoint of a listed architecture);
- a model's own name: ``resnet18``, ``timm:convnext_tiny``, ``clip:ViT-B-32``, ``card:birds``.

A classifier offered is offered as an embedder too, and a CLIP model with any labels: they are
the same network. Nothing here imports streamlit or torch: the sidebar and the model cache ask
the same question of the same rules.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

MODELS_ENV = "HOOKVIZ_MODELS"
KINDS = ("bundled", "cards", "uploads")  # the words that name a kind rather than a model
# a catalog source (hookviz.ModelInfo.source) -> the word that offers every model of it
_KIND_OF_SOURCE = {"bundled": "bundled", "card": "cards", "upload": "uploads"}


@dataclass(frozen=True)
class OfferedModels:
    """The teacher's list (None: no list, everything offered)."""

    listed: frozenset[str] | None = None

    def offers(self, base: str, source: str | None) -> bool:
        """Whether the model ``base`` may be picked and loaded here: its name without an
        embedder's prefix or a zero-shot model's labels (the same network), and ``source`` its
        catalog source (``upload`` for one brought on the Your model page; None for a name
        the catalog does not hold)."""
        if self.listed is None or base in self.listed:
            return True
        kind = _KIND_OF_SOURCE.get(source or "")
        return kind is not None and kind in self.listed

    @property
    def typing_allowed(self) -> bool:
        """Whether any timm model may be typed by name (only without a list)."""
        return self.listed is None

    def described(self) -> str:
        """The list in words, for a refusal."""
        if self.listed is None:
            return "every model"
        words = {"bundled": "the bundled models", "cards": "its model cards",
                 "uploads": "models brought on the Your model page"}  # fmt: skip
        parts = [words[k] for k in KINDS if k in self.listed]
        parts += sorted(self.listed - set(KINDS))
        return ", ".join(parts) or "no model"


def offered_models() -> OfferedModels:
    """This server's, from ``HOOKVIZ_MODELS`` (comma-separated; empty or unset: no list)."""
    text = os.environ.get(MODELS_ENV, "")
    names = frozenset(part.strip() for part in text.split(",") if part.strip())
    return OfferedModels(names or None)
