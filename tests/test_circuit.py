"""A class's circuit between two layers: its per-image relevances are ``hookviz.relevance``'s,
its links are zennit's relevance at the lower layer with only one upper channel's relevance let
through (the reference, as Concept Relevance Propagation conditions it), the links of every
upper channel add up to the lower layer's whole, and the folder run (``hookviz circuit``)
gives the library's circuit, resumes, and refuses what it cannot make. Real models, random
weights."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from zennit.attribution import Gradient

import hookviz
from hookviz.dataset import RunError, open_circuit, run_circuit

from .test_relevance import CANONIZERS, ZENNIT, _with_batch_norm_statistics

UPPER, LOWER = "layer4", "layer3"


@pytest.fixture(scope="module")
def resnet18_float64() -> hookviz.LoadedModel:
    torch.manual_seed(0)
    loaded = hookviz.load_model("resnet18", pretrained=False, device="cpu")
    loaded.model.double()
    return _with_batch_norm_statistics(loaded)


def _zennit_at_lower(loaded, composite, x, index, upper_channel=None) -> np.ndarray:
    """zennit's relevance of class ``index`` reaching each channel of ``LOWER`` (through
    ``UPPER``; with ``upper_channel``, only that channel's relevance let down)."""
    kept = {}

    def keep_lower(module, inputs, output):
        kept["lower"] = output

    def mask_upper(module, inputs, output):
        if upper_channel is not None:
            mask = torch.zeros_like(output)
            mask[:, upper_channel] = 1
            output.register_hook(lambda grad: grad * mask)

    model = loaded.model
    hooks = [
        model.layer3.register_forward_hook(keep_lower),
        model.layer4.register_forward_hook(mask_upper),
    ]
    try:
        with Gradient(model, ZENNIT[composite]([CANONIZERS["resnet18"]()])):
            x = x.clone().requires_grad_(True)
            logits = model(x)
            start = torch.zeros_like(logits)
            start[0, index] = logits[0, index].detach()
            (found,) = torch.autograd.grad(logits, kept["lower"], grad_outputs=start)
    finally:
        for hook in hooks:
            hook.remove()
    return found.sum(dim=(2, 3))[0].detach().numpy()


def _pictures(count: int, seed: int = 0) -> list:
    from PIL import Image

    generator = np.random.default_rng(seed)
    return [
        Image.fromarray(generator.integers(0, 255, (48 + 8 * i, 64, 3), dtype=np.uint8))
        for i in range(count)
    ]


def test_the_links_are_zennits_conditional_relevance(resnet18_float64) -> None:
    loaded, composite = resnet18_float64, "epsilon_plus_flat"
    images = [torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(s)).double()
              for s in (1, 2)]  # fmt: skip
    found = hookviz.circuit(loaded, images, 7, layers=(UPPER, LOWER), top=3, composite=composite)
    assert (found.lower, found.upper, found.class_index) == (LOWER, UPPER, 7)
    assert found.images == 2 and len(found.upper_channels) == 3
    assert found.links_by_image.shape == (2, 3, 256)
    for number, x in enumerate(images):
        whole = _zennit_at_lower(loaded, composite, x, 7)
        scale = np.abs(whole).max()
        np.testing.assert_allclose(found.lower_by_image[number], whole, rtol=0, atol=1e-6 * scale)
        for row, channel in enumerate(found.upper_channels):
            reference = _zennit_at_lower(loaded, composite, x, 7, channel)
            np.testing.assert_allclose(
                found.links_by_image[number, row], reference, rtol=0, atol=1e-6 * scale
            )
    # the upper channels followed are the most relevant on average, most first
    assert list(found.upper_channels) == [c for c, _ in found.top_upper(3)]
    mean = found.upper_by_image.mean(axis=0)
    assert found.upper_relevance[found.upper_channels[0]] == pytest.approx(mean.max())


