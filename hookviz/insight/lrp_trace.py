"""Putting LRP's rules (``lrp_rules``) into a model's forward, whatever its modules.

``RelevanceTrace`` is a torch function mode: during one forward pass it sees every torch
operation the model runs (functional calls included, in any module structure) and replaces the
ones LRP has a rule for by the rule's autograd function, with the same output. The model and
its parameters are never changed, so a model shared with other callers stays as it was.

- Convolutions and dense layers get the composite's rules; the first one met gets the first
  layer's (``flat`` in the ``*_flat`` composites).
- A BatchNorm (in evaluation) that directly follows one of them is merged into it for the
  rule, as zennit's ``SequentialMergeBatchNorm`` canonizer does, here found by the data's flow
  rather than by the modules' order; any other normalisation passes relevance through.
- The sum of two tensors (a residual connection) shares relevance between its terms, as
  zennit's ``ResNetCanonizer`` makes it; average pooling and means share it by their inputs.
- Activations pass relevance through; a product of a signal and a gate gives it all to the
  signal; a scaling by a constant passes it through.
- Attention (a softmax, a product of two activations, scaled dot-product attention) has no
  rule here: the trace raises ``UnsupportedOperation`` naming it.

Everything else (max pooling, concatenation, reshaping, dropout in evaluation) is left to
autograd, which routes relevance as it routes a gradient.
"""

from __future__ import annotations

import functools
import numbers
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from .lrp_rules import GateRule, LinearLayer, LinearRule, NormRule, PassRule, SumRule

# name -> (the first layer's rule or None, the convolutions', the dense layers')
COMPOSITES = {
    "epsilon": (None, "epsilon", "epsilon"),
    "epsilon_plus": (None, "zplus", "epsilon"),
    "epsilon_plus_flat": ("flat", "zplus", "epsilon"),
    "epsilon_alpha2_beta1": (None, "alpha2beta1", "epsilon"),
    "epsilon_alpha2_beta1_flat": ("flat", "alpha2beta1", "epsilon"),
}

_CONVOLUTIONS = {"conv1d", "conv2d", "conv3d"}
_PASSED = {
    "relu", "relu6", "hardtanh", "silu", "gelu", "hardswish", "elu", "selu", "celu",
    "leaky_relu", "prelu", "mish", "softplus", "sigmoid", "hardsigmoid", "tanh", "rrelu",
    "batch_norm", "layer_norm", "group_norm", "instance_norm", "local_response_norm",
}  # fmt: skip
_POOLED = {
    "avg_pool1d", "avg_pool2d", "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d",
    "adaptive_avg_pool3d", "mean",
}  # fmt: skip
_ADDS = {"add", "__add__", "__radd__", "__iadd__", "add_"}
_PRODUCTS = {"mul", "__mul__", "__rmul__", "__imul__", "mul_"}
_DIVISIONS = {"div", "__truediv__", "truediv", "__itruediv__", "div_"}
_ATTENTION = {
    "scaled_dot_product_attention", "multi_head_attention_forward", "softmax", "log_softmax",
    "matmul", "bmm", "baddbmm", "einsum", "__matmul__",
}  # fmt: skip


class UnsupportedOperation(RuntimeError):
    """An operation LRP has no rule for here (attention); its name is ``operation``."""

    def __init__(self, operation: str) -> None:
        super().__init__(operation)
        self.operation = operation


