"""The model card (README.md) that `push_to_hub` writes: the model, where its weights come from and
their licence, the label names, the preprocessing, the training run it came from (settings and
final metrics) and how to load it in vitzoo, timm and transformers. Plain text from plain data.

The metadata (the YAML front matter) is written by huggingface_hub's `ModelCardData`, so each
value is one YAML scalar, quoted where YAML needs it, and a licence must be a licence id
(`check_license`). Every name and
value from a file goes into the Markdown escaped: names as code spans (`code`), free text with
its Markdown punctuation backslash-escaped (`prose`), each on one line, so that no label or
description adds a heading, a link or raw HTML to the card."""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from torch import nn

from .checks import UNPRINTABLE, escape_unprintable
from .errors import VitzooError
from .features import FeatureGetterNet
from .layers.lora import is_lora_parameter
from .licenses import license_flags
from .pretrained_cfg import PretrainedCfg, resolve_label_names

CARD_NAME = "README.md"
# Licence ids the Hub's metadata knows; any other licence is written as `other` with its name.
HUB_LICENSES = (
    "apache-2.0",
    "mit",
    "bsd-3-clause",
    "cc0-1.0",
    "cc-by-4.0",
    "cc-by-sa-4.0",
    "cc-by-nc-4.0",
    "cc-by-nc-sa-4.0",
    "cc-by-nc-nd-4.0",
    "llama2",
    "llama3",
    "gemma",
)
# A licence id as the Hub and SPDX spell them ("apache-2.0", "cc-by-nc-4.0", "other").
_LICENSE_ID = re.compile(r"[A-Za-z0-9.+-]{1,100}")
_LABELS_SHOWN = 100  # more label names than this are summarised
# Settings of a run that say where and how fast it ran, not what it learned.
_RUNTIME_SETTINGS = ("progress", "device", "threads", "workers", "eval_batch_size")
# The Hub's task of a model: what its widget and search list it under.
CLASSIFICATION_TASK, FEATURES_TASK = "image-classification", "image-feature-extraction"


class CardValueError(VitzooError, ValueError):
    """A value the model card cannot state (a licence that is not a licence id)."""


def check_license(license: str | None, what: str) -> str | None:
    """`license` if it is a licence id (letters, digits, '.', '+', '-': a Hub or SPDX id, or
    "other") or None; else one CardValueError naming `what` (the argument or config key it came from)."""
    if license is None or (isinstance(license, str) and _LICENSE_ID.fullmatch(license)):
        return license
    shown = repr(license[:60] + ("..." if len(license) > 60 else "")) if isinstance(license, str) else repr(license)
    raise CardValueError(
        f"{what} {shown} is not a licence id; expected a Hub or SPDX licence id of letters, digits, '.', '+' "
        "and '-' (apache-2.0, mit, cc-by-nc-4.0, ...) or 'other'"
    )


def code(text: str) -> str:
    """`text` as one Markdown code span, shown exactly: line breaks and control characters as
    escapes, fenced by more backticks than any run inside it, padded where it starts or ends with
    a backtick or a space (CommonMark strips one space each side)."""
    text = escape_unprintable(text)
    if not text:
        return '""'
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text[0] in "` " or text[-1] in "` " else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def prose(text: str) -> str:
    """`text` as one line of literal Markdown text: line breaks and control characters become
    spaces, and each ASCII punctuation character that Markdown acts on is backslash-escaped (no
    emphasis, link, code span, entity or raw HTML)."""
    text = " ".join("".join(" " if unicodedata.category(c) in UNPRINTABLE else c for c in text).split())
    return re.sub(r"([\\`*_\[\]<>!|~&])", r"\\\1", text)


@dataclass(frozen=True)
class CardFacts:
    """What the card says beyond the model itself."""

    repo_id: str
    layout: str  # "timm" or "vitzoo"
    timm_name: str | None
    model_args: dict[str, Any]
    why_not_timm: str | None
    pretrained: PretrainedCfg
    run: dict[str, Any] | None  # {"run_info": run.json, "metrics": [records], "result": train_result.json}
    sharded: bool = False  # the weights are shards and their index (vitzoo/weight_shards.py)


