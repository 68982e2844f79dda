"""Pixel attributions: each input pixel's share in a target's score (``attribute``), by
gradients (``attribute``: saliency, input x gradient, guided backprop, deconvolution, guided
Grad-CAM, integrated gradients, SmoothGrad) or by hiding parts of the input (``perturbation``:
occlusion, RISE). ``relu_rules`` changes the ReLUs' backward for guided backprop and
deconvolution, for one call."""

from . import perturbation  # noqa: F401  (registers occlusion and rise)
from .attribute import Attribution, AttributionError, attribute, attribution_methods

__all__ = ["Attribution", "AttributionError", "attribute", "attribution_methods"]
