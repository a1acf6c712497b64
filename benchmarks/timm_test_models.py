"""Run timm's own `tests/test_models.py`, unmodified, on vitzoo's registered models.

timm's test file looks models up through timm's registry (`list_models`, `create_model`,
`get_pretrained_cfg_value`, ...). This script loads a pytest plugin that, before the file is
imported, points those names of the `timm` and `timm.models` namespaces at vitzoo:

    timm.create_model(name, **kw)              vitzoo.create(name, **kw)
    timm.list_models(filter, module, ...)      vitzoo's registered models up to --max-params
    timm.list_pretrained(filter, ...)          the same with pretrained tags ("name.tag")
    timm.get_pretrained_cfg_value(name, key)   vitzoo.get_pretrained_cfg_value(name, key)
    timm.is_model(name)                        whether vitzoo registers the name

The rest of timm (its FeatureInfo, `set_scriptable`, the FX tracer's leaf lists, `timm.data`) is
timm's own: the test file uses them as its checks and vitzoo models contain none of timm's layers.

How timm's filters apply: the file selects models by timm name patterns (`vit_*`, `deit*`, ...,
its NON_STD_FILTERS for ViTs) and by timm module (`module=FEAT_INTER_FILTERS`). A vitzoo name
matches a pattern when it or its timm counterpart (`model_info(name)["timm_name"]`, with the same
tag) does, so `dinov3_7b16` is excluded by `*_7b_*` and `clip_b16` is a ViT (`vit_base_patch16_
clip_224`); its module is its counterpart's timm module, `vision_transformer` without one (vitzoo's
model is timm's VisionTransformer). Every vitzoo model has a registry-level cfg, so
`name_matches_cfg` keeps all names; `include_tags` / `pretrained` expand "name.tag" as timm does.

Left out: timm's tests that are not about registered models (its own NaFlexViT / Gemma-4 modules,
`regnetx_002`) are deselected, and the tests that download pretrained weights are skipped (no
network here). A test marked `timeout(n)` fails after n * --timeout-scale seconds. Nothing is
written into the repository (pytest's cache is off; the test file's own directory gets pytest's
`__pycache__`).

Usage (timm's file kept outside the repository; the models run at their real size, on the CPU
unless TORCH_DEVICE is set, as timm's file reads it):

    PYTHONPATH=. python benchmarks/timm_test_models.py /path/to/timm/tests/test_models.py \
        [--max-params 110e6] [--json results.json] [-- -k vit_ti16 -x ...]
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import re
import signal
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

NOT_REGISTRY = "not about registered models (timm's own architectures)"
EMPTY = "no registered model passes the file's filters"
DOWNLOADS = {"test_model_load_pretrained", "test_model_features_pretrained"}
MARKERS = ("base", "cfg", "features", "fxforward", "fxbackward", "torchscript", "timeout(seconds)")


def _names(value: str | Iterable[str] | None) -> list[str]:
    if not value:
        return []
    return [value] if isinstance(value, str) else list(value)


def _expand(pattern: str) -> list[str]:
    """timm's `_expand_filter`: a pattern without a tag also matches every tag."""
    return [pattern] if "." in pattern else [f"{pattern}.*", pattern]


