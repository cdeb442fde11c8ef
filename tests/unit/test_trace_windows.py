"""Step windows from every marker a trace may carry, or from its repeating work; bounds per rank.

On real traces: the H200 trace in tests/data (markers removed or renamed as SGLang and vLLM name
them), the glm5-shaped eager and graph steps, and the demo server's CPU traces of each profile
method (tests/data/traces/served, with the figures they are expected to give).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli import app
from playbooks.engine import diagnose, load_playbooks
from playbooks.predict import floor_us
from playbooks.spread import served_bounds
from state.profiling.diagnosis import DiagnosisContext
from tools.trace import read_chrome_trace, read_profiles

from .glm5_shaped import glm5_events
from .test_trace import TRACES

H200 = TRACES / "full_pool_cast_cuda.json.gz"
SERVED = TRACES / "served"
# The synthetic glm5 traces carry served host times (85 ms of issue per step, as served, not the
# 150-257 ms a profiler makes of it): no de-profiling.
CTX = DiagnosisContext(target_kind="mla_server", active_tokens=230, host_inflation=1.0)
CAST, LAUNCH = "kv-cache-full-pool-cast", "launch-bound-decode"


def rewrite(src: Path | list[dict], out: Path, rename: dict[str, str | None]) -> Path:
    """The trace with annotations renamed by prefix (None: removed)."""
    events = json.loads(gzip.decompress(src.read_bytes())) if isinstance(src, Path) else {"traceEvents": src}
    kept = []
    for e in events["traceEvents"]:
        name = str(e.get("name", ""))
        hit = next((p for p in rename if name.startswith(p)), None)
        if hit is None:
            kept.append(e)
        elif rename[hit] is not None:
            kept.append({**e, "name": rename[hit]})
    out.write_bytes(gzip.compress(json.dumps({**events, "traceEvents": kept}).encode()))
    return out


@pytest.mark.parametrize(
    ("rename", "source"),
    [
        ({}, "ProfilerStep"),
        ({"ProfilerStep": None}, "forward_decode"),
        ({"ProfilerStep": None, "forward_decode": "step[DECODE bs=1]"}, "SGLang step[DECODE]"),
        (
            {"ProfilerStep": None, "forward_decode": "gpu_model_runner: forward"},
            "vLLM gpu_model_runner: forward",
        ),
        ({"ProfilerStep": None, "forward_decode": None}, "kernel pattern"),
    ],
)
def test_every_marker_gives_the_same_bounds_on_the_h200_trace(
    tmp_path: Path, rename: dict, source: str
) -> None:
    marked = read_chrome_trace(H200).step_bounds
    summary = read_chrome_trace(rewrite(H200, tmp_path / "t.json.gz", rename))
    b = summary.step_bounds
    assert b is not None and b.windows == source and summary.steps == 3
    assert marked is not None and summary.step_source is not None
    assert summary.step_source.startswith(
        source if source != "kernel pattern" else "inferred from the kernel"
    )
    assert b.bound == marked.bound == "host launch" and b.kernels == marked.kernels == 24
    assert b.device_us == pytest.approx(marked.device_us, rel=0.05)
    assert b.issue_us == pytest.approx(marked.issue_us, rel=0.05)


def test_a_draft_step_is_not_a_decode_step(tmp_path: Path) -> None:
    rename = {"ProfilerStep": None, "forward_decode": "draft step[DECODE bs=1]"}
    summary = read_chrome_trace(rewrite(H200, tmp_path / "t.json.gz", rename))
    assert summary.step_bounds is not None and summary.step_bounds.windows == "kernel pattern"


@pytest.mark.parametrize("graph", [False, True])
def test_glm5_steps_without_markers_diagnose_as_with_them(tmp_path: Path, graph: bool) -> None:
    events = glm5_events(cast=True, graph=graph, steps=4)
    marked = read_chrome_trace(rewrite(events, tmp_path / "m.json.gz", {}))
    bare = read_chrome_trace(rewrite(events, tmp_path / "b.json.gz", {"ProfilerStep": None}))
    assert (
        bare.steps == 4
        and bare.step_source
        == "inferred from the kernel pattern: 4 repeats, 78 repeats of a per-layer pattern each"
    )
    a, b = marked.step_bounds, bare.step_bounds
    assert a is not None and b is not None
    assert b.bound == a.bound == ("device" if graph else "host launch") and b.kernels == a.kernels
    assert b.device_us == pytest.approx(a.device_us, rel=0.01) and b.issue_us == pytest.approx(
        a.issue_us, rel=0.01
    )
    got = [diagnose(s, CTX, load_playbooks()).findings for s in (marked, bare)]
    assert [f.playbook for f in got[0]] == [f.playbook for f in got[1]]
    top = got[1][0]
    assert top.basis is not None
    assert top.playbook == CAST and top.bound == b.bound and "kernel pattern" in top.basis
    if not graph:  # eager: each fix alone is held by the other's bound; together several times
        found = {f.playbook: f for f in got[1]}
        cast_alone, launch_alone = found[CAST].predicted_speedup, found[LAUNCH].predicted_speedup
        assert cast_alone is not None and launch_alone is not None
        assert cast_alone <= 1.3 and launch_alone <= 1.5
        paired = found[CAST].paired_speedup
        assert found[CAST].paired_with == LAUNCH and paired is not None and paired >= 3


def test_two_ranks_keep_their_bounds_and_the_slowest_sets_the_step(tmp_path: Path) -> None:
    doc = json.loads(gzip.decompress(H200.read_bytes()))
    slow = [
        {**e, "dur": e["dur"] * 3} if e.get("cat") == "kernel" else e for e in doc["traceEvents"]
    ]  # the same step on a rank whose device runs 3x longer
    folder = tmp_path / "tp"
    folder.mkdir()
    (folder / "x-TP-0.trace.json.gz").write_bytes(H200.read_bytes())
    (folder / "x-TP-1.trace.json.gz").write_bytes(
        gzip.compress(json.dumps({**doc, "traceEvents": slow}).encode())
    )
    merged = read_profiles([folder])
    fast, slower = (r.step_bounds for r in merged.ranks)
    assert fast is not None and slower is not None
    assert fast.bound == "host launch" and slower.device_us > 1.4 * fast.device_us > 1.4 * fast.issue_us / 1.2
    assert slower.bound == "device"
    assert merged.step_bounds == slower and merged.ranks[1].step_source == "ProfilerStep"


def served() -> list[tuple[dict, dict]]:
    out = []
    for manifest in sorted(SERVED.glob("expected-*.json")):
        doc = json.loads(manifest.read_text())
        out += [(doc, t) for t in doc["traces"]]
    return out


@pytest.mark.parametrize(("doc", "trace"), served(), ids=lambda v: v.get("file", ""))
def test_the_served_corpus_gives_its_expected_steps_bound_and_finding(doc: dict, trace: dict) -> None:
    summary = read_chrome_trace(SERVED / trace["file"])
    assert summary.step_source is not None
    assert summary.step_source.startswith(trace["step_source"]) and summary.steps == trace["steps"]
    assert (summary.step_bounds.bound if summary.step_bounds else None) == trace["bound"]
    ctx = DiagnosisContext(target_kind=doc["target_kind"], active_tokens=doc["active_tokens"])
    found = diagnose(summary, ctx, load_playbooks()).findings
    assert "top_finding" not in trace or found[0].playbook == trace["top_finding"]
    raw = summary.step_bounds  # the step the model predicts from: de-profiled on a GPU trace
    b = served_bounds(raw, None, 1.0 if summary.time_basis == "cpu" else None) if raw else None
    effects = {f.playbook: f.effect for f in found}
    for f in found:  # every number has its basis; none beyond the physical bound
        assert f.predicted_speedup is None or f.basis
        if b is not None and f.effect is not None:
            assert f.predicted_step_ms is not None
            assert f.predicted_step_ms * 1000 >= floor_us(b, [f.effect]) * (1 - 1e-9)
        if b is not None and f.paired_with:
            effect, other = f.effect, effects[f.paired_with]
            assert f.paired_speedup is not None and effect is not None and other is not None
            assert f.paired_speedup <= b.wall_us / floor_us(b, [effect, other]) * (1 + 1e-9)
    for name in ("max_cast_alone", "max_launch_alone"):
        if trace.get(name) is not None:
            playbook = CAST if "cast" in name else LAUNCH
            assert next(f for f in found if f.playbook == playbook).predicted_speedup <= trace[name]


def test_a_marker_less_trace_gets_the_top_finding_it_gets_with_steps(tmp_path: Path) -> None:
    bare = SERVED / "cpu-bare.json.gz"
    tops = []
    for extra in ([], ["--steps", "5"]):
        result = CliRunner().invoke(
            app,
            ["diagnose", str(bare), "--json", "--active-tokens", "79", "--target-kind", "mla_server", *extra],
        )
        assert result.exit_code == 0, result.output
        doc = json.loads(result.stdout)
        tops.append(doc["findings"][0]["playbook"])
        assert doc["step_source"].startswith("inferred from the operator pattern: 5 repeats")
    assert tops == [CAST, CAST]
