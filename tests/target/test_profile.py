"""SGLang-compatible /start_profile and /stop_profile write a Chrome trace with the cast op."""

import gzip
import json
import time
from pathlib import Path

from tests.target.conftest import chat

POOL_SLOTS = 2048  # conftest.SMALL


def cast_events(trace: Path) -> list[dict]:
    """aten::to/_to_copy/copy_ events whose first input is the whole pool."""
    with gzip.open(trace) as f:
        events = json.load(f)["traceEvents"]
    return [
        e
        for e in events
        if e.get("name") in {"aten::to", "aten::_to_copy", "aten::copy_"}
        and (e.get("args", {}).get("Input Dims") or [[]])[0] == [POOL_SLOTS, 1, 576]
    ]


def test_start_and_stop_profile_write_trace_with_full_pool_cast(small_server, tmp_path):
    status, _ = small_server.post(
        "/start_profile", {"output_dir": str(tmp_path), "activities": ["CPU", "GPU"], "profile_id": "first"}
    )
    assert status == 200
    chat(small_server.client(), "profile me", max_tokens=6)
    status, body = small_server.post("/stop_profile", {})
    assert status == 200
    trace = tmp_path / "first-TP-0.trace.json.gz"
    assert body["trace"] == str(trace) and trace.exists()
    assert cast_events(trace)
    assert [p.name for p in tmp_path.iterdir()] == [trace.name]  # no temporary file left


def test_num_steps_stops_by_itself_and_profiling_again_works(small_server, tmp_path):
    for run in range(2):
        status, _ = small_server.post(
            "/start_profile", {"output_dir": str(tmp_path), "num_steps": 3, "profile_id": f"run{run}"}
        )
        assert status == 200
        chat(small_server.client(), "profile me", max_tokens=10)
        trace = tmp_path / f"run{run}-TP-0.trace.json.gz"
        deadline = time.monotonic() + 30
        while not trace.exists():
            assert time.monotonic() < deadline
            time.sleep(0.1)
        # 2 layers x 3 decode steps; a cast is aten::to -> aten::_to_copy -> aten::copy_.
        assert len([e for e in cast_events(trace) if e["name"] == "aten::to"]) == 6


def test_profile_bad_requests(small_server, tmp_path):
    assert small_server.post("/stop_profile", {})[0] == 400
    assert small_server.post("/start_profile", {"num_steps": "three"})[0] == 400
    assert small_server.post("/start_profile", {"activities": "CPU"})[0] == 400
    assert small_server.post("/start_profile", b"{oops")[0] == 400
    ok = {
        "output_dir": str(tmp_path),
        "with_stack": False,
        "record_shapes": True,
        "profile_by_stage": False,
        "merge_profiles": False,
    }
    assert small_server.post("/start_profile", ok)[0] == 200
    assert small_server.post("/start_profile", ok)[0] == 400  # already running
    assert small_server.post("/stop_profile", {})[0] == 200