def model_card(model: nn.Module, facts: CardFacts) -> str:
    """README.md for the pushed repository."""
    pcfg = facts.pretrained
    sections = [
        _front_matter(facts, pipeline_tag(model)),
        f"# {facts.repo_id.split('/')[-1]}\n",
        *_model_section(model, facts),
        *_labels_section(pcfg),
        *_preprocessing_section(pcfg),
        *_training_section(facts.run),
        *_usage_section(facts),
    ]
    return "\n".join(sections).rstrip() + "\n"


def pipeline_tag(model: nn.Module) -> str:
    """The Hub's task of `model`: a feature extractor when it has no classifier (num_classes 0:
    pooled features, as a backbone or an image-text model's image tower gives them; a
    `features_only` model), else an image classifier."""
    if isinstance(model, FeatureGetterNet):
        return FEATURES_TASK
    config = getattr(model, "config", None)
    classes = getattr(model, "num_classes", getattr(config, "num_classes", None))
    return FEATURES_TASK if classes == 0 else CLASSIFICATION_TASK


def _front_matter(facts: CardFacts, task: str) -> str:
    """The metadata block, written by huggingface_hub (its YAML quotes what needs quoting)."""
    from huggingface_hub import ModelCardData

    license = check_license(facts.pretrained.license, "the model card's licence")
    other = bool(license) and license not in (*HUB_LICENSES, "other")  # stated as `other` with its name
    data = ModelCardData(
        library_name="timm" if facts.layout == "timm" else "vitzoo",
        license="other" if other else license or None,
        license_name=license if other else None,
        tags=[task, "vitzoo"] + (["timm"] if facts.layout == "timm" else []),
        pipeline_tag=task,
    )
    return f"---\n{data.to_yaml()}\n---\n"


def _model_section(model: nn.Module, facts: CardFacts) -> list[str]:
    pcfg = facts.pretrained
    arch = getattr(model, "architecture", None) or type(model).__name__
    # the pushed model's: LoRA adapters are merged into the weights they adapt
    params = sum(p.numel() for n, p in model.named_parameters() if not is_lora_parameter(n))
    lines = ["## Model", "", f"- architecture: vitzoo {code(arch)}, {params:,} parameters"]
    if facts.timm_name is not None:
        args = f" with model_args {code(json.dumps(facts.model_args))}" if facts.model_args else ""
        lines.append(f"- timm architecture: {code(facts.timm_name)}{args}")
    if pcfg.description:
        lines.append(f"- about: {prose(pcfg.description)}")
    source = code(pcfg.source) if pcfg.source else "not stated (trained or changed with vitzoo)"
    lines.append(f"- source weights: {source}")
    flags = license_flags(pcfg.license)
    restricted = f" ({', '.join(flags)})" if flags else ""
    lines.append(
        f"- licence: {pcfg.license or 'not stated: the author has not said under which terms it may be used'}{restricted}"
    )
    lines.append(f"- layout: {layout_summary(facts.layout, facts.sharded, facts.why_not_timm)}")
    return [*lines, ""]


def loaded_by(layout: str, sharded: bool) -> tuple[str, ...]:
    """The libraries that load a pushed repository (the one home of this fact: the card and `vitzoo
    push` say it from here). vitzoo reads both layouts, sharded or not; transformers (its
    TimmWrapper) reads timm's, an index too. timm's own loader (`load_state_dict_from_hf`, 1.0.31)
    downloads a single model.safetensors (else pytorch_model.bin) and never reads an index: a
    sharded repository is not timm's, though its config.json is."""
    if layout != "timm":
        return ("vitzoo",)
    return ("transformers", "vitzoo") if sharded else ("timm", "transformers", "vitzoo")


def layout_summary(layout: str, sharded: bool, why_not_timm: str | None) -> str:
    """One line: the layout a push wrote and which libraries load it (`loaded_by`)."""
    names = loaded_by(layout, sharded)
    who = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    if layout != "timm":
        return f"vitzoo's: only {who} loads it; timm and transformers cannot: {why_not_timm}"
    if sharded:
        return (
            f"timm's, sharded (config.json + model.safetensors.index.json and its shards): {who} load it; "
            "timm's own loader reads a single model.safetensors only"
        )
    return f"timm's (config.json + model.safetensors): {who} load it"


