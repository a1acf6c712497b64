"""Third-party models: packages that declare an entry point in the group "vitzoo.models".

A plugin's pyproject.toml says

    [project.entry-points."vitzoo.models"]
    my_models = "my_package.models"             # a module that registers models when imported
    more = "my_package.zoo:register_all"        # or a function called with no arguments

and the registry imports every such entry point once, lazily, on its first use (the first
`create`, `list_models`, `model_info`, ...), so that `import vitzoo` stays cheap and a broken
plugin costs nothing until the zoo is used. Models registered while a plugin loads get the origin
"plugin (<distribution name>)".

This module sits below the registry and imports nothing of vitzoo: the registry hands it a
`RegistryAccess` (its lock, origin context, snapshot/restore) when it asks for discovery.

What can go wrong, and what happens:
* The plugin fails to import or its function raises: one `PluginWarning` naming the entry point,
  its distribution and the error; whatever it had registered is rolled back and the rest of the zoo
  keeps working.
* The plugin registers a name that already exists (built-in or another plugin's) without
  `override=True`: a `RegistryError` naming both origins. That is a conflict between two installed
  packages which only the user can settle, so it is not swallowed: every registry call raises it
  until one of the two packages is removed or renamed. The clashing plugin is rolled back whole.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

ENTRY_POINT_GROUP = "vitzoo.models"


@dataclass(frozen=True)
class RegistryAccess:
    """What plugin discovery needs of the registry, handed in by the registry itself."""

    lock: Any  # the registry's re-entrant lock: discovery runs under it
    origin: Callable[[str], AbstractContextManager[None]]  # origin("plugin (dist)") for the entries registered inside
    snapshot: Callable[[], dict[str, Any]]  # name -> entry
    restore: Callable[[dict[str, Any]], None]
    clash_error: type[Exception]  # the registry's RegistryError


class PluginWarning(UserWarning):
    """A plugin that could not be loaded (the zoo goes on without it)."""


@dataclass(frozen=True)
class PluginRecord:
    """What loading one entry point did."""

    name: str  # the entry point's name
    value: str  # "module" or "module:function"
    distribution: str  # the distribution that declares it
    models: tuple[str, ...]  # names it registered (empty when it failed)
    error: str | None = None  # "ExceptionType: message" when it failed


# Discovery state, guarded by the registry's lock (discover runs under it). A plugin's own
# `vitzoo.register(...)` call asks for discovery again on the same thread: "running" says it is underway.
_state: dict[str, Any] = {"done": False, "running": False, "clash": None, "access": None}
_records: list[PluginRecord] = []
# name -> (entry registered by a plugin, entry it replaced or None): lets `reset` undo plugins.
_installed: dict[str, tuple[Any, Any]] = {}
_imported_modules: set[str] = set()


def discover(access: RegistryAccess) -> None:
    """Load every "vitzoo.models" entry point once; a name clash is raised on every call."""
    with access.lock:
        _state["access"] = access
        if _state["running"]:
            return  # a plugin being loaded is registering: discovery is already underway
        if not _state["done"]:
            _state["running"] = True
            try:
                for ep in _entry_points():
                    _load(ep, access)
            finally:
                _state["running"] = False
                _state["done"] = True
        clash = _state["clash"]
        if clash is not None:
            raise access.clash_error(str(clash))


def records() -> list[PluginRecord]:
    """One record per entry point seen by discovery so far (`vitzoo.registry.loaded_plugins()`
    runs discovery first)."""
    return list(_records)


def reset() -> None:
    """Undo discovery: unregister plugin models (restoring what they overrode), forget the
    plugins' modules, and let the next registry call discover again. For tests, and for an
    interactive session after installing a plugin."""
    access: RegistryAccess | None = _state["access"]
    if access is None:
        return  # discovery never ran: nothing to undo
    with access.lock:
        table = access.snapshot()
        for name, (entry, replaced) in _installed.items():
            if table.get(name) is entry:
                if replaced is None:
                    del table[name]
                else:
                    table[name] = replaced
        access.restore(table)
        for module in _imported_modules:
            for key in [k for k in sys.modules if k == module or k.startswith(module + ".")]:
                del sys.modules[key]
        _installed.clear()
        _imported_modules.clear()
        _records.clear()
        _state.update(done=False, running=False, clash=None)
        importlib.invalidate_caches()  # new distributions on sys.path become visible


def _entry_points() -> list[importlib.metadata.EntryPoint]:
    try:
        eps = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
        # Sorted so that which of two clashing plugins is "first" does not depend on sys.path order.
        return sorted(eps, key=lambda ep: (_dist_name(ep), ep.name))
    except Exception as exc:
        warnings.warn(
            f"vitzoo could not read the installed packages' entry points, so no plugin is loaded: "
            f"{type(exc).__name__}: {exc}",
            PluginWarning,
            stacklevel=2,
        )
        return []


def _dist_name(ep: importlib.metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return dist.metadata["Name"] if dist is not None and dist.metadata["Name"] else ep.value.split(":")[0]


def _load(ep: importlib.metadata.EntryPoint, access: RegistryAccess) -> None:
    dist = _dist_name(ep)
    before = access.snapshot()
    modules_before = set(sys.modules)
    try:
        with access.origin(f"plugin ({dist})"):
            target = ep.load()
            if ep.attr is not None and callable(target):
                target()
    except access.clash_error as exc:
        # A plugin loads completely or not at all: a half-registered plugin would be worse than none.
        access.restore(before)
        _records.append(PluginRecord(ep.name, ep.value, dist, (), f"RegistryError: {exc}"))
        if _state["clash"] is None:
            _state["clash"] = exc
        return
    except Exception as exc:
        access.restore(before)
        error = f"{type(exc).__name__}: {exc}"
        _records.append(PluginRecord(ep.name, ep.value, dist, (), error))
        warnings.warn(
            f"vitzoo plugin {ep.name!r} ({ep.value}, distribution {dist!r}) failed to load and is skipped: {error}",
            PluginWarning,
            stacklevel=2,
        )
        return
    # Only the plugin's own package is forgotten by `reset`, never the libraries it imported.
    top = ep.module.split(".")[0]
    _imported_modules.update(m for m in set(sys.modules) - modules_before if m.split(".")[0] == top)
    after = access.snapshot()
    added = [name for name, entry in after.items() if before.get(name) is not entry]
    for name in added:
        _installed[name] = (after[name], before.get(name))
    _records.append(PluginRecord(ep.name, ep.value, dist, tuple(added)))
