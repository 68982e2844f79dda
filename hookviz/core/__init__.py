"""The core: hooks and the lean graph below them, layer discovery, model inputs, CAM maths and
methods, and the hooked forward pass every analysis is built on. Knows nothing of where a model
comes from (``hookviz.models``) or how results are drawn (``hookviz.render``)."""
