"""Plugins found through real entry-point discovery: each test writes a distribution (a module and
its `.dist-info` with `entry_points.txt`) into a temporary directory, puts it on sys.path and lets
`importlib.metadata` find it, exactly as for a pip-installed package."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch

import vitzoo
from vitzoo import plugins, registry
from vitzoo.plugins import PluginWarning
from vitzoo.registry import RegistryError

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "plugin_example"


def write_dist(root: Path, dist: str, modules: dict[str, str], entry_points: dict[str, str]) -> None:
    """A minimal installed distribution: modules at `root`, metadata in `<dist>-0.1.dist-info`."""
    for name, source in modules.items():
        (root / f"{name}.py").write_text(textwrap.dedent(source))
    info = root / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    lines = "\n".join(f"{name} = {value}" for name, value in entry_points.items())
    (info / "entry_points.txt").write_text(f"[vitzoo.models]\n{lines}\n")


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A fresh directory on sys.path; plugin discovery is reset before and after the test."""
    plugins.reset()
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    plugins.reset()


GOOD = """
    import vitzoo
    vitzoo.register("plug_tiny", base="vit_mnist_tiny", depth=1, description="from a plugin")

    @vitzoo.register_model
    def plug_builder(**overrides):
        return vitzoo.VisionTransformer(vitzoo.ViTConfig(img_size=32, patch_size=16, in_chans=1,
            num_classes=3, embed_dim=12, depth=1, num_heads=2).replace(**overrides))
"""


def test_plugin_models_are_discovered_lazily_with_their_origin(site):
    write_dist(site, "good-plugin", {"good_plug": GOOD}, {"good": "good_plug"})
    assert "good_plug" not in sys.modules  # nothing is imported before the registry is used
    assert vitzoo.list_models("plug_*") == ["plug_builder", "plug_tiny"]
    assert "good_plug" in sys.modules

    info = vitzoo.model_info("plug_tiny")
    assert info["origin"] == "plugin (good-plugin)"
    assert info["config"]["depth"] == 1 and info["preprocessing"]["input_size"] == (1, 32, 32)  # inherited
    assert vitzoo.model_info("plug_builder")["origin"] == "plugin (good-plugin)"
    model = vitzoo.create("plug_builder", num_classes=5).eval()
    assert model(torch.zeros(2, 1, 32, 32)).shape == (2, 5)
    assert vitzoo.model_info("vit_mnist")["origin"] == "built-in"
    [record] = registry.loaded_plugins()
    assert (record.distribution, record.models, record.error) == ("good-plugin", ("plug_tiny", "plug_builder"), None)

    plugins.reset()  # unregisters the plugin's models
    assert "plug_tiny" not in registry.snapshot()


def test_entry_point_can_name_a_function(site):
    source = """
        import vitzoo
        def register_all():
            vitzoo.register("plug_fn", base="vit_mnist_tiny", num_classes=4)
    """
    write_dist(site, "fn-plugin", {"fn_plug": source}, {"fn": "fn_plug:register_all"})
    assert vitzoo.create("plug_fn")(torch.zeros(1, 1, 32, 32)).shape == (1, 4)
    assert vitzoo.model_info("plug_fn")["origin"] == "plugin (fn-plugin)"


