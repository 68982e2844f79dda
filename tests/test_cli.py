"""The command line's own messages and commands (real processes, the real bundled model): an
unknown --layer answered with the layers there are, ``hookviz layers``, and what ``--help`` says.
"""

from __future__ import annotations

import argparse
import os

import pytest

import hookviz

from .test_dataset_run import _cli, _folder


@pytest.mark.slow
@pytest.mark.parametrize("command", ["cam", "features"])
def test_an_unknown_layer_is_answered_with_the_layers_that_can_be_hooked(tmp_path, command):
    images = _folder(tmp_path / "data", count=2)
    out = tmp_path / "out"
    answer = _cli(
        command,
        str(images),
        "--model",
        "efficientnet_lite0",
        "--layer",
        "nosuch",
        "--out",
        str(out),
    )
    assert answer.returncode == 2, answer.stderr
    assert "Traceback" not in answer.stderr and answer.stdout == ""
    message = answer.stderr
    assert "unknown layer 'nosuch'" in message and "hookviz.list_layers" not in message
    table = hookviz.layer_table(hookviz.load_model("efficientnet_lite0", device="cpu"))
    listed = [line.split()[0] for line in message.splitlines() if line.startswith("  ")]
    names = [layer.name for layer in table.distinct]
    assert listed[:20] == names[:20] and f"and {len(names) - 20} more" in message
    assert "hookviz layers --model efficientnet_lite0" in message
    assert not out.exists()  # refused before anything was written


@pytest.mark.slow
def test_layers_lists_every_hookable_layer_with_its_shape_and_the_default():
    answer = _cli("layers", "--model", "efficientnet_lite0")
    assert answer.returncode == 0, answer.stderr
    table = hookviz.layer_table(hookviz.load_model("efficientnet_lite0", device="cpu"))
    lines = answer.stdout.splitlines()
    assert [line.split()[0] for line in lines] == [layer.name for layer in table.hookable]
    for line, layer in zip(lines, table.hookable, strict=True):
        channels, height, width = layer.shape
        assert line.split()[1] == f"{channels}x{height}x{width}"
    marked = [line.split()[0] for line in lines if line.endswith("(default)")]
    assert marked == [table.default]
    unknown = _cli("layers", "--model", "resnet18x")
    assert unknown.returncode == 2 and "unknown model" in unknown.stderr
    assert "Traceback" not in unknown.stderr


def test_the_help_on_workers_states_the_rule_the_code_follows(monkeypatch):
    """The default of --workers depends on the machine: the help (which is also the docs'
    command-line reference, built on another machine) says the rule, not the number on the
    machine that printed it."""
    from hookviz.cli import GPU_WORKERS, _parser, gpu_workers

    monkeypatch.setenv("COLUMNS", "400")  # (argparse's width: each option's help on one line)
    commands = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    for command in ("cam", "features"):
        text = commands.choices[command].format_help()
        line = next(line for line in text.splitlines() if "--workers" in line.split())
        assert "0, in the main process, on a CPU" in line
        assert "with a GPU, one less than the number of CPU cores, at most 8" in line
        assert f"{GPU_WORKERS} with a GPU" not in line
    # the rule the help states, on machines other than this one
    stated = {None: 1, 1: 1, 2: 1, 3: 2, 8: 7, 9: 8, 64: 8}
    assert {cores: gpu_workers(cores) for cores in stated} == stated
    assert gpu_workers(os.cpu_count()) == GPU_WORKERS  # and it is what this machine runs


def test_the_help_defaults_are_the_runs_and_the_command_line_starts_without_torch():
    """The command line names the runs' defaults without importing them (they import torch):
    they must agree, and ``hookviz --help`` (or ``hookviz app``) must not pay for torch."""
    import subprocess
    import sys

    from hookviz import cli
    from hookviz.dataset import evaluate, run
    from hookviz.insight import faithfulness

    assert (cli.MIN_SCORE, cli.MAX_BOXES) == (run.MIN_SCORE, run.MAX_BOXES)
    assert cli.EVALUATE_CHUNK_SIZE == evaluate.CHUNK_SIZE
    assert cli.METRICS == faithfulness.METRICS
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, hookviz.cli; print('torch' in sys.modules)"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert loaded == "False"