def _labels_section(pcfg: PretrainedCfg) -> list[str]:
    names = resolve_label_names(pcfg)
    lines = ["## Labels", ""]
    if pcfg.num_classes == 0:
        return [*lines, "None: the model returns pooled features (no classifier).", ""]
    if not names:
        return [*lines, f"{pcfg.num_classes} classes, unnamed: predictions are class indices.", ""]
    shown = names if len(names) <= _LABELS_SHOWN else names[:20]
    more = "" if len(shown) == len(names) else f", ... ({len(names) - len(shown)} more)"
    return [*lines, f"{len(names)} classes: " + ", ".join(code(n) for n in shown) + more, ""]


def _preprocessing_section(pcfg: PretrainedCfg) -> list[str]:
    c, h, w = pcfg.input_size
    return [
        "## Preprocessing",
        "",
        f"- input: {c} channel(s), {h}x{w}; resize {pcfg.interpolation}, crop_pct {pcfg.crop_pct} ({pcfg.crop_mode})",
        f"- normalisation: mean {tuple(pcfg.mean)}, std {tuple(pcfg.std)}",
        "",
    ]


def _training_section(run: dict[str, Any] | None) -> list[str]:
    if not run:
        return []
    info, metrics, result = run.get("run_info") or {}, run.get("metrics") or [], run.get("result") or {}
    lines = ["## Training", ""]
    model = str(info.get("model", "?"))
    started = code(str(info["weights"])) if info.get("weights") else None
    started = started or (f"{code(model)} pretrained" if info.get("pretrained") else "random initialisation")
    lines.append(f"- model: {code(model)}, started from {started}")
    if info.get("data"):
        sizes = f"{info.get('train_images', '?')} training / {info.get('val_images', '?')} validation images"
        lines.append(f"- data: {prose(str(info['data']))}, {len(info.get('classes') or [])} classes, {prose(sizes)}")
    settings = {k: v for k, v in (info.get("train_config") or {}).items() if k not in _RUNTIME_SETTINGS}
    if settings:
        lines.append("- settings: " + ", ".join(code(f"{k}={v}") for k, v in settings.items()))
    if metrics:
        last = metrics[-1]
        lines.append(
            f"- final epoch ({last.get('epoch', 0) + 1}): train loss {last.get('train_loss', float('nan')):.4f}, "
            f"accuracy {100 * last.get('train_acc', float('nan')):.2f}%; validation loss "
            f"{last.get('val_loss', float('nan')):.4f}, accuracy {100 * last.get('val_acc', float('nan')):.2f}%"
        )
    if "val_acc" in result:
        lines.append(
            f"- these weights: the best epoch ({result.get('epoch', 0) + 1}), validation accuracy "
            f"{100 * result['val_acc']:.2f}%"
        )
    return [*lines, ""]


def _usage_section(facts: CardFacts) -> list[str]:
    repo = facts.repo_id
    auto = "AutoModelForImageClassification" if facts.pretrained.num_classes else "AutoModel"  # features: no head
    lines = [
        "## Usage",
        "",
        "vitzoo:",
        "",
        "```python",
        "import vitzoo",
        f'model = vitzoo.create("hf-hub:{repo}").eval()',
        "```",
        "",
    ]
    if facts.layout != "timm":
        return [*lines, f"timm and transformers cannot load this repository: {facts.why_not_timm}.", ""]
    if "timm" in loaded_by(facts.layout, facts.sharded):
        lines += [
            "timm:",
            "",
            "```python",
            "import timm",
            f'model = timm.create_model("hf-hub:{repo}", pretrained=True).eval()',
            "transform = timm.data.create_transform(**timm.data.resolve_data_config(model=model))",
            "```",
            "",
        ]
    lines += [
        "transformers (its timm wrapper):",
        "",
        "```python",
        f"from transformers import AutoImageProcessor, {auto}",
        f'processor = AutoImageProcessor.from_pretrained("{repo}")',
        f'model = {auto}.from_pretrained("{repo}").eval()',
        "```",
        "",
    ]
    return lines
