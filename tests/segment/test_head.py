"""vitzoo/segment/head.py: DINOv3's linear head, in its order: channel dropout (training only),
BatchNorm, 1x1 convolution initialised from N(0, 0.01²) with a zero bias."""

from __future__ import annotations

import torch

from vitzoo.segment.head import LinearHead


def test_the_head_is_dropout_then_batchnorm_then_a_1x1_convolution():
    torch.manual_seed(0)
    head = LinearHead(64, 7, dropout=0.5)
    x = torch.randn(4, 64, 3, 5)
    assert head(x).shape == (4, 7, 3, 5)
    head.eval()
    expected = torch.einsum("kc,bchw->bkhw", head.conv.weight[:, :, 0, 0], head.norm(x)) + head.conv.bias.view(
        1, 7, 1, 1
    )
    torch.testing.assert_close(head(x), expected)
    head.train()
    torch.manual_seed(1)
    dropped = head.dropout(x)
    assert bool((dropped == 0).flatten(2).all(dim=2).any())  # whole channels dropped, as Dropout2d does
    assert float(head.conv.weight.detach().std()) < 0.02 and bool((head.conv.bias == 0).all())
