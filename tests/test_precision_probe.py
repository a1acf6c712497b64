"""vitzoo/precision_probe.py: "auto" on a CPU with native bf16 follows what a short timed probe
measured, remembered per machine and versions. No test here asserts a real timing (a shared
machine's timings are not steady): the timer is the `probe_timer` stand-in, but for one run of the
real workloads at a tiny shape."""

from __future__ import annotations

import json
import math

import pytest
import torch

import vitzoo
from vitzoo import precision, precision_probe
from vitzoo.precision import auto_dtype
from vitzoo.precision_probe import BF16_MARGIN, PrecisionSettingError, verdict
from vitzoo.train import placement
from vitzoo.train.placement import choose_bf16

MACHINE = {"cpu": "Test CPU 9000", "flags": ["avx512_bf16"], "isa": "AVX512"}
CPU = torch.device("cpu")


@pytest.fixture
def native(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU whose flags say it multiplies bf16 matrices natively (whatever runs the suite)."""
    flags_of(monkeypatch, ("avx512_bf16",))


def flags_of(monkeypatch: pytest.MonkeyPatch, flags: tuple[str, ...]) -> None:
    """The native-bf16 flags `auto_dtype` and `choose_bf16` see."""
    monkeypatch.setattr(precision, "native_bf16_flags", lambda: flags)
    monkeypatch.setattr(placement, "native_bf16_flags", lambda: flags)


def entries() -> dict:
    return json.loads(precision_probe.cache_file().read_text())["probes"]


@pytest.mark.parametrize(
    "speedup, bf16, said",
    [
        (2.0, True, "bf16 ran at 2.00x fp32's speed here for inference (measured now in"),
        (0.56, False, "bf16 ran at 0.56x fp32's speed here for inference (measured now in"),
        # a tie keeps fp32, which is exact: bf16 must be BF16_MARGIN faster to be worth its rounding
        (1.02, False, f"less than the {BF16_MARGIN}x that would be worth bf16's rounding"),
        (BF16_MARGIN, True, f"bf16 ran at {BF16_MARGIN:.2f}x"),
    ],
)
def test_the_faster_precision_is_chosen(probe_timer, speedup: float, bf16: bool, said: str) -> None:
    probe_timer.set(inference=speedup)
    answer = verdict("inference", MACHINE)
    assert answer.bf16 is bf16 and said in answer.reason
    assert set(probe_timer.calls) == {("inference", "fp32"), ("inference", "bf16")}  # training when asked


# One probe of one kind of work: a warm-up call of each precision, then the fewest rounds (the
# stand-in timer's seconds are beyond the budget).
ONE_PROBE = 2 * (1 + precision_probe.MIN_ROUNDS)


def test_inference_and_training_are_measured_and_decided_apart(probe_timer) -> None:
    probe_timer.set(inference=0.56, training=1.8)
    assert not verdict("inference", MACHINE).bf16
    assert verdict("training", MACHINE).bf16
    assert len(probe_timer.calls) == 2 * ONE_PROBE
    assert {e["work"]: e["speedup"] for e in entries().values()} == {"inference": 0.56, "training": 1.8}


def test_the_median_round_decides_the_order_alternates_and_one_thread_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each round's fp32 / bf16 ratio, then their median: one disturbed round (another process
    took the core while bf16 ran) does not change the answer. The probe runs on one thread, and
    the caller's thread count is restored."""
    bf16_seconds = iter([1.0, 1.0, 9.0, 1.0, 1.0, 1.0])  # the warm-up, then the rounds
    seen: list[tuple[tuple[str, str], int]] = []

    def timer(name: tuple[str, str], run: object) -> float:
        seen.append((name, torch.get_num_threads()))
        return 2.0 if name[1] == "fp32" else next(bf16_seconds)

    monkeypatch.setattr(precision_probe, "time_call", timer)
    monkeypatch.setattr(precision_probe, "workloads", lambda *args: dict.fromkeys(("fp32", "bf16"), lambda: None))
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert precision_probe.measure("inference", rounds=5) == 2.0
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)
    order = [name[1] for name, _ in seen]
    assert order[:6] == ["fp32", "bf16", "fp32", "bf16", "bf16", "fp32"]  # warm-up, round 0, round 1
    assert {t for _, t in seen} == {precision_probe.PROBE_THREADS}


@pytest.mark.parametrize("call_s, rounds", [(1e-3, precision_probe.ROUNDS), (1.0, precision_probe.MIN_ROUNDS)])
def test_more_rounds_are_measured_only_within_the_budget(monkeypatch, call_s: float, rounds: int) -> None:
    calls: list[tuple[str, str]] = []
    monkeypatch.setattr(precision_probe, "time_call", lambda name, run: calls.append(name) or call_s)
    monkeypatch.setattr(precision_probe, "workloads", lambda *args: dict.fromkeys(("fp32", "bf16"), lambda: None))
    assert precision_probe.measure("training") == 1.0
    assert len(calls) == 2 * (1 + rounds)


