"""Non-negative matrix factorisation, V ~ W H with W, H >= 0, in torch: the factorisation Deep
Feature Factorization runs on a layer's activations (``hookviz.concepts``).

Initialised by NNDSVDa (Boutsidis & Gallopoulos 2008: the leading singular pairs split into
their positive parts, zeros filled with the data's mean; the same start every call) and solved
by HALS (hierarchical alternating least squares, Cichocki & Phan 2009: each component's row of
H, then its column of W, is the exact non-negative least-squares update with the others held),
the coordinate descent scikit-learn's default solver also runs. Computed in float64: the
matrices are a layer's channels by its positions, small enough, and the convergence test then
never stalls on rounding."""

from __future__ import annotations

from typing import NamedTuple

import torch

_FLOOR = 1e-12  # a component never reaches exact zero: its update would divide by zero
MAX_ITERATIONS = 1000
TOLERANCE = 1e-8  # stop when the relative error improves less than this over an iteration


class Factorisation(NamedTuple):
    """``w`` (m, k) and ``h`` (k, n), both >= 0; ``error``: ||V - W H||_F / ||V||_F;
    ``iterations``: the HALS sweeps run."""

    w: torch.Tensor
    h: torch.Tensor
    error: float
    iterations: int


def nmf(
    v: torch.Tensor, k: int, *, max_iterations: int = MAX_ITERATIONS, tolerance: float = TOLERANCE
) -> Factorisation:
    """Factorise the non-negative (m, n) ``v`` into ``k`` components.

    Raises:
        ValueError: ``v`` has a negative entry, is not 2-D, or ``k`` is not in 1..min(m, n).
    """
    if v.dim() != 2:
        raise ValueError(f"nmf factorises a matrix; got shape {tuple(v.shape)}")
    m, n = v.shape
    if not 1 <= k <= min(m, n):
        raise ValueError(f"k must be between 1 and {min(m, n)} for a {m}x{n} matrix; got {k}")
    v = v.double()
    if bool((v < 0).any()):
        raise ValueError("nmf factorises a non-negative matrix")
    norm = float(torch.linalg.matrix_norm(v))
    if norm == 0:
        return Factorisation(v.new_zeros(m, k), v.new_zeros(k, n), 0.0, 0)
    w, h = _nndsvda(v, k)
    error, iterations = _relative_error(v, w, h, norm), 0
    for iterations in range(1, max_iterations + 1):  # noqa: B007  (the count is returned)
        _update_h(v, w, h)
        _update_w(v, w, h)
        previous, error = error, _relative_error(v, w, h, norm)
        if previous - error < tolerance * previous:
            break
    return Factorisation(w, h, error, iterations)


def _nndsvda(v: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """NNDSVD's start with its zeros set to the mean of ``v`` (NNDSVDa)."""
    u, s, vt = torch.linalg.svd(v, full_matrices=False)
    w = torch.zeros(v.shape[0], k, dtype=v.dtype, device=v.device)
    h = torch.zeros(k, v.shape[1], dtype=v.dtype, device=v.device)
    # the first pair of a non-negative matrix has one sign throughout
    w[:, 0] = s[0].sqrt() * u[:, 0].abs()
    h[0] = s[0].sqrt() * vt[0].abs()
    for j in range(1, k):
        x, y = u[:, j], vt[j]
        # the pair's positive parts or its negative parts, whichever carries more
        parts = [(x.clamp(min=0), y.clamp(min=0)), ((-x).clamp(min=0), (-y).clamp(min=0))]
        a, b = max(parts, key=lambda pair: float(pair[0].norm() * pair[1].norm()))
        sigma = float(a.norm() * b.norm())
        a, b = a / max(float(a.norm()), _FLOOR), b / max(float(b.norm()), _FLOOR)
        scale = (s[j] * sigma).sqrt()
        w[:, j], h[j] = scale * a, scale * b
    mean = v.mean()
    w[w == 0] = mean
    h[h == 0] = mean
    return w, h


def _update_h(v: torch.Tensor, w: torch.Tensor, h: torch.Tensor) -> None:
    wtv, wtw = w.T @ v, w.T @ w
    for j in range(h.shape[0]):
        h[j] = (h[j] + (wtv[j] - wtw[j] @ h) / max(float(wtw[j, j]), _FLOOR)).clamp_(min=_FLOOR)


def _update_w(v: torch.Tensor, w: torch.Tensor, h: torch.Tensor) -> None:
    vht, hht = v @ h.T, h @ h.T
    for j in range(w.shape[1]):
        w[:, j] = (w[:, j] + (vht[:, j] - w @ hht[:, j]) / max(float(hht[j, j]), _FLOOR)).clamp_(
            min=_FLOOR
        )


def _relative_error(v: torch.Tensor, w: torch.Tensor, h: torch.Tensor, norm: float) -> float:
    return float(torch.linalg.matrix_norm(v - w @ h)) / norm
