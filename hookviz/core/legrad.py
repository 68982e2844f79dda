"""LeGrad (Bousselham et al. 2024, "LeGrad: An Explainability Method for Vision Transformers via
Feature Formation Sensitivity", arXiv:2404.03214), as TorchCAM 0.5.0's ``LeGrad`` computes it,
for torchvision's ``VisionTransformer``.

Not a combination of one layer's activations and gradient: LeGrad reads every selected block's
attention probabilities and a class score of its own per block. It runs one forward pass of its
own (up to the chosen block; to the output where the target is chosen from it) with hooks that
keep those probabilities in the graph of the block's score, then one ``torch.autograd.grad`` per
block. Everything happens under the model's lock, and every hook is removed in a ``finally``,
so the model is left exactly as it was (no hook, no ``.grad``).
"""

from __future__ import annotations

import contextlib
import functools
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .grids import grid_view
from .hooks import ModuleHook, StopForward, hooks_on
from .loaded import LoadedModel
from .methods import MethodError
from .probe import Probe, report_progress

# nn.MultiheadAttention.forward(query, key, value, key_padding_mask, need_weights, attn_mask,
# average_attn_weights, is_causal): where its two weight options sit when passed positionally.
_NEED_WEIGHTS_ARG = 4
_AVERAGE_ARG = 6

# How many autograd steps back from an attention's output its softmax is looked for: seven in
# F.multi_head_attention_forward (out_proj, the head reshapes, the batch-first transpose).
_SOFTMAX_SEARCH_DEPTH = 12

_PICK = (
    "legrad explains a vision transformer's attention: torchvision's ViT models (vit_b_16, "
    "vit_b_32, vit_l_16, ..., or a torchvision VisionTransformer given to wrap_model); pick "
    "one of them, or another method for this model"
)


@dataclass
class _Block:
    """What the hooks of one selected encoder block recorded during LeGrad's forward pass."""

    name: str
    block: nn.Module
    attention: nn.MultiheadAttention
    # (need_weights, average_attn_weights) as the block itself asked its attention, restored
    # in what the attention returns to it.
    asked: tuple[bool, bool] = (False, True)
    # what the score is differentiated with respect to: the attention's probabilities, or the
    # softmax output they are a view of (batch x heads, queries, keys)
    probabilities: torch.Tensor | None = None
    layout: tuple[int, ...] = ()  # (batch, heads, queries, keys), the gradient's shape
    # (1, K) the logits the model's head gives the block's tokens (the target's score of the
    # block is taken from them once the target is known)
    logits: torch.Tensor | None = None
    tokens: int = 0


def legrad(probe: Probe) -> tuple[torch.Tensor, None]:
    r"""LeGrad: the gradient of each block's own class score with respect to that block's
    attention probabilities, its positive part averaged over heads, queries and blocks.

    For each selected encoder block :math:`l` of a torchvision ViT (arXiv:2404.03214, Sec. 3,
    as TorchCAM's ``LeGrad`` computes it):

    .. math::

        s^l = \mathrm{heads}\big(\mathrm{ln}\big(\tfrac{1}{T} \textstyle\sum_t z^l_t\big)\big)_c,
        \qquad
        E^l = \frac{1}{H\,Q} \sum_{h,q} \mathrm{ReLU}\Big(
            \frac{\partial s^l}{\partial A^l_{h,q,:}}\Big),
        \qquad
        E = \frac{1}{|L|} \sum_{l \in L} E^l[\text{patch keys}]

    where :math:`z^l` are the block's output tokens (class token included), ``ln`` and
    ``heads`` the model's own final norm and classifier (the score the model would give had it
    stopped after block :math:`l`), :math:`c` the explained class (the target's score applied
    to those logits), :math:`A^l` the block's post-softmax attention probabilities
    (batch, heads, queries, keys). The class-token key is dropped and the patch keys are laid
    out row by row on the patch grid. The attention values are not multiplied in (LeGrad, unlike
    Grad-CAM for ViTs, keeps only the gradient).

    ``probe.layer`` is an encoder block ``encoder.layers.encoder_layer_N`` (or a module inside
    one: its block is used); ``probe.options["blocks"]`` how many blocks ending at it are
    averaged: None, every block from the first (the paper aggregates over all layers), or n,
    the last n (fewer where there are fewer).

    Returns:
        The map (1, gh, gw) float32 on the patch grid (non-negative already; TorchCAM's min-max
        normalization is the caller's scaling to [0, 1]), and None (no channel weights).

    Raises:
        MethodError: the model is not a torchvision ViT, the layer is not in an encoder block,
            or ``blocks`` is not None or a positive integer.
    """
    blocks = _selected_blocks(probe.loaded.model, probe.layer, (probe.options or {}).get("blocks"))
    cam, _ = _run(probe.loaded, probe.inputs, blocks, lambda _output: probe.score, probe.tick)
    return cam, None


