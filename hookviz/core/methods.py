"""The CAM family as one mechanism: a method turns a layer's activations A (and, for most, the
gradient G = d y^c / d A of the class logit) into a coarse map; hooks, the backward pass,
upsampling and scaling are shared by all of them (pipeline.py, cam.py).

Each function takes float32 tensors with a leading batch dimension, A and G of shape
(N, C, h, w), and returns the map before ReLU, shape (N, h, w), plus the effective channel
weights (N, C) when the method has them (None for the spatially weighted ones). The caller
applies the ReLU that every method of this family ends with.

Two methods are not such a combination and are run by the callers (method_dispatch.py,
batch.py): Score-CAM (a forward pass per channel, ``score_weights``) and the original CAM
(the classifier head's weights, ``head_weights``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from ..errors import HookvizError
from .baseline_maps import BASELINE_ALIASES, BASELINE_MAPS
from .cam import weighted_sum

Combine = Callable[[torch.Tensor, torch.Tensor | None], tuple[torch.Tensor, torch.Tensor | None]]

# Numerical guards, the values the reference implementations use, so results agree with them.
_EPS_PLUSPLUS = 1e-6
_EPS_XGRAD = 1e-7
# FEM's k in its k-sigma rule (pytorch-grad-cam's default).
FEM_K = 2.0
# Random-CAM's seed: the same call gives the same map.
RANDOMCAM_SEED = 0
# Kernel PCA: a full eigendecomposition of the (hw x hw) kernel matrix up to this many positions,
# LOBPCG for the first eigenvector above (as scikit-learn switches to ARPACK above 200); beyond
# the limit the kernel matrix alone would take gigabytes.
_KPCA_DENSE = 1024
KPCA_MAX_POSITIONS = 16384


class MethodError(HookvizError, ValueError):
    """Unknown CAM method name."""


def gradcam(a: torch.Tensor, g: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Grad-CAM, Selvaraju et al. 2017 (arXiv:1610.02391), eq. 1-2:
    alpha_k = mean_ij G_kij;  L = sum_k alpha_k A_k."""
    weights = g.mean(dim=(-2, -1))
    return weighted_sum(a, weights), weights


