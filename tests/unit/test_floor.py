"""Issue 61: each link of a chain and the summary print the step's memory-bandwidth floor (weights +
live KV bytes over the card's bandwidth, from its spec, named) and how many times above it the step
runs; where a figure is missing, the line says which (agent/sessions/floor.py)."""

from __future__ import annotations

import html
import io
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from rich.console import Console

from agent.cli import render
from agent.cli.commands.sessions import not_compared
from agent.cli.target import load_target
from agent.report.data import ReportData
from agent.report.html import render_report
from agent.sessions.floor import bandwidth_of, floors_of, step_floor
from agent.sessions.summary import summarize
from playbooks.roofline import spec_bandwidth
from state.measurement.floor import ModelFootprint
from state.profiling.diagnosis import Diagnosis
from state.sessions.loop import Decision, LoopOptions, LoopState, ProfileResult
from state.sessions.session import SessionInfo
from tests.unit.test_legacy import measurement
from tools.engines.demo import PRESETS, DemoEngine

ROOT = Path(__file__).resolve().parents[2]
GLM5 = ["bash", "launch.sh", "--port", "{port}", "--preset", "glm5", "--device", "cuda"]
GLM5_BYTES = 13_601_736_704
"""78 layers x 87,183,872 BF16 weights (q 18.9M, kv 1.2M, o 16.8M, router, 8 experts' gate_up 33.6M
and down 16.8M, norms) + the lm_head and final norm: 6,800,868,352 weights."""


def test_the_glm5_preset_reads_13_6_gb_of_weights_and_45_kb_of_kv_per_token() -> None:
    f = DemoEngine().footprint(GLM5)
    assert f is not None and f.weight_bytes == GLM5_BYTES and f.kv_bytes_per_token == 576 * 78
    assert f.gpus == 1 and f.basis.startswith("mla_server glm5 preset: 78 layers, hidden 2048")
    tp = DemoEngine().footprint([*GLM5, "--tp-size", "2", "--layers=39"])
    assert tp is not None and tp.gpus == 2 and tp.kv_bytes_per_token == 576 * 39
    assert DemoEngine().footprint(["bash", "launch.sh", "--preset", "huge"]) is None


def test_the_footprint_counts_the_demo_servers_own_weights() -> None:
    """The cpu preset built by the example's own model code: the bytes it holds, the embedding
    table aside (a step gathers its few rows), are the footprint's; the presets are the example's."""
    sys.path.insert(0, str(ROOT / "examples" / "targets" / "mla_server"))
    try:
        from mla_server import config as example
        from mla_server.model import MLAModel
    finally:
        sys.path.pop(0)
    for name, sizes in PRESETS.items():
        assert {k: example.PRESETS[name][k] for k in sizes} == sizes, name
    cfg = example.parse_config(["--port", "1", "--layers", "2", "--experts", "3", "--top-k", "1"])
    model = MLAModel(cfg)
    held = sum(t.numel() * t.element_size() for w in model.layers for t in vars(w).values())
    held += sum(t.numel() * t.element_size() for t in (model.lm_head, model.final_norm))
    f = DemoEngine().footprint(["--port", "1", "--layers", "2", "--experts", "3", "--top-k", "1"])
    assert f is not None and f.weight_bytes == held


def test_a_step_against_its_floor_on_an_h100() -> None:
    f = DemoEngine().footprint(GLM5)
    bw = spec_bandwidth("NVIDIA H100 80GB HBM3")
    assert bw == (3350.0, "H100 spec")
    floor = step_floor("final", "final", 12.0, f, 600, bw)  # 600 live tokens: 26,956,800 KV bytes
    assert floor.kv_bytes == 600 * 44_928 and floor.floor_ms == pytest.approx(4.06827, abs=1e-5)
    assert floor.above == pytest.approx(2.94966, abs=1e-5)
    assert floor.line() == (
        "step 12.0 ms, floor 4.07 ms (weights 13.6 GB + KV 0.027 GB at 3.35 TB/s, H100 spec): 2.9x above"
    )
    slow = step_floor("baseline", "baseline", 85.2, f, 600, bw)
    assert slow.line().endswith(": 20.9x above"), slow.line()


def test_two_gpus_share_the_bytes_and_a_pcie_card_is_not_an_sxm_one() -> None:
    f = ModelFootprint(weight_bytes=9_600_000_000, kv_bytes_per_token=1000, gpus=2, basis="b")
    assert spec_bandwidth("NVIDIA H200") == (4800.0, "H200 spec")
    floor = step_floor("final", "final", 5.0, f, 0, (4800.0, "H200 spec"))
    assert floor.floor_ms == pytest.approx(1.0) and floor.above == pytest.approx(5.0)
    assert "(weights 9.6 GB + KV 0 GB at 2 x 4.8 TB/s, H200 spec): 5.0x above" in floor.line()
    assert spec_bandwidth("NVIDIA H100 PCIe") == (2000.0, "H100 PCIe spec")
    assert spec_bandwidth("NVIDIA A100-SXM4-80GB") == (2039.0, "A100 spec")
    assert spec_bandwidth("NVIDIA GeForce RTX 4090") is None