def legrad_to_the_output(
    loaded: LoadedModel,
    inputs: torch.Tensor,
    layer: str,
    blocks: object,
    target_of: Callable[[Any], Callable[[Any], torch.Tensor]],
    progress: Callable[[int, int], bool | None] | None = None,
) -> tuple[torch.Tensor, Any]:
    """LeGrad on a forward pass that runs to the model's output, for a caller with no forward
    pass of its own: the explained target is chosen from that output (the top-1 class needs
    it), so the one forward serves both.

    Args:
        loaded, inputs, layer: the model, its (1, 3, H, W) input, the block or a layer in it.
        blocks: the ``blocks`` option, as for ``legrad``.
        target_of: the model's output (in the graph) -> the target's score function (a model
            output -> (N,) scores), called once, after the forward pass.
        progress: called with (steps done, steps in all); returning True cancels.

    Returns:
        The map (1, gh, gw), as ``legrad``'s, and the model's output (in the graph).
    """
    selected = _selected_blocks(loaded.model, layer, blocks)
    tick = functools.partial(report_progress, progress)
    return _run(loaded, inputs, selected, target_of, tick, to_the_output=True)


def _run(
    loaded: LoadedModel,
    inputs: torch.Tensor,
    blocks: list[_Block],
    target_of: Callable[[Any], Callable[[Any], torch.Tensor]],
    tick: Callable[[int, int, str], None],
    *,
    to_the_output: bool = False,
) -> tuple[torch.Tensor, Any]:
    """LeGrad's forward pass with ``blocks``' hooks (stopped after the last of them unless
    ``to_the_output``), then one gradient per block of the score ``target_of(output)`` gives
    (output: None where the pass stopped early). Returns the map (1, gh, gw) and the output."""
    view = grid_view(loaded.tokens, inputs)
    if view is None:
        raise MethodError(_PICK)
    grid = view.patch_grid
    prefix = view.layout.prefix_tokens
    project = _projection(loaded.model)
    total = len(blocks) + 1
    tick(0, total, "LeGrad")
    hooks: list[ModuleHook] = []
    for index, selected in enumerate(blocks):
        last = index == len(blocks) - 1 and not to_the_output
        hooks += _hooks(selected, project, last=last)
    with loaded.lock, torch.inference_mode(False), torch.enable_grad():
        output = None
        with hooks_on(hooks), contextlib.suppress(StopForward):  # the chosen block was the last
            output = loaded.model(inputs)
        score = target_of(output)
        maps = []
        for index, selected in enumerate(blocks):
            tick(index + 1, total, "LeGrad")
            maps.append(_relevance(selected, score, prefix, grid, retain=index < len(blocks) - 1))
    return torch.stack(maps).mean(dim=0).float(), output


def block_count(model: nn.Module, layer: str, count: object) -> int:
    """How many encoder blocks ``legrad`` averages at ``layer`` with ``blocks=count`` (one
    backward pass each); a MethodError where it does not apply."""
    return len(_selected_blocks(model, layer, count))


