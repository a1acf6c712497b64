"""Test-suite-wide setup: no test can reach the real Hugging Face Hub.

At import time, before any test module (or timm / transformers) imports huggingface_hub, which
reads these variables once:

* HF_HOME / HF_HUB_CACHE point into a fresh temporary directory;
* HF_ENDPOINT points at `FakeHub`, an HTTP server on 127.0.0.1 (port chosen by the OS) that
  answers the Hub's file requests `/{org}/{repo}/resolve/{revision}/{filename}` (HEAD and GET,
  with X-Repo-Commit, ETag and Content-Length) for repos that tests publish to it, and 404s for
  everything else - so a stray download fails at once instead of retrying against huggingface.co;
  It also takes uploads as the Hub's API does (`POST /api/repos/create`, `.../branch/{name}`,
  `.../preupload/{revision}`, `.../commit/{revision}` with every file inline, `/api/validate-yaml`):
  a commit is applied whole when its request succeeds, never in part;
* HF_HUB_OFFLINE is cleared and tokens are removed, so the user's environment cannot leak in;
* VITZOO_PRECISION=bf16: "auto" precision on a CPU with native bf16 is decided without timing.

Fixtures:
    fake_hub   the server; `fake_hub.publish("org/repo", {"model.safetensors": path_or_bytes})`,
               `fake_hub.publish_dir("org/repo", directory)`, `fake_hub.requests` (method, path)
               log, `fake_hub.fail_with("org/repo", 500)`, `fake_hub.truncate("org/repo")`,
               `fake_hub.fail_commits("org/repo", 500)` (the commit request fails after its body
               arrived), `fake_hub.commits` (repo_id, revision, message, Authorization header),
               `fake_hub.private` (repos created private), `fake_hub.files("org/repo", revision)`
    hf_cache   an empty hub cache directory for one test (HF_HUB_CACHE points at it)
    silent_hub the URL of a server on 127.0.0.1 that accepts connections and never answers
    mnist_dir  600 + 200 real digits as a raw MNIST directory (`--data mnist --data-dir`)
    png_size   (width, height) of a PNG file, after checking that it decodes fully
    load_benchmark   a function: benchmarks/STEM.py imported as a module, for the tests of that script
    memory_cap the address space capped a little above its size for one test (a hostile config's
               allocation fails at once)
    probe_timer  the CPU's bf16 probe asked as outside the suite, with the timings a test sets
               (`probe_timer.set(inference=0.56)`: bf16 at 0.56x fp32), its cache under tmp_path
    fsdp_runs  the directory of one torchrun launch of tests/train/_fsdp_worker.py (2 gloo processes;
               FSDP loads, runs and resumes, the FSDP benchmark's fsdp mode), shared by
               tests/train/test_fsdp.py and tests/benchmarks/test_benchmark_fsdp.py
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType
from urllib.parse import unquote

import pytest


class FakeHub:
    """A minimal Hugging Face Hub: published repos, file resolution, failure injection."""

    def __init__(self) -> None:
        # repo_id -> revision name or commit -> (commit, {filename: bytes})
        self.repos: dict[str, dict[str, tuple[str, dict[str, bytes]]]] = {}
        self.requests: list[tuple[str, str]] = []
        self.user_agents: list[str] = []  # the User-Agent header of each file request, in order
        self.failures: dict[str, int] = {}  # repo_id -> HTTP status answered to every request
        self.truncated: set[str] = set()  # repos whose GETs break off half-way
        self.commit_failures: dict[str, int] = {}  # repo_id -> HTTP status answered to its commits
        self.commits: list[tuple[str, str, str, str]] = []  # (repo_id, revision, message, Authorization)
        self.private: set[str] = set()  # repos created private
        self._lock = threading.Lock()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_HEAD(self) -> None:
                hub._answer(self, body=False)

            def do_GET(self) -> None:
                hub._answer(self, body=True)

            def do_POST(self) -> None:
                hub._post(self)

            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, name="fake-hub", daemon=True)
        self.thread.start()

    # ---------------------------------------------------------------- publishing
    def publish(self, repo_id: str, files: dict[str, bytes | str | os.PathLike[str]], *, revision: str = "main") -> str:
        """Publish `files` as `revision` of `repo_id` (replacing what was there); returns the commit."""
        data = {name: (Path(v).read_bytes() if not isinstance(v, bytes) else v) for name, v in files.items()}
        digest = hashlib.sha1(repr(sorted((n, hashlib.sha256(b).hexdigest()) for n, b in data.items())).encode())
        commit = digest.hexdigest()
        with self._lock:
            revisions = self.repos.setdefault(repo_id, {})
            revisions[revision] = (commit, data)
            revisions[commit] = (commit, data)
        return commit

    def publish_dir(self, repo_id: str, directory: str | os.PathLike[str], *, revision: str = "main") -> str:
        files = {p.name: p for p in Path(directory).iterdir() if p.is_file()}
        return self.publish(repo_id, files, revision=revision)

    def fail_with(self, repo_id: str, status: int) -> None:
        self.failures[repo_id] = status

    def fail_commits(self, repo_id: str, status: int) -> None:
        self.commit_failures[repo_id] = status

    def files(self, repo_id: str, revision: str = "main") -> dict[str, bytes]:
        """The files of `revision` of a published repo ({} when there is none)."""
        with self._lock:
            return dict(self.repos.get(repo_id, {}).get(revision, ("", {}))[1])

    def truncate(self, repo_id: str) -> None:
        """The next GET of the repo breaks off half-way; every request after it gets HTTP 500."""
        self.truncated.add(repo_id)

    def gets(self, filename: str | None = None) -> list[str]:
        """Paths of the GET requests seen (for one file name, if given)."""
        return [p for m, p in self.requests if m == "GET" and (filename is None or p.endswith("/" + filename))]

    def reset(self) -> None:
        with self._lock:
            self.repos.clear()
            self.requests.clear()
            self.user_agents.clear()
            self.failures.clear()
            self.truncated.clear()
            self.commit_failures.clear()
            self.commits.clear()
            self.private.clear()

    # ---------------------------------------------------------------- serving
    def _answer(self, handler: BaseHTTPRequestHandler, *, body: bool) -> None:
        path = unquote(handler.path.split("?", 1)[0])
        with self._lock:
            self.requests.append((handler.command, path))
            self.user_agents.append(handler.headers.get("User-Agent", ""))
        parts = path.lstrip("/").split("/")
        # /{org}/{repo}/resolve/{revision}/{filename...}; revisions with '/' arrive URL-encoded.
        if len(parts) < 5 or parts[2] != "resolve":
            return self._send(handler, 404, b"not found", {"X-Error-Code": "RepoNotFound"}, body)
        repo_id, revision, filename = f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:])
        if repo_id in self.failures:
            return self._send(handler, self.failures[repo_id], b"injected server error", {}, body)
        revisions = self.repos.get(repo_id)
        if revisions is None:
            return self._send(handler, 404, b"Repository not found", {"X-Error-Code": "RepoNotFound"}, body)
        if revision not in revisions:
            return self._send(handler, 404, b"Revision not found", {"X-Error-Code": "RevisionNotFound"}, body)
        commit, files = revisions[revision]
        if filename not in files:
            headers = {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": commit}
            return self._send(handler, 404, b"Entry not found", headers, body)
        data = files[filename]
        headers = {
            "X-Repo-Commit": commit,
            "ETag": f'"{hashlib.sha256(data).hexdigest()}"',
            "Content-Type": "application/octet-stream",
        }
        if body and repo_id in self.truncated:  # announce the full size, send half, hang up;
            self.truncated.discard(repo_id)  # the client's resume attempt then meets a server error
            self.failures[repo_id] = 500
            handler.send_response(200)
            for k, v in headers.items():
                handler.send_header(k, v)
            handler.send_header("Content-Length", str(len(data)))
            handler.send_header("Connection", "close")
            handler.end_headers()
            handler.wfile.write(data[: len(data) // 2])
            handler.wfile.flush()
            handler.close_connection = True
            return None
        return self._send(handler, 200, data, headers, body)

    # ---------------------------------------------------------------- uploads
    def _post(self, handler: BaseHTTPRequestHandler) -> None:
        path = unquote(handler.path.split("?", 1)[0])
        body = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        with self._lock:
            self.requests.append(("POST", path))
        parts = path.lstrip("/").split("/")
        if path == "/api/validate-yaml":
            return self._send_json(handler, 200, {"errors": [], "warnings": []})
        if path == "/api/repos/create":
            request = json.loads(body)
            name = request["name"] if "/" in request["name"] else f"{request.get('organization')}/{request['name']}"
            if name in self.repos:
                return self._send_json(handler, 409, {"error": "You already created this model repo", "url": name})
            self.publish(name, {".gitattributes": b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n"})
            # older huggingface_hub sends "private", newer "visibility"
            if request.get("private") or request.get("visibility") == "private":
                self.private.add(name)
            return self._send_json(handler, 200, {"url": f"{self.url}/{name}", "name": name})
        # /api/models/{org}/{repo}/{action}/{revision}
        if len(parts) != 6 or parts[:2] != ["api", "models"]:
            return self._send_json(handler, 404, {"error": "not found"})
        repo_id, action, revision = f"{parts[2]}/{parts[3]}", parts[4], parts[5]
        if repo_id not in self.repos:
            return self._send_json(handler, 404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
        if action == "branch":
            if revision in self.repos[repo_id]:
                return self._send_json(handler, 409, {"error": f"branch {revision} already exists"})
            self.publish(repo_id, self.files(repo_id), revision=revision)
            return self._send_json(handler, 200, {})
        if revision not in self.repos[repo_id]:
            headers = {"X-Error-Code": "RevisionNotFound"}
            return self._send_json(handler, 404, {"error": "Revision not found"}, headers)
        if action == "preupload":
            files = [
                {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False, "oid": None}
                for f in json.loads(body)["files"]
            ]
            return self._send_json(handler, 200, {"files": files})
        if action == "commit":
            return self._commit(handler, repo_id, revision, body)
        return self._send_json(handler, 404, {"error": "not found"})

    def _commit(self, handler: BaseHTTPRequestHandler, repo_id: str, revision: str, body: bytes) -> None:
        """Apply an NDJSON commit of inline files whole, or answer an injected failure and change nothing."""
        if repo_id in self.commit_failures:
            return self._send_json(handler, self.commit_failures[repo_id], {"error": "injected commit failure"})
        lines = [json.loads(line) for line in body.splitlines() if line.strip()]
        files = self.files(repo_id, revision)
        message = ""
        for line in lines:
            value = line["value"]
            if line["key"] == "header":
                message = value["summary"]
            elif line["key"] == "file":
                files[value["path"]] = base64.b64decode(value["content"])
            elif line["key"] == "deletedFile":
                files.pop(value["path"], None)
            else:  # LFS and copies: this hub answers every preupload with "regular"
                return self._send_json(handler, 400, {"error": f"unsupported commit operation {line['key']}"})
        commit = self.publish(repo_id, files, revision=revision)
        with self._lock:
            self.commits.append((repo_id, revision, message, handler.headers.get("Authorization", "")))
        answer = {"commitUrl": f"{self.url}/{repo_id}/commit/{commit}", "commitOid": commit, "pullRequestUrl": None}
        return self._send_json(handler, 200, answer)

    @classmethod
    def _send_json(
        cls, handler: BaseHTTPRequestHandler, status: int, data: dict, headers: dict[str, str] | None = None
    ) -> None:
        cls._send(
            handler, status, json.dumps(data).encode(), {"Content-Type": "application/json", **(headers or {})}, True
        )

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, status: int, data: bytes, headers: dict[str, str], body: bool) -> None:
        handler.send_response(status)
        for k, v in headers.items():
            handler.send_header(k, v)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        if body:
            handler.wfile.write(data)


# ------------------------------------------------------------------ environment, set at import
_HF_HOME = Path(tempfile.mkdtemp(prefix="vitzoo-tests-hf-"))
FAKE_HUB = FakeHub()
for _var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE"):
    os.environ.pop(_var, None)
os.environ.update(
    {
        "HF_HOME": str(_HF_HOME),
        "HF_HUB_CACHE": str(_HF_HOME / "hub"),
        "HF_ENDPOINT": FAKE_HUB.url,
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_XET": "1",  # the fake hub serves plain HTTP files
        "HF_HUB_ETAG_TIMEOUT": "5",
        "HF_HUB_DOWNLOAD_TIMEOUT": "5",
        # "auto" on a CPU with native bf16 follows vitzoo/precision_probe.py's timings, which a shared
        # machine cannot take steadily: the suite answers bf16 there (what the flags alone decided
        # before the probe), times nothing and writes no cache. The probe's own tests unset it.
        "VITZOO_PRECISION": "bf16",
    }
)


def pytest_unconfigure(config: pytest.Config) -> None:
    FAKE_HUB.server.shutdown()
    shutil.rmtree(_HF_HOME, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects: the marks added here count
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test marked `every_config` runs over the curated models (its parameter `name`): the default
    run keeps the smallest model of each family, `-m slow` (CI) every other one."""
    marked = [item for item in items if item.get_closest_marker("every_config") is not None]
    if not marked:
        return
    import vitzoo
    from vitzoo import registry

    vitzoo.list_models()  # the built-in table registered
    kept: dict[tuple[str, str], tuple[int, pytest.Item]] = {}
    for item in marked:
        name = item.callspec.params["name"]  # type: ignore[attr-defined]
        entry = registry.get_entry(name)
        key, size = (item.originalname, entry.family), entry.resolve_config().num_params  # type: ignore[attr-defined]
        if key not in kept or size < kept[key][0]:
            kept[key] = (size, item)
    chosen = {id(item) for _, item in kept.values()}
    for item in marked:
        if id(item) not in chosen:
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def fake_hub() -> Iterator[FakeHub]:
    """The local Hub; its repos and request log are emptied after each test."""
    FAKE_HUB.requests.clear()
    FAKE_HUB.user_agents.clear()
    yield FAKE_HUB
    FAKE_HUB.reset()


