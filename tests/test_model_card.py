"""vitzoo.model_card: the card's metadata states the licence as the Hub knows it (`other` with its
name otherwise) and marks restricted licences; a feature extractor's card says it has no labels."""

from __future__ import annotations

import vitzoo
from vitzoo.model_card import CardFacts, model_card


def _card(license: str | None, num_classes: int = 3) -> str:
    model = vitzoo.create("vit_ti16", depth=1, embed_dim=24, num_heads=2, img_size=32, num_classes=num_classes)
    pcfg = model.pretrained_cfg.replace(license=license, source="hf-hub:org/weights")
    facts = CardFacts("me/model", "timm", "vit_tiny_patch16_224", {"depth": 1}, None, pcfg, None)
    return model_card(model, facts)


def test_card_metadata_states_the_licence_and_marks_restricted_ones():
    card = _card("cc-by-nc-4.0")
    assert card.startswith("---\nlibrary_name: timm\nlicense: cc-by-nc-4.0\n")
    assert "- licence: cc-by-nc-4.0 (non-commercial)" in card and "- source weights: hf-hub:org/weights" in card
    card = _card("dinov3-license")
    assert "license: other\nlicense_name: dinov3-license\n" in card and "(gated)" in card
    card = _card(None)
    assert "license:" not in card.split("---")[1] and "- licence: not stated" in card
    assert '`vit_tiny_patch16_224` with model_args `{"depth": 1}`' in card and "## Training" not in card


def test_a_feature_extractor_card_loads_with_automodel():
    card = _card("apache-2.0", num_classes=0)
    assert "None: the model returns pooled features" in card
    assert "AutoModel.from_pretrained" in card and "AutoModelForImageClassification" not in card
