"""Pixel attributions: each input pixel's share in a target's score (``attribute``), by
gradients (``attribute``: saliency, input x gradient, guided backprop, deconvolution, guided
Grad-CAM, integrated gradients, SmoothGrad) or by hiding parts of the input (``perturbation``:
occlusion, RISE), and the baselines a method should beat (``baselines``: random, centre,
edges). ``relu_rules`` changes the ReLUs' backward for guided backprop and deconvolution, for
one call."""

from . import baselines, perturbation  # noqa: F401  (they register their methods)
from .attribute import Attribution, AttributionError, attribute, attribution_methods

__all__ = ["Attribution", "AttributionError", "attribute", "attribution_methods"]