@pytest.fixture
def silent_hub() -> Iterator[str]:
    """A Hub that accepts every connection and never answers; its connections are closed after
    the test (a request a client gave up on then ends)."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.05)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, name="silent-hub", daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


@pytest.fixture
def hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty hub cache for one test. huggingface_hub read HF_HUB_CACHE at import, so its
    constant is patched too (timm and transformers call it without a cache_dir)."""
    from huggingface_hub import constants

    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    return cache


@pytest.fixture(scope="session")
def mnist_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """600 + 200 real digits written as a raw MNIST directory (.gz), for `--data mnist --data-dir`."""
    import torch

    from vitzoo.data import load_mnist_sample, write_idx

    root = tmp_path_factory.mktemp("mnist")
    sample = load_mnist_sample()
    write_idx(root / "train-images-idx3-ubyte.gz", sample.train.images[:600, 0])
    write_idx(root / "train-labels-idx1-ubyte.gz", sample.train.labels[:600].to(torch.uint8))
    write_idx(root / "t10k-images-idx3-ubyte.gz", sample.val.images[:200, 0])
    write_idx(root / "t10k-labels-idx1-ubyte.gz", sample.val.labels[:200].to(torch.uint8))
    return root


def _png_size(path: Path) -> tuple[int, int]:
    """(width, height) of a PNG, after checking the signature and that Pillow decodes it fully."""
    import struct

    from PIL import Image

    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG file"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    with Image.open(path) as img:
        img.load()  # decodes every row: a truncated file fails here
        assert img.size == (width, height)
    return width, height


