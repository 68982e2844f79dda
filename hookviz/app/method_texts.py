"""The page's words about the CAM methods and the baselines: their labels, the groups the
method box lists them in, a one-line note each and, for "What am I looking at?", each one's idea
in two sentences with its equation. Notation: A^k is channel k of the layer's activations
(h x w cells, Z = h w of them), y the score explained (a class's logit), G^k = ∂y/∂A^k."""

METHOD_LABELS = {
    "gradcam": "Grad-CAM",
    "gradcam++": "Grad-CAM++",
    "xgradcam": "XGrad-CAM",
    "layercam": "Layer-CAM",
    "hirescam": "HiResCAM",
    "gradcamelementwise": "Grad-CAM element-wise",
    "eigengradcam": "Eigen-Grad-CAM",
    "shapleycam": "Shapley-CAM",
    "finercam": "Finer-CAM",
    "smoothgradcam++": "Smooth Grad-CAM++",
    "fullgrad": "FullGrad",
    "legrad": "LeGrad (torchvision ViTs)",
    "cam": "CAM (global-pool + linear heads only)",
    "scorecam": "Score-CAM",
    "sscam": "SS-CAM",
    "iscam": "IS-CAM",
    "ablationcam": "Ablation-CAM",
    "eigencam": "Eigen-CAM",
    "kpcacam": "KPCA-CAM",
    "fem": "FEM",
    "randomcam": "Random-CAM",
    "random": "Random map",
    "centre": "Centre Gaussian",
    "edges": "Edge map",
}

# The method box's groups, in its order: the group's name and its methods.
METHOD_GROUPS = {
    "Gradient": (
        "gradcam",
        "gradcam++",
        "xgradcam",
        "layercam",
        "hirescam",
        "gradcamelementwise",
        "eigengradcam",
        "shapleycam",
        "finercam",
        "smoothgradcam++",
        "fullgrad",
    ),
    "Attention": ("legrad",),
    "Head": ("cam",),
    "Forward passes": ("scorecam", "sscam", "iscam", "ablationcam"),
    "No class": ("eigencam", "kpcacam", "fem"),
    "Baseline": ("randomcam", "random", "centre", "edges"),
}
GROUP_OF = {method: group for group, methods in METHOD_GROUPS.items() for method in methods}

METHOD_NOTES = {
    "gradcam": "channel weight = average gradient of the class score",
    "gradcam++": "channel weight = positive gradients, each weighted by a closed-form alpha",
    "xgradcam": "channel weight = gradient averaged with the activation as weights",
    "layercam": "every cell weighted by its own positive gradient (finer maps at early layers)",
    "hirescam": "every cell weighted by its own gradient, no averaging (faithful to the score)",
    "gradcamelementwise": "every cell: the positive part of activation × gradient, summed",
    "eigengradcam": "first principal component of activation × gradient (class-specific)",
    "shapleycam": "Grad-CAM's weights with the second-order (Hessian) term of a Shapley value",
    "finercam": "what sets the class apart from the classes most like it",
    "smoothgradcam++": "Grad-CAM++ averaged over noisy copies of the image",
    "fullgrad": "every bias's gradient and the input's, summed: the whole network, no layer",
    "legrad": "positive gradients of each block's class score at its attention, averaged",
    "cam": "channel weight = the linear head's weight for the class (the original CAM)",
    "scorecam": "channel weight = class score of the image masked by that channel (no gradient)",
    "sscam": "Score-CAM with noise on each channel's mask, averaged (no gradient)",
    "iscam": "Score-CAM with each mask faded in step by step, summed (no gradient)",
    "ablationcam": "channel weight = how much the score drops without that channel",
    "eigencam": "first principal component of the activations: what the layer sees most",
    "kpcacam": "first kernel principal component (sigmoid kernel) of the activations",
    "fem": "channel weight = share of its cells above mean + 2σ (no gradient)",
    "randomcam": "random channel weights (seeded): what any method should beat",
    "random": "uniform noise (seeded): explains nothing, a floor for every score",
    "centre": "a Gaussian on the image's centre: where photographers put the subject",
    "edges": "the image's Sobel edges: reads the photo, not the model",
}

