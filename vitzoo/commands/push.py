"""`vitzoo push RUN_DIR_OR_WEIGHTS REPO_ID`: upload a fine-tuned run's best model (or saved weights)
to the Hugging Face Hub as one commit, with a model card (vitzoo/push.py says what is written)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .base import describe, emit


def configure_parser(parser: argparse.ArgumentParser) -> None:
    describe(
        parser,
        "Upload a model to the Hugging Face Hub as one commit: timm's layout where timm has the "
        "architecture (timm, transformers and vitzoo load it; sharded, transformers and vitzoo), else "
        "vitzoo's, and a model card. The "
        "token is huggingface_hub's: HF_TOKEN or the cached `hf auth login`; HF_ENDPOINT is honoured.",
    )
    parser.add_argument(
        "source",
        metavar="RUN_DIR_OR_WEIGHTS",
        help="a `vitzoo finetune` run directory (its best/ model; its settings and metrics go into the card), "
        "or saved weights that vitzoo.from_pretrained reads",
    )
    parser.add_argument("repo_id", metavar="REPO_ID", help="the Hub repository, org/name (created if missing)")
    parser.add_argument("--private", action="store_true", help="create the repository private")
    parser.add_argument("--revision", metavar="R", help="the branch to commit to (created from main if missing)")
    parser.add_argument("--commit-message", metavar="M", default="Upload vitzoo model", help="the commit's message")
    parser.add_argument(
        "--license",
        metavar="ID",
        help="the weights' licence (a Hub or SPDX id: letters, digits, '.', '+', '-'; or 'other'), "
        "when they state none or another",
    )
    parser.add_argument(
        "--max-shard-size",
        metavar="SIZE",
        default=None,
        help="weights above this size are written as shards and their index (bytes or e.g. '500MB', up to "
        "50GB; default 5GB); timm's own loader reads no shards, transformers and vitzoo do",
    )


def run(args: argparse.Namespace) -> int:
    from ..builder import from_pretrained
    from ..layout import CONFIG_NAME
    from ..model_card import check_license
    from ..pretrained_cfg import pretrained_cfg_of
    from ..push import push_to_hub
    from ..weight_shards import DEFAULT_MAX_SHARD_SIZE, parse_shard_size

    check_license(args.license, "--license")
    size = DEFAULT_MAX_SHARD_SIZE if args.max_shard_size is None else args.max_shard_size
    shard_size = parse_shard_size(size, "--max-shard-size")  # bytes, or "500MB"
    weights, record = _read_source(Path(args.source))
    model = from_pretrained(weights)
    if args.license is None:  # the licence the weights state, named by where it was read
        pcfg = pretrained_cfg_of(model)
        where = weights / CONFIG_NAME if weights.is_dir() else weights
        check_license(pcfg.license if pcfg else None, f"{str(where)!r} key pretrained_cfg.license")
    url = push_to_hub(
        model,
        args.repo_id,
        private=args.private,
        revision=args.revision,
        commit_message=args.commit_message,
        license=args.license,
        run=record,
        max_shard_size=shard_size,
    )
    repo = url.repo
    result = {
        "repo_id": args.repo_id,
        "revision": args.revision or "main",
        "commit_url": str(url),
        "weights": str(weights),
        "layout": repo.layout,
        "timm_name": repo.timm_name,
        "sharded": repo.sharded,
        "loaded_by": list(repo.loaded_by),
        "run": str(args.source) if record is not None else None,
    }
    text = f"pushed {args.repo_id}@{result['revision']}  {url}\n  weights  {weights}\n  layout   {repo.summary}"
    if repo.timm_name:
        text += f"\n  timm     {repo.timm_name}"
    emit(args, result, text)
    return 0


def _read_source(source: Path) -> tuple[Path, dict[str, Any] | None]:
    """The weights to push, and the run record for the card when `source` is a run directory."""
    from ..jsonio import read_json
    from ..train.export import BEST_DIR, RESULT_NAME
    from ..train.metrics import METRICS_NAME, read_metrics
    from ..train.resume import load_run_info
    from ..train.rundir import is_run_dir

    if not source.exists():
        raise FileNotFoundError(f"RUN_DIR_OR_WEIGHTS {str(source)!r} does not exist")
    if not (source.is_dir() and is_run_dir(source)):
        return source, None
    best = source / BEST_DIR
    if not best.is_dir():
        raise FileNotFoundError(
            f"run directory {str(source)!r} has no {BEST_DIR}/ model yet (it is written after the first epoch)"
        )
    result = read_json(best / RESULT_NAME, what="the best model's result") if (best / RESULT_NAME).is_file() else {}
    record = {"run_info": load_run_info(source), "metrics": read_metrics(source / METRICS_NAME), "result": result}
    return best, record