def _selected_blocks(model: nn.Module, layer: str, count: object) -> list[_Block]:
    """The encoder blocks to average: ``count`` of them (all for None) ending at the block that
    is or holds ``layer``."""
    encoder = getattr(model, "encoder", None)
    layers = getattr(encoder, "layers", None)
    if (
        not isinstance(layers, nn.Module)
        or not isinstance(getattr(encoder, "ln", None), nn.Module)
        or not isinstance(getattr(model, "heads", None), nn.Module)
    ):
        raise MethodError(_PICK)
    named = [(f"encoder.layers.{name}", block) for name, block in layers.named_children()]
    if not named or not all(
        isinstance(getattr(block, "self_attention", None), nn.MultiheadAttention)
        for _, block in named
    ):
        raise MethodError(_PICK)
    chosen = next(
        (i for i, (name, _) in enumerate(named) if layer == name or layer.startswith(name + ".")),
        None,
    )
    if chosen is None:
        raise MethodError(
            f"legrad reads an encoder block's attention; {layer!r} is not in one: pick an "
            f"encoder block ({named[0][0]} to {named[-1][0]}) or a layer inside one"
        )
    if count is None:
        first = 0
    elif isinstance(count, bool) or not isinstance(count, numbers.Integral) or count < 1:
        raise MethodError(
            f"legrad's blocks is how many encoder blocks to average (a positive integer, or "
            f"None for all up to the layer), got {count!r}"
        )
    else:
        first = max(0, chosen + 1 - int(count))
    selected = []
    for name, block in named[first : chosen + 1]:
        attention = block.self_attention
        _check_attention(attention, name)
        selected.append(_Block(name, block, attention))
    return selected


def _check_attention(attention: nn.MultiheadAttention, name: str) -> None:
    """The attention LeGrad's replay of the output (``_replayed``) reproduces: batch-first,
    packed Q/K/V projections of one width, no added key/value tokens (TorchCAM's conditions)."""
    if (
        not attention.batch_first
        or attention.in_proj_weight is None
        or attention.kdim != attention.embed_dim
        or attention.vdim != attention.embed_dim
        or attention.bias_k is not None
        or attention.bias_v is not None
        or attention.add_zero_attn
    ):
        raise MethodError(
            f"legrad needs torchvision's ViT attention (batch-first, packed Q/K/V, no added "
            f"tokens); {name}.self_attention is not one"
        )