def test_broken_plugin_warns_once_and_the_zoo_keeps_working(site):
    broken = """
        import vitzoo
        vitzoo.register("plug_half", base="vit_mnist_tiny")  # registered before the failure...
        import a_module_that_does_not_exist
    """
    write_dist(site, "broken-plugin", {"broken_plug": broken}, {"broken": "broken_plug"})
    write_dist(site, "good-plugin", {"good_plug": GOOD}, {"good": "good_plug"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        names = vitzoo.list_models()
        vitzoo.list_models()  # discovery runs once: no second warning
    plugin_warnings = [w for w in caught if issubclass(w.category, PluginWarning)]
    assert len(plugin_warnings) == 1
    message = str(plugin_warnings[0].message)
    assert "'broken'" in message and "broken-plugin" in message and "a_module_that_does_not_exist" in message
    assert "plug_half" not in names  # ...and rolled back: a plugin loads whole or not at all
    assert {"plug_tiny", "vit_b16"} <= set(names)  # the other plugin and the built-ins work


def test_unreadable_entry_point_metadata_warns(site):
    write_dist(site, "good-plugin", {"good_plug": GOOD}, {"good": "good_plug"})
    (next(site.glob("good_plugin*.dist-info")) / "entry_points.txt").write_text("[vitzoo.models]\nnot an entry point\n")
    with pytest.warns(PluginWarning, match="could not read the installed packages' entry points"):
        assert "vit_b16" in vitzoo.list_models()


def test_clash_with_a_builtin_is_an_error_naming_both_origins(site):
    source = 'import vitzoo\nvitzoo.register("vit_s16", base="vit_mnist_tiny")\n'
    write_dist(site, "clash-plugin", {"clash_plug": source}, {"clash": "clash_plug"})
    for _ in range(2):  # not swallowed after the first call: the conflict stays visible
        with pytest.raises(RegistryError, match=r"'vit_s16'.*built-in.*plugin \(clash-plugin\)"):
            vitzoo.create("vit_mnist_tiny")
    plugins.reset()
    shutil.rmtree(next(site.glob("clash_plug*.dist-info")))
    assert vitzoo.model_info("vit_s16")["num_params"] == 22_050_664  # the built-in was never replaced


def test_clash_between_two_plugins_names_both(site):
    write_dist(site, "first-plugin", {"first_plug": GOOD}, {"first": "first_plug"})
    write_dist(
        site,
        "second-plugin",
        {"second_plug": 'import vitzoo\nvitzoo.register("plug_tiny")\n'},
        {"second": "second_plug"},
    )
    with pytest.raises(RegistryError, match=r"plugin \(first-plugin\).*plugin \(second-plugin\)"):
        vitzoo.list_models()


def test_override_true_replaces_and_reset_restores(site):
    source = 'import vitzoo\nvitzoo.register("vit_s16", base="vit_mnist_tiny", override=True)\n'
    write_dist(site, "override-plugin", {"override_plug": source}, {"over": "override_plug"})
    info = vitzoo.model_info("vit_s16")
    assert info["origin"] == "plugin (override-plugin)" and info["num_params"] == 5_689
    plugins.reset()
    shutil.rmtree(next(site.glob("override_plug*.dist-info")))
    assert vitzoo.model_info("vit_s16")["origin"] == "built-in"


def test_user_code_registers_after_plugins(site):
    """Registering in user code first loads the plugins, so a clash names the user code as the
    newcomer instead of breaking plugin discovery later."""
    write_dist(site, "good-plugin", {"good_plug": GOOD}, {"good": "good_plug"})
    with pytest.raises(
        RegistryError, match=r"origin: plugin \(good-plugin\)\); the new registration \(origin: user code\)"
    ):

        @vitzoo.register_model
        def plug_tiny(**overrides):
            return vitzoo.VisionTransformer(**overrides)

    assert vitzoo.model_info("plug_tiny")["origin"] == "plugin (good-plugin)"


def test_user_code_origin():
    try:
        vitzoo.register("user_variant_test", base="vit_mnist_tiny", depth=2)
        assert vitzoo.model_info("user_variant_test")["origin"] == "user code"
        with pytest.raises(RegistryError, match=r"built-in.*user code"):
            vitzoo.register("vit_mnist_tiny", base="vit_mnist_tiny")
    finally:
        registry.restore({k: v for k, v in registry.snapshot().items() if k != "user_variant_test"})


@pytest.mark.slow
def test_example_plugin_installed_with_pip(tmp_path, monkeypatch):
    """The shipped example, really installed (pip --target) and then discovered."""
    src = tmp_path / "src"
    shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            str(target),
            str(src),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    plugins.reset()
    monkeypatch.syspath_prepend(str(target))
    try:
        assert vitzoo.list_models("example_*") == ["example_vit_cifar", "example_vit_mnist_shallow"]
        info = vitzoo.model_info("example_vit_mnist_shallow")
        assert info["origin"] == "plugin (vitzoo-plugin-example)" and info["config"]["depth"] == 3
        model = vitzoo.create("example_vit_cifar").eval()
        assert model(torch.zeros(1, 3, 64, 64)).shape == (1, 100)
    finally:
        plugins.reset()


def test_register_custom_example(tmp_path, capsys):
    """examples/register_custom.py: a config variant, a builder, and a shallow model made from the
    first blocks of a saved base (a local copy, as on an air-gapped machine)."""
    import runpy

    torch.manual_seed(0)
    base = vitzoo.create("vit_mnist").eval()  # a small base keeps the test fast; the example defaults to vit_s16
    base.save_pretrained(tmp_path / "base")
    added = ["vit_mnist_deep", "vit_fashion_wide", "vit_mnist_first2"]
    try:
        example = runpy.run_path(str(EXAMPLE.parent / "register_custom.py"), run_name="example")
        example["main"](
            [
                "--base",
                "vit_mnist",
                "--depth",
                "2",
                "--base-weights",
                str(tmp_path / "base"),
                "--out",
                str(tmp_path / "shallow"),
            ]
        )
        out = capsys.readouterr().out
        assert "vit_mnist_deep: " in out and "origin: user code" in out

        assert vitzoo.model_info("vit_mnist_deep")["config"]["depth"] == 8
        assert vitzoo.create("vit_fashion_wide", num_classes=5)(torch.zeros(1, 1, 28, 28)).shape == (1, 5)
        assert "vit_mnist_first2.first_blocks" in vitzoo.list_models(pretrained=True)
        shallow = vitzoo.create("vit_mnist_first2", pretrained=True).eval()
        assert shallow.config.depth == 2 and vitzoo.model_info("vit_mnist_first2")["origin"] == "user code"
        base_state = base.state_dict()
        for key, value in shallow.state_dict().items():
            assert torch.equal(value, base_state[key]), key  # every tensor is the base's own
        with pytest.raises(ValueError, match=r"depth must be in 1\.\.4"):
            example["first_blocks"](base, 7)
    finally:
        for name in added:
            registry.restore({k: v for k, v in registry.snapshot().items() if k != name})


# ------------------------------------------------------------------------------------ threads
SLOW_PLUGIN = """
    import threading, time
    import vitzoo
    vitzoo.register("slow_plug", base="vit_mnist_tiny", depth=1)
    import slow_gate
    slow_gate.started.set()
    slow_gate.release.wait(10)
    {tail}
"""


@pytest.mark.parametrize("fails", [False, True], ids=["loads", "fails"])
def test_other_threads_wait_for_a_slow_plugin_and_keep_their_own_origin(site, fails):
    """While one thread imports a slow plugin, another thread's create() of the plugin's model
    waits for it instead of failing, a register() from that thread is "user code", and when the
    plugin then fails, the user's model is still there."""
    import threading
    import types

    gate = types.ModuleType("slow_gate")
    gate.started, gate.release = threading.Event(), threading.Event()
    sys.modules["slow_gate"] = gate
    tail = "raise RuntimeError('late failure')" if fails else "pass"
    write_dist(site, "slow-plugin", {"slow_plug_mod": SLOW_PLUGIN.format(tail=tail)}, {"slow": "slow_plug_mod"})
    results: dict[str, object] = {}

    def discoverer() -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PluginWarning)
            results["names"] = vitzoo.list_models("slow_*")

    def user() -> None:
        gate.started.wait(10)
        try:
            results["user"] = registry.register("user_model_while_loading", base="vit_mnist_tiny", depth=1)
            if not fails:
                results["created"] = vitzoo.create("slow_plug")
        except Exception as exc:
            results["error"] = exc

    threads = [threading.Thread(target=discoverer), threading.Thread(target=user)]
    try:
        for t in threads:
            t.start()
        gate.started.wait(10)
        gate.release.set()
        for t in threads:
            t.join(30)
        assert "error" not in results, results.get("error")
        assert results["user"].origin == "user code"
        assert "user_model_while_loading" in registry.snapshot()  # not rolled back with the plugin
        if fails:
            assert results["names"] == [] and "slow_plug" not in registry.snapshot()
        else:
            assert results["names"] == ["slow_plug"] and results["created"].config.depth == 1
            assert registry.get_entry("slow_plug").origin == "plugin (slow-plugin)"
    finally:
        sys.modules.pop("slow_gate", None)
        registry.restore({k: v for k, v in registry.snapshot().items() if k != "user_model_while_loading"})


def test_listing_while_other_threads_register():
    """list_models / model lookups never see the table change size under them."""
    import threading

    vitzoo.list_models()
    errors: list[BaseException] = []
    names = [f"thread_model_{i}" for i in range(200)]

    def writer() -> None:
        try:
            for name in names:
                registry.register(name, base="vit_mnist_tiny", depth=1)
        except BaseException as exc:
            errors.append(exc)

    def reader() -> None:
        try:
            for _ in range(300):
                vitzoo.list_models("thread_model_*")
                registry.timm_counterparts()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer), *(threading.Thread(target=reader) for _ in range(3))]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert errors == []
        assert vitzoo.list_models("thread_model_*") == sorted(names)
    finally:
        registry.restore({k: v for k, v in registry.snapshot().items() if not k.startswith("thread_model_")})


