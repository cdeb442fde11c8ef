"""The gain model that knows host from device: step bounds from traces, predicted step after a fix."""

from pathlib import Path

import pytest

from playbooks.engine import diagnose, load_playbooks
from playbooks.predict import predict_step_us
from state.profiling.diagnosis import DiagnosisContext, StepEffect
from tools.trace import read_chrome_trace

from .glm5_shaped import glm5_profile
from .test_trace import TRACES

# The synthetic glm5 traces carry served host times (85 ms of issue per step, as served, not the
# 150-257 ms a profiler makes of it): no de-profiling.
CTX = DiagnosisContext(target_kind="mla_server", active_tokens=230, host_inflation=1.0)
CAST, LAUNCH = "kv-cache-full-pool-cast", "launch-bound-decode"


def findings(profile) -> tuple:
    return profile, {f.playbook: f for f in diagnose(profile, CTX, load_playbooks()).findings}


def test_eager_glm5_step_is_launch_bound_and_the_cast_fix_alone_gains_little(tmp_path: Path) -> None:
    profile, found = findings(glm5_profile(tmp_path, cast=True, graph=False))
    b = profile.step_bounds
    assert b.bound == "host launch" and b.graph_launches == 0
    assert b.issue_us == pytest.approx(85000, rel=0.02) and b.device_us == pytest.approx(81000, rel=0.02)
    cast = found[CAST]
    assert cast.evidence[0].share > 0.8  # the profile's share is still shown...
    assert cast.predicted_speedup <= 1.2 and cast.bound == "host launch"  # ...but not promised
    assert cast.bound_after == "host launch" and cast.predicted_step_ms == pytest.approx(
        b.wall_us / 1000, rel=0.05
    )
    # CUDA graphs alone: the host bound goes, the cast stays the device's work: little gain either.
    graphs = found[LAUNCH]
    assert graphs.effect.graphs and graphs.predicted_speedup < 1.2 and graphs.bound_after == "device"
    # Together they are predicted to gain several times: each names the other.
    assert cast.paired_with == LAUNCH and graphs.paired_with == CAST
    assert cast.paired_speedup >= 3 and graphs.paired_speedup == pytest.approx(cast.paired_speedup)


@pytest.mark.parametrize("blocking", [False, True], ids=["short-launch-call", "launch-call-spans-replay"])
def test_under_cuda_graphs_the_cast_is_the_bound_and_its_fix_gains_several_times(
    tmp_path: Path, blocking: bool
) -> None:
    """Also when the graph-launch call lasts the whole replay (the H200's API-method trace: issue
    87.4 ms against 82.5 ms of device time made the step look host bound, the cast fix was predicted
    1.00x and realized 5.24x): the host holds the device back only until its first kernel runs."""
    profile, found = findings(glm5_profile(tmp_path, cast=True, graph=True, blocking_graph_launch=blocking))
    b = profile.step_bounds
    assert b.graph_launches == 1 and b.bound == "device" and b.issue_us < 100
    assert profile.ops[0].name == "CUDA graph"  # no operators inside a replay...
    cast = found[CAST]  # ...so the cast is matched by its kernel name
    assert cast.confidence == 0.6 and cast.evidence[0].calls == 78 * 3
    assert cast.predicted_speedup >= 3 and cast.bound == "device" and cast.bound_after == "device"
    assert LAUNCH not in found


def test_graphs_after_the_cast_fix_predict_the_measured_step(tmp_path: Path) -> None:
    """Eager gather-then-cast (issue: 80.9 ms served, host bound) under a graph: 17.9 ms measured."""
    profile, found = findings(glm5_profile(tmp_path, cast=False, graph=False))
    graphs = found[LAUNCH]
    assert profile.step_bounds.bound == "host launch"
    assert graphs.predicted_step_ms == pytest.approx(17.9, rel=0.25) and graphs.predicted_speedup >= 4
    assert CAST not in found