@pytest.fixture
def png_size() -> Callable[[Path], tuple[int, int]]:
    return _png_size


@pytest.fixture(scope="session")
def load_benchmark() -> Iterator[Callable[[str], ModuleType]]:
    """benchmarks/STEM.py imported under a private name (removed from sys.modules at the end)."""
    scripts = Path(__file__).resolve().parents[1] / "benchmarks"
    loaded: list[str] = []

    def load(stem: str) -> ModuleType:
        spec = importlib.util.spec_from_file_location(f"vitzoo_benchmark_{stem}", scripts / f"{stem}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up while the class is created
        loaded.append(spec.name)
        spec.loader.exec_module(module)
        return module

    yield load
    for name in loaded:
        sys.modules.pop(name, None)


class ProbeTimer:
    """A stand-in for vitzoo/precision_probe.py's timer: it runs nothing and reports that bf16 ran
    at `speedups[work]` times fp32's speed ({"inference": 2.0, "training": 0.5}), bf16's call taking
    a second (beyond the probe's budget: it runs its fewest rounds); `calls` lists the workloads it
    was asked to time, (work, precision). `forbid()`: any call fails the test."""

    def __init__(self) -> None:
        self.speedups = {"inference": 2.0, "training": 2.0}
        self.calls: list[tuple[str, str]] = []
        self.forbidden = False

    def set(self, **speedups: float) -> None:
        self.speedups.update(speedups)

    def forbid(self) -> None:
        self.forbidden = True

    def __call__(self, name: tuple[str, str], run: Callable[[], object]) -> float:
        assert not self.forbidden, f"the precision probe timed {name}, where it should not have measured"
        self.calls.append(name)
        work, precision = name
        return self.speedups[work] if precision == "fp32" else 1.0


@pytest.fixture
def probe_timer(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ProbeTimer:
    """ "auto" on a CPU with native bf16 asks the precision probe, as outside the suite
    (VITZOO_PRECISION unset), whose timings are the returned ProbeTimer's; its answers are
    remembered under tmp_path, none from earlier in the process."""
    from vitzoo import precision_probe

    timer = ProbeTimer()
    monkeypatch.delenv("VITZOO_PRECISION", raising=False)
    monkeypatch.setenv("VITZOO_CACHE", str(tmp_path / "vitzoo-cache"))
    monkeypatch.setattr(precision_probe, "time_call", timer)
    monkeypatch.setattr(precision_probe, "_measured", {})
    return timer


@pytest.fixture
def memory_cap() -> Iterator[None]:
    """Cap this process's address space a little above its current size for one test, so that a
    regression that sizes an allocation by a hostile config fails at once with torch's "can't
    allocate memory" instead of taking the machine's memory."""
    resource = pytest.importorskip("resource")
    status = Path("/proc/self/status")
    if not status.is_file():
        pytest.skip("needs Linux /proc to measure the address space")
    vm_kib = next(int(line.split()[1]) for line in status.read_text().splitlines() if line.startswith("VmSize:"))
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = vm_kib * 1024 + 2**30
    for limit in (soft, hard):  # never raise a limit someone else set lower
        if limit != resource.RLIM_INFINITY:
            cap = min(cap, limit)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@pytest.fixture(scope="session")
def digit_scenes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny digits-on-photos segmentation dataset (plain layout): 8 training and 4 validation
    scenes of 48x64 pixels (vitzoo.data.synthetic_seg; needs scikit-image)."""
    pytest.importorskip("skimage", reason="scikit-image (a dev dependency) provides the photos")
    from vitzoo.data.synthetic_seg import build_digit_scenes

    return build_digit_scenes(
        tmp_path_factory.mktemp("scenes") / "scenes", train=8, val=4, size=(48, 64), scale=(1.0, 1.4), seed=0
    )


@pytest.fixture(scope="session")
def fsdp_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One launch of tests/train/_fsdp_worker.py in 2 processes (see its docstring for what it
    leaves where); OUT/big, the model whose load the worker measures, is written here, so no
    worker process ever held it whole."""
    import torch

    import vitzoo

    here = Path(__file__).resolve().parent / "train"
    sys.path.insert(0, str(here))
    from _fsdp_worker import BIG

    out = tmp_path_factory.mktemp("fsdp")
    torch.manual_seed(0)
    vitzoo.create("vit_mnist", **BIG).save_pretrained(out / "big")
    path = os.pathsep.join(p for p in (str(here), os.environ.get("PYTHONPATH", "")) if p)
    # glibc hands freed blocks back at once, so the resident set follows the memory in use
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path, "MALLOC_MMAP_THRESHOLD_": "65536"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    proc = subprocess.Popen(
        [*command, str(here / "_fsdp_worker.py"), str(out)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        raise AssertionError("torchrun with 2 processes did not finish in 300 s:\n" + output[-3000:]) from None
    assert proc.returncode == 0, output[-3000:]
    return out


# vitzoo's one-line refusal where the installed torch cannot compute bf16 on this CPU at all (torch 2.1
# on x86 without AVX-512: vitzoo.precision.PrecisionUnavailableError).
NO_BF16_HERE = "bf16 cannot run on this CPU with torch"


def _no_bf16_here(text: str) -> bool:
    """Whether a failure is this torch's missing bf16 kernels: vitzoo's refusal, or oneDNN's own error
    where a test computes bf16 directly and vitzoo's probe finds torch cannot (never on newer torch)."""
    if NO_BF16_HERE in text:
        return True
    if "could not create a primitive descriptor" not in text:
        return False
    from vitzoo.precision import bf16_emulation_problem

    return bf16_emulation_problem() is not None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """A test that computes in bf16 where vitzoo refuses it (NO_BF16_HERE, raised or printed by a
    command) is reported skipped, naming the torch version: newer torch emulates bf16 there."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when == "call" and report.failed and _no_bf16_here(report.longreprtext + report.capstderr):
        import torch

        report.outcome = "skipped"
        report.longrepr = (
            str(item.path),
            item.location[1] or 0,
            f"Skipped: torch {torch.__version__} cannot compute bf16 on this CPU (newer torch emulates it)",
        )