def test_the_answer_is_remembered_and_reused_without_timing(probe_timer) -> None:
    probe_timer.set(inference=0.56, training=1.8)
    first, first_training = verdict("inference", MACHINE), verdict("training", MACHINE)
    entry = next(e for e in entries().values() if e["work"] == "inference")
    assert entry["speedup"] == 0.56 and entry["machine"] == MACHINE and entry["torch"] == torch.__version__
    precision_probe._measured.clear()  # a new process
    probe_timer.forbid()
    again = verdict("inference", MACHINE)
    assert again.bf16 is first.bf16 is False
    assert f"measured before, remembered in {precision_probe.cache_file()}" in again.reason
    assert verdict("training", MACHINE).bf16 is first_training.bf16 is True


@pytest.mark.parametrize(
    "change",
    [
        lambda mp: mp.setattr(torch, "__version__", "9.9.9"),
        lambda mp: mp.setenv("MKL_ENABLE_INSTRUCTIONS", "SSE4_2"),
        lambda mp: mp.setitem(MACHINE, "isa", "AVX512, ONEDNN_MAX_CPU_ISA=AVX512_CORE_AMX"),
        lambda mp: mp.setitem(MACHINE, "flags", ["amx_bf16", "avx512_bf16"]),
        lambda mp: mp.setitem(MACHINE, "cpu", "Another CPU"),
    ],
    ids=["torch", "mkl-cap", "isa", "flags", "cpu"],
)
def test_another_machine_or_version_is_measured_again(probe_timer, monkeypatch, change) -> None:
    verdict("inference", MACHINE)
    precision_probe._measured.clear()
    change(monkeypatch)
    verdict("inference", MACHINE)
    assert len(probe_timer.calls) == 2 * ONE_PROBE and len(entries()) == 2


def test_the_callers_thread_count_is_not_in_the_key(probe_timer, monkeypatch) -> None:
    """The probe runs on PROBE_THREADS whatever the caller uses: another count reads the same answer."""
    verdict("inference", MACHINE)
    precision_probe._measured.clear()
    monkeypatch.setattr(torch, "get_num_threads", lambda: 97)
    assert "measured before" in verdict("inference", MACHINE).reason
    assert len(probe_timer.calls) == ONE_PROBE


@pytest.mark.parametrize(
    "damage",
    [
        lambda key: {"probes": {key: {"speedup": -1.0}}},
        lambda key: {"probes": {key: {"speedup": 1e6}}},
        lambda key: {"probes": {key: {"speedup": "fast"}}},
        lambda key: {"probes": {key: {"speedup": True}}},
        lambda key: {"probes": {key: {"work": "inference"}}},
        lambda key: {"probes": {key: [1, 2]}},
        lambda key: {"probes": "gone"},
    ],
    ids=["negative", "absurd", "string", "bool", "missing", "not-an-object", "no-section"],
)
def test_a_damaged_or_tampered_entry_is_measured_again(probe_timer, damage) -> None:
    verdict("inference", MACHINE)
    key = next(iter(entries()))
    precision_probe.cache_file().write_text(json.dumps(damage(key)))
    precision_probe._measured.clear()
    probe_timer.set(inference=0.5)
    assert not verdict("inference", MACHINE).bf16  # measured again, not read
    assert entries()[key]["speedup"] == 0.5  # and replaced
    assert len(probe_timer.calls) == 2 * ONE_PROBE


