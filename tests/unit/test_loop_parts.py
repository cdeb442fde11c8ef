"""Pure parts of the loop: acceptance rule, timing statistics, SSE parsing, command building, door."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from pydantic import BaseModel

from agent.cli.target import load_target
from agent.decision.legacy import judge
from agent.sessions.checkpoint import serializer, state_types
from agent.steps.propose import files_of
from playbooks.launch import with_flag, without_flag
from state.loop import LoopOptions, LoopState
from state.measure import RequestRecord
from state.sglang import SglangLayout
from tests.recorders import MemoryRecorder
from tools.bench import sse_data, stat, summarize, to_record
from tools.door import tool
from tools.door.live import LiveDoor as Door
from tools.errors import ConfigError, ToolError
from tools.server import build_argv

DEMO_TOML = Path(__file__).resolve().parents[2] / "examples" / "targets" / "mla_server.toml"


def measurement(tpots: list[float], texts: list[str], label: str = "m"):
    records = [
        RequestRecord(
            prompt_index=i % len(texts),
            ttft_ms=50.0,
            itl_ms=[t, t, t],
            text=texts[i % len(texts)],
            completion_tokens=4,
        )
        for i, t in enumerate(tpots)
    ]
    return summarize(label, "tree", records, len(texts), wall_s=1.0)


def test_judge_accepts_a_clear_win_with_identical_outputs() -> None:
    ok, reason, noise = judge(
        measurement([100, 101, 99, 100], ["a", "b"]), measurement([30, 31, 29, 30], ["a", "b"])
    )
    assert ok and "3.33x" in reason and 0 < noise < 2


def test_judge_rejects_changed_outputs_even_when_faster() -> None:
    ok, reason, _ = judge(measurement([100, 100], ["a", "b"]), measurement([10, 10], ["a", "X"]))
    assert not ok and reason.startswith("outputs changed for 1/2")


def test_judge_rejects_a_gain_within_noise() -> None:
    ok, reason, noise = judge(measurement([100, 80, 120, 100], ["a"]), measurement([95, 75, 115, 95], ["a"]))
    assert not ok and "within the measured noise" in reason and noise >= 10


def test_judge_names_a_regression() -> None:
    ok, reason, _ = judge(measurement([100, 101, 99, 100], ["a"]), measurement([150, 151, 149, 150], ["a"]))
    assert not ok and reason.startswith("TPOT got worse: 100.0 -> 150.0 ms")


def test_stat_and_record() -> None:
    s = stat([1.0, 2.0, 3.0, 4.0, 100.0])
    assert (s.median, s.min, s.max, s.n) == (3.0, 1.0, 100.0, 5)
    assert s.p25 == 2.0 and s.p75 == 4.0 and s.iqr == 2.0
    r = to_record(0, [0.1, 0.15, 0.25], "abc")
    assert r.ttft_ms == pytest.approx(100) and r.itl_ms == pytest.approx([50, 100])
    assert r.tpot_ms == pytest.approx(75)
    with pytest.raises(ToolError, match="streamed no tokens"):
        to_record(3, [], "")


def test_summarize_flags_unstable_outputs() -> None:
    records = [
        RequestRecord(prompt_index=0, ttft_ms=1, itl_ms=[1], text=t, completion_tokens=2)
        for t in ("ab", "ac")
    ]
    m = summarize("x", "t", records, 1, 1.0)
    assert m.outputs == ["ab"] and not m.outputs_stable


def test_sse_parsing_stops_at_done() -> None:
    lines = [
        b": keep-alive\n",
        b'data: {"choices": [{"delta": {"content": "h"}}]}\n',
        b"\n",
        b"data: [DONE]\n",
        b'data: {"never": 1}\n',
    ]
    assert list(sse_data(iter(lines))) == [{"choices": [{"delta": {"content": "h"}}]}]


def test_command_building() -> None:
    assert build_argv(["{python}", "-m", "x", "--port", "{port}"], 8001, "/py") == [
        "/py",
        "-m",
        "x",
        "--port",
        "8001",
    ]
    assert with_flag(["a", "--device", "cpu", "b"], "--device", "cuda") == ["a", "--device", "cuda", "b"]
    assert without_flag(["a", "--threads", "1", "b"], "--threads") == ["a", "b"]
    assert without_flag(["a", "b"], "--threads") == ["a", "b"]
    assert with_flag(["a"], "--device", "cuda") == ["a", "--device", "cuda"]


def test_files_of_a_diff() -> None:
    diff = "diff --git a/x/y.py b/x/y.py\n--- a/x/y.py\n+++ b/x/y.py\n@@ -1 +1 @@\n-a\n+b\n"
    assert files_of(diff) == ["x/y.py"]


def test_target_config_resolves_repo_and_rejects_bad_fields(tmp_path: Path) -> None:
    target = load_target(DEMO_TOML, repo="rel/repo")
    assert target.repo == (DEMO_TOML.parent / "rel" / "repo").resolve()
    assert target.kind == "mla_server" and "{port}" in target.launch.argv
    bad = tmp_path / "t.toml"
    bad.write_text(DEMO_TOML.read_text().replace("max_tokens = 16", "max_tokens = 1"))
    with pytest.raises(ConfigError, match=r"field `measure.max_tokens`"):
        load_target(bad)
    bad.write_text(DEMO_TOML.read_text() + "\ntypo_field = 1\n")
    with pytest.raises(ConfigError, match="typo_field"):
        load_target(bad)


class _In(BaseModel):
    x: int


class _Out(BaseModel):
    y: int


@tool("test.double")
def _double(args: _In) -> _Out:
    if args.x < 0:
        raise ToolError("negative input; pass x >= 0")
    return _Out(y=2 * args.x)


def test_door_records_outputs_and_errors() -> None:
    rec = MemoryRecorder()
    door = Door("s1", rec)
    door.node = "n"
    assert door.call(_double, _In(x=2)).y == 4
    with pytest.raises(ToolError, match=r"^negative input; pass x >= 0$"):
        door.call(_double, _In(x=-1))
    with pytest.raises(TypeError, match="takes _In"):
        door.call(_double, _Out(y=1))  # type: ignore[arg-type]
    ok, failed = rec.calls[0], rec.calls[1]
    assert (ok.seq, ok.node, ok.input, ok.output, ok.error) == (0, "n", {"x": 2}, {"y": 4}, None)
    assert failed.output is None and failed.error == "ToolError: negative input; pass x >= 0"
    assert failed.duration_s >= 0


def test_state_types_round_trip_without_unregistered_warnings(tmp_path: Path, caplog) -> None:
    assert LoopState in state_types()
    state = LoopState(
        session_id="s",
        target=load_target(DEMO_TOML),
        options=LoopOptions(session_dir=tmp_path, python="python3"),
        baseline=measurement([10, 11], ["a"]),
        sglang=SglangLayout(kind="checkout", package_dir="python/sglang", version="0.5.23"),
    )
    serde = serializer()
    with caplog.at_level(logging.WARNING):
        back = serde.loads_typed(serde.dumps_typed(state))
    assert back == state
    assert not [r for r in caplog.records if "unregistered" in r.getMessage().lower()]
