"""The only place hookviz registers hooks.

Every hook lives for one call: it is registered inside a context manager and removed in its
``finally``, on success and on every exception, so nothing is ever left on a shared model (the
leak peers are known for). Nothing is kept on the module or on a long-lived object.

Snapshots are clones: ``output.detach()`` shares storage with the output, and a following
``ReLU(inplace=True)`` (VGG, ResNet) would overwrite it. For gradients no module backward hook is
used (they break on layers followed by in-place ops, pytorch/pytorch#61519): the forward hook
swaps the layer's output for a tensor we own, hands a clone downstream, and the caller asks
``torch.autograd.grad`` for the gradient with respect to the tensor we own.

Below a tracked layer, frozen BatchNorm / Conv2d / ReLU modules are recorded as lean nodes
(``hookviz.lean_graph``) through two process-wide module hooks that act only on the calling
thread and live, like every other hook here, for one ``capture_outputs`` block.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.nn.modules import module as module_hooks

from ..errors import LayerError
from . import lean_graph
from .grids import GridView

ForwardHook = Callable[[nn.Module, tuple[Any, ...], Any], Any]


@dataclass(frozen=True)
class ModuleHook:
    """One hook for ``hooks_on`` to put on one module for the length of its block.

    Attributes:
        module: the module it is put on.
        hook: called as PyTorch calls a forward hook, ``hook(module, args, output)``, or a
            forward pre-hook, ``hook(module, args)``; with ``with_kwargs`` the keyword arguments
            come after ``args`` (a pre-hook then returns ``(args, kwargs)`` to change them).
        pre: a forward pre-hook (runs before the module) rather than a forward hook.
        with_kwargs: the hook also gets (and a pre-hook may change) the call's keyword
            arguments.
    """

    module: nn.Module
    hook: Callable[..., Any]
    pre: bool = False
    with_kwargs: bool = False


@contextmanager
def hooks_on(hooks: Iterable[ModuleHook]) -> Iterator[None]:
    """Register ``hooks``, in order, for the block; remove every one of them on exit.

    The one place a module hook is registered: on success and on every exception the block
    leaves the modules without them (a hook that fails to register removes those before it).
    Hooks on one module run in the order given::

        with hooks_on([ModuleHook(model.layer4, keep)]):
            model(x)
    """
    handles = []
    try:
        for hook in hooks:
            register = (
                hook.module.register_forward_pre_hook
                if hook.pre
                else hook.module.register_forward_hook
            )
            handles.append(register(hook.hook, with_kwargs=hook.with_kwargs))
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextmanager
def forward_hooks(
    modules: Mapping[str, nn.Module], hook_for: Callable[[str], ForwardHook]
) -> Iterator[None]:
    """Register ``hook_for(name)`` as a forward hook on each module; remove all on exit.

    Usable on its own by anyone who wants hooks done right::

        with forward_hooks({"layer4": model.layer4}, make_hook):
            model(x)
    """
    with hooks_on(ModuleHook(module, hook_for(name)) for name, module in modules.items()):
        yield


class StopForward(Exception):
    """Raised by a hook once it has read what it needs, so nothing after its layer is
    computed; the caller catches it around the model call (``forward_hooks`` still removes
    every hook on the way out)."""


@dataclass
class Capture:
    """What the hooks of one forward pass recorded.

    Attributes:
        activations: layer name -> (N, C, h, w) detached snapshot of the layer's output.
        tracked: layer name -> the tensor standing for that output in the autograd graph (only
            when gradients were requested); pass these to ``torch.autograd.grad``.
    """

    activations: dict[str, torch.Tensor] = field(default_factory=dict)
    tracked: dict[str, torch.Tensor] = field(default_factory=dict)


class _LeanHooks:
    """The hooks behind ``lean_graph``, armed when the graph starts (at the first tracked layer,
    so nothing upstream pays for them) and removed by ``remove``.

    Two process-wide module hooks rather than two hooks on each of a few hundred modules:
    registering a hook costs tens of microseconds, which added up to 10% of a Grad-CAM call.
    They act only on this thread (the one running the hooked forward), and global hooks run
    before a module's own hooks, so a capture or an intervention on the same module sees the
    linked output. The pre-hook turns recording off for the module's op when its input is in
    the graph; the forward hook turns it back on and attaches the lean node.
    """

    def __init__(self) -> None:
        self.handles: list[Any] = []
        self.thread = threading.get_ident()
        self.rules: dict[int, lean_graph.Rule | None] = {}
        self.paused: set[int] = set()  # modules running right now with recording off

    def arm(self) -> None:
        if not self.handles:
            self.handles = [
                module_hooks.register_module_forward_pre_hook(self._pause),
                module_hooks.register_module_forward_hook(self._resume),
            ]

    def _pause(self, module: nn.Module, inputs: tuple[Any, ...]) -> None:
        if type(module) not in lean_graph.HANDLED or threading.get_ident() != self.thread:
            return
        source = inputs[0] if len(inputs) == 1 else None
        if (
            not isinstance(source, torch.Tensor)
            or not source.requires_grad
            or not torch.is_grad_enabled()
            or module._forward_pre_hooks  # they run after this one and may change the input
        ):
            return
        in_place = type(module) in lean_graph.CLAMPS and module.inplace  # (no getattr: slow)
        if in_place and (source._is_view() or source.grad_fn is None):
            # The in-place node replaces the input's history: not allowed for a leaf, and for
            # a view autograd would also have to rewrite its base's. Plain autograd handles it.
            return
        key = id(module)
        if key not in self.rules:
            self.rules[key] = lean_graph.rule_for(module)
        if self.rules[key] is not None:
            self.paused.add(key)
            torch.set_grad_enabled(False)

    def _resume(self, module: nn.Module, inputs: tuple[Any, ...], output: Any) -> Any:
        key = id(module)
        if key not in self.paused or threading.get_ident() != self.thread:
            return None
        self.paused.discard(key)
        torch.set_grad_enabled(True)
        return lean_graph.attach(module, inputs[0], output, self.rules[key])

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        if self.paused:  # a module raised between pause and resume
            self.paused.clear()
            torch.set_grad_enabled(True)


@contextmanager
def capture_outputs(
    model: nn.Module,
    layers: Sequence[str],
    *,
    track_grad: bool,
    lean: bool = True,
    grids: GridView | None = None,
) -> Iterator[Capture]:
    """Capture the outputs of ``layers`` during the forward passes run inside the block.

    Args:
        model: the network (its parameters may be frozen).
        layers: dotted module names, as in ``model.named_modules()``.
        track_grad: make each output a differentiable tensor in ``Capture.tracked``. The caller
            must run the forward with grad mode on.
        lean: with ``track_grad``, record the graph downstream of the layers with
            ``hookviz.lean_graph``'s lean nodes (frozen BatchNorm, Conv2d and ReLU-like modules
            keep only what the gradient to their input needs; same gradients, about half the
            memory at early layers). False gives plain autograd everywhere.
        grids: for a transformer, how its token outputs become (N, C, h, w) maps at this
            input size (``hookviz.core.grids``); the captured maps are then those grids.

    Raises:
        LayerError: a name is unknown, a layer's output is not a tensor, or a layer runs more
            than once per forward (its last call would silently win).
    """
    modules = resolve_modules(model, layers)
    capture = Capture()
    lean_hooks = _LeanHooks()

    def hook_for(name: str) -> ForwardHook:
        _, level = split_level(name)

        def hook(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> Any:
            if name in capture.activations:
                raise LayerError(
                    f"layer {name!r} ({type(module).__name__}) runs more than once per forward, "
                    "so its output is ambiguous; pick its parent block or a neighbouring layer"
                )
            if level is not None:
                element = level_of(name, output, level)
                replaced = tensor_hook(module, inputs, element)
                return None if replaced is None else with_level(output, level, replaced)
            return tensor_hook(module, inputs, output)

        def tensor_hook(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> Any:
            if not isinstance(output, torch.Tensor):
                raise LayerError(
                    f"layer {name!r} returns {type(output).__name__}, not a feature-map tensor"
                )
            if grids is not None and level is None:
                grid = _grid_of(name, output, grids)
                if grid is not output:
                    return _capture_tokens(name, output, grid, grids)
            if not track_grad:
                # clone: an in-place op downstream (ReLU(inplace=True)) would rewrite a view.
                capture.activations[name] = output.detach().clone()
                return None
            if output.requires_grad:
                # An earlier hooked layer already put this output in the graph: keep that link
                # so one backward serves every captured layer.
                tracked = output
                capture.activations[name] = output.detach().clone()
            else:
                # The graph starts here: nothing upstream is differentiated (frozen weights).
                tracked = output.detach().clone().requires_grad_(True)
                capture.activations[name] = tracked.detach()
                if lean:
                    lean_hooks.arm()
            capture.tracked[name] = tracked
            # Downstream gets a copy, so in-place ops after this layer cannot alter `tracked`.
            return tracked.clone()

        return hook

    def _capture_tokens(
        name: str, output: torch.Tensor, grid: torch.Tensor, view: GridView
    ) -> torch.Tensor | None:
        # A token output: the maps are its patch grid, and downstream gets the output rebuilt
        # from that grid, so the class score depends on the grid itself (see core.grids).
        if not track_grad:
            capture.activations[name] = grid.detach().clone()
            return None
        if output.requires_grad:
            tracked = grid  # already in the graph (an earlier hooked layer): keep the link
        else:
            tracked = grid.detach().clone().requires_grad_(True)
            if lean:
                lean_hooks.arm()
        capture.activations[name] = tracked.detach().clone()
        capture.tracked[name] = tracked
        return view.from_grid(tracked, output)

    try:
        with forward_hooks(modules, hook_for):
            yield capture
    finally:
        lean_hooks.remove()


@contextmanager
def observe_outputs(
    model: nn.Module,
    layers: Sequence[str],
    observe: Callable[[str, torch.Tensor], None],
    grids: GridView | None = None,
) -> Iterator[None]:
    """Call ``observe(name, output)`` for each layer's output during the block, at the moment
    it is produced (before any in-place op downstream can change it). The output is not kept.

    Raises:
        LayerError: a layer runs more than once per forward, or returns no tensor.
    """
    modules = resolve_modules(model, layers)
    seen: set[str] = set()

    def hook_for(name: str) -> ForwardHook:
        def hook(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> None:
            if name in seen:
                raise LayerError(f"layer {name!r} runs more than once per forward")
            level = split_level(name)[1]
            if level is not None:
                output = level_of(name, output, level)
            if not isinstance(output, torch.Tensor):
                raise LayerError(f"layer {name!r} returns {type(output).__name__}, not a tensor")
            seen.add(name)
            with torch.no_grad():
                shown = output if grids is None else _grid_of(name, output, grids)
                observe(name, shown.detach())

        return hook

    with forward_hooks(modules, hook_for):
        yield


@contextmanager
def replace_output(
    model: nn.Module,
    layer: str,
    change: Callable[[torch.Tensor], torch.Tensor],
    grids: GridView | None = None,
) -> Iterator[None]:
    """During the block, ``layer``'s output is replaced by ``change(output)`` (a new tensor:
    the module and its weights are never altered). With ``grids`` (a transformer), ``change``
    gets and returns the (N, C, h, w) grid of a token output."""
    modules = resolve_modules(model, [layer])

    def hook_for(name: str) -> ForwardHook:
        def hook(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> Any:
            level = split_level(name)[1]
            if level is not None:
                return with_level(output, level, change(level_of(name, output, level)))
            if not isinstance(output, torch.Tensor):
                raise LayerError(f"layer {name!r} returns {type(output).__name__}, not a tensor")
            if grids is not None:
                return grids.from_grid(change(_grid_of(name, output, grids)), output)
            return change(output)

        return hook

    with forward_hooks(modules, hook_for):
        yield


@dataclass(frozen=True)
class ModuleCall:
    """One module call seen while tracing.

    Attributes:
        name: the module's dotted name.
        type_name: its class name.
        shape: its output's shape (None if the output is not a 4-D tensor).
        same_as_previous: its output is the very tensor the previous call returned, unchanged
            since (a container returning its last child's output, an ``Identity``): the two
            names hook the same values.
        same_as: for a level (``NAME:KEY``), the earlier level that is the very same tensor.
    """

    name: str
    type_name: str
    shape: tuple[int, ...] | None
    same_as_previous: bool = False
    same_as: str | None = None


@contextmanager
def record_calls(model: nn.Module, grids: GridView | None = None) -> Iterator[list[ModuleCall]]:
    """Record every submodule call, in the order outputs are produced, during the block (with
    ``grids``, a transformer's token outputs count as maps, with their grid's shape)."""
    calls: list[ModuleCall] = []
    modules = {name: module for name, module in model.named_modules() if name}
    # Only the last output is kept (a reference and its version), so tracing costs no memory.
    # The version matters: an in-place ReLU returns the same tensor object with new values.
    last: list[Any] = [None, -1]
    # every map output so far, by id, held weakly (tracing keeps no activation alive)
    seen_maps: dict[int, tuple[str, weakref.ref, int]] = {}

    def hook_for(name: str) -> ForwardHook:
        def hook(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> None:
            grid = None
            if isinstance(output, torch.Tensor):
                grid = grids.to_grid(output) if grids is not None else output
            is_map = grid is not None and grid.dim() == 4
            shape = tuple(grid.shape) if is_map else None
            same = is_map and output is last[0] and output._version == last[1]
            calls.append(ModuleCall(name, type(module).__name__, shape, bool(same)))
            if isinstance(output, torch.Tensor):
                last[0], last[1] = output, output._version
                if is_map:
                    seen_maps[id(output)] = (name, weakref.ref(output), output._version)
            else:
                last[0], last[1] = None, -1
            # a dict or tuple of maps (a feature pyramid's levels): each level is a layer too,
            # ``NAME:KEY``; a level that is a tensor an earlier call output as it is (a
            # backbone returning its pyramid's dict, a stage's output in a dict) names it
            for key, element in _levels(output):
                level = f"{name}:{key}"
                earlier = seen_maps.get(id(element))
                same_as = None
                if earlier is not None and earlier[1]() is element:
                    same_as = earlier[0] if earlier[2] == element._version else None
                shape = tuple(element.shape)
                calls.append(ModuleCall(level, type(module).__name__, shape, False, same_as))
                if same_as is None:
                    seen_maps[id(element)] = (level, weakref.ref(element), element._version)

        return hook

    try:
        with forward_hooks(modules, hook_for):
            yield calls
    finally:
        last.clear()
        seen_maps.clear()


def _grid_of(name: str, output: torch.Tensor, grids: GridView) -> torch.Tensor:
    grid = grids.to_grid(output)
    if grid is None or grid.dim() != 4:
        raise LayerError(
            f"layer {name!r} outputs {tuple(output.shape)}: not a map of the image (its tokens "
            f"do not form the {grids.patch_grid[0]}x{grids.patch_grid[1]} patch grid)"
        )
    return grid


def resolve_modules(model: nn.Module, names: Sequence[str]) -> dict[str, nn.Module]:
    """Map dotted names to submodules, with a helpful error for a name that does not exist."""
    found = dict(model.named_modules())
    resolved = {}
    for name in names:
        module_name = split_level(name)[0]
        if not name or module_name not in found:
            import difflib

            close = difflib.get_close_matches(name, [n for n in found if n], n=3)
            hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
            raise LayerError(
                f"layer {name!r} not found in {type(model).__name__}{hint} "
                "See hookviz.list_layers(loaded) for the layers you can pick."
            )
        resolved[name] = found[module_name]
    return resolved


def split_level(name: str) -> tuple[str, str | None]:
    """``"backbone.fpn:0"`` -> (``"backbone.fpn"``, ``"0"``): a module and one level of its
    dict or tuple output; a plain module name -> (the name, None)."""
    module, colon, key = name.partition(":")
    return (module, key) if colon else (name, None)


def level_of(name: str, output: Any, key: str) -> torch.Tensor:
    """The level ``key`` of a module's dict or tuple output (a LayerError if it has none)."""
    try:
        element = output[int(key)] if isinstance(output, (tuple, list)) else output[key]
    except (KeyError, IndexError, ValueError, TypeError):
        raise LayerError(
            f"layer {name!r}: the module's output ({type(output).__name__}) has no level {key!r}"
        ) from None
    return element


def with_level(output: Any, key: str, value: torch.Tensor) -> Any:
    """The same container as ``output`` with level ``key`` replaced by ``value`` (a new
    container: the module's own output object is left as it is)."""
    if isinstance(output, Mapping):
        changed = type(output)(output) if type(output) is not dict else dict(output)
        changed[key] = value
        return changed
    items = list(output)
    items[int(key)] = value
    return type(output)(items) if isinstance(output, tuple) else items


def _levels(output: Any) -> list[tuple[str, torch.Tensor]]:
    """The (key, map) levels of a dict, tuple or list output holding 4-D tensors."""
    if isinstance(output, Mapping):
        pairs = [(str(key), value) for key, value in output.items()]
    elif isinstance(output, (tuple, list)):
        pairs = [(str(index), value) for index, value in enumerate(output)]
    else:
        return []
    return [
        (key, value) for key, value in pairs if isinstance(value, torch.Tensor) and value.dim() == 4
    ]


def count_hooks(model: nn.Module) -> int:
    """Total forward, forward-pre and backward hooks on ``model`` and its submodules, plus the
    process-wide module hooks (they act on every model; hookviz's lean graph uses two)."""
    total = len(module_hooks._global_forward_hooks) + len(module_hooks._global_forward_pre_hooks)
    total += len(module_hooks._global_backward_hooks)
    for module in model.modules():
        total += len(module._forward_hooks) + len(module._forward_pre_hooks)
        total += len(module._backward_hooks) + len(module._backward_pre_hooks)
    return total