def test_a_file_that_is_not_json_is_measured_again_and_replaced(probe_timer) -> None:
    path = precision_probe.cache_file()
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\x00{not json")
    assert verdict("inference", MACHINE).bf16 and probe_timer.calls
    assert len(entries()) == 1


def test_an_unwritable_cache_costs_one_probe_a_process(probe_timer, tmp_path, monkeypatch) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("VITZOO_CACHE", str(tmp_path / "file" / "below"))  # a folder that cannot be made
    first = verdict("inference", MACHINE)
    assert "could not record it in" in first.reason
    assert "measured earlier in this process" in verdict("inference", MACHINE).reason
    assert len(probe_timer.calls) == ONE_PROBE


@pytest.mark.parametrize("value, bf16", [("fp32", False), ("bf16", True), (" BF16 ", True)])
def test_vitzoo_precision_answers_without_measuring(probe_timer, monkeypatch, native, value, bf16) -> None:
    probe_timer.forbid()
    monkeypatch.setenv("VITZOO_PRECISION", value)
    dtype, why = auto_dtype("cpu")
    assert dtype == (torch.bfloat16 if bf16 else torch.float32)
    assert why.endswith(f"VITZOO_PRECISION={value.strip().lower()} asks for {value.strip().lower()} (not measured)")
    assert choose_bf16("auto", CPU, vitzoo.create("vit_mnist_tiny"))[0] is bf16
    assert not precision_probe.cache_file().exists()


def test_a_bad_vitzoo_precision_is_one_clear_error(probe_timer, monkeypatch, native) -> None:
    monkeypatch.setenv("VITZOO_PRECISION", "fast")
    expected = r"^VITZOO_PRECISION='fast' is invalid; expected fp32 or bf16 .*or unset to measure$"
    with pytest.raises(PrecisionSettingError, match=expected):
        auto_dtype("cpu")
    with pytest.raises(ValueError, match=expected):
        vitzoo.create("vit_mnist_tiny", dtype="auto")


def test_where_bf16_is_emulated_auto_keeps_fp32_without_probing(probe_timer, monkeypatch) -> None:
    probe_timer.forbid()
    flags_of(monkeypatch, ())
    dtype, why = auto_dtype("cpu")
    assert dtype == torch.float32 and "bf16 would be emulated, slower than fp32" in why
    on, why = choose_bf16("auto", CPU, vitzoo.create("vit_mnist_tiny"))
    assert not on and "bf16 would be emulated" in why


def test_an_avx2_cap_keeps_fp32_without_probing(probe_timer, monkeypatch) -> None:
    """CI's AVX2 run: a CPU with bf16 units run as an AVX2-only one (ONEDNN_MAX_CPU_ISA=AVX2)."""
    probe_timer.forbid()
    monkeypatch.setattr(precision, "cpu_bf16_flags", lambda: ("amx_bf16", "avx512_bf16"))
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    dtype, why = auto_dtype("cpu")
    assert dtype == torch.float32 and "ONEDNN_MAX_CPU_ISA=AVX2" in why
    assert not choose_bf16("auto", CPU, vitzoo.create("vit_mnist_tiny"))[0]


@pytest.mark.parametrize("speedup, dtype", [(2.0, torch.bfloat16), (0.56, torch.float32)])
def test_create_and_from_pretrained_follow_the_probe(probe_timer, native, tmp_path, speedup, dtype) -> None:
    probe_timer.set(inference=speedup, training=1 / speedup)  # training's answer is not the one asked
    model = vitzoo.create("vit_mnist_tiny", dtype="auto")
    assert {p.dtype for p in model.parameters()} == {dtype}
    vitzoo.save_pretrained(vitzoo.create("vit_mnist_tiny"), tmp_path / "w")
    assert {p.dtype for p in vitzoo.from_pretrained(tmp_path / "w", dtype="auto").parameters()} == {dtype}
    assert len(probe_timer.calls) == ONE_PROBE  # measured once, then remembered


def test_amp_auto_follows_the_training_probe(probe_timer, native) -> None:
    probe_timer.set(inference=2.0, training=0.62)
    on, why = choose_bf16("auto", CPU, vitzoo.create("vit_mnist_tiny"))
    assert not on and why.startswith(
        "auto: this CPU multiplies bf16 matrices natively (avx512_bf16), but bf16 ran at 0.62x"
    )
    assert "for training" in why
    precision_probe._measured.clear()
    precision_probe.cache_file().unlink()
    probe_timer.set(training=1.7)
    on, why = choose_bf16("auto", CPU, vitzoo.create("vit_mnist_tiny"))
    assert on and "and bf16 ran at 1.70x fp32's speed here for training" in why


def test_the_real_workloads_run_and_give_positive_speedups(monkeypatch, tmp_path) -> None:
    """The probe itself, at a tiny shape and one round: it runs (in bf16 natively or emulated), even
    when asked from within torch.inference_mode (create(dtype="auto") there), and answers a finite
    positive ratio for each kind of work; which one is faster is not asserted."""
    monkeypatch.setattr(precision_probe, "SHAPE", (4, 16, 32))
    if precision.bf16_emulation_problem() is not None:
        pytest.skip(f"torch {torch.__version__} cannot compute bf16 on this CPU")
    for work in ("inference", "training"):
        with torch.inference_mode():
            speedup = precision_probe.measure(work, rounds=1)
        assert math.isfinite(speedup) and speedup > 0


def test_the_cpu_is_named_by_its_model_name(tmp_path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor : 0\nvendor_id : AuthenticAMD\nmodel name : AMD EPYC 9R14 96-Core Processor\n")
    assert precision.cpu_name(cpuinfo) == "AMD EPYC 9R14 96-Core Processor"
    assert precision.cpu_name(tmp_path / "missing")  # not Linux: platform's name, or "unknown CPU"
