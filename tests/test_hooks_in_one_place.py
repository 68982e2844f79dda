"""Every hook hookviz registers goes through ``hookviz/core/hooks.py``: one lifetime rule (a hook
lives for one block and its ``finally`` removes it) written once. The scan reads the library's
sources, so a new ``register_*hook`` call elsewhere fails here with its file and line."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch
from torch import nn

from hookviz.core.hooks import ModuleHook, count_hooks, hooks_on

LIBRARY = Path(__file__).resolve().parents[1] / "hookviz"
HOOKS_MODULE = LIBRARY / "core" / "hooks.py"
# register_forward_hook, register_forward_pre_hook, register_full_backward_hook, a tensor's
# register_hook, torch's process-wide register_module_forward_hook, ...
REGISTERS = re.compile(r"register_\w*hook")


def _registrations(path: Path) -> list[tuple[int, str]]:
    """(line, name) of every use of a ``register_*hook`` function or method in ``path``: a
    call, or the function taken to be called later (``register = module.register_..._hook``)
    or imported."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.ImportFrom):
            names = [alias.name for alias in node.names]
        else:
            continue
        found += [(node.lineno, name) for name in names if REGISTERS.fullmatch(name)]
    return sorted(found)


def test_hooks_are_registered_only_in_hooks_py():
    outside = [
        f"{path.relative_to(LIBRARY.parent)}:{line}: {name}"
        for path in sorted(LIBRARY.rglob("*.py"))
        if path != HOOKS_MODULE
        for line, name in _registrations(path)
    ]
    assert not outside, (
        "hooks registered outside hookviz/core/hooks.py (use hooks_on, forward_hooks or "
        "another of its context managers, so the hook lives for one block):\n" + "\n".join(outside)
    )


def test_the_scan_sees_the_registrations_of_hooks_py():
    names = {name for _, name in _registrations(HOOKS_MODULE)}
    assert {"register_forward_hook", "register_forward_pre_hook"} <= names
    assert "register_module_forward_hook" in names  # the lean graph's process-wide pair


def test_hooks_on_runs_pre_hooks_with_kwargs_in_order_and_removes_all_on_an_error():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    calls: list[str] = []

    def first(_module, args, kwargs):
        calls.append("pre")
        return (args[0] * 0,), kwargs

    def second(_module, _args, _output):
        calls.append("second")

    def third(_module, _args, output):
        calls.append("third")
        raise RuntimeError("stop")

    hooks = [
        ModuleHook(model[0], first, pre=True, with_kwargs=True),
        ModuleHook(model[0], second),
        ModuleHook(model[0], third),
    ]
    before = count_hooks(model)
    with pytest.raises(RuntimeError, match="stop"), hooks_on(hooks):
        assert count_hooks(model) == before + 3
        model(torch.ones(1, 2))
    assert calls == ["pre", "second", "third"]
    assert count_hooks(model) == before
    with hooks_on([ModuleHook(model[0], first, pre=True, with_kwargs=True)]):
        hooked = model[0](torch.ones(1, 2))
    assert torch.equal(hooked, model[0](torch.zeros(1, 2)))  # the input the pre-hook gave
    assert not torch.equal(model[0](torch.ones(1, 2)), hooked)  # and the pre-hook is gone