def gradcam_plusplus(
    a: torch.Tensor, g: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Grad-CAM++, Chattopadhay et al. 2018 (arXiv:1710.11063), eq. 19 with the exponential
    output, where higher derivatives are powers of the first:
    a_kij = G^2 / (2 G^2 + sum_ab A_kab G^3);  w_k = sum_ij a_kij ReLU(G_kij);
    L = sum_k w_k A_k."""
    g2 = g * g
    g3 = g2 * g
    total = a.sum(dim=(-2, -1), keepdim=True)
    alpha = g2 / (2 * g2 + total * g3 + _EPS_PLUSPLUS)
    alpha = torch.where(g != 0, alpha, torch.zeros_like(alpha))
    weights = (alpha * torch.relu(g)).sum(dim=(-2, -1))
    return weighted_sum(a, weights), weights


def xgradcam(a: torch.Tensor, g: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """XGrad-CAM, Fu et al. 2020 (arXiv:2008.02312), eq. 8:
    w_k = sum_ij (A_kij / sum_ab A_kab) G_kij;  L = sum_k w_k A_k."""
    total = a.sum(dim=(-2, -1), keepdim=True)
    weights = (g * a / (total + _EPS_XGRAD)).sum(dim=(-2, -1))
    return weighted_sum(a, weights), weights


def layercam(a: torch.Tensor, g: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Layer-CAM, Jiang et al. 2021 (IEEE TIP 30), eq. 6-7: every location has its own weight,
    w_kij = ReLU(G_kij);  L = sum_k w_k * A_k (element-wise)."""
    return (torch.relu(g) * a).sum(dim=-3), None


def hirescam(a: torch.Tensor, g: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """HiResCAM, Draelos & Carin 2020 (arXiv:2011.08891), eq. 4: the gradient itself weighs
    each location, L = sum_k G_k * A_k (element-wise; no spatial averaging)."""
    return (g * a).sum(dim=-3), None


def eigencam(a: torch.Tensor, g: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Eigen-CAM, Muhammad & Yeasin 2020 (arXiv:2008.00299), eq. 5-6: the projection of the
    mean-centred activations (h*w positions x C channels) on their first principal component.
    No gradient and no class: it shows what the layer responds to most.

    An SVD's singular vectors have no fixed sign, so the raw projection may come out inverted
    (a frequent complaint about Eigen-CAM). The sign is fixed as in Seg-Eigen-CAM (Chung & Ying
    2025, eq. 13): flipped when its most negative value outweighs its most positive one."""
    return _first_component(a), None


def eigengradcam(
    a: torch.Tensor, g: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Eigen-Grad-CAM (pytorch-grad-cam's ``EigenGradCAM``): Eigen-CAM (Muhammad & Yeasin 2020,
    arXiv:2008.00299, eq. 5-6) of the activations weighted by the gradient, so class-specific:
    L = (A ⊙ G) V_1, the projection of the mean-centred (h*w x C) matrix A ⊙ G on its first
    right singular vector V_1. Its sign is fixed as Eigen-CAM's is (``eigencam``)."""
    return _first_component(a * g), None


def gradcam_elementwise(
    a: torch.Tensor, g: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Grad-CAM element-wise (pytorch-grad-cam's ``GradCAMElementWise``; the element-wise
    variant of Grad-CAM, Selvaraju et al. 2017, arXiv:1610.02391, eq. 1-2, with the ReLU moved
    inside the sum): L = sum_k ReLU(G_k * A_k), element-wise, so a channel's negative evidence
    at one location cannot cancel another channel's positive evidence there."""
    return torch.relu(g * a).sum(dim=-3), None


def randomcam(a: torch.Tensor, g: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Random-CAM (pytorch-grad-cam's ``RandomCAM``), a baseline: channel weights drawn
    uniformly, w_k ~ U(-1, 1);  L = sum_k w_k A_k. It explains nothing: a method that does not
    beat it (on a faithfulness metric, or a sanity check) shows the layer, not the class.

    Seeded: the weights are the first C draws of NumPy's ``RandomState(RANDOMCAM_SEED)``
    (``np.random.seed(RANDOMCAM_SEED)`` makes pytorch-grad-cam draw the same ones), the same
    for every image and every call, so the same call gives the same map."""
    drawn = np.random.RandomState(RANDOMCAM_SEED).uniform(-1.0, 1.0, size=a.shape[-3])
    weights = torch.as_tensor(drawn, dtype=torch.float32, device=a.device)
    weights = weights.expand(a.shape[0], -1)
    return weighted_sum(a, weights), weights


def kpcacam(a: torch.Tensor, g: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """KPCA-CAM, Karmani et al. 2024 (arXiv:2410.00267), eq. 4-7 as pytorch-grad-cam's
    ``KPCA_CAM`` computes it (scikit-learn's ``KernelPCA`` with its sigmoid kernel): Eigen-CAM
    with kernel PCA in place of PCA. With X the mean-centred activations (n = h*w positions x C
    channels), the kernel K_ij = tanh(gamma x_i . x_j + c0), gamma = 1/C, c0 = 1, centred as
    K' = K - 1_n K - K 1_n + 1_n K 1_n (1_n: the n x n matrix of 1/n); with (lambda_1, v_1) the
    largest eigenvalue of K' and its unit eigenvector, L = sqrt(lambda_1) v_1 (the training
    points' projections on the first kernel component). No gradient and no class.

    scikit-learn fixes the eigenvector's sign so that its largest entry in magnitude is
    positive: the very rule ``eigencam`` uses. Computed in float64; memory grows as (h*w)^2."""
    n, c, h, w = a.shape
    positions = h * w
    if positions > KPCA_MAX_POSITIONS:
        raise MethodError(
            f"kpcacam needs a {positions} x {positions} kernel matrix at this layer "
            f"({h}x{w} positions; at most {KPCA_MAX_POSITIONS}): pick a deeper layer or a "
            "smaller image"
        )
    x = a.double().reshape(n, c, positions).transpose(1, 2)  # (N, hw, C)
    x = x - x.mean(dim=1, keepdim=True)
    kernel = torch.tanh(x @ x.transpose(1, 2) / c + 1.0)
    kernel = (
        kernel
        - kernel.mean(dim=1, keepdim=True)
        - kernel.mean(dim=2, keepdim=True)
        + kernel.mean(dim=(1, 2), keepdim=True)
    )
    kernel = (kernel + kernel.transpose(1, 2)) / 2  # exactly symmetric for the solver
    values, vectors = _largest_eigenpairs(kernel)
    projection = vectors * values.clamp(min=0).sqrt()[:, None]
    return _fix_sign(projection).float().reshape(n, h, w), None


def fem(a: torch.Tensor, g: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """FEM, the Feature Explanation Method, Fuad et al. 2020 (IPTA, hal-02963298), eq. 1-3 as
    pytorch-grad-cam's ``FEM`` computes it: channel k's cells above the k-sigma threshold
    mu_k + K sigma_k (its spatial mean and population standard deviation, K = FEM_K = 2) make a
    binary mask B_k; w_k = mean_ij B_kij, the share of its cells above it;  L = sum_k w_k A_k.
    No gradient and no class: channels that fire on a few strong spots weigh most."""
    mean = a.mean(dim=(-2, -1), keepdim=True)
    std = a.std(dim=(-2, -1), keepdim=True, correction=0)
    weights = (a > mean + FEM_K * std).float().mean(dim=(-2, -1))
    return weighted_sum(a, weights), weights


def _first_component(x: torch.Tensor) -> torch.Tensor:
    """(N, C, h, w) -> (N, h, w): the projection of the mean-centred (h*w x C) matrix of each
    image on its first principal component, its sign fixed (``_fix_sign``)."""
    n, c, h, w = x.shape
    positions = x.reshape(n, c, h * w).transpose(1, 2)  # (N, hw, C)
    centred = positions - positions.mean(dim=1, keepdim=True)
    # float64 SVD: the first singular vector must not depend on float32 round-off
    _, _, vh = torch.linalg.svd(centred.double(), full_matrices=False)
    projection = (centred.double() @ vh[:, 0, :, None])[..., 0]
    return _fix_sign(projection).float().reshape(n, h, w)


def _fix_sign(projection: torch.Tensor) -> torch.Tensor:
    """(N, P) projections, each flipped when its most negative value outweighs its most
    positive one (Seg-Eigen-CAM, Chung & Ying 2025, eq. 13; scikit-learn's ``svd_flip``)."""
    flip = projection.amin(dim=1).abs() > projection.amax(dim=1)
    return torch.where(flip[:, None], -projection, projection)


def _largest_eigenpairs(matrices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The largest eigenvalue (N,) and its unit eigenvector (N, P) of each symmetric (P, P)
    matrix: all of them by ``eigh`` when small, the first alone by LOBPCG (from a fixed start,
    so the same input gives the same answer) when large."""
    size = matrices.shape[-1]
    if size <= _KPCA_DENSE:
        values, vectors = torch.linalg.eigh(matrices)
        return values[:, -1], vectors[:, :, -1]
    start = torch.randn(
        size, 1, generator=torch.Generator().manual_seed(0), dtype=matrices.dtype
    ).to(matrices.device)
    found = [torch.lobpcg(m, k=1, X=start.clone(), largest=True) for m in matrices]
    return torch.cat([v for v, _ in found]), torch.stack([u[:, 0] for _, u in found])


def head_weights(
    model: torch.nn.Module,
    activations: torch.Tensor,
    logits: torch.Tensor,
    classes: torch.Tensor,
    layer: str,
    tolerance: float = 1e-3,
) -> torch.Tensor:
    """CAM's channel weights, Zhou et al. 2016 (arXiv:1512.04150), eq. 2: for a network whose
    class scores are y^c = sum_k w^c_k mean_ij A_kij + b_c (global average pooling right after
    the layer, then one linear layer), M_c = sum_k w^c_k A_k, the head's weights for the class.
    (Grad-CAM's weights there are w^c_k / (h*w): the same map, scaled.)

    The head is the ``nn.Linear`` of ``model`` from C features to the scores for which the
    scores of this very forward pass are W mean(A) + b (to ``tolerance`` times their largest
    magnitude): anything running between the layer and the head (a ReLU, a second linear
    layer, a pooling other than the average) makes them differ, and CAM is refused.

    Args:
        model: the network.
        activations: (N, C, h, w) the layer's maps.
        logits: (N, K) the class scores of the same forward pass.
        classes: (N,) the class of each image.
        layer: the layer's name (for the message).
        tolerance: relative; larger under autocast.

    Returns:
        (N, C) float32 weights, on the activations' device.

    Raises:
        MethodError: no linear head on the global average pool of ``layer``.
    """
    head, why = pooled_linear_head(model, activations, logits, layer, tolerance)
    if head is None:
        raise MethodError(
            "CAM (Zhou et al. 2016) needs a linear head right after global average pooling of "
            f"the layer; {why}. Pick the layer the pooling reads (the last convolutional "
            "block), or use 'gradcam', which equals CAM / (h*w) where CAM applies."
        )
    weight = head.weight.to(activations.device, torch.float64)
    return weight[classes.to(activations.device)].float()


def pooled_linear_head(
    model: torch.nn.Module,
    activations: torch.Tensor,
    logits: torch.Tensor,
    layer: str,
    tolerance: float = 1e-3,
) -> tuple[torch.nn.Linear | None, str]:
    """The ``nn.Linear`` of ``model`` whose scores of this forward pass are W mean(A) + b for
    the layer's (N, C, h, w) ``activations`` and the (N, K) ``logits`` (to ``tolerance``
    times their largest magnitude) and "", or None and the reason in words (anything running
    between the layer and the head makes them differ)."""
    c, k = activations.shape[1], logits.shape[1]
    heads = [
        m
        for m in model.modules()
        if isinstance(m, torch.nn.Linear) and m.in_features == c and m.out_features == k
    ]
    with torch.no_grad():
        pooled = activations.double().mean(dim=(-2, -1))
        scores = logits.double().to(pooled.device)
        scale = max(float(scores.abs().max()), 1e-12)
        for head in heads:
            weight = head.weight.to(pooled.device, torch.float64)
            bias = 0.0 if head.bias is None else head.bias.to(pooled.device, torch.float64)
            if float((pooled @ weight.T + bias - scores).abs().max()) <= tolerance * scale:
                return head, ""
    if heads:
        return None, (
            f"its class scores are not a linear layer of the global average pool of {layer!r} "
            "(something else runs between them)"
        )
    return None, (
        f"it has no linear layer from the {c} channels of {layer!r} to its {k} class scores"
    )


# Score-CAM needs forward passes of masked images and CAM the classifier's head, not a
# combination rule: method_dispatch.py and batch.py run them. The methods that probe the model
# further (more forward or backward passes) are in pass_methods.py.
METHODS: dict[str, Combine | None] = {
    "gradcam": gradcam,
    "gradcam++": gradcam_plusplus,
    "xgradcam": xgradcam,
    "layercam": layercam,
    "hirescam": hirescam,
    "gradcamelementwise": gradcam_elementwise,
    "eigengradcam": eigengradcam,
    "shapleycam": None,
    "finercam": None,
    "smoothgradcam++": None,
    "fullgrad": None,
    "legrad": None,
    "cam": None,
    "scorecam": None,
    "sscam": None,
    "iscam": None,
    "ablationcam": None,
    "eigencam": eigencam,
    "kpcacam": kpcacam,
    "fem": fem,
    "randomcam": randomcam,
}
NEEDS_GRADIENT = frozenset(
    {
        "gradcam",
        "gradcam++",
        "xgradcam",
        "layercam",
        "hirescam",
        "gradcamelementwise",
        "eigengradcam",
    }
)
# The methods whose map does not depend on the class (or whatever target is explained).
CLASSLESS = frozenset({"eigencam", "kpcacam", "fem", "randomcam", *BASELINE_MAPS})
# The methods that run a forward pass per channel or per sample: seconds to minutes on a CPU,
# so a page runs them on request, with progress and Cancel.
SLOW = frozenset({"scorecam", "sscam", "iscam", "ablationcam"})
# What each layer-wise map is summed from, element by element, for the methods whose weights
# are not one per channel: ``eigen_smooth`` takes the first principal component of it instead.
ELEMENTWISE: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "layercam": lambda a, g: torch.relu(g) * a,
    "hirescam": lambda a, g: g * a,
    "gradcamelementwise": lambda a, g: torch.relu(g * a),
    "eigengradcam": lambda a, g: a * g,
}
_ALIASES = {
    "gradcampp": "gradcam++",
    "gradcamplusplus": "gradcam++",
    "smoothgradcampp": "smoothgradcam++",
    "smoothgradcamplusplus": "smoothgradcam++",
    "fullgradcam": "fullgrad",
    "kpca": "kpcacam",
}


def check_method(method: str) -> str:
    """The method's canonical name (a CAM method or a baseline), or a MethodError listing the
    choices."""
    name = method.lower().replace("_", "").replace("-", "") if isinstance(method, str) else method
    name = _ALIASES.get(name, BASELINE_ALIASES.get(name, name))
    if name not in METHODS and name not in BASELINE_MAPS:
        raise MethodError(
            f"unknown CAM method {method!r}; choose one of {', '.join(METHODS)} or a baseline: "
            f"{', '.join(BASELINE_MAPS)}"
        )
    return name


def first_component(weighted: torch.Tensor) -> torch.Tensor:
    """(N, C, h, w) -> (N, h, w): the projection on the first principal component, its sign
    fixed (``eigen_smooth``: pytorch-grad-cam's ``get_2d_projection`` with Seg-Eigen-CAM's sign
    rule, as ``eigencam``)."""
    return _first_component(weighted)


SCORECAM_BATCH = 32


def score_weights(
    scores: Callable[[torch.Tensor], torch.Tensor],
    image: torch.Tensor,
    activations: torch.Tensor,
    batch_size: int = SCORECAM_BATCH,
    progress: Callable[[int, int], bool | None] | None = None,
) -> torch.Tensor:
    """Score-CAM channel weights, Wang et al. 2020 (arXiv:1910.01279), eq. 5-7 as in the
    reference implementation: each channel, upsampled to the input and scaled to [0, 1], masks
    the input; the target's score of every masked input (a class's logit), softmaxed over
    channels, is that channel's weight.

    Args:
        scores: the model followed by the target: (N, 3, H, W) inputs -> (N,) scores.
        image: (1, 3, H, W) preprocessed input.
        activations: (C, h, w).
        batch_size: masked inputs per forward pass.
        progress: called before each batch with (channels done, channels in all); returning
            True cancels (raises CancelledError). A UI can also cancel by raising from it.

    Returns:
        (C,) weights.
    """
    size = tuple(image.shape[-2:])
    masks = torch.nn.functional.interpolate(
        activations[None].float(), size=size, mode="bilinear", align_corners=True
    )[0]
    low = masks.amin(dim=(1, 2), keepdim=True)
    high = masks.amax(dim=(1, 2), keepdim=True)
    masks = (masks - low) / (high - low + 1e-8)
    found = []
    for start in range(0, masks.shape[0], batch_size):
        if progress is not None and progress(start, masks.shape[0]):
            raise CancelledError("Score-CAM was cancelled")
        chunk = image * masks[start : start + batch_size, None].to(image.dtype)
        found.append(scores(chunk).float())
    return torch.softmax(torch.cat(found), dim=0)


class CancelledError(HookvizError):
    """A long computation was cancelled by its caller."""
