"""Classes a newcomer reads whole stay within the size they were cut down to: a class that grows
past its bound is doing a second job, which belongs in a module of its own."""

from __future__ import annotations

import inspect

import pytest

from hookviz.core.forward_pass import ForwardPass

# The most lines each class's source may take (its docstring and methods included).
BOUNDS = {ForwardPass: 300}


@pytest.mark.parametrize("kind", list(BOUNDS), ids=lambda kind: kind.__qualname__)
def test_a_class_stays_within_its_bound(kind):
    lines, _ = inspect.getsourcelines(kind)
    assert len(lines) <= BOUNDS[kind], (
        f"{kind.__qualname__} is {len(lines)} lines, over its {BOUNDS[kind]}: move a job "
        "it does into a module of its own (as results_memo.py, cost_estimates.py)"
    )