METHOD_IDEAS = {
    "gradcam": r"""Each channel is weighted by its average gradient: how much the score rises
when the channel brightens. The weighted channels are summed and only the positive part is kept.
$$L = \mathrm{ReLU}\Big(\sum_k \alpha_k A^k\Big),\qquad
\alpha_k = \frac{1}{Z}\sum_{i,j} G^k_{ij}$$""",
    "gradcam++": r"""Like Grad-CAM, but each cell's positive gradient gets its own weight, so
several objects of the class all count. The weights come in closed form from higher derivatives.
$$w_k = \sum_{i,j} a^k_{ij}\,\mathrm{ReLU}(G^k_{ij}),\qquad
a^k_{ij} = \frac{(G^k_{ij})^2}{2\,(G^k_{ij})^2 + \sum_{a,b} A^k_{ab}\,(G^k_{ij})^3}$$""",
    "xgradcam": r"""The gradient is averaged with the activations as weights rather than
evenly, so that the map better meets two axioms of an explanation (sensitivity, conservation).
$$w_k = \sum_{i,j} \frac{A^k_{ij}}{\sum_{a,b} A^k_{ab}}\, G^k_{ij}$$""",
    "layercam": r"""Every cell of every channel has its own weight, its positive gradient:
no averaging, so early layers give fine maps rather than blurred ones.
$$L = \mathrm{ReLU}\Big(\sum_k \mathrm{ReLU}(G^k) \odot A^k\Big)$$""",
    "hirescam": r"""Every cell is weighted by its own gradient, signed and not averaged. The
map then shows exactly where, at this layer, the score comes from.
$$L = \mathrm{ReLU}\Big(\sum_k G^k \odot A^k\Big)$$""",
    "gradcamelementwise": r"""The ReLU moves inside the sum: a channel counts at a cell only
where its contribution is positive, so one channel's evidence against cannot cancel another's.
$$L = \sum_k \mathrm{ReLU}\big(G^k \odot A^k\big)$$""",
    "eigengradcam": r"""The first principal component of the gradient-weighted activations:
Eigen-CAM made specific to the class.
$$L = (A \odot G)\, v_1,\qquad v_1 = \text{first right singular vector of the centred }
(Z \times C)\text{ matrix } A \odot G$$""",
    "shapleycam": r"""Grad-CAM's weight is the first-order term of a channel's Shapley value;
this adds the second-order term, the Hessian of the score applied to the activations.
$$w_k = \frac{1}{Z}\sum_{i,j}\Big(G^k_{ij} - \tfrac12\,(H A)^k_{ij}\Big),\qquad
H = \frac{\partial^2 y}{\partial A^2}$$""",
    "finercam": r"""Grad-CAM of the class's lead over the classes the model finds most like it
(the three with the closest scores), weighted by their probabilities: what sets it apart.
$$y' = \frac{\sum_{c \in S} p_c\,(y - \alpha\, y_c)}{\sum_{c \in S} p_c},\qquad
\alpha = 1$$""",
    "smoothgradcam++": r"""Grad-CAM++ whose gradient terms are averaged over copies of the
image with Gaussian noise added (SmoothGrad), for a steadier map.
$$w_k = \sum_{i,j} \bar a^k_{ij}\,\mathrm{ReLU}\big(\overline{G}^k_{ij}\big),\qquad
\overline{G^n} = \frac{1}{N}\sum_{s=1}^{N} \big(G^{(x + \epsilon_s)}\big)^n$$""",
    "fullgrad": r"""Not one layer but the whole network: the input's gradient times the input,
plus every convolution's and batch norm's bias times its gradient; together they add up to the
score. Each part is made absolute, scaled and upsampled, then summed.
$$S = \psi\big(|x \odot \nabla_x y|\big) + \sum_{l}\sum_{c} \psi\big(|b_{l,c}\,
\nabla_{z_{l,c}} y|\big)$$""",
    "legrad": r"""For a vision transformer: each encoder block's own class score (the head
applied to the block's mean token) is differentiated with respect to that block's attention
probabilities; the positive part, averaged over heads, queries and blocks, shows the patches.
$$L = \frac{1}{|B|}\sum_{l \in B} \frac{1}{HQ}\sum_{h,q}
\mathrm{ReLU}\Big(\frac{\partial s^l_c}{\partial P^l_{hq}}\Big)$$""",
    "cam": r"""The original: where global average pooling and one linear layer follow the
layer, the head's own weights for the class weigh the channels (Grad-CAM equals it divided by Z).
$$L = \sum_k w^c_k A^k$$""",
    "scorecam": r"""No gradient: each channel, scaled to [0, 1], masks the image, and the score
of the masked image is the channel's weight (softmaxed over the channels).
$$w_k = \mathrm{softmax}_k\, y\big(x \odot \hat A^k\big)$$""",
    "sscam": r"""Score-CAM with Gaussian noise added to each channel's mask, the scores
averaged over the noisy masks: weights less sensitive to any one mask.
$$w_k = \mathrm{softmax}_k\, \frac{1}{N}\sum_{s=1}^{N} y\big(x \odot (\hat A^k +
\epsilon_s)\big)$$""",
    "iscam": r"""Score-CAM with each mask faded in step by step, the scores of the steps
summed: an integral along the mask's strength, like integrated gradients.
$$w_k = \mathrm{softmax}_k\, \frac{1}{N}\sum_{s=1}^{N} y\big(x \odot c_s \hat A^k\big),
\qquad c_s = \sum_{t \le s} \tfrac{t}{N}$$""",
    "ablationcam": r"""No gradient: each channel in turn is removed from the layer's output
and the rest of the network run; the share of the score lost is the channel's weight.
$$w_k = \frac{y - y_{A^k = 0}}{y}$$""",
    "eigencam": r"""No class and no gradient: the first principal component of the
activations, what the layer responds to most in this image.
$$L = A\, v_1,\qquad v_1 = \text{first right singular vector of the centred }
(Z \times C)\text{ matrix } A$$""",
    "kpcacam": r"""Eigen-CAM with kernel PCA (a sigmoid kernel): the first component of a
non-linear view of the activations. No class and no gradient.
$$L = \sqrt{\lambda_1}\, v_1,\qquad K_{ij} = \tanh\!\big(\tfrac{1}{C}\, a_i \cdot a_j +
1\big)\ \text{centred}$$""",
    "fem": r"""No class and no gradient: a channel weighs as much as the share of its cells
that stand out (above its mean plus two standard deviations).
$$w_k = \frac{1}{Z}\sum_{i,j} \big[A^k_{ij} > \mu_k + 2\sigma_k\big]$$""",
    "randomcam": r"""A baseline: random channel weights, seeded. A method that does not beat
it on the scores explains the layer, not the class.
$$w_k \sim \mathcal{U}(-1, 1)$$""",
    "random": r"""A baseline that reads nothing: uniform noise, seeded. Every score a real
method gets should beat it.
$$M_{ij} \sim \mathcal{U}(0, 1)$$""",
    "centre": r"""A baseline that reads nothing but is hard to beat on photos: a Gaussian on
the centre, where photographers put the subject.
$$M_{ij} = \exp\!\Big(-\frac{u_i^2 + v_j^2}{2\sigma^2}\Big),\qquad \sigma = 0.25$$""",
    "edges": r"""A baseline that reads the image, not the model: the size of its Sobel
gradient. It survives any randomisation of the network, so the sanity check must flag it.
$$M = \sqrt{(S_x * Y)^2 + (S_y * Y)^2}$$""",
}

