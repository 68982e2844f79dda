"""Layer-wise relevance propagation: hookviz.relevance against zennit on the same model, input
and composite.

    python bench/bench_relevance.py            # about 2 minutes on a 2-core CPU
    python bench/bench_relevance.py --size 160 --repeats 3

For a random-weight torchvision ResNet-18 and VGG-16 (zennit's ResNet and VGG canonizers), a
(1, 3, size, size) input and each composite: the median of ``--repeats`` calls of
``hookviz.relevance`` (a forward pass with the rules, the target resolved, one backward) and of
zennit's ``Gradient`` attributor (its composite registered, one forward and one backward,
removed). Both start from the top class's score. Torch runs on one thread (``--threads``): on a
shared machine two threads wait on each other at every op. The ratio is what to read; the
seconds move with the machine.
"""

from __future__ import annotations

import argparse
import functools

import torch

# (run as a script: its own folder, bench/, is the first on the path)
from timing import median_seconds
from zennit.attribution import Gradient
from zennit.composites import COMPOSITES as ZENNIT_COMPOSITES
from zennit.composites import LayerMapComposite, layer_map_base
from zennit.rules import Epsilon
from zennit.torchvision import ResNetCanonizer, VGGCanonizer
from zennit.types import Convolution

import hookviz

MODELS = {"resnet18": ResNetCanonizer, "vgg16_bn": VGGCanonizer}


def _zennit_composite(name: str, canonizer):
    if name == "epsilon":  # (zennit names no composite so: the epsilon rule everywhere)
        rules = [(Convolution, Epsilon()), (torch.nn.Linear, Epsilon())]
        return LayerMapComposite(layer_map_base() + rules, canonizers=[canonizer()])
    return ZENNIT_COMPOSITES[name](canonizers=[canonizer()])


def _rows(model_name: str, canonizer, x: torch.Tensor, repeats: int) -> None:
    """One model's line per composite: hookviz's median time, zennit's and their ratio."""
    torch.manual_seed(0)
    loaded = hookviz.load_model(model_name, pretrained=False, device="cpu")
    with torch.no_grad():
        logits = loaded.model(x)
    start = torch.zeros_like(logits)
    index = int(logits.argmax())
    start[0, index] = logits[0, index]
    for composite in hookviz.RELEVANCE_COMPOSITES:
        ours = median_seconds(functools.partial(
            hookviz.relevance, loaded, x, index, composite=composite
        ), repeats)  # fmt: skip
        reference = functools.partial(_zennit_once, loaded, composite, canonizer, x, start)
        theirs = median_seconds(reference, repeats)
        print(f"{model_name:10} {composite:26} {ours:10.3f} {theirs:10.3f} {ours / theirs:7.2f}")


def _zennit_once(loaded, composite: str, canonizer, x: torch.Tensor, start: torch.Tensor) -> None:
    with Gradient(loaded.model, _zennit_composite(composite, canonizer)) as attributor:
        attributor(x.clone().requires_grad_(True), start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    x = torch.randn(1, 3, args.size, args.size, generator=torch.Generator().manual_seed(0))
    print(f"input 1x3x{args.size}x{args.size}, {args.threads} thread(s), median of {args.repeats}")
    print(f"{'model':10} {'composite':26} {'hookviz s':>10} {'zennit s':>10} {'ratio':>7}")
    for model_name, canonizer in MODELS.items():
        _rows(model_name, canonizer, x, args.repeats)


if __name__ == "__main__":
    main()