# ------------------------------------------------------------------------- hostile plugins
@pytest.mark.parametrize(
    ("body", "expected"),
    [("import sys\nsys.exit(3)", "it called sys.exit(3)"), ("raise BaseException('odd')", "BaseException: odd")],
    ids=["sys-exit", "base-exception"],
)
def test_plugin_that_exits_is_one_warning_and_a_skip(site, capsys, body, expected):
    source = f'import vitzoo\nvitzoo.register("plug_exit", base="vit_mnist_tiny")\n{body}\n'
    write_dist(site, "exit-plugin", {"exit_plug": source}, {"exits": "exit_plug"})
    write_dist(site, "good-plugin", {"good_plug": GOOD}, {"good": "good_plug"})
    from vitzoo import cli

    assert cli.main(["list", "plug_", "--json"]) == 0  # not the plugin's exit code
    out, err = capsys.readouterr()
    assert [row["name"] for row in json.loads(out)] == ["plug_builder", "plug_tiny"]  # plug_exit rolled back
    [line] = err.splitlines()
    assert line.startswith("vitzoo: warning: vitzoo plugin 'exits'") and "exit-plugin" in line and expected in line


HUNG_PLUGIN = """
    import vitzoo
    import hung_gate
    vitzoo.register("plug_hung", base="vit_mnist_tiny")
    hung_gate.started.set()
    hung_gate.release.wait(60)  # blocks like a plugin waiting on a network share
    try:
        vitzoo.register("plug_late", base="vit_mnist_tiny")
    except Exception as exc:
        hung_gate.late_error = exc
"""