class VitzooRegistry:
    """timm's registry functions answered from vitzoo's registry, over the models up to
    `max_params` parameters."""

    def __init__(self, max_params: float) -> None:
        import timm.models._registry as timm_registry

        import vitzoo

        self.vitzoo = vitzoo
        self.info = {n: vitzoo.model_info(n) for n in vitzoo.list_models()}
        self.names = sorted(n for n, i in self.info.items() if i["num_params"] <= max_params)
        self.module = {
            n: timm_registry._model_to_module.get(self.info[n]["timm_name"] or "", "vision_transformer")
            for n in self.names
        }

    def _tagged(self, name: str) -> list[str]:
        tags = self.info[name]["pretrained"]
        return [f"{name}.{t}" for t in tags] or [name]

    def _aliases(self, name: str) -> list[str]:
        """The name and its timm counterpart's, with the same tag."""
        base, dot, tag = name.partition(".")
        timm_name = self.info[base]["timm_name"]
        return [name] + ([f"{timm_name}{dot}{tag}"] if timm_name else [])

    def _matches(self, name: str, patterns: list[str]) -> bool:
        return any(fnmatch.fnmatch(a, p) for a in self._aliases(name) for p in patterns)

    def list_models(
        self,
        filter: str | Iterable[str] = "",
        module: str | Iterable[str] = "",
        pretrained: bool = False,
        exclude_filters: str | Iterable[str] = "",
        name_matches_cfg: bool = False,
        include_tags: bool | None = None,
    ) -> list[str]:
        includes, excludes, modules = _names(filter), _names(exclude_filters), _names(module)
        include_tags = pretrained if include_tags is None else include_tags
        names = [n for n in self.names if not modules or self.module[n] in modules]
        if include_tags:
            names = [t for n in names for t in self._tagged(n)]
            includes = [e for p in includes for e in _expand(p)]
            excludes = [e for p in excludes for e in _expand(p)]
        names = [n for n in names if (not includes or self._matches(n, includes)) and not self._matches(n, excludes)]
        if pretrained:
            names = [n for n in names if "." in n or self.info[n]["pretrained"]]
        return names  # name_matches_cfg: every vitzoo name has a registry-level cfg

    def list_pretrained(self, filter: str | Iterable[str] = "", exclude_filters: str | Iterable[str] = "") -> list[str]:
        return self.list_models(filter, pretrained=True, exclude_filters=exclude_filters, include_tags=True)

    def create_model(self, model_name: str, pretrained: bool = False, **kwargs: Any) -> Any:
        return self.vitzoo.create(model_name, pretrained=pretrained, **kwargs)

    def get_pretrained_cfg_value(self, model_name: str, cfg_key: str) -> Any:
        return self.vitzoo.get_pretrained_cfg_value(model_name, cfg_key)

    def is_model(self, model_name: str) -> bool:
        return model_name.partition(".")[0] in self.names

    def install(self) -> None:
        """Point the names of `timm` and `timm.models` at these functions."""
        import timm
        import timm.models

        for name in ("list_models", "list_pretrained", "create_model", "get_pretrained_cfg_value", "is_model"):
            for namespace in (timm, timm.models):
                setattr(namespace, name, getattr(self, name))


class TimeoutMarkError(Exception):
    """A test ran past its `timeout` mark."""


class HarnessPlugin:
    """Routes timm's registry to vitzoo at import, selects, times out and tallies the tests."""

    def __init__(self, registry: VitzooRegistry, timeout_scale: float) -> None:
        self.registry = registry
        self.timeout_scale = timeout_scale
        self.outcomes: dict[str, tuple[str, str, str]] = {}  # nodeid -> (function, outcome, message)
        self.deselected: Counter[tuple[str, str]] = Counter()  # (why, function) -> tests
        registry.install()  # before pytest imports the test file

    def pytest_configure(self, config: pytest.Config) -> None:
        for marker in MARKERS:
            config.addinivalue_line("markers", marker)

    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        keep = []
        for item in items:
            params = getattr(item, "callspec", None)
            name = params.params.get("model_name") if params else None
            if not isinstance(name, str) or not self.registry.is_model(name):  # NotSet: an empty parameter set
                why = EMPTY if params and name is not None and not isinstance(name, str) else NOT_REGISTRY
                self.deselected[(why, getattr(item, "originalname", item.name))] += 1
            else:
                if getattr(item, "originalname", "") in DOWNLOADS:
                    item.add_marker(pytest.mark.skip(reason="downloads pretrained weights (no network here)"))
                keep.append(item)
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Iterator[None]:
        mark = item.get_closest_marker("timeout")
        seconds = float(mark.args[0]) * self.timeout_scale if mark and mark.args else 0.0

        def expire(signum: int, frame: Any) -> None:
            raise TimeoutMarkError(f"ran past its timeout mark ({seconds:.0f} s)")

        previous = signal.signal(signal.SIGALRM, expire)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        function = report.nodeid.split("::")[-1].split("[")[0]
        previous = self.outcomes.get(report.nodeid)
        if previous and previous[1] != "passed":
            return  # a failed setup or call stays failed through teardown
        if report.failed:
            crash = getattr(report.longrepr, "reprcrash", None)
            message = crash.message if crash else str(report.longrepr).splitlines()[-1]
            self.outcomes[report.nodeid] = (function, "failed", message.splitlines()[0][:200])
        elif report.skipped:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else ""
            self.outcomes[report.nodeid] = (function, "skipped", str(reason))
        elif report.when == "call":
            self.outcomes[report.nodeid] = (function, "passed", "")


