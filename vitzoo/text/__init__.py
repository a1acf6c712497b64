"""Text towers, tokenizers and whole image-text models (CLIP, SigLIP): zero-shot classification
and retrieval. See docs/zeroshot.md.

    model = vitzoo.create("clip_b16", pretrained=True, text=True)   # an ImageTextModel
    tok = vitzoo.text.get_tokenizer("clip_b16")                       # strings -> LongTensor of ids
    head = model.zero_shot_classifier(["cat", "dog"], vitzoo.text.templates("openai"))
"""

from __future__ import annotations

from .bpe import ClipTokenizer
from .load import create_image_text, get_tokenizer, read_image_text
from .model import ImageTextModel, imagenet_classnames, templates
from .transformer import TextConfig, TextTransformer

__all__ = [
    "ClipTokenizer",
    "ImageTextModel",
    "TextConfig",
    "TextTransformer",
    "create_image_text",
    "get_tokenizer",
    "imagenet_classnames",
    "read_image_text",
    "templates",
]
