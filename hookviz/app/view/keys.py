"""The view's named values: what the sidebar resolved (``View``), the keys results are cached
by (``AnalysisKey``, ``SeenKey``), and the session keys that more than one module reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from hookviz.app.view.target import ViewTarget

# The widget keys of Explore's two lazy expanders (True while open), read beyond the page: they
# decide what a class change reruns (``class_change``), whether the browser may draw a picture
# before the server's run (``ready``), whether the channel overlay is on.
CHANNELS_OPEN = "channels_open"  # "Channels behind the heatmap"
SNIPPET_OPEN = "snippet_open"  # "Reproduce in Python"


class SeenKey(NamedTuple):
    """What a hooked forward pass, and so a layer's feature maps, depends on: the image (its
    content hash), the model, its weights and the layer."""

    digest: str
    model: str
    pretrained: bool
    layer: str


class AnalysisKey(NamedTuple):
    """What an analysis (feature maps, predictions and a CAM) depends on: a forward pass
    (``seen``), the target and the CAM method."""

    digest: str
    model: str
    pretrained: bool
    layer: str
    target: ViewTarget
    method: str

    @property
    def seen(self) -> SeenKey:
        return SeenKey(self.digest, self.model, self.pretrained, self.layer)

    def for_target(self, target: ViewTarget) -> AnalysisKey:
        """The same forward pass and method, explaining ``target``."""
        return self._replace(target=target)


@dataclass(frozen=True)
class View:
    """What the shared sidebar resolved for this run: the pages' read-only input.

    Attributes:
        digest: the image's content hash (the key of every cached result).
        image_name: the uploaded file's name, or None for the sample.
        model: registry name.
        pretrained: trained or random weights.
        layer: the hooked layer.
        target: what is explained.
        method: the CAM method.
    """

    digest: str
    image_name: str | None
    model: str
    pretrained: bool
    layer: str
    target: ViewTarget
    method: str

    @property
    def key(self) -> AnalysisKey:
        """What the analysis shown is cached by."""
        return AnalysisKey(
            self.digest, self.model, self.pretrained, self.layer, self.target, self.method
        )