# The pixel attributions' names on the Methods page (the CAM methods' are ``METHOD_LABELS``).
ATTRIBUTION_LABELS = {
    "saliency": "Saliency",
    "input_x_gradient": "Input × gradient",
    "guided_backprop": "Guided backprop",
    "deconvolution": "Deconvolution",
    "guided_gradcam": "Guided Grad-CAM",
    "integrated_gradients": "Integrated gradients",
    "smoothgrad": "SmoothGrad",
    "occlusion": "Occlusion",
    "rise": "RISE",
}


def method_label(method: str) -> str:
    """A method's short name as the sidebar writes it ("Grad-CAM element-wise", "LeGrad"),
    or a pixel attribution's; an unknown name as it is."""
    label = METHOD_LABELS.get(method) or ATTRIBUTION_LABELS.get(method) or method
    return label.split(" (")[0]


# What a method's note calls "the class score" is, for a model that is not a classifier.
_SCORE_WORDS = {
    "detection": "box score",
    "segmentation": "category's summed score",
    "embedding": "similarity",
}


def method_note(method: str, task: str = "classification") -> str:
    """The method's one-line note (``METHOD_NOTES``) in the words of a model of ``task``: a
    box's score is not a class score."""
    words = _SCORE_WORDS.get(task)
    note = METHOD_NOTES[method]
    return note.replace("class score", words) if words else note