class _TwoStages(nn.Module):
    """Two conv stages (with a residual sum), and a side branch that feeds neither."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Conv2d(3, 6, 3, padding=1)
        self.second = nn.Conv2d(6, 5, 3, padding=1)
        self.side = nn.Conv2d(3, 5, 1)
        self.head = nn.Linear(5, 4)

    def forward(self, x):
        y = F.relu(self.first(x))
        z = F.relu(self.second(y)) + self.side(x)
        return self.head(torch.flatten(F.adaptive_avg_pool2d(z, 1), 1))


@pytest.fixture(scope="module")
def two_stages() -> hookviz.LoadedModel:
    torch.manual_seed(2)
    return hookviz.wrap_model(_TwoStages(), name="two stages", num_classes=4)


def test_every_upper_channels_links_add_up_to_the_lower_layers_relevance(two_stages) -> None:
    images = _pictures(3)
    found = hookviz.circuit(two_stages, images, 1, layers=("first", "second"), top=5)
    assert found.links_by_image.shape == (3, 5, 6)
    np.testing.assert_allclose(found.links_by_image.sum(axis=1), found.lower_by_image,
                               rtol=1e-5, atol=1e-7)  # fmt: skip
    for number, image in enumerate(images):
        upper = hookviz.relevance(two_stages, image, 1, layer="second")
        np.testing.assert_allclose(found.upper_by_image[number], upper.layer_relevance,
                                   rtol=1e-5, atol=1e-8)  # fmt: skip
        # what reaches ``first`` through ``second``: all of it (the side branch skips first)
        lower = hookviz.relevance(two_stages, image, 1, layer="first")
        np.testing.assert_allclose(found.lower_by_image[number], lower.layer_relevance,
                                   rtol=1e-5, atol=1e-8)  # fmt: skip
    # the table: every link once, strongest first, share of its upper channel's relevance
    table = found.table()
    assert len(table) == 5 * 6
    values = [row["relevance"] for row in table]
    assert values == sorted(values, reverse=True)
    strongest = found.strongest_links(1)[0]
    assert strongest.relevance == pytest.approx(float(found.links.max()), rel=1e-5)
    assert strongest.share == pytest.approx(
        strongest.relevance / found.upper_relevance[strongest.upper], rel=1e-5
    )
    assert found.link(strongest.upper, strongest.lower) == strongest
    # an image's examples: the images where the channel carries the most
    column = found.lower_by_image[:, 2]
    assert [i for i, _ in found.examples("first", 2, 2)] == list(np.argsort(-column)[:2])


def test_a_circuit_refuses_what_it_cannot_make(two_stages) -> None:
    images = _pictures(1)
    for layers, message in (
        (("first", "first"), "two different layers"),
        (("first",), "joins two layers"),
        (("side", "second"), "does not feed"),
        (("side", "first"), "does not feed"),
    ):
        with pytest.raises(hookviz.RelevanceError, match=message):
            hookviz.circuit(two_stages, images, 0, layers=layers)
    with pytest.raises(hookviz.LayerError):
        hookviz.circuit(two_stages, images, 0, layers=("first", "nope"))
    resnet = hookviz.load_model("resnet18", pretrained=False, device="cpu")
    with pytest.raises(hookviz.RelevanceError, match="give the same feature map"):
        hookviz.circuit(resnet, images, 0, layers=("layer4.1", "layer4"))
    with pytest.raises(hookviz.RelevanceError, match="out of range"):
        hookviz.circuit(two_stages, images, 9, layers=("first", "second"))
    with pytest.raises(hookviz.RelevanceError, match="no class named"):
        hookviz.circuit(two_stages, images, "zebra", layers=("first", "second"))
    with pytest.raises(hookviz.RelevanceError, match="at least one image"):
        hookviz.circuit(two_stages, [], 0, layers=("first", "second"))
    with pytest.raises(hookviz.RelevanceError, match="top must be at least 1"):
        hookviz.circuit(two_stages, images, 0, layers=("first", "second"), top=0)


def _folder(root: Path) -> Path:
    root.mkdir(parents=True)
    for number, picture in enumerate(_pictures(5, seed=3)):
        picture.save(root / f"photo{number}.png")
    (root / "broken.jpg").write_bytes(b"\xff\xd8 not a jpeg")
    return root


@pytest.mark.slow
def test_a_folder_run_gives_the_librarys_circuit_and_resumes(tmp_path, resnet18) -> None:
    images = _folder(tmp_path / "data")
    out = tmp_path / "circuit"
    summary = run_circuit(resnet18, [images], out, target="goldfish", layers=("layer3", "layer2"),
                          top=3, chunk_size=2, batch_size=2)  # fmt: skip
    assert (summary.rows, summary.ok) == (6, 5)
    assert [Path(path).name for path, _ in summary.errors] == ["broken.jpg"]
    found = open_circuit(out)
    assert (found.lower, found.upper, found.class_name) == ("layer2", "layer3", "goldfish")
    ok = sorted(images.glob("*.png"))  # (paths: circuit reads them as load_image does)
    alone = hookviz.circuit(resnet18, ok, "goldfish", layers=("layer2", "layer3"), top=3)
    assert alone.sources == tuple(str(path) for path in ok)
    assert found.upper_channels == alone.upper_channels
    rows = [i for i, source in enumerate(found.sources) if source.endswith(".png")]
    assert np.isnan(found.upper_by_image[[i for i in range(6) if i not in rows]]).all()
    for mine, theirs in ((found.upper_by_image, alone.upper_by_image),
                         (found.lower_by_image, alone.lower_by_image),
                         (found.links_by_image, alone.links_by_image)):  # fmt: skip
        np.testing.assert_allclose(mine[rows], theirs, rtol=0, atol=1e-4 * np.abs(theirs).max())
    # the tables: channels of each layer, every link, a summary with each channel's examples
    with (out / "links.csv").open() as file:
        links = list(csv.DictReader(file))
    assert len(links) == 3 * 128
    for written_row, row in zip(links, found.table(), strict=True):
        assert int(written_row["upper_channel"]) == row["upper_channel"]
        assert int(written_row["lower_channel"]) == row["lower_channel"]
        assert float(written_row["relevance"]) == pytest.approx(row["relevance"], rel=1e-5)
    with (out / "channels.csv").open() as file:
        channels = list(csv.DictReader(file))
    assert {row["layer"] for row in channels} == {"layer2", "layer3"} and len(channels) == 384
    written = json.loads((out / "circuit.json").read_text())
    assert [c["channel"] for c in written["upper_channels"]] == list(found.upper_channels)
    first = written["lower_channels"][0]
    assert first["examples"][0]["row"] == found.examples("layer2", first["channel"], 1)[0][0]
    # interrupted in the links run: the same call finishes it, with the same circuit
    (out / "links" / "cams" / "00001.npz").unlink()
    (out / "circuit.json").unlink()
    again = run_circuit(resnet18, [images], out, target="goldfish", layers=("layer3", "layer2"),
                        top=3, chunk_size=2, batch_size=2)  # fmt: skip
    assert again.chunks_done_before == 3 + 2
    np.testing.assert_array_equal(open_circuit(out).links_by_image, found.links_by_image)
    assert json.loads((out / "circuit.json").read_text()) == written
    # another class in the same folder is another run
    with pytest.raises(RunError, match="holds another run"):
        run_circuit(resnet18, [images], out, target="tench", layers=("layer3", "layer2"), top=3,
                    chunk_size=2)  # fmt: skip


def test_a_folder_run_refuses_before_reading_an_image(tmp_path, resnet18, detector) -> None:
    images = _folder(tmp_path / "data")
    for options, message in (
        ({"target": "zebra crossing"}, "no class named"),
        ({"layers": ("layer3",)}, "joins two layers"),
        ({"composite": "lrp"}, "unknown composite"),
        ({"top": 0}, "top must be at least 1"),
    ):
        arguments = {"target": "goldfish", "layers": ("layer2", "layer3")} | options
        with pytest.raises(RunError, match=message):
            run_circuit(resnet18, [images], tmp_path / "out", **arguments)
        assert not (tmp_path / "out").exists()
    with pytest.raises(RunError, match="detector"):
        run_circuit(detector, [images], tmp_path / "out", target=1, layers=("a", "b"))
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(RunError, match="holds no hookviz circuit"):
        run_circuit(resnet18, [images], tmp_path / "other", target=1, layers=("layer2", "layer3"))
    with pytest.raises(RunError, match="no hookviz circuit"):
        open_circuit(tmp_path / "other")


@pytest.mark.slow
def test_the_command_line(tmp_path) -> None:
    from hookviz import cli
    from hookviz.insight.circuit import DEFAULT_TOP

    assert cli.CIRCUIT_TOP == DEFAULT_TOP
    images = _folder(tmp_path / "data")

    def hookviz_run(*arguments: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "hookviz", "circuit", str(images), "--model", "resnet18",
             "--weights", "untrained", "--quiet", *arguments],
            capture_output=True, text=True, cwd=tmp_path, timeout=600,
        )  # fmt: skip

    done = hookviz_run("--class", "tench", "--layers", "layer3,layer4", "--top", "2",
                       "--out", "out")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "The circuit of 'tench' (class 0) over 5 images, layer3 -> layer4" in done.stdout
    assert "layer4[" in done.stdout and "links.csv" in done.stdout
    assert len(open_circuit(tmp_path / "out").upper_channels) == 2
    refused = hookviz_run("--class", "tench", "--layers", "layer3,layer9", "--out", "bad")
    assert refused.returncode == 2
    assert "unknown layer 'layer9'" in refused.stderr and "layer4" in refused.stderr
    refused = hookviz_run("--class", "no such thing", "--layers", "layer3,layer4", "--out", "bad")
    assert refused.returncode == 2 and "no class named 'no such thing'" in refused.stderr
    assert not (tmp_path / "bad").exists()