def _projection(model: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """TorchCAM's score projection for torchvision's ViT: a block's tokens (1, T, D) to the
    logits the model's own head gives their mean after its final norm."""
    norm, heads = model.encoder.ln, model.heads

    def project(tokens: torch.Tensor) -> torch.Tensor:
        return heads(norm(tokens.mean(dim=1)))

    return project


def _hooks(
    selected: _Block, project: Callable[[torch.Tensor], torch.Tensor], *, last: bool
) -> list[ModuleHook]:
    """Hooks on one block, recording into ``selected`` (the caller registers them for its pass):

    - a pre-hook on its attention asking for the per-head probabilities, on a fresh leaf
      copy of its input that requires grad. The copy keeps torch off the attention's fused
      fast path (taken when nothing requires grad: the model is frozen and the input is not
      tracked), which never forms the probabilities in the graph; its values are the input's,
      and d s^l / d A^l does not depend on what lies upstream of A^l.
    - a forward hook on the attention keeping the tensor the block's score is differentiated
      with respect to (``_in_graph``): ``nn.MultiheadAttention`` returns the probabilities as a
      view of its softmax output that nothing downstream uses, so the score depends on the
      softmax output, not on that view;
    - a forward hook on the last linear layer of its MLP (``_SharedRowGradient``): the score
      reads the mean of the block's tokens, which that layer's output is added to, so every
      token's gradient there is the same and one row of its backward product is enough;
    - a forward hook on the block scoring its output tokens, s^l; on the last block it stops
      the forward pass (nothing after it is needed).
    """
    attention = selected.attention

    def ask(_module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if len(args) < 3 or not (args[0] is args[1] is args[2]):
            raise MethodError(
                f"legrad needs self-attention called as (x, x, x); {selected.name} is not"
            )
        query = args[0].detach().requires_grad_()
        args = (query, query, query, *args[3:])
        kwargs = dict(kwargs)
        need = (
            args[_NEED_WEIGHTS_ARG]
            if len(args) > _NEED_WEIGHTS_ARG
            else kwargs.get("need_weights", True)
        )
        average = (
            args[_AVERAGE_ARG]
            if len(args) > _AVERAGE_ARG
            else kwargs.get("average_attn_weights", True)
        )
        selected.asked = (bool(need), bool(average))
        listed = list(args)
        if len(listed) > _NEED_WEIGHTS_ARG:
            listed[_NEED_WEIGHTS_ARG] = True
        else:
            kwargs["need_weights"] = True
        if len(listed) > _AVERAGE_ARG:
            listed[_AVERAGE_ARG] = False
        else:
            kwargs["average_attn_weights"] = False
        return tuple(listed), kwargs

    def capture(
        module: nn.MultiheadAttention, args: tuple[Any, ...], _kwargs: dict[str, Any], output: Any
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        probabilities = output[1] if isinstance(output, tuple) and len(output) == 2 else None
        if (
            not isinstance(probabilities, torch.Tensor)
            or probabilities.dim() != 4
            or not probabilities.requires_grad
        ):
            raise MethodError(
                f"{selected.name}'s attention gave no per-head probabilities in the graph "
                "(a fused attention kernel?); legrad cannot read them"
            )
        selected.layout = tuple(probabilities.shape)
        selected.probabilities, attended = _in_graph(module, args[2], output[0], probabilities)
        need, average = selected.asked
        returned = (probabilities.mean(dim=1) if average else probabilities) if need else None
        return attended, returned

    def keep(_module: nn.Module, _args: tuple[Any, ...], output: Any) -> None:
        if not isinstance(output, torch.Tensor) or output.dim() != 3:
            raise MethodError(f"{selected.name} gave no (batch, tokens, channels) tokens")
        selected.tokens = int(output.shape[1])
        selected.logits = project(output)
        if last:
            raise StopForward

    hooks = [
        ModuleHook(attention, ask, pre=True, with_kwargs=True),
        ModuleHook(attention, capture, with_kwargs=True),
    ]
    layer = _last_mlp_layer(selected.block)
    if layer is not None:
        hooks.append(ModuleHook(layer, _share_rows))
    hooks.append(ModuleHook(selected.block, keep))
    return hooks


def _last_mlp_layer(block: nn.Module) -> nn.Linear | None:
    """The block's MLP's output layer (torchvision's ``mlp.3``), None if it has no MLP."""
    mlp = getattr(block, "mlp", None)
    if not isinstance(mlp, nn.Module):
        return None
    layers = [module for module in mlp.modules() if type(module) is nn.Linear]
    return layers[-1] if layers else None


def _share_rows(module: nn.Linear, args: tuple[Any, ...], output: Any) -> torch.Tensor | None:
    """The layer's output, with ``_SharedRowGradient``'s backward (None: left as it is)."""
    inputs = args[0] if args else None
    if not isinstance(inputs, torch.Tensor) or not inputs.requires_grad or output.dim() != 3:
        return None
    # (only d s / d A is asked for: the weight's gradient never is, even where it is tracked)
    return _SharedRowGradient.apply(inputs, output.detach(), module.weight.detach())


class _SharedRowGradient(torch.autograd.Function):
    """A linear layer's output (N, T, out) whose backward, where the gradient's T rows are
    equal (every token's, as a score of the tokens' mean makes them), multiplies one row by
    the weight instead of T: the same gradient (to float rounding) at 1/T of the cost."""

    @staticmethod
    def forward(
        ctx: Any, _inputs: torch.Tensor, output: torch.Tensor, weight: torch.Tensor
    ) -> torch.Tensor:
        # (``_inputs`` only links the output to the layer's input in the graph)
        ctx.save_for_backward(weight)
        return output.view_as(output)

    @staticmethod
    def backward(ctx: Any, gradient: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (weight,) = ctx.saved_tensors
        first = gradient[:, :1]
        if torch.equal(gradient, first.expand_as(gradient)):
            shape = (*gradient.shape[:-1], weight.shape[1])
            return torch.matmul(first, weight).expand(shape), None, None
        return torch.matmul(gradient, weight), None, None


def _in_graph(
    module: nn.MultiheadAttention,
    value: torch.Tensor,
    attended: torch.Tensor,
    probabilities: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """What the block's score is differentiated with respect to, and the attention output
    (N, Q, D) to hand on to the block, which depends on it.

    The attention's output was computed from its softmax output, of which ``probabilities``
    (N, H, Q, K) is a view: where that softmax output is found in the output's graph, the
    output is kept as it is and the gradient taken with respect to it (the same numbers,
    laid out (N x H, Q, K)). Otherwise (a torch whose attention computes its output some
    other way) the output is recomputed from ``probabilities`` themselves (``_replayed``): one
    more value projection, product and output projection per block."""
    softmax = _softmax_of(probabilities, attended)
    if softmax is not None:
        return softmax, attended
    return probabilities, _replayed(module, value, probabilities)


def _softmax_of(probabilities: torch.Tensor, attended: torch.Tensor) -> torch.Tensor | None:
    """The tensor ``probabilities`` is a view of, if ``attended`` was computed from it (a few
    autograd steps downstream); None otherwise."""
    source = probabilities._base
    if (
        source is None
        or source.grad_fn is None
        or source.numel() != probabilities.numel()
        or attended.grad_fn is None
    ):
        return None
    wanted = source.grad_fn
    frontier, seen = [attended.grad_fn], set()
    for _ in range(_SOFTMAX_SEARCH_DEPTH):
        following = []
        for node in frontier:
            if node is wanted:
                return source
            if node is not None and node not in seen:
                seen.add(node)
                following.extend(parent for parent, _ in node.next_functions)
        frontier = following
    return None


def _replayed(
    module: nn.MultiheadAttention, value: torch.Tensor, probabilities: torch.Tensor
) -> torch.Tensor:
    """The attention's output (N, Q, D) recomputed from its probabilities (N, H, Q, K):
    out_proj(concat_h A_h V_h), with V the value projection of ``value`` (N, K, D), as
    ``F.multi_head_attention_forward`` computes it (no dropout: the model is in eval mode)."""
    batch, keys, width = value.shape
    heads = module.num_heads
    bias = module.in_proj_bias
    values = F.linear(
        value,
        module.in_proj_weight[2 * width :],
        None if bias is None else bias[2 * width :],
    )
    values = values.reshape(batch, keys, heads, width // heads).transpose(1, 2)
    mixed = torch.matmul(probabilities, values).transpose(1, 2)
    mixed = mixed.reshape(batch, probabilities.shape[-2], width)
    # F.linear rather than calling out_proj: no module hook of anyone else fires on the replay.
    return F.linear(mixed, module.out_proj.weight, module.out_proj.bias)


def _relevance(
    selected: _Block,
    score: Callable[[Any], torch.Tensor],
    prefix: int,
    grid: tuple[int, int],
    *,
    retain: bool,
) -> torch.Tensor:
    """E^l (1, gh, gw): ReLU(d s^l / d A^l) averaged over heads and queries, the prefix keys
    dropped, the patch keys on the grid; s^l is ``score`` of the block's logits."""
    if selected.logits is None or selected.probabilities is None:
        raise MethodError(f"legrad's forward pass did not reach {selected.name}")
    patches = grid[0] * grid[1]
    if selected.tokens != prefix + patches or selected.layout[-1] != selected.tokens:
        raise MethodError(
            f"{selected.name} has {selected.tokens} tokens, not the {prefix} prefix and "
            f"{grid[0]} x {grid[1]} patch tokens of this input"
        )
    block_score = score(selected.logits)
    if not block_score.requires_grad:  # a target that ignores the class scores
        return torch.zeros((1, *grid), device=selected.probabilities.device)
    # retain_graph for all but the last block, as TorchCAM: the blocks' graphs are built in one
    # forward pass and freed together with it.
    (gradient,) = torch.autograd.grad(
        block_score.sum(), [selected.probabilities], retain_graph=retain, allow_unused=True
    )
    if gradient is None:
        return torch.zeros((1, *grid), device=selected.probabilities.device)
    gradient = gradient.detach().reshape(selected.layout)
    relevance = gradient.float().relu().mean(dim=(1, 2))[:, prefix:]
    return relevance.reshape(relevance.shape[0], *grid)


# The method for ``pass_methods.PASS_METHODS``, with its option's default: every block from the
# first up to the chosen one (the paper's aggregation over layers).
LEGRAD: dict[str, tuple[Callable[[Probe], tuple[torch.Tensor, None]], dict[str, Any]]] = {
    "legrad": (legrad, {"blocks": None}),
}
