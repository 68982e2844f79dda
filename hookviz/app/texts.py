"""The page's words: labels of choices and the "What am I looking at?" explanations. Plain
strings (some with ``str.format`` fields), so the pages stay about layout."""

ORDER_LABELS = {
    "mean": "mean activation",
    "max": "max activation",
    "index": "index",
    "weight": "CAM weight α",
    "weight_x_mean": "α × mean",
}
FEATURE_MAPS_HELP = """
A **feature map** is what one channel (one learned filter) of a layer outputs: a small image that
is bright where the filter's pattern occurs. Early layers respond to edges and colours, deep
layers to textures and object parts.

**How it was captured:** hookviz registered a *forward hook* on `{layer}`: a function PyTorch
calls right after that module computes its output. The hook copied (cloned) the output tensor of
shape {shape}, then was removed. A clone matters: the next module may be an in-place ReLU that
would overwrite a mere view.
"""

GRAD_CAM_HELP = """
**Grad-CAM** asks which regions of the image raise the score of {subject}.

1. The forward pass runs with the same hook on `{layer}`; it keeps the activations *A*
   ({channels} channels of {height}×{width}).
2. `torch.autograd.grad` computes the gradient of {score}
   with respect to *A* — only *A*, not the weights, so the backward stops at this layer.
3. Each channel's gradient is averaged over its {height}×{width} cells: the channel's weight
   α<sub>k</sub> (how much that channel helps {subject}).
4. The channels are summed with those weights; a ReLU keeps only positive evidence.
5. The {height}×{width} map is stretched bilinearly over your image and scaled to 0–1.

**Why coarse?** A deep layer has few cells ({height}×{width} here), each summarising a large
patch of the image. Pick an earlier layer for a finer, but less class-specific, map.
"""

CAM_HELP = """
**How it was computed:** the forward pass ran with a hook on `{layer}`, which kept its
activations *A* ({channels} channels of {height}×{width}); what the method explains is {score}.
Its map is stretched bilinearly over your image and scaled to 0–1, its negative part dropped.
The *CAM method* box lists every method with what it costs on this model; *Methods side by side*
shows them all on this image with how faithful each one is here.
"""

# What the score Grad-CAM differentiates is, by the model's task: (subject, score).
CAM_SCORES = {
    "classification": ("the class", "the class score (the logit, before softmax)"),
    "zero-shot": ("the label", "the label's score (its scaled cosine similarity to the image)"),
    "detection": (
        "the box",
        "the box's score (its detection's score plus its overlap with the box, as "
        "pytorch-grad-cam's box target)",
    ),
    "segmentation": ("the region", "the category's scores summed over the region's pixels"),
    "embedding": (
        "the likeness",
        "the cosine similarity of the photo's embedding to the reference's",
    ),
}

PREDICTIONS_HELP = """
The model's **softmax probabilities** for its {classes} classes, computed from the whole image
(no crop) in the same forward pass. With untrained weights they are meaningless by design.
"""

STATS_HELP = """
One forward pass with a forward hook on **every** layer: each hook computes its layer's
statistics on the spot (on the GPU if there is one) and keeps nothing else. A layer whose
fraction of zeros is near 1 has **dead** units (its ReLUs never fire for this image); a mean or
spread that jumps by orders of magnitude marks a layer that **explodes** or **saturates**.
"""

FLOW_HELP = """
The size of the gradient of the class score at each layer's output, from **one** backward pass:
forward hooks capture every layer's output tensor and `torch.autograd.grad` returns the gradient
for all of them at once. A curve falling by orders of magnitude towards the input is a
**vanishing** gradient. Why not module *backward* hooks? They report gradients of a module's
inputs and outputs together, fire in an order that depends on the graph, and break when an
in-place operation follows the module (pytorch/pytorch#61519).
"""

INTERVENE_HELP = """
A forward hook can **return** a new output: here it multiplies the chosen channels of the layer
by the factor (0 switches them off) for one forward pass. The model and its weights are never
changed; the original predictions come from the same image without the hook. The heatmaps are
the Grad-CAM of the explained class at this layer without and with the intervention.
"""

STEPS_HELP = """
The Grad-CAM on screen, tensor by tensor. **A** is what the forward hook copied; **∂y/∂A** is
what `torch.autograd.grad` returned for the class score y (the logit); **α** is each gradient
map's average; the **weighted sum** Σ α·A can be negative; the **ReLU** removes the negative part
(shown separately: evidence against the class); the result is upsampled bilinearly and laid
over the photo. The tiles show the 8 channels with the largest |α|. Just before a global average
pooling, ∂y/∂A is the same in every cell of a channel (the pooling spreads the gradient evenly),
so those gradient tiles are flat: all the spatial detail of Grad-CAM then comes from A.
"""

TRUST_HELP = """
**Deletion:** pixels are removed (set to the dataset mean) in heatmap order, most important
first, and the class probability is followed: it should fall fast. **Insertion:** pixels are
revealed on a blurred copy in the same order: it should rise fast. The dashed curves use a random
order. A heatmap you can trust has a smaller deletion area and a larger insertion area than the
random order (Petsiuk et al. 2018).
"""

VISUALIZE_HELP = """
**What is optimised.** The picture starts as grey noise and is changed, step by step, in the
direction that raises the channel's mean activation (or the class's score): the gradient of
that number with respect to the picture, from the same forward hook that captures the feature
maps. It goes through the model's own preprocessing, so it is shown in normal colours.

**Why the regularisers.** Plain gradient ascent on pixels finds high-frequency patterns that
excite the channel at one exact position and look like noise. Three things keep the picture
natural: it is made of frequencies weighted like those of photos (1/f, low frequencies move as
easily as high ones), its colours move along the main axes of natural colour, and at every step
it is shifted, scaled and rotated a little at random, so only patterns that work wherever they
fall survive (Olah, Mordvintsev & Schubert, *Feature Visualization*, Distill 2017).

**Why it looks strange.** Nothing asks the picture to be a photo: it shows *everything* the
channel likes at once, repeated, at every scale the shifts allow. Parts of objects, textures
and colours recur; a whole object rarely does.

**What it does not prove.** It shows what can drive the channel, not what drives it on real
images: a channel can respond to several unrelated things (try a few pictures), and a strong
response here says nothing about how the model uses the channel. The dataset examples (real
images that excite it most) and the channel's map on your image are the check.

**How the channel computes.** The channel is a sum over its inputs: each input map is weighed
by the kernel, position by position, and a bias is added; normalisation and an activation
follow. The filter section shows that arithmetic at the place you pick.
"""
