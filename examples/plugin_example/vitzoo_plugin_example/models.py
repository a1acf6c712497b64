"""Models this plugin adds to vitzoo. Importing the module registers them; vitzoo does that
lazily through the "vitzoo.models" entry point, so users never import it themselves.

Both ways of registering are shown: a config variant of a built-in model, and a builder function.
"""

from __future__ import annotations

import vitzoo
from vitzoo import VisionTransformer, ViTConfig

# A config variant: vit_mnist with half the depth. It inherits vit_mnist's preprocessing
# (28x28 grayscale, MNIST mean/std, labels "0".."9").
vitzoo.register(
    "example_vit_mnist_shallow",
    base="vit_mnist",
    depth=3,
    description="vit_mnist with 3 blocks instead of 6 (from vitzoo-plugin-example)",
)


# A builder function: anything that returns an nn.Module and accepts config overrides as keywords.
# Its preprocessing is given explicitly, since it is not derived from a registered name.
@vitzoo.register_model(
    default_cfg=vitzoo.PretrainedCfg(
        input_size=(3, 64, 64),
        mean=(0.5, 0.5, 0.5),
        std=(0.5, 0.5, 0.5),
        interpolation="bilinear",
        crop_pct=1.0,
        num_classes=100,
    )
)
def example_vit_cifar(**overrides) -> VisionTransformer:
    """A small ViT for 64x64 colour images with global average pooling (from vitzoo-plugin-example)."""
    config = ViTConfig(
        img_size=64,
        patch_size=8,
        num_classes=100,
        embed_dim=192,
        depth=6,
        num_heads=3,
        class_token=False,
        global_pool="avg",
    )
    return VisionTransformer(config.replace(**overrides))
