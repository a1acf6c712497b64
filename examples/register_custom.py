"""Custom variants in your own code: a config variant, a builder function, and a shallower ViT
that starts from the first blocks of a pretrained model.

    python examples/register_custom.py                              # vit_s16's weights from the Hub (cached after)
    python examples/register_custom.py --base-weights DIR_OR_FILE   # a local copy of them, for air-gapped machines
    python examples/register_custom.py --base vit_ti16 --depth 4    # another base, another depth

Everything registered here shows up in `vitzoo.list_models`, `vitzoo.create` and
`vitzoo.model_info` (origin: "user code"), exactly like the built-in models. To make such models
available to everyone who installs a package, ship them as a plugin: see examples/plugin_example/.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

import vitzoo
from vitzoo import PretrainedCfg, VisionTransformer, ViTConfig
from vitzoo.data import FASHION_CLASSES
from vitzoo.flops import vit_flops

# 1. A config variant: a registered name (or a ViTConfig) with some fields changed. It inherits the
#    base's preprocessing; it inherits no weights unless `pretrained=` says where they are.
vitzoo.register(
    "vit_mnist_deep",
    base="vit_mnist",
    depth=8,
    drop_path_rate=0.1,
    description="vit_mnist with twice the blocks and stochastic depth",
)


# 2. A builder function: any callable returning an nn.Module; config overrides arrive as keywords
#    (vitzoo.create("vit_fashion_wide", num_classes=5) passes num_classes=5).
@vitzoo.register_model(
    default_cfg=PretrainedCfg(
        input_size=(1, 28, 28),
        mean=(0.2860,),
        std=(0.3530,),
        interpolation="bilinear",
        crop_pct=1.0,
        num_classes=10,
        label_names=FASHION_CLASSES,
    )
)
def vit_fashion_wide(**overrides) -> VisionTransformer:
    """A wide, shallow ViT for Fashion-MNIST (28x28 grayscale, patch 7, average pooling)."""
    config = ViTConfig(
        img_size=28,
        patch_size=7,
        in_chans=1,
        num_classes=10,
        embed_dim=128,
        depth=4,
        num_heads=8,
        class_token=False,
        global_pool="avg",
    )
    return VisionTransformer(config.replace(**overrides))


# 3. A shallower model initialised from the first blocks of a pretrained one.
def first_blocks(base: VisionTransformer, depth: int) -> dict[str, torch.Tensor]:
    """The base's state dict without blocks `depth` and later. Every other tensor (patch embedding,
    tokens, position embedding, final norm, head) has the same shape in the shallower model."""
    if not 0 < depth <= base.config.depth:
        raise ValueError(
            f"depth must be in 1..{base.config.depth} for a base with {base.config.depth} blocks, got {depth}"
        )
    return {
        key: value
        for key, value in base.state_dict().items()
        if not key.startswith("blocks.") or int(key.split(".")[1]) < depth
    }


def make_shallow(base_name: str, depth: int, base_weights: str | None, out: Path) -> str:
    """Register `<base>_first<depth>` with weights taken from the base's first blocks and
    saved to `out`; return the new name. Afterwards `vitzoo.create(name, pretrained=True)` works."""
    if base_weights is None:
        base = vitzoo.create(base_name, pretrained=True)  # the base's default source, e.g. timm on the Hub
    else:
        base = vitzoo.create(base_name, weights=base_weights)
    name = f"{base_name}_first{depth}"
    shallow = VisionTransformer(base.config.replace(depth=depth))
    shallow.load_state_dict(first_blocks(base, depth))  # strict: every key of the shallow model is filled
    shallow.pretrained_cfg = base.pretrained_cfg  # same preprocessing and labels as the base's weights
    shallow.architecture = name
    shallow.save_pretrained(out)

    # The variant carries its own pretrained source (the directory just written) and the base's
    # preprocessing, so it behaves like any zoo model from here on.
    vitzoo.register(
        name,
        base=base_name,
        depth=depth,
        num_classes=base.config.num_classes,
        pretrained={
            "first_blocks": base.pretrained_cfg.replace(
                source=str(out), description=f"first {depth} blocks of {base_name}"
            )
        },
        description=f"{base_name} cut to its first {depth} blocks",
        override=True,  # running the example twice in one session re-registers it
    )
    return name


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="vit_s16", help="the pretrained model to cut (default: vit_s16)")
    parser.add_argument("--depth", type=int, default=6, help="how many of its blocks to keep (default: 6)")
    parser.add_argument(
        "--base-weights", help="a local file or directory with the base's weights instead of its default source"
    )
    parser.add_argument(
        "--out", type=Path, default=Path("runs/custom_shallow"), help="where the shallow model is saved"
    )
    args = parser.parse_args(argv)

    for name in ("vit_mnist_deep", "vit_fashion_wide"):
        info = vitzoo.model_info(name)
        print(f"{name}: {info['num_params']:,} parameters, origin: {info['origin']}")
    wide = vitzoo.create("vit_fashion_wide", num_classes=5)
    print("vit_fashion_wide with 5 classes ->", tuple(wide(torch.zeros(2, 1, 28, 28)).shape))

    name = make_shallow(args.base, args.depth, args.base_weights, args.out)
    model = vitzoo.create(name, pretrained=True).eval()
    base_gflops = vit_flops(ViTConfig.from_dict(vitzoo.model_info(args.base)["config"])).total / 1e9
    print(
        f"{name}: {vitzoo.model_info(name)['num_params']:,} parameters, "
        f"{vit_flops(model.config).total / 1e9:.2f} GFLOPs (the base: {base_gflops:.2f}); saved in {args.out}"
    )
    print(f"listed as: {vitzoo.list_models(name, pretrained=True)}")


if __name__ == "__main__":
    main()