def test_plugin_that_hangs_is_skipped_after_the_timeout(site, monkeypatch, capsys):
    import threading
    import types

    gate = types.ModuleType("hung_gate")
    gate.started, gate.release = threading.Event(), threading.Event()
    monkeypatch.setitem(sys.modules, "hung_gate", gate)
    monkeypatch.setenv(plugins.TIMEOUT_ENV, "0.5")
    write_dist(site, "hung-plugin", {"hung_plug": HUNG_PLUGIN}, {"hung": "hung_plug"})
    write_dist(site, "good-plugin", {"good_plug": GOOD}, {"good": "good_plug"})
    from vitzoo import cli

    try:
        assert cli.main(["list", "plug_", "--json"]) == 0
        out, err = capsys.readouterr()
        assert gate.started.is_set()
        assert [row["name"] for row in json.loads(out)] == ["plug_builder", "plug_tiny"]  # plug_hung rolled back
        [line] = err.splitlines()
        assert "plugin 'hung'" in line and "hung-plugin" in line and "did not finish loading within 0.5 s" in line
        assert plugins.TIMEOUT_ENV in line
    finally:
        gate.release.set()
    [worker] = [t for t in threading.enumerate() if t.name == "vitzoo-plugin-hung"] or [None]
    if worker is not None:
        worker.join(30)
    # The abandoned plugin's late registration is refused in its own thread, never added afterwards.
    assert isinstance(getattr(gate, "late_error", None), plugins.PluginAbandonedError)
    assert not {"plug_hung", "plug_late"} & set(registry.snapshot())


def test_invalid_plugin_timeout_is_a_clear_error(site, monkeypatch, capsys):
    from vitzoo import cli

    monkeypatch.setenv(plugins.TIMEOUT_ENV, "soon")
    assert cli.main(["list"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("vitzoo: error: environment variable VITZOO_PLUGIN_TIMEOUT='soon' is invalid")
    monkeypatch.setenv(plugins.TIMEOUT_ENV, "inf")  # waits for ever: allowed
    assert "vit_b16" in vitzoo.list_models()


@pytest.mark.slow
def test_hanging_plugin_does_not_hang_the_command(tmp_path):
    """The real process: `vitzoo list` ends (its plugin thread is a daemon) with one warning."""
    write_dist(tmp_path, "sleepy-plugin", {"sleepy_plug": "import time\ntime.sleep(3600)\n"}, {"sleepy": "sleepy_plug"})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    env[plugins.TIMEOUT_ENV] = "1"
    proc = subprocess.run(
        [sys.executable, "-m", "vitzoo", "list", "vit_mnist_tiny"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,  # generous: only "does not hang" is tested
    )
    assert proc.returncode == 0, proc.stderr
    assert "vit_mnist_tiny" in proc.stdout
    [line] = proc.stderr.splitlines()
    assert "plugin 'sleepy'" in line and "did not finish loading within 1 s" in line
