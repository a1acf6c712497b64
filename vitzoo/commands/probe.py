"""`vitzoo probe FEATURES [--test FEATURES2] --method ...`: kNN, linear, few-shot and retrieval
evaluation of cached features (`vitzoo features`)."""

from __future__ import annotations

import argparse
from typing import Any

from .base import bounded_int, describe, emit, number, printable, table

METHOD_CHOICES = ("all", "knn", "linear", "fewshot", "retrieval")


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        values = ()
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers separated by commas, got {text!r}")
    return values


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Arguments of `vitzoo probe FEATURES ...`."""
    describe(
        parser,
        "Evaluate cached features (vitzoo features): weighted kNN (DINO), a linear classifier (L-BFGS logistic "
        "regression), few-shot prototypes and retrieval recall@k. Without --test, FEATURES must hold both splits: "
        "the probes fit on its train split and are measured on its val split.",
    )
    parser.add_argument("features", metavar="FEATURES", help="a file written by `vitzoo features` (the training set)")
    parser.add_argument("--test", metavar="FEATURES2", help="a second features file, the test set (all of it)")
    parser.add_argument(
        "--method", nargs="+", choices=METHOD_CHOICES, default=["all"], help="which evaluations (default: all)"
    )
    parser.add_argument("--k", type=_ints, default=(10, 20), metavar="K,K", help="kNN neighbours (default: 10,20)")
    parser.add_argument(
        "--temperature", type=number(low=0, low_open=True), default=0.07, help="kNN vote temperature (default: 0.07)"
    )
    parser.add_argument(
        "--C", dest="C", type=number(low=0, low_open=True), default=1.0, help="linear: inverse L2 strength (default: 1)"
    )
    parser.add_argument("--shots", type=_ints, default=(1, 5, 10), metavar="N,N", help="few-shot (default: 1,5,10)")
    parser.add_argument("--draws", type=bounded_int(1, "an int >= 1"), default=5, help="few-shot draws (default: 5)")
    parser.add_argument("--seed", type=bounded_int(0, "an int >= 0"), default=0, help="few-shot seed (default: 0)")
    parser.add_argument("--recall", type=_ints, default=(1, 5, 10), metavar="K,K", help="recall@k (default: 1,5,10)")
    parser.add_argument(
        "--device",
        default="cpu",
        help="where kNN, the linear probe and retrieval compute (default: cpu; cuda for large sets)",
    )


def run(args: argparse.Namespace) -> int:
    """Print the evaluations of the features as a table, or --json."""
    from ..probe.evaluate import METHODS, run_probes, train_test
    from ..probe.featurefile import load_features

    methods = METHODS if "all" in args.method else tuple(dict.fromkeys(args.method))
    test = load_features(args.test) if args.test else None
    train, test = train_test(load_features(args.features), test)
    report = run_probes(
        train,
        test,
        methods,
        knn_ks=args.k,
        temperature=args.temperature,
        c=args.C,
        shots=args.shots,
        draws=args.draws,
        seed=args.seed,
        recall_ks=args.recall,
        device=args.device,
    )
    emit(args, report, _text(report))
    return 0


def _text(report: dict[str, Any]) -> str:
    from ..probe.evaluate import report_rows

    settings = report["settings"]
    head = (
        f"{settings.get('model')} ({settings.get('weights')}), {settings.get('output')} features; "
        f"train {report['train']['source']} ({report['train']['count']}), "
        f"test {report['test']['source']} ({report['test']['count']})"
    )
    return printable(head) + "\n" + table(("method", "setting", "accuracy %"), report_rows(report))
