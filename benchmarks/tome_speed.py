"""Token merging's speed at ViT token counts: `apply_tome(model, r)` against the model as given, eager,
for a few merge rates, measured in one run (accuracy pairs on trained models: benchmarks/int8_quality.py).

    python benchmarks/tome_speed.py                          # vit_b16, batch 8, r = 4, 8, 16
    python benchmarks/tome_speed.py --model vit_s16 --rates 8 16 --rounds 7 --json /tmp/tome.json

Random weights (speed does not depend on them) and crops of scikit-image's photos; beside each
speed, the tokens left after the last block and the cosine similarity of the merged model's
outputs to the unmerged ones (how far the numbers move, not an accuracy). Rounds go through every
order of the contestants, the median is reported. Run alone: a second busy process wrecks ratios.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
from pathlib import Path
from typing import Any

import torch

import vitzoo
from vitzoo.atomic import write_json
from vitzoo.precision import cpu_isa, cpu_name
from vitzoo.tome import apply_tome, token_counts


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="vit_b16")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rates", nargs="+", type=int, default=[4, 8, 16])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    model = vitzoo.create(args.model).eval()
    int8_speed = _load_sibling("int8_speed")
    x = int8_speed.photo_batch(model, args.batch)
    contestants: dict[str, torch.nn.Module] = {"r=0": model}
    contestants.update({f"r={r}": apply_tome(model, r).eval() for r in args.rates})
    seconds: dict[str, list[float]] = {name: [] for name in contestants}
    orders = list(itertools.permutations(contestants))
    with torch.inference_mode():
        reference = model(x)
        for i in range(args.rounds):
            for name in orders[i % len(orders)]:
                seconds[name].append(int8_speed.seconds_per_call(lambda name=name: contestants[name](x)))
        cosine = {
            name: torch.nn.functional.cosine_similarity(m(x), reference, dim=-1).mean().item()
            for name, m in contestants.items()
        }
    tokens = model.patch_embed.num_patches + model.num_prefix_tokens
    rows = []
    base = args.batch / statistics.median(seconds["r=0"])
    for name, m in contestants.items():
        speed = args.batch / statistics.median(seconds[name])
        left = token_counts(m, tokens)[-1] if name != "r=0" else tokens
        rows.append(
            {"r": name, "tokens_left": left, "img_per_s": speed, "speedup": speed / base, "cosine": cosine[name]}
        )
    print(f"{cpu_name()} ({cpu_isa()}), {torch.get_num_threads()} threads, {args.model}, batch {args.batch}")
    for r in rows:
        print(
            f"  {r['r']:<6} {r['tokens_left']:>4} tokens left  {r['img_per_s']:8.2f} img/s  {r['speedup']:.2f}x  cos {r['cosine']:.4f}"
        )
    report = {"cpu": f"{cpu_name()} ({cpu_isa()})", "model": args.model, "batch": args.batch, "rows": rows}
    if args.json is not None:
        write_json(args.json, report)
    return report


def _load_sibling(stem: str) -> Any:
    """benchmarks/<stem>.py as a module (the photo batch and the timer are int8_speed's)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(stem, Path(__file__).with_name(f"{stem}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    main()