def test_what_is_missing_is_said_not_a_made_up_number() -> None:
    f = DemoEngine().footprint(GLM5)
    h100 = spec_bandwidth("NVIDIA H100 80GB HBM3")
    assert h100 is not None
    assert (
        step_floor("final", "final", 30.0, None, 600, h100).line()
        == "step 30.0 ms, floor unknown (the engine does not know its model's size)"
    )
    cpu = step_floor("final", "final", 30.0, f, 600, "no bandwidth for the CPU")
    assert cpu.floor_ms is None and cpu.line() == "step 30.0 ms, floor unknown (no bandwidth for the CPU)"
    weights = step_floor("final", "final", 12.0, f, None, h100)  # no profile counted the live tokens
    assert weights.floor_ms == pytest.approx(GLM5_BYTES / 3.35e9)
    assert weights.line() == (
        "step 12.0 ms, floor 4.06 ms (weights 13.6 GB at 3.35 TB/s, H100 spec; KV not counted: no "
        "profile counted the live tokens): 3.0x above"
    )


def profile(iteration: int, device: str, tokens: int) -> ProfileResult:
    return ProfileResult(
        iteration=iteration, method="patch", trace_path=Path(f"t{iteration}.json.gz"), summary_path=None,
        trace_sha256="0", device=device, active_tokens=tokens,
    )  # fmt: skip


def chain_session(tmp_path: Path, device_name: str | None = "NVIDIA H100 80GB HBM3") -> LoopState:
    """A chain on the glm5 preset: the cast fix (85.2 -> 18.7 ms) then the compile (-> 12.0 ms)."""
    target = load_target(ROOT / "examples" / "targets" / "mla_server_glm5.toml")
    target = target.model_copy(update={"proposer": target.proposer.model_copy(update={"mode": "chain"})})
    kept = [
        Decision.model_validate(
            {"iteration": i, "playbook": src, "verdict": "accepted", "reason": "r"}
            | {"tpot_ms_before": a, "tpot_ms_after": b, "launch_argv": argv}
        )
        for i, src, a, b, argv in [
            (1, "kv-cache-full-pool-cast", 85.2, 18.7, None),
            (2, "search-1", 18.7, 12.0, [*target.launch.argv, "--enable-torch-compile"]),
        ]
    ]
    return LoopState(
        session_id="s-floor",
        target=target,
        options=LoopOptions(session_dir=tmp_path, python="python3", decision_rule="ci-v1"),
        baseline=measurement([85.2] * 4, ["a", "b"]),
        reference=measurement([12.0] * 4, ["a", "b"]),
        decisions=kept,
        profiles=[profile(1, "cuda", 600), profile(2, "cuda", 600)],
        diagnosis=Diagnosis(findings=[], top_ops=[], time_basis="device", device_name=device_name),
        iteration=3,
    )


def test_each_chain_link_and_the_summary_print_their_floor(tmp_path: Path) -> None:
    state = chain_session(tmp_path)
    s = summarize(state, "done")
    assert [(f.label, f.role) for f in s.floors] == [
        ("baseline", "baseline"),
        ("kv-cache-full-pool-cast", "link"),
        ("search-1", "link"),
        ("final", "final"),
    ]
    assert [round(f.above or 0, 2) for f in s.floors] == [20.94, 4.6, 2.95, 2.95]
    out = io.StringIO()
    render.summary(Console(file=out, width=300, color_system=None), s)
    text = out.getvalue()
    floor = "floor 4.07 ms (weights 13.6 GB + KV 0.027 GB at 3.35 TB/s, H100 spec)"
    for line in [
        f"kv-cache-full-pool-cast: step 18.7 ms, {floor}: 4.6x above",
        f"search-1: step 12.0 ms, {floor}: 2.9x above",
        f"baseline: step 85.2 ms, {floor}: 20.9x above",
        f"final: step 12.0 ms, {floor}: 2.9x above",
    ]:
        assert line in text, (line, text)
    assert "bandwidth floor" in text
    info = SessionInfo(
        id=state.session_id, created_at=datetime.now(UTC), target_name="t", target_path=None,
        repo=state.target.repo, status="done", summary=s,
    )  # fmt: skip
    page = html.unescape(render_report(ReportData(info, state, s, [], [], [], [], 0), link=lambda _p: None))
    assert f"search-1: step 12.0 ms, {floor}: 2.9x above" in page
    assert f"final: step 12.0 ms, {floor}: 2.9x above" in page


def test_a_cpu_session_and_an_unnamed_device_say_why_there_is_no_floor(tmp_path: Path) -> None:
    cpu = chain_session(tmp_path, device_name=None)
    cpu = cpu.model_copy(update={"profiles": [profile(1, "cpu", 80)]})
    assert bandwidth_of(cpu) == "no bandwidth for the CPU"
    assert floors_of(cpu, 30.0, None)[0].line() == "step 30.0 ms, floor unknown (no bandwidth for the CPU)"
    unnamed = cpu.model_copy(update={"profiles": [], "diagnosis": None})
    assert bandwidth_of(unnamed) == "no bandwidth: no profile named the device"
    odd = chain_session(tmp_path, device_name="NVIDIA GeForce RTX 4090")
    assert bandwidth_of(odd) == "no bandwidth for NVIDIA GeForce RTX 4090"


def test_a_summary_recorded_before_the_floors_replays_without_comparing_them(tmp_path: Path) -> None:
    s = summarize(chain_session(tmp_path), "done")
    assert "floors" not in not_compared(s, s)
    assert "floors" in not_compared(s.model_copy(update={"floors": []}), s)
