"""vitzoo.model_card: the card's metadata states the licence as the Hub knows it (`other` with its
name otherwise), as YAML that huggingface_hub writes, and marks restricted licences; a licence that
is not a licence id is refused; names and free text from files go in escaped (code spans that
survive backticks, text without Markdown or HTML); a feature extractor's card says it has no labels."""

from __future__ import annotations

import pytest

import vitzoo
from vitzoo.model_card import CardFacts, CardValueError, check_license, code, model_card, pipeline_tag, prose

yaml = pytest.importorskip("yaml")  # huggingface_hub's own dependency


def _card(license: str | None, num_classes: int = 3, description: str = "") -> str:
    model = vitzoo.create("vit_ti16", depth=1, embed_dim=24, num_heads=2, img_size=32, num_classes=num_classes)
    pcfg = model.pretrained_cfg.replace(license=license, source="hf-hub:org/weights", description=description)
    facts = CardFacts("me/model", "timm", "vit_tiny_patch16_224", {"depth": 1}, None, pcfg, None)
    return model_card(model, facts)


def _meta(card: str) -> dict:
    assert card.startswith("---\n")
    return yaml.safe_load(card.split("---\n")[1])


def test_card_metadata_states_the_licence_and_marks_restricted_ones():
    card = _card("cc-by-nc-4.0")
    assert _meta(card) == {
        "library_name": "timm",
        "license": "cc-by-nc-4.0",
        "tags": ["image-classification", "vitzoo", "timm"],
        "pipeline_tag": "image-classification",
    }
    assert "- licence: cc-by-nc-4.0 (non-commercial)" in card and "- source weights: `hf-hub:org/weights`" in card
    card = _card("dinov3-license")
    assert (_meta(card)["license"], _meta(card)["license_name"]) == ("other", "dinov3-license") and "(gated)" in card
    assert _meta(_card("other"))["license"] == "other" and "license_name" not in _meta(_card("other"))
    card = _card(None)
    assert "license" not in _meta(card) and "- licence: not stated" in card
    assert '`vit_tiny_patch16_224` with model_args `{"depth": 1}`' in card and "## Training" not in card


@pytest.mark.parametrize("license", ["mit\nextra_gated_prompt: agree", "Apache 2.0: modified", "a'b", "x" * 101])
def test_a_licence_that_is_not_an_id_is_refused(license):
    with pytest.raises(CardValueError, match=r"^the model card's licence .* is not a licence id"):
        _card(license)
    with pytest.raises(CardValueError, match=r"^--license .* is not a licence id; expected a Hub or SPDX"):
        check_license(license, "--license")
    assert check_license("other", "--license") == "other" and check_license("GPL-3.0+", "--license") == "GPL-3.0+"


@pytest.mark.parametrize("text", ["plain", "a`b", "``", "`x`", " x ", "<b>x</b>", "a\nb", "\u202e", "a\\`b"])
def test_a_code_span_shows_its_text_exactly(text):
    markdown_it = pytest.importorskip("markdown_it")
    tokens = markdown_it.MarkdownIt("commonmark").parseInline(code(text))[0].children
    shown = text.replace("\n", "\\n").replace("\u202e", "\\u202e")  # a line break, a right-to-left override
    assert [(t.type, t.content) for t in tokens] == [("code_inline", shown)]


def test_prose_is_one_line_of_literal_text():
    markdown_it = pytest.importorskip("markdown_it")
    text = "Fine-tuned *here*, see [x](http://y) <img src=x>\n# not a heading &amp; `code` _e_ ~s~ |t|"
    card = _card("mit", description=text)
    about = next(line for line in card.splitlines() if line.startswith("- about: "))
    assert about == f"- about: {prose(text)}"
    html = markdown_it.MarkdownIt("commonmark").render(about)
    flat = " ".join(text.split()).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    assert html == f"<ul>\n<li>about: {flat}</li>\n</ul>\n"


def test_a_model_without_classifier_is_a_feature_extractor():
    """num_classes 0 (a backbone, an image-text model's image tower) and features_only models."""
    card = _card("mit", num_classes=0)
    assert _meta(card)["pipeline_tag"] == "image-feature-extraction"
    assert _meta(card)["tags"] == ["image-feature-extraction", "vitzoo", "timm"]
    assert pipeline_tag(vitzoo.create("vit_ti16", depth=1, features_only=True)) == "image-feature-extraction"
    assert pipeline_tag(vitzoo.create("vit_ti16", depth=1, num_classes=3)) == "image-classification"