class RelevanceTrace(TorchFunctionMode):
    """The mode of one relevance forward pass with ``composite``'s rules."""

    def __init__(self, composite: str) -> None:
        super().__init__()
        self.first_rule, self.conv_rule, self.dense_rule = COMPOSITES[composite]
        self.linear_layers = 0
        # the outputs of the linear layers by id, with their layers (the tensors are kept so
        # that no id is reused during the pass)
        self._outputs: dict[int, tuple[torch.Tensor, LinearLayer]] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        name = getattr(func, "__name__", "")
        if name in _CONVOLUTIONS or name == "linear":
            return self._linear(func, name, args, kwargs)
        if name in _PASSED or name.rstrip("_") in _PASSED:
            return self._passed(func, name, args, kwargs)
        if name in _POOLED and _is_tensor(args[0]) and args[0].dim() > 1:
            operation = functools.partial(_call_with_input, func, args[1:], kwargs)
            return NormRule.apply(args[0], operation)
        if name in _ADDS and _two_activations(args) and "alpha" not in kwargs:
            return _in_place(name, args[0], SumRule.apply(args[0], args[1]))
        if name in _PRODUCTS and len(args) == 2:
            return _in_place(name, args[0], self._product(func, args, kwargs))
        if name in _DIVISIONS and len(args) == 2 and _is_tensor(args[0]) and _constant(args[1]):
            return _in_place(name, args[0], PassRule.apply(args[0], func(*args, **kwargs)))
        if name in _ATTENTION:
            raise UnsupportedOperation(name)
        return func(*args, **kwargs)

    def _linear(self, func, name: str, args: tuple, kwargs: dict) -> torch.Tensor:
        x, weight = _argument(args, kwargs, 0, "input"), _argument(args, kwargs, 1, "weight")
        bias = _argument(args, kwargs, 2, "bias", None)
        rest = args[3:]
        options = {k: v for k, v in kwargs.items() if k not in ("input", "weight", "bias")}

        def call(inputs, w, b):
            return func(inputs, w, b, *rest, **options)

        if self.linear_layers == 0 and self.first_rule is not None:
            rule = self.first_rule
        else:
            rule = self.conv_rule if name in _CONVOLUTIONS else self.dense_rule
        self.linear_layers += 1
        layer = LinearLayer(call=call, weight=weight, bias=bias, rule=rule)
        output = LinearRule.apply(x, layer)
        self._outputs[id(output)] = (output, layer)
        return output

    def _passed(self, func, name: str, args: tuple, kwargs: dict) -> torch.Tensor:
        x = args[0] if args else kwargs.get("input")
        if name == "batch_norm":
            self._merge(args, kwargs)
        if kwargs.get("inplace"):
            kwargs["inplace"] = False  # (a new tensor: the rule's output stands for it)
        in_place = name.endswith("_") and not name.endswith("__")
        plain = getattr(torch, name.rstrip("_")) if in_place else func
        output = PassRule.apply(x, plain(*args, **kwargs))
        return _in_place(name, x, output)

    def _merge(self, args: tuple, kwargs: dict) -> None:
        """Merge a BatchNorm in evaluation into the linear layer whose output it takes."""
        x = _argument(args, kwargs, 0, "input")
        if _argument(args, kwargs, 5, "training", False):
            return
        known = self._outputs.get(id(x))
        if known is None or known[0] is not x or known[1].merged is not None:
            return
        mean = _argument(args, kwargs, 1, "running_mean")
        variance = _argument(args, kwargs, 2, "running_var")
        gamma = _argument(args, kwargs, 3, "weight", None)
        beta = _argument(args, kwargs, 4, "bias", None)
        eps = _argument(args, kwargs, 7, "eps", 1e-5)
        if mean is None or variance is None:
            return
        scale = (variance.detach() + eps).rsqrt()
        if gamma is not None:
            scale = scale * gamma.detach()
        shift = -mean.detach() * scale
        if beta is not None:
            shift = shift + beta.detach()
        known[1].merged = (scale, shift)

    def _product(self, func, args: tuple, kwargs: dict) -> torch.Tensor:
        a, b = args
        if _is_tensor(a) and _is_tensor(b) and a.numel() > 1 and b.numel() > 1:
            return GateRule.apply(a, b)
        signal = a if _is_tensor(a) and (not _is_tensor(b) or a.numel() >= b.numel()) else b
        if not _is_tensor(signal):
            return func(*args, **kwargs)
        return PassRule.apply(signal, func(*args, **kwargs))


def _call_with_input(func, rest: tuple, kwargs: dict, x: torch.Tensor) -> torch.Tensor:
    return func(x, *rest, **kwargs)


def _argument(args: tuple, kwargs: dict, position: int, name: str, default: Any = ...) -> Any:
    if len(args) > position:
        return args[position]
    if name in kwargs:
        return kwargs[name]
    if default is ...:
        raise TypeError(f"missing argument {name!r}")
    return default


def _is_tensor(value: object) -> bool:
    return isinstance(value, torch.Tensor)


def _constant(value: object) -> bool:
    """A number, or a tensor of one element (a scale, not another activation)."""
    return isinstance(value, numbers.Number) or (_is_tensor(value) and value.numel() == 1)


def _two_activations(args: tuple) -> bool:
    """Two tensors of more than one element each: a sum relevance is shared between."""
    return len(args) == 2 and all(
        _is_tensor(a) and a.numel() > 1 and a.is_floating_point() for a in args
    )


def _in_place(name: str, target: torch.Tensor, result: torch.Tensor) -> torch.Tensor:
    """``result`` as the operation ``name`` returns it: an in-place one (``add_``, ``+=``)
    writes it into ``target`` (autograd then routes through the rule's function) and returns
    ``target``, whether or not the caller uses what it returns."""
    if name.startswith("__i") or (name.endswith("_") and not name.endswith("__")):
        return target.copy_(result)
    return result
