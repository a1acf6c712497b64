"""Third-party models: packages that declare an entry point in the group "vitzoo.models".

A plugin's pyproject.toml says

    [project.entry-points."vitzoo.models"]
    my_models = "my_package.models"             # a module that registers models when imported
    more = "my_package.zoo:register_all"        # or a function called with no arguments

and the registry imports every such entry point once, lazily, on its first use (the first
`create`, `list_models`, `model_info`, ...), so that `import vitzoo` stays cheap and a broken
plugin costs nothing until the zoo is used. Models registered while a plugin loads get the origin
"plugin (<distribution name>)".

This module sits below the registry and imports nothing of vitzoo but `checks` (its reading of
VITZOO_PLUGIN_TIMEOUT): the registry hands it a
`RegistryAccess` (its lock, origin context, snapshot/restore) when it asks for discovery.

Locking: discovery runs under the registry's lock, but while it waits for a plugin's thread it
gives the lock up (a Condition on that lock), so the plugin's own `register` calls can take it.
Every other thread that asks for the registry meanwhile waits in `discover` until the zoo is
complete, as before; a rollback therefore only ever undoes the plugin's own registrations.

What can go wrong, and what happens:
* The plugin fails to import or its function raises — anything, `sys.exit(3)` included (only a
  KeyboardInterrupt is passed on): one `PluginWarning` naming the entry point, its distribution and
  the error; whatever it had registered is rolled back and the rest of the zoo keeps working.
* The plugin does not finish loading within VITZOO_PLUGIN_TIMEOUT seconds (default 30; "inf" waits
  for ever): the same warning and rollback, and the command goes on without it. Each plugin loads in
  a daemon thread for that reason; a late `register` from an abandoned plugin raises in its thread.
* The plugin registers a name that already exists (built-in or another plugin's) without
  `override=True`: a `RegistryError` naming both origins. That is a conflict between two installed
  packages which only the user can settle, so it is not swallowed: every registry call raises it
  until one of the two packages is removed or renamed. The clashing plugin is rolled back whole.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
import threading
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from .checks import env_seconds

ENTRY_POINT_GROUP = "vitzoo.models"
TIMEOUT_ENV = "VITZOO_PLUGIN_TIMEOUT"
DEFAULT_TIMEOUT_S = 30.0  # per plugin: generous for a plugin that imports a large library on a busy machine


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


class PluginAbandonedError(RuntimeError):
    """Raised in the thread of a plugin that timed out, when it tries to register afterwards."""


@dataclass(frozen=True)
class PluginRecord:
    """What loading one entry point did."""

    name: str  # the entry point's name
    value: str  # "module" or "module:function"
    distribution: str  # the distribution that declares it
    models: tuple[str, ...]  # names it registered (empty when it failed)
    error: str | None = None  # "ExceptionType: message" when it failed


# Discovery state, guarded by the registry's lock (discover runs under it). "owner" is the thread
# running discovery; "cond" is a Condition on the registry's lock (made on first use).
_state: dict[str, Any] = {"done": False, "running": False, "clash": None, "access": None, "owner": None, "cond": None}
_records: list[PluginRecord] = []
# name -> (entry registered by a plugin, entry it replaced or None): lets `reset` undo plugins.
_installed: dict[str, tuple[Any, Any]] = {}
_imported_modules: set[str] = set()
_local = threading.local()  # .job: in a plugin's loading thread, the _Job it runs


class _Job:
    """One entry point being loaded in its own thread."""

    def __init__(self, ep: importlib.metadata.EntryPoint, dist: str) -> None:
        self.ep, self.dist = ep, dist
        self.done = False  # set under the lock when the thread ends
        self.error: BaseException | None = None
        self.abandoned = False  # set under the lock when discovery stopped waiting for it


def discover(access: RegistryAccess) -> None:
    """Load every "vitzoo.models" entry point once; a name clash is raised on every call."""
    with access.lock:
        _state["access"] = access
        cond = _condition(access)
        job: _Job | None = getattr(_local, "job", None)
        if job is not None:  # a plugin's own register call, in its loading thread
            _refuse_abandoned(job)
            return
        if _state["running"]:
            if _state["owner"] == threading.get_ident():
                return  # re-entered by discovery's own thread (a warning hook): it is underway
            cond.wait_for(lambda: not _state["running"])  # another thread loads plugins: wait for the whole zoo
        if not _state["done"]:
            timeout = plugin_timeout()  # before "running": a bad value is raised on every call
            _state.update(running=True, owner=threading.get_ident())
            try:
                for ep in _entry_points():
                    _load(ep, access, cond, timeout)
            finally:
                _state.update(running=False, done=True, owner=None)
                cond.notify_all()
        clash = _state["clash"]
        if clash is not None:
            raise access.clash_error(str(clash))


def check_registering() -> None:
    """Called by the registry under its lock before it adds an entry: a plugin abandoned after its
    timeout must not register anything later (its rollback is done)."""
    job: _Job | None = getattr(_local, "job", None)
    if job is not None:
        _refuse_abandoned(job)


def plugin_timeout() -> float | None:
    """Seconds to wait for one plugin to load (VITZOO_PLUGIN_TIMEOUT); None waits for ever."""
    return env_seconds(TIMEOUT_ENV, DEFAULT_TIMEOUT_S, "to wait for each vitzoo plugin to load")


def _refuse_abandoned(job: _Job) -> None:
    if job.abandoned:
        raise PluginAbandonedError(
            f"vitzoo plugin {job.ep.name!r} (distribution {job.dist!r}) was skipped after {TIMEOUT_ENV} "
            "expired; it can no longer register models"
        )


def _condition(access: RegistryAccess) -> threading.Condition:
    cond: threading.Condition | None = _state["cond"]
    if cond is None or _state.get("cond_lock") is not access.lock:
        cond = threading.Condition(access.lock)
        _state.update(cond=cond, cond_lock=access.lock)
    return cond


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
        _state.update(done=False, running=False, clash=None, owner=None)
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


def _load(
    ep: importlib.metadata.EntryPoint, access: RegistryAccess, cond: threading.Condition, timeout: float | None
) -> None:
    """Load one entry point in a daemon thread and wait for it (giving the lock up meanwhile)."""
    dist = _dist_name(ep)
    job = _Job(ep, dist)
    before = access.snapshot()
    modules_before = set(sys.modules)
    thread = threading.Thread(target=_run, args=(job, access, cond), name=f"vitzoo-plugin-{ep.name}", daemon=True)
    try:
        thread.start()
        finished = cond.wait_for(lambda: job.done, timeout)
    except BaseException:  # Ctrl-C while waiting: the plugin is abandoned and undone
        job.abandoned = True
        access.restore(before)
        raise
    error: str | None = None
    if not finished:
        job.abandoned = True  # under the lock: from now on its registrations are refused
        error = f"it did not finish loading within {timeout:g} s (set {TIMEOUT_ENV} to wait longer)"
    elif isinstance(job.error, access.clash_error):
        # A plugin loads completely or not at all: a half-registered plugin would be worse than none.
        access.restore(before)
        _records.append(PluginRecord(ep.name, ep.value, dist, (), f"RegistryError: {job.error}"))
        if _state["clash"] is None:
            _state["clash"] = job.error
        return
    elif isinstance(job.error, KeyboardInterrupt):
        access.restore(before)
        raise job.error
    elif job.error is not None:
        error = f"{type(job.error).__name__}: {job.error}"
        if isinstance(job.error, SystemExit):
            error = f"it called sys.exit({job.error.code!r})"
    if error is not None:
        access.restore(before)
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


def _run(job: _Job, access: RegistryAccess, cond: threading.Condition) -> None:
    """The body of a plugin's loading thread."""
    _local.job = job
    try:
        with access.origin(f"plugin ({job.dist})"):
            target = job.ep.load()
            if job.ep.attr is not None and callable(target):
                target()
    except BaseException as exc:  # SystemExit too: a plugin must not end the command
        job.error = exc
    finally:
        with cond:
            job.done = True
            cond.notify_all()