def summary(plugin: HarnessPlugin) -> str:
    """The table of passed / failed / skipped per test function, then each distinct failure."""
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for function, outcome, _ in plugin.outcomes.values():
        counts[function][outcome] += 1
    width = max([len(f) for f in counts] + [len("test function")])
    lines = [f"{'test function':<{width}}  passed  failed  skipped", "-" * (width + 26)]
    total: Counter[str] = Counter()
    for function, c in counts.items():
        total.update(c)
        lines.append(f"{function:<{width}}  {c['passed']:>6}  {c['failed']:>6}  {c['skipped']:>7}")
    lines.append(f"{'total':<{width}}  {total['passed']:>6}  {total['failed']:>6}  {total['skipped']:>7}")
    for why in (EMPTY, NOT_REGISTRY):
        functions = [f"{f} ({n})" for (w, f), n in plugin.deselected.items() if w == why]
        if functions:
            lines.append(f"deselected, {why}: {', '.join(functions)}")
    failures: dict[tuple[str, str, str], list[tuple[str, str]]] = defaultdict(list)
    for nodeid, (function, outcome, message) in plugin.outcomes.items():
        if outcome != "passed":  # one group per message up to the names and numbers in it
            shape = re.sub(r"'[^']*'|\d+", "#", message)
            failures[(outcome, function, shape)].append((nodeid.split("[")[-1].rstrip("]"), message))
    for (outcome, function, _), cases in sorted(failures.items()):
        ids = " ".join(case for case, _ in cases)
        lines.append(f"{outcome} {len(cases)}x {function}: {cases[0][1]}\n    {ids}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("test_file", type=Path, help="timm's tests/test_models.py (kept outside the repository)")
    parser.add_argument("--max-params", type=float, default=110e6, help="largest model, in parameters")
    parser.add_argument("--timeout-scale", type=float, default=1.0, help="multiplies the tests' timeout marks")
    parser.add_argument("--json", type=Path, help="also write {nodeid: [function, outcome, message]} here")
    argv = sys.argv[1:] if argv is None else argv
    cut = argv.index("--") if "--" in argv else len(argv)  # after --: pytest's own arguments (-k, -x, -v)
    args = parser.parse_args(argv[:cut])
    test_file = args.test_file.resolve()
    registry = VitzooRegistry(args.max_params)
    plugin = HarnessPlugin(registry, args.timeout_scale)
    print(f"vitzoo {registry.vitzoo.__file__}; {len(registry.names)} models up to {args.max_params:.3g} parameters")
    pytest_args = [str(test_file), "-p", "no:cacheprovider", "--rootdir", str(test_file.parent)]
    pytest_args += ["--confcutdir", str(test_file.parent), "-q", *argv[cut + 1 :]]
    start = time.monotonic()
    code = pytest.main(pytest_args, plugins=[plugin])
    print(f"\n{summary(plugin)}\n({time.monotonic() - start:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps(plugin.outcomes, indent=1))
    return int(code)


if __name__ == "__main__":
    sys.exit(main())