def test_predict_is_the_bound_that_remains(tmp_path: Path) -> None:
    b = glm5_profile(tmp_path, cast=True, graph=False).step_bounds
    assert b is not None
    assert predict_step_us(b, []) == pytest.approx(b.wall_us)
    small = predict_step_us(b, [StepEffect(device_removed_us=1000)])
    assert small == pytest.approx(b.wall_us)  # device work under a host bound: nothing
    fixed = glm5_profile(tmp_path, cast=False, graph=False).step_bounds
    assert fixed is not None
    fused = predict_step_us(fixed, [StepEffect(kernels_removed=fixed.kernels / 2)])
    assert fused < 0.6 * fixed.wall_us  # half the kernels to issue: the host bound halves


def test_committed_h200_traces_have_bounds() -> None:
    full = read_chrome_trace(TRACES / "full_pool_cast_cuda.json.gz").step_bounds
    assert full is not None
    assert full.steps == 3 and full.launches == 24 and full.kernels == 24 and full.graph_launches == 0
    assert full.issue_us > full.device_us and full.bound == "host launch"
    assert full.wall_us == pytest.approx(full.serial_host_us + full.issue_us + full.residual_us)


def test_calibrated_to_the_served_tpot_on_the_h200_numbers() -> None:
    """Bounds recorded on one H200 (glm5 demo, 2026-11-30): the profiler slows the host (eager step
    257 ms profiled, 113.3 ms served); scaled to the TPOT, CUDA graphs predict what was measured
    (82.2 ms, 1.38x) and the cast fix alone nothing."""
    from playbooks.predict import calibrated
    from state.profiling.profile import StepBounds

    eager = StepBounds(
        steps=5, wall_us=257029.6, host_us=256989.2, issue_us=255949.5, serial_host_us=1039.7,
        device_us=80617.2, residual_us=40.4, kernels=5868, launches=5863, graph_launches=0,
        bound="host launch",
    )  # fmt: skip
    b = calibrated(eager, 113285.0)
    assert b.wall_us == 113285.0 and b.bound == "host launch" and b.device_us == eager.device_us
    assert predict_step_us(b, []) == pytest.approx(113285.0, rel=1e-6)
    graphs = predict_step_us(b, [StepEffect(graphs=True)])
    assert graphs == pytest.approx(82200, rel=0.05)
    assert predict_step_us(b, [StepEffect(device_removed_us=66000)]) == pytest.approx(113285.0, rel=0.01)
    assert calibrated(eager, None) is eager


def test_no_prediction_below_the_physical_floor_and_unknown_without_bounds() -> None:
    """A residual the model cannot explain (negative) never takes a prediction below the device's
    remaining work or below the step less what the fix removes; without bounds on a GPU trace the
    prediction is unknown, not a share of the step."""
    from playbooks.predict import floor_us, with_prediction
    from state.profiling.diagnosis import Finding
    from state.profiling.profile import StepBounds

    b = StepBounds(
        steps=5, wall_us=60000, host_us=60000, issue_us=55000, serial_host_us=0, device_us=28000,
        residual_us=-10000, kernels=5818, launches=5818, graph_launches=0, bound="host launch",
    )  # fmt: skip
    graphs = [StepEffect(graphs=True)]
    assert predict_step_us(b, graphs) >= 28000 + 5818 * 0.5  # the device's work and the replay's gaps stay
    cast = [StepEffect(device_removed_us=20000)]
    assert predict_step_us(b, cast) == pytest.approx(floor_us(b, cast)) == pytest.approx(55000)  # issue stays
    f = Finding(
        playbook=LAUNCH, title="t", confidence=0.5, expected_gain_share=0.99, expected_gain_ms=None,
        explanation="-", evidence=[], effect=StepEffect(graphs=True),
    )  # fmt: skip
    unknown = with_prediction(f, None, 81100.0, None, "device")
    assert unknown.predicted_speedup is None and unknown.bound is None and unknown.basis is not None
    assert unknown.basis.startswith("unknown")
    known = with_prediction(f, b, 60000.0)
    assert known.predicted_speedup is not None and known.basis is not None
    assert known.predicted_speedup <= 60000 / (28000 + 5818 * 0.5) and "not below" in known.basis
    cpu = with_prediction(
        f.model_copy(update={"effect": None, "expected_gain_share": 0.5}), None, 100.0, None, "cpu"
    )
    assert cpu.predicted_speedup == pytest.approx(2.0) and cpu.basis is not None and "Amdahl" in cpu.basis
